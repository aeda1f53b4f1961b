"""What one client may use of the REST API (docs/security.md, "Limits"): two pure
ASGI middlewares, set by `api.limits`.

`RequestCaps` (outside the token guard)
    at most `max_event_streams` open /events streams (the web view's server-sent
    events: long-lived, so counted on their own) and at most `max_in_flight`
    other requests being answered at once (/healthz always passes, so that a busy
    controller is not taken for a dead one); beyond either a 429
    (``too_many_event_streams``, ``too_many_requests_in_flight``) with
    ``Retry-After``. A slot is given back when the app returns: for a stream,
    when its client goes away (ui.py notices within `ui.PLAN_POLL_S`) or the
    server stops.
`RateLimit` (inside the token guard, so its keys are checked tokens)
    at most `rate` writes (POST, PUT, PATCH, DELETE) per client in a moving
    window (the `limits` library, in memory); beyond it 429 ``rate_limited`` with
    ``Retry-After``. A client is the principal its bearer token proved (the
    admin, or a tenant: each tenant has a budget of its own) when the API has a
    token or tenants, else its address (without tokens any string would do as a
    credential, and each would get a budget of its own). At most `rate_keys`
    clients are remembered: the one seen least recently is forgotten first, so a
    client sending from many addresses cannot grow the memory. A broadcast
    announcement (PUT /jobs/{id}/broadcasting: a PS renews it every half second or
    so while its broadcast lasts) counts instead against `announce_rate` of that
    client for that job (beyond it 429 ``rate_limited`` too); each such pair is a
    client remembered.

Reads are not rate limited (the web view polls), only capped in flight.
uvicorn's own `limit_concurrency` (`api.limits.max_connections`, `api.serve`)
is the backstop under both: beyond it uvicorn answers a plain-text 503.
"""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable

from fastapi import FastAPI
from limits import parse as parse_rate
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from controller.config.schema import ApiLimits
from controller.northbound.errors import error_response
from controller.northbound.middleware import ASGIApp, RETRY_AFTER_S

EVENTS_PATH = "/events"  # ui.add_ui's stream
HEALTH_PATH = "/healthz"  # answered past the in-flight cap: a busy controller is alive
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ANNOUNCEMENT = re.compile(r"/jobs/[^/]+/broadcasting")  # PUT: a job's broadcast phase (core.phases)


def add_rate_limit(app: FastAPI, limits: ApiLimits, keyed_by_token: bool) -> None:
    """Add `RateLimit` to `app`, outside everything added before."""
    app.add_middleware(RateLimit, rate=limits.rate, max_keys=limits.rate_keys, keyed_by_token=keyed_by_token,
                       announce_rate=limits.announce_rate)


def add_request_caps(app: FastAPI, limits: ApiLimits) -> None:
    """Add `RequestCaps` to `app`, outside everything added before."""
    app.add_middleware(RequestCaps, max_in_flight=limits.max_in_flight, max_streams=limits.max_event_streams)


class RequestCaps:
    """Pure ASGI middleware: caps on open /events streams and on other requests in flight."""

    def __init__(self, app: ASGIApp, max_in_flight: int, max_streams: int) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.max_streams = max_streams
        self.in_flight = 0  # one event loop: read and changed between awaits only
        self.streams = 0

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stream = scope.get("path") == EVENTS_PATH and scope.get("method") == "GET"
        if stream and self.streams >= self.max_streams:
            await error_response(429, "too_many_event_streams",
                                 f"{self.max_streams} event streams are open (api.limits.max_event_streams)",
                                 headers={"Retry-After": RETRY_AFTER_S})(scope, receive, send)
            return
        if not stream and self.in_flight >= self.max_in_flight and scope.get("path") != HEALTH_PATH:
            await error_response(429, "too_many_requests_in_flight",
                                 f"{self.max_in_flight} requests are being answered (api.limits.max_in_flight)",
                                 headers={"Retry-After": RETRY_AFTER_S})(scope, receive, send)
            return
        if stream:
            self.streams += 1
        else:
            self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            if stream:
                self.streams -= 1
            else:
                self.in_flight -= 1


class RateLimit:
    """Pure ASGI middleware: `rate` writes per client (see the module docstring)."""

    def __init__(self, app: ASGIApp, rate: str, max_keys: int, keyed_by_token: bool,
                 announce_rate: str = ApiLimits.announce_rate) -> None:
        self.app = app
        self.item = parse_rate(rate)
        self.rate = rate
        self.announce_item = parse_rate(announce_rate)
        self.announce_rate = announce_rate
        self.limiter = MovingWindowRateLimiter(MemoryStorage())
        self.max_keys = max_keys
        self.keyed_by_token = keyed_by_token
        self.keys: OrderedDict[str, None] = OrderedDict()  # least recently seen first

    def key(self, scope: dict) -> str:
        """The client a request counts against."""
        if self.keyed_by_token:  # behind the Guard: the principal its token proved (the admin, or a tenant)
            principal = scope.get("state", {}).get("principal")
            if principal is not None:
                return f"principal:{principal}"
        client = scope.get("client")
        return f"address:{client[0] if client else 'unknown'}"

    def _remember(self, key: str) -> None:
        self.keys[key] = None
        self.keys.move_to_end(key)
        while len(self.keys) > self.max_keys:
            oldest, _ = self.keys.popitem(last=False)
            self.limiter.clear(self.announce_item if oldest.startswith("announce|") else self.item, oldest)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") not in MUTATING:
            await self.app(scope, receive, send)
            return
        key = self.key(scope)
        item, what = self.item, f"{self.rate} writes from this client (api.limits.rate)"
        if scope.get("method") == "PUT" and ANNOUNCEMENT.fullmatch(scope.get("path", "")):
            key = f"announce|{key}|{scope['path']}"
            item, what = self.announce_item, f"{self.announce_rate} announcements of this job (api.limits.announce_rate)"
        self._remember(key)
        if not self.limiter.hit(item, key):
            reset = self.limiter.get_window_stats(item, key).reset_time
            retry = str(max(1, math.ceil(reset - time.time())))
            await error_response(429, "rate_limited", f"more than {what}",
                                 headers={"Retry-After": retry})(scope, receive, send)
            return
        await self.app(scope, receive, send)
