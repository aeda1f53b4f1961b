"""The web UI of the controller: its static page and the server-sent events it follows.

Owns three routes added to the REST app by `add_ui`:

    GET /         the page (controller/northbound/ui/index.html)
    GET /ui/...   its assets (app.js, app.css), from the package, never a CDN
    GET /events   text/event-stream: ``event: plan`` within `PLAN_POLL_S` of a new plan
                  generation (data: {"generation"}), ``event: tick`` every `tick_s`
                  seconds (link rates and table use may have changed), and one
                  ``event: hello`` when the stream opens

The page and its assets hold no secret and need no token (`PUBLIC_PATHS`); the
page sends ``Authorization: Bearer`` on every fetch, /events included, so the
API's token rule applies unchanged. The page reads /events with fetch() rather than
EventSource because EventSource cannot send that header, and a token in the URL
would end up in logs. Streams end when the server stops (`closing`), so they never
hold up uvicorn's shutdown, and when their client goes away (at most
`api.limits.max_event_streams` are open at once: limits.py). The page loads no
inline script or style: it is served under a strict Content-Security-Policy
(browser.py).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from controller.core.service import ControllerService

STATIC_DIR = Path(__file__).with_name("ui")
PLAN_POLL_S = 0.2  # how often a stream looks at the plan generation (a cheap read under the lock)
TICK_S = 3.0  # how often a stream says "look again" without a new plan (measured rates move)


def is_public(path: str) -> bool:
    """Paths served without the token: the page and its static assets (no secrets in them)."""
    return path == "/" or path.startswith("/ui/")


def sse(event: str, data: dict) -> bytes:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def add_ui(app: FastAPI, service: ControllerService, closing: threading.Event, tick_s: float | None = None) -> None:
    """Add the page, its assets and /events to `app`; streams end once `closing` is set."""
    tick_s = TICK_S if tick_s is None else tick_s
    index = STATIC_DIR / "index.html"
    if not index.is_file():
        raise RuntimeError(f"the UI's files are missing from the package: {index} (reinstall the package)")

    @app.get("/", include_in_schema=False)
    def get_page() -> FileResponse:
        return FileResponse(index, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-cache"})

    app.mount("/ui", StaticFiles(directory=STATIC_DIR), name="ui")

    def generation() -> int:
        summary = service.served.summary()
        return 0 if summary is None else summary.generation

    async def stream(request: Request) -> AsyncIterator[bytes]:
        seen = await asyncio.to_thread(generation)
        yield sse("hello", {"generation": seen, "tick_s": tick_s})
        loop = asyncio.get_running_loop()
        next_tick = loop.time() + tick_s
        while not closing.is_set():
            await asyncio.sleep(PLAN_POLL_S)
            if await request.is_disconnected():
                return
            now = await asyncio.to_thread(generation)
            if now != seen:
                seen = now
                yield sse("plan", {"generation": now})
            if loop.time() >= next_tick:
                next_tick = loop.time() + tick_s
                yield sse("tick", {"generation": now})

    # the schema leaves it out: an endless stream is no operation for clients to generate
    @app.get("/events", include_in_schema=False)
    def get_events(request: Request) -> StreamingResponse:
        return StreamingResponse(
            stream(request), media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
