"""Browser safety of the REST API and the web view (docs/security.md, "Browser safety").

Three pure ASGI middlewares, outermost first (`add_browser_safety`):

`SecurityHeaders`
    every answer gets ``X-Content-Type-Options: nosniff``; the web view (/ and
    /ui/..., `ui.is_public`) a strict ``Content-Security-Policy`` (`PAGE_POLICY`:
    its own scripts and styles only, no frames) and ``X-Frame-Options: DENY``;
    every other answer ``Cache-Control: no-store`` and a policy that allows nothing.
`HostAllowlist`
    a request whose ``Host`` header is not in `api.allowed_hosts` (by default the
    loopback names localhost, 127.0.0.1 and [::1], and `api.host`) is refused with
    400 ``host_not_allowed`` before anything else runs, /healthz included: a page
    that rebinds its own DNS name to 127.0.0.1 reaches the API only under its own
    name, and is refused. An allowed name matches with no port or the port the
    server listens on; an entry NAME:PORT matches that port only.
`JsonOnly`
    a POST, PUT, PATCH or DELETE that carries a body (or a Content-Type) must say
    ``Content-Type: application/json`` (charset utf-8 allowed), else 415
    ``unsupported_media_type``, whatever the FastAPI version does with other types.
    A cross-origin page can send a body without a CORS preflight only as
    text/plain, a form or multipart: all of them are refused here.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI

from controller.config import ApiConfig
from controller.northbound.errors import error_response
from controller.northbound.middleware import ASGIApp
from controller.northbound.ui import is_public

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# the web view loads its own app.js and app.css only, and fetches from its own origin
PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
               "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
API_POLICY = "default-src 'none'; frame-ancestors 'none'"


def add_browser_safety(app: FastAPI, api: ApiConfig) -> None:
    """Add the three middlewares to `app`, outside everything added before."""
    app.add_middleware(JsonOnly)
    app.add_middleware(HostAllowlist, allowed=allowed_hosts(api))
    app.add_middleware(SecurityHeaders)


def allowed_hosts(api: ApiConfig) -> tuple[str, ...]:
    """`api.allowed_hosts`, or the loopback names and `api.host`."""
    if api.allowed_hosts is not None:
        return api.allowed_hosts
    host = api.host.lower()
    return (*LOOPBACK_NAMES, f"[{host}]" if ":" in host else host)


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header value (or an allowlist entry) as (name, port), lower case, no
    trailing dot; None if it is malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value.partition("]")
        name += bracket
        if not bracket:
            return None
    else:
        name, _, port_text = value.partition(":")
        rest = f":{port_text}" if _ else ""
    if rest and not (rest[0] == ":" and rest[1:].isdigit() and len(rest) <= 6):
        return None
    name = name.rstrip(".")
    if not name:
        return None
    return name, int(rest[1:]) if rest else None


class HostAllowlist:
    """Pure ASGI middleware: refuse (400 ``host_not_allowed``) a Host header not in `allowed`."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        entries = [split_host(a) for a in allowed]
        self.allowed = [e for e in entries if e is not None]

    def accepts(self, host: str, served_port: int | None) -> bool:
        parts = split_host(host)
        if parts is None:
            return False
        name, port = parts
        for a_name, a_port in self.allowed:
            if a_name != name:
                continue
            if a_port is not None:
                if port == a_port:
                    return True
            elif port is None or served_port is None or port == served_port:
                return True
        return False

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"host"), "")
        server = scope.get("server")
        if not self.accepts(host, server[1] if server else None):
            await error_response(
                400, "host_not_allowed",
                f"the Host header {host[:100]!r} is not one this API answers to (api.allowed_hosts)",
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)


def is_json(content_type: str) -> bool:
    """``application/json``, with at most a ``charset=utf-8`` parameter."""
    mime, *params = [p.strip().lower() for p in content_type.split(";")]
    if mime != "application/json":
        return False
    return all(p.replace(" ", "") in ("charset=utf-8", 'charset="utf-8"') for p in params if p)


class JsonOnly:
    """Pure ASGI middleware: a write with a body must be JSON (415 ``unsupported_media_type``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") not in MUTATING:
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        content_type = headers.get(b"content-type")
        has_body = headers.get(b"content-length", "0").strip() not in ("0", "") or b"transfer-encoding" in headers
        if (content_type is not None or has_body) and not is_json(content_type or ""):
            await error_response(
                415, "unsupported_media_type",
                f"the request body must be JSON (Content-Type: application/json), not {(content_type or 'none')[:100]!r}",
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """Pure ASGI middleware: the headers of the module docstring, on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        page = is_public(scope.get("path", ""))
        extra = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                 (b"content-security-policy", (PAGE_POLICY if page else API_POLICY).encode())]
        if not page:
            extra.append((b"cache-control", b"no-store"))
        replaced = {k for k, _ in extra}

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in replaced]
                message = {**message, "headers": kept + extra}
            await send(message)

        await self.app(scope, receive, send_with_headers)
