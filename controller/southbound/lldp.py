"""Signed LLDP probes, shared by both backends: the frame, its signature, and the
check of a probe a switch hands back.

A probe (IEEE 802.1AB) carries the sending switch (chassis id, `CHASSIS_PREFIX` +
its name: other LLDP speakers' frames are told apart and ignored), its port (port
id), and an organisationally specific TLV (type 127, `OUI`, subtype `SUBTYPE`) with
a timestamp (milliseconds since the epoch: wall clock, so the instances of a
cluster agree), a random 8-byte nonce and an HMAC-SHA256 over (switch, port,
timestamp, nonce) under the secret, as ONOS signs its probes.

`ProbeSigner.verify(frame, now)` gives the probe (`Probe`) or why it is refused:
`unsigned` (no MAC TLV, or a malformed one), `bad_signature`, `stale` (older than
`max_age_s`, or from the future by more), `replayed` (its nonce was accepted
before), or `not_ours` (another LLDP speaker's frame: ignored, never counted).

Bounded memory: the accepted nonces are kept for `max_age_s` (a replay older than
that is stale anyway), at most `MAX_NONCES` of them, the oldest dropped first.

The secret (`secret_for`): `southbound.lldp.secret` (or the environment variable
`secret_env` names), else 32 random bytes generated once and kept in the store
under the state key `STATE_KEY`, so restarts and the instances of a cluster share
it. `signer_for(service)` gives the one signer of a controller (both backends of
a process share it, and its nonces).

`probe_ports(service, switch, ports)` is where both backends send probes: in a
declared topology, the ports the port map gives toward other switches; in a
learned network, every port the switch has (`ports`) except those where a host
has been seen, so a tenant's host is not handed a signed probe it could relay
from another port (the rule of the edge, `core.wiring`, refuses such a relay
too).

`receive(service, signer, switch, port, frame)` is what a backend does with an
LLDP packet-in: the verified probe, or None (a refused probe is counted as
`lldp_<reason>` and logged by `Counters.refused`).
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from controller.addressing.hosts import normalise_mac
from controller.config.schema import LldpConfig

if TYPE_CHECKING:
    from controller.core.service import ControllerService
    from controller.store.base import Store

ETH_LLDP = 0x88CC
LLDP_MULTICAST = "01:80:c2:00:00:0e"  # nearest bridge: never forwarded by a bridge
CHASSIS_PREFIX = b"mcast-controller:"
LLDP_TTL_S = 120
OUI = b"\x02\x6d\x63"  # locally administered
SUBTYPE = 1
STATE_KEY = "lldp_secret"
MAX_NONCES = 65_536
NONCE_BYTES = 8
_MAC_LEN = 32
_TLV_END, _TLV_CHASSIS, _TLV_PORT, _TLV_TTL, _TLV_ORG = 0, 1, 2, 3, 127
_SUBTYPE_LOCAL = 7  # chassis id and port id subtype "locally assigned"

UNSIGNED, BAD_SIGNATURE, STALE, REPLAYED, NOT_OURS = "unsigned", "bad_signature", "stale", "replayed", "not_ours"
REASONS = (UNSIGNED, BAD_SIGNATURE, STALE, REPLAYED, NOT_OURS)


@dataclass(frozen=True)
class Probe:
    """A verified probe: sent out of `switch` port `port` at `timestamp_ms`."""

    switch: str
    port: int
    timestamp_ms: int
    nonce: bytes


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(normalise_mac(mac).replace(":", ""))


def _tlv(kind: int, value: bytes) -> bytes:
    if len(value) > 511:
        raise ValueError("LLDP TLV longer than 511 bytes")
    return ((kind << 9) | len(value)).to_bytes(2, "big") + value


def _signed(switch: str, port: int, timestamp_ms: int, nonce: bytes) -> bytes:
    name = switch.encode()
    return len(name).to_bytes(2, "big") + name + port.to_bytes(4, "big") + timestamp_ms.to_bytes(8, "big") + nonce


def mac_of(secret: bytes, switch: str, port: int, timestamp_ms: int, nonce: bytes) -> bytes:
    """The HMAC-SHA256 of (switch, port, timestamp, nonce) under `secret`."""
    return hmac.new(secret, _signed(switch, port, timestamp_ms, nonce), hashlib.sha256).digest()


def lldp_frame(switch: str, port: int, src_mac: str = "02:00:00:00:00:01", *, signature: bytes | None = None) -> bytes:
    """An LLDP frame announcing `switch` port `port`; `signature`: the value of the
    signed TLV (`ProbeSigner.frame` gives it), None for an unsigned frame."""
    body = (
        _tlv(_TLV_CHASSIS, bytes([_SUBTYPE_LOCAL]) + CHASSIS_PREFIX + switch.encode())
        + _tlv(_TLV_PORT, bytes([_SUBTYPE_LOCAL]) + str(port).encode())
        + _tlv(_TLV_TTL, LLDP_TTL_S.to_bytes(2, "big"))
        + (_tlv(_TLV_ORG, OUI + bytes([SUBTYPE]) + signature) if signature is not None else b"")
        + _tlv(_TLV_END, b"")
    )
    return _mac_bytes(LLDP_MULTICAST) + _mac_bytes(src_mac) + ETH_LLDP.to_bytes(2, "big") + body


def _parse(frame: bytes) -> tuple[str, int, bytes | None] | None:
    """(switch, port, the signed TLV's value or None) of one of our probes; None
    for anything else (another LLDP speaker's frame, not LLDP, malformed)."""
    if len(frame) < 14 or int.from_bytes(frame[12:14], "big") != ETH_LLDP:
        return None
    pos, chassis, port, signed = 14, None, None, None
    while pos + 2 <= len(frame):
        head = int.from_bytes(frame[pos : pos + 2], "big")
        kind, length = head >> 9, head & 0x1FF
        value = frame[pos + 2 : pos + 2 + length]
        if len(value) != length or kind == _TLV_END:
            break
        if kind == _TLV_CHASSIS and value[:1] == bytes([_SUBTYPE_LOCAL]) and value[1:].startswith(CHASSIS_PREFIX):
            try:
                chassis = value[1 + len(CHASSIS_PREFIX) :].decode("utf-8")
            except UnicodeDecodeError:
                return None
        elif kind == _TLV_PORT and value[:1] == bytes([_SUBTYPE_LOCAL]):
            try:
                port = int(value[1:].decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                return None
        elif kind == _TLV_ORG and value[:4] == OUI + bytes([SUBTYPE]):
            signed = value[4:]
        pos += 2 + length
    if not chassis or port is None or not 0 <= port < 2**32:
        return None
    return chassis, port, signed


def parse_lldp(frame: bytes) -> tuple[str, int] | None:
    """(switch, port) one of our probes claims, signed or not (unverified); None for
    anything else."""
    parsed = _parse(frame)
    return None if parsed is None else parsed[:2]


class ProbeSigner:
    """Signs probes and verifies them (see the module docstring). Thread-safe."""

    def __init__(self, secret: bytes, max_age_s: float = 30.0, clock: Callable[[], float] = time.time,
                 max_nonces: int = MAX_NONCES) -> None:
        if len(secret) < 16:
            raise ValueError("an LLDP secret has at least 16 bytes")
        self._secret = secret
        self.max_age_s = max_age_s
        self._clock = clock
        self._max_nonces = max_nonces
        self._lock = threading.Lock()
        self._nonces: collections.OrderedDict[bytes, int] = collections.OrderedDict()  # nonce -> its timestamp (ms)

    def frame(self, switch: str, port: int, src_mac: str = "02:00:00:00:00:01", *, now: float | None = None,
              nonce: bytes | None = None) -> bytes:
        """A signed probe of `switch` port `port` (now, with a random nonce)."""
        ts = int((self._clock() if now is None else now) * 1000)
        nonce = os.urandom(NONCE_BYTES) if nonce is None else nonce
        mac = mac_of(self._secret, switch, port, ts, nonce)
        return lldp_frame(switch, port, src_mac, signature=ts.to_bytes(8, "big") + nonce + mac)

    def verify(self, frame: bytes, now: float | None = None) -> Probe | str:
        """The probe `frame` carries, or why it is refused (a reason of `REASONS`).
        An accepted probe's nonce is remembered: the same frame again is `replayed`."""
        parsed = _parse(frame)
        if parsed is None:
            return NOT_OURS
        switch, port, signed = parsed
        if signed is None or len(signed) != 8 + NONCE_BYTES + _MAC_LEN:
            return UNSIGNED
        ts = int.from_bytes(signed[:8], "big")
        nonce, mac = signed[8 : 8 + NONCE_BYTES], signed[8 + NONCE_BYTES :]
        if not hmac.compare_digest(mac, mac_of(self._secret, switch, port, ts, nonce)):
            return BAD_SIGNATURE
        now_ms = int((self._clock() if now is None else now) * 1000)
        max_age_ms = int(self.max_age_s * 1000)
        if abs(now_ms - ts) > max_age_ms:
            return STALE
        with self._lock:
            while self._nonces:  # forget what is stale anyway
                oldest, when = next(iter(self._nonces.items()))
                if now_ms - when <= max_age_ms:
                    break
                del self._nonces[oldest]
            if nonce in self._nonces:
                return REPLAYED
            self._nonces[nonce] = ts
            while len(self._nonces) > self._max_nonces:
                self._nonces.popitem(last=False)
        return Probe(switch, port, ts, nonce)

    def remembered(self) -> int:
        """How many nonces are remembered (at most `max_nonces`)."""
        with self._lock:
            return len(self._nonces)


def secret_for(config: LldpConfig, store: Store) -> bytes:
    """The probes' secret: the config's, else the one kept in `store` (generated
    once, 32 random bytes, hex-encoded under `STATE_KEY`)."""
    if config.secret is not None:
        return config.secret.encode()
    kept = store.get_state(STATE_KEY)
    if not isinstance(kept, str) or len(kept) < 32:
        store.put_state(STATE_KEY, os.urandom(32).hex())
        kept = store.get_state(STATE_KEY)  # another instance may have written first: take what is kept
    return bytes.fromhex(kept)


_signers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_signers_lock = threading.Lock()


def signer_for(service: ControllerService) -> ProbeSigner:
    """The one `ProbeSigner` of `service` (made at the first call, both backends share it)."""
    with _signers_lock:
        signer = _signers.get(service)
        if signer is None:
            lldp = service.config.southbound.lldp
            signer = _signers[service] = ProbeSigner(secret_for(lldp, service.store), lldp.max_age_s)
        return signer


def probe_ports(service: ControllerService, switch: str, ports: Iterable[int]) -> list[int]:
    """The ports of `switch` that LLDP probes go out of (see the module docstring);
    `ports`: the ports the switch has (used in a learned network only)."""
    wiring = service.wiring
    if service.config.discovers:
        return [p for p in sorted(set(ports)) if not wiring.is_host_end(switch, p)]
    topo, port_map = wiring.topology_and_ports()
    v = topo.index.get(switch)
    return sorted(p for (sw, nb), p in port_map.items() if sw == v and topo.is_switch(nb))


def receive(service: ControllerService, signer: ProbeSigner, switch: str, port: int, frame: bytes) -> Probe | None:
    """An LLDP packet-in from `switch` (in on `port`): the verified probe, or None
    (another speaker's frame: ignored; a refused probe: counted and logged)."""
    got = signer.verify(frame)
    if isinstance(got, Probe):
        return got
    if got != NOT_OURS:
        claimed = parse_lldp(frame)
        why = f"an LLDP probe claiming {claimed[0]} port {claimed[1]}" if claimed else "an LLDP probe"
        service.counters.refused("lldp_" + got, switch=switch, port=port, why=f"{why}: {got.replace('_', ' ')}")
    return None
