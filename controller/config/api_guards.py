"""The readers of `api.allowed_hosts` and `api.limits` (docs/controller.md): the
Host header values the API answers, and what one client may use of it
(`schema.ApiLimits`). Each raises a `ConfigError` naming the key.
"""

from __future__ import annotations

import re
from typing import Any

from limits import parse as parse_rate

from controller.config.schema import ApiLimits
from controller.config.strict import CONFIG, key

_fail = CONFIG.fail
_LIMIT_KEYS = ("rate", "announce_rate", "rate_keys", "max_in_flight", "max_event_streams", "max_connections", "max_jobs", "max_workers")
_CEILINGS = {"rate_keys": 1_000_000, "max_in_flight": 100_000, "max_event_streams": 100_000,
             "max_connections": 1_000_000, "max_jobs": 1_000_000, "max_workers": 100_000}
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]*[a-z0-9_-])(:[0-9]{1,5})?")  # NAME, NAME:PORT, [IPv6]:PORT
_MAX_RATE_AMOUNT = 100_000  # a moving window keeps one timestamp per request counted


def allowed_hosts(value: Any, where: str) -> tuple[str, ...]:
    """`api.allowed_hosts`: a non-empty list of host names or addresses, each
    optionally with ":PORT" (an IPv6 address in brackets: "[::1]:8080")."""
    items = CONFIG.array(value, where)
    if not items:
        raise _fail(where, "must list at least one host name (else nothing could reach the API)")
    out = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        name = CONFIG.string(item, at).strip().lower()
        if not _HOST.fullmatch(name):
            raise _fail(at, f"expected a host name or address, optionally with :PORT, got {item!r}")
        out.append(name)
    return tuple(out)


def rate(value: Any, where: str) -> str:
    """A rate in the `limits` library's notation: "60/minute", "10 per second"."""
    text = CONFIG.string(value, where)
    try:
        item = parse_rate(text)
    except ValueError:
        raise _fail(where, f"expected a rate like '60/minute' or '5 per second', got {text!r}") from None
    if item.amount < 1 or item.amount > _MAX_RATE_AMOUNT:
        raise _fail(where, f"the amount must be between 1 and {_MAX_RATE_AMOUNT}, got {item.amount}")
    return text


def api_limits(value: Any, where: str) -> ApiLimits:
    """`api.limits`: every key optional (`ApiLimits`' defaults)."""
    raw = CONFIG.mapping(value, where, optional=_LIMIT_KEYS)
    d = ApiLimits()
    counts = {name: CONFIG.integer(raw[name], key(where, name), 1, top) if name in raw else getattr(d, name)
              for name, top in _CEILINGS.items()}
    limits = ApiLimits(rate(raw["rate"], key(where, "rate")) if "rate" in raw else d.rate,
                       rate(raw["announce_rate"], key(where, "announce_rate")) if "announce_rate" in raw
                       else d.announce_rate, **counts)
    needed = limits.max_in_flight + limits.max_event_streams
    if limits.max_connections < needed:
        raise _fail(key(where, "max_connections"), f"must be at least max_in_flight + max_event_streams ({needed}), "
                    f"got {limits.max_connections}: uvicorn would refuse requests the API's own caps allow")
    return limits
