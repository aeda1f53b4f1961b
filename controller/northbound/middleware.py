"""The API's middleware: the guard (the token, which names the request's
principal, and the body-size limit, checked
against Content-Length and against the bytes actually received) and, with
several instances (docs/ha.md), the follower gate (a write answered with 307 to
the leader, or 503 while no leader is known).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable

from controller.config import TenantConfig
from controller.core.tenants import ADMIN, Principal
from controller.northbound.errors import error_response
from controller.northbound.ui import is_public

# -- the guard: token and body size ---------------------------------------------------------

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
RETRY_AFTER_S = "1"


class FollowerGate:
    """Pure ASGI middleware (several instances, docs/ha.md): on a follower, a write
    goes to the leader (307, same path and query) or, with no leader, is refused
    with a retryable 503."""

    def __init__(self, app: ASGIApp, cluster) -> None:
        self.app = app
        self.cluster = cluster

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method", "GET") in SAFE_METHODS or self.cluster.leading:
            await self.app(scope, receive, send)
            return
        leader = self.cluster.leader_url()
        if leader is None:
            await error_response(503, "no_leader", "no controller instance leads right now (an election is under way); retry",
                                 headers={"Retry-After": RETRY_AFTER_S})(scope, receive, send)
            return
        target = leader + scope.get("path", "/")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        await error_response(307, "not_leader", f"this instance is a follower; the leader is {leader}",
                             headers={"Location": target})(scope, receive, send)


class Guard:
    """Pure ASGI middleware: bearer token (if any), then the body size limit.

    The token names the principal (`core.tenants.Principal`), put in the scope as
    ``scope["state"]["principal"]`` (`request.state.principal`): the admin token
    (`token`) the admin, a tenant's token that tenant. Tokens are compared as
    sha256 digests, in constant time, with every known digest. With neither an
    admin token nor tenants, every request is the admin's (an open loopback API).

    The body is read here, counted, and replayed to the app, so a body that is
    larger than announced (or has no Content-Length) is refused as well.
    """

    OPEN_PATHS = frozenset({"/healthz"})

    def __init__(self, app: ASGIApp, token: str | None, max_body: int,
                 tenants: tuple[TenantConfig, ...] = ()) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body = max_body
        # digest -> principal: the admin's and every tenant's
        self._known: list[tuple[bytes, Principal]] = [(bytes.fromhex(t.token_sha256), Principal(t.name)) for t in tenants]
        if self.token is not None:
            self._known.append((hashlib.sha256(self.token).digest(), ADMIN))

    def principal(self, credential: bytes) -> Principal | None:
        """Whose token `credential` is (None: nobody's). Every digest is compared."""
        digest = hashlib.sha256(credential).digest()
        found = None
        for known, who in self._known:
            if hmac.compare_digest(digest, known) and found is None:
                found = who
        return found

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        path = scope.get("path", "")
        principal: Principal | None = None if self._known else ADMIN  # (None on an open path: no one's)
        if self._known and path not in self.OPEN_PATHS and not is_public(path):
            given = headers.get("authorization", b"")
            scheme, _, credential = given.partition(b" ")
            principal = self.principal(credential.strip()) if scheme.lower() == b"bearer" else None
            if principal is None:
                await error_response(
                    401, "unauthorized", "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
                )(scope, receive, send)
                return
        scope.setdefault("state", {})["principal"] = principal
        length = headers.get("content-length")
        if length is not None:
            try:
                announced = int(length)
            except ValueError:
                await error_response(400, "bad_request", "invalid Content-Length")(scope, receive, send)
                return
            if announced > self.max_body:
                await self._too_large(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body:
                await self._too_large(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: dict, receive: Callable, send: Callable) -> None:
        await error_response(
            413, "body_too_large", f"the request body is larger than {self.max_body} bytes"
        )(scope, receive, send)


