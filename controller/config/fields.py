"""The config's own kinds of value, read with the config's strict reader
(`strict.CONFIG`): table budgets, file paths, URLs, HOST:PORT addresses, names
chosen from a list, port lists, id ranges, TLS files and mappings of switch names. Each
returns the checked value or raises a `ConfigError` that names the key path.
"""

from __future__ import annotations

import ssl
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from controller.config.schema import MAX_P4_PORT, MIN_PORT_STATS_S, UNLIMITED, Capacity, ServerTls, TlsFiles
from controller.config.strict import CONFIG, key

_fail = CONFIG.fail


def capacity(value: Any, where: str) -> Capacity:
    """A table budget: a non-negative integer or "unlimited"."""
    if value == UNLIMITED:
        return UNLIMITED
    if isinstance(value, str):
        raise _fail(where, f"expected a non-negative integer or {UNLIMITED!r}, got {value!r}")
    return CONFIG.integer(value, where, 0)


def file_path(value: Any, where: str, base: Path) -> Path:
    """A path (~ expanded), relative ones taken from `base`."""
    p = Path(CONFIG.string(value, where)).expanduser()
    return p if p.is_absolute() else base / p


def _pem_file(value: Any, where: str, base: Path, marker: str, what: str) -> Path:
    """An existing, readable file that holds a PEM block of `marker` (CERTIFICATE, PRIVATE KEY)."""
    p = file_path(value, where, base)
    try:
        text = p.read_text(errors="replace")
    except OSError as e:
        raise _fail(where, f"cannot read {p}: {e.strerror or e}") from None
    if not ("-----BEGIN " in text and f"{marker}-----" in text):
        raise _fail(where, f"{p} holds no PEM {what}")
    return p


def tls_files(value: Any, where: str, base: Path) -> TlsFiles:
    """`{cert, key, ca}`: all three PEM files, relative to `base`; the key must be
    the certificate's and the CA file must load as CA certificates."""
    raw = CONFIG.mapping(value, where, ("cert", "key", "ca"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cert, private = _key_pair(raw, where, base, context)
    ca = _pem_file(raw["ca"], key(where, "ca"), base, "CERTIFICATE", "CA certificate")
    try:
        context.load_verify_locations(cafile=ca)
    except ssl.SSLError as e:
        raise _fail(key(where, "ca"), f"{ca} does not load as CA certificates: {e.reason or e}") from None
    return TlsFiles(cert, private, ca)


def server_tls(value: Any, where: str, base: Path) -> ServerTls:
    """`{cert, key}` of a TLS server (`api.tls`): PEM files relative to `base`, the
    key the certificate's."""
    raw = CONFIG.mapping(value, where, ("cert", "key"))
    return ServerTls(*_key_pair(raw, where, base, ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)))


def _key_pair(raw: dict, where: str, base: Path, context: ssl.SSLContext) -> tuple[Path, Path]:
    """The `cert` and `key` PEM files of `raw`, the key checked to be the certificate's
    by loading both into `context`."""
    cert = _pem_file(raw["cert"], key(where, "cert"), base, "CERTIFICATE", "certificate")
    private = _pem_file(raw["key"], key(where, "key"), base, "PRIVATE KEY", "private key")
    try:
        context.load_cert_chain(cert, private)
    except ssl.SSLError as e:
        raise _fail(key(where, "key"), f"{private} is not the private key of {cert} (or not a key): {e.reason or e}") from None
    return cert, private


def one_of(value: Any, where: str, what: str, choices: Iterable[str]) -> str:
    """A string among `choices` ("unknown `what` 'x'; choose from ..." otherwise)."""
    name = CONFIG.string(value, where)
    choices = tuple(choices)
    if name not in choices:
        raise _fail(where, f"unknown {what} {name!r}; choose from {', '.join(choices)}")
    return name


def url(value: Any, where: str) -> str:
    """An http:// or https:// URL with a host, without a trailing slash."""
    text = CONFIG.string(value, where)
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail(where, f"expected an http:// or https:// URL with a host, got {text!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise _fail(where, f"bad port in {text!r}") from None
    return text.rstrip("/")


def address(value: Any, where: str) -> str:
    """HOST:PORT, the port in 1..65535."""
    text = CONFIG.string(value, where)
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _fail(where, f"expected HOST:PORT with a port in 1..65535, got {text!r}")
    return text


def ports(value: Any, where: str) -> tuple[int, ...]:
    """A non-empty list of distinct port numbers (0..511), kept sorted."""
    if not isinstance(value, list):
        raise _fail(where, f"expected a list of port numbers, got {CONFIG.type_name(value)}")
    if not value:
        raise _fail(where, "must list at least one port")
    numbers = [CONFIG.integer(p, f"{where}[{i}]", 0, MAX_P4_PORT) for i, p in enumerate(value)]
    dup = next((p for i, p in enumerate(numbers) if p in numbers[:i]), None)
    if dup is not None:
        raise _fail(where, f"port {dup} is listed twice")
    return tuple(sorted(numbers))


def id_range(value: Any, where: str, maximum: int) -> tuple[int, int]:
    """[first, last] with 1 <= first <= last <= `maximum`."""
    if not isinstance(value, list):
        raise _fail(where, f"expected [first, last], got {CONFIG.type_name(value)}")
    if len(value) != 2:
        raise _fail(where, f"expected [first, last], got a list of {len(value)}")
    first = CONFIG.integer(value[0], f"{where}[0]", 1, maximum)
    last = CONFIG.integer(value[1], f"{where}[1]", 1, maximum)
    if last < first:
        raise _fail(where, f"last ({last}) is below first ({first})")
    return first, last


def port_stats_s(value: Any, where: str) -> float:
    """Seconds between port statistics requests: 0 (off) or at least MIN_PORT_STATS_S."""
    x = CONFIG.number(value, where, positive=False)
    if 0 < x < MIN_PORT_STATS_S:
        raise _fail(where, f"must be 0 (no port statistics) or at least {MIN_PORT_STATS_S} s, got {value}")
    return x


def per_switch(value: Any, at: str, allowed: tuple[str, ...]) -> Iterator[tuple[str, dict, str]]:
    """(name, its checked mapping, its key path) for a mapping of switch names."""
    if not isinstance(value, dict):
        raise _fail(at, f"expected a mapping of switch names, got {CONFIG.type_name(value)}")
    for name, spec in value.items():
        if not isinstance(name, str) or not name:
            raise _fail(at, f"switch names must be non-empty strings, got {name!r}")
        s_at = key(at, name)
        yield name, CONFIG.mapping(spec, s_at, optional=allowed), s_at
