"""Model broadcast over NORM (RFC 5740): the PS sends one object (the model's
bytes) to every worker of its job at the planned rate; each worker gets the
object whole and checked, or an error.

    from controller.client import Client
    from controller.client.broadcast import Sender, Receiver

    # on the PS                                       # on each worker
    with Sender(job, hosts) as tx:                     with Receiver(job, hosts, me="host-1") as rx:
        tx.send(weights_bytes)                             data = rx.receive(timeout=60)

(`broadcast(job, data)` and `receive(job)` do one object each.)

Where the bytes go follows the job's plan (the controller's answer, `Job`):
- to the job's group address, when the plan has a multicast tree
  (`job.sends_multicast`): one NORM session whose receivers are the workers the
  tree reaches. Switches that end the tree in a unicast branch rewrite the
  packets' IPv4 and Ethernet destination to the worker's own (OpenFlow
  `set_field`, P4 egress rewrite), so a worker must accept the session's packets
  at its unicast address as well as at the group: the receiver's socket is bound
  to the wildcard address on the job's port, and joins the group.
- to each worker of `job.ps_unicast` (hybrid and unicast jobs): one more NORM
  session per worker, addressed to that worker's IPv4 address, on the same port.

Every session is paced by NORM's rate control (`NormSetTxRate`, which counts
NORM messages) so that its segments (the object's bytes) go at `rate_share` of
the job's planned rate (`Sender.set_rate` when the controller changes it: a job
broadcasting): the plan is a payload rate, and the controller's meter at the PS's
edge switch polices the frames, with their Ethernet, IPv4, UDP and NORM headers, at
the plan times the headers' factor, which the planner reserved on every link
(`controller.client.normwire` has the per-packet accounting). Segments are as
large as the interface's MTU allows, or larger (`segment`: then sent as IP
fragments). Congestion control is off: the plan, not NORM, decides the rate.
Each block of `block` data segments has `parity` repair segments that answer
NACKs (one parity segment repairs any one lost segment of its block, for every
receiver at once), and `auto_parity` of them can be sent proactively.
Receivers send their NACKs (and watermark ACKs) by unicast to the PS
(`NormSetDefaultUnicastNack`): only the PS needs them, and a unicast branch has
no multicast path back. Ports (checked by a capture in tests/test_broadcast.py):
the PS's sessions send to the job's port from an ephemeral port each; a worker
answers from the job's port (`NormSetTxPort`; NORM's default would be an
ephemeral one) to the port the data came from, so that the fabric can tell a
job's feedback from other traffic (the controller's planned class,
`southbound.planned_dscp`, `controller.southbound.planned`).

Integrity: the object's NORM info (`NormDataEnqueue`'s info, delivered to
receivers with the object) carries a magic, the SHA-256 of the bytes, their
length, the object's sequence number, an HMAC and the job id. A receiver
returns an object only when its length and digest match; otherwise
`CorruptObject`. An object the sender aborts or that stays incomplete is
`IncompleteObject` / `ReceiveTimeout`, never returned.

Authentication: every job has a 32-byte key (`Job.auth_key`: the controller
gives it to the job's registrant, who hands it to the workers out of band). The
sender signs each object: HMAC-SHA256 under the key over the job id, the
object's sequence number (increasing: nanoseconds since the epoch at sending),
its length and its SHA-256 (`object_mac`). A receiver accepts an object only
from the job's PS (the NORM sender's source address, `norm.node_address`, is
the PS's) and only with a valid HMAC over a sequence number above the last one
it accepted; anything else is refused: logged (an ERROR naming the sender's
address and why, at most once a minute per sender and reason), never
delivered, and `receive` goes on waiting for the real object. Both sides refuse
to start without a key; `insecure=True` (tests of the old behaviour only) signs
nothing and checks no sender. The source check holds only as far as the fabric
stops forged source addresses (its source guard); the HMAC holds regardless.

Completion: the sender sets a NORM watermark on the object with every worker as
an acking node; `send` returns when every worker has acknowledged the whole
object, re-asking (new watermark) until `timeout`, after which
`BroadcastIncomplete` names the workers that never confirmed. A confirmation is
NORM's: the worker holds every byte. The digest is checked by the worker's
`receive`, after that; a worker that refuses an object raises there, and the PS
does not learn it from NORM.

The port is derived from the group address (`port_for`), so a PS and its
workers agree on it without talking, and two jobs never share one (each has its
own group address; their ports differ by construction within a /17).
"""

from __future__ import annotations

import ctypes
import hashlib
import ipaddress
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.client import norm
from controller.client.normwire import (  # noqa: F401 (BUFFER_BYTES, interface_for: this module's API too)
    BUFFER_BYTES, DEFAULT_MTU, check_buffer, check_segment, check_tos, interface_for, interface_mtu, max_segment,
    norm_rate)
from controller.client.normwire import PORT_BASE, PORT_SPAN, port_for  # noqa: F401 (this module's API too)
from controller.client.objinfo import (  # noqa: F401  (make_info, parse_info: this module's API too)
    INFO_MAGIC,
    KEY_BYTES,
    Info,
    info_refusal,
    make_info,
    object_mac,
    parse_info,
    parse_signed,
)
from controller.client.outcome import (  # this module's API too
    BroadcastError,
    BroadcastIncomplete,
    BroadcastReport,
    CorruptObject,
    IncompleteObject,
    ReceiveTimeout,
    SessionReport,
)

log = logging.getLogger(__name__)

REFUSAL_LOG_S = 60.0         # one ERROR per (sender, reason) per minute
REFUSAL_TABLE = 256          # bound of the (sender, reason) -> last log time table (oldest dropped)
MAX_OBJECT = 2**32 - 1       # NormDataEnqueue takes a 32-bit length


# -- addressing ---------------------------------------------------------------------------

def node_id_for(ip: str) -> int:
    """A host's NORM node id: its IPv4 address as a 32-bit number (unique in the fabric)."""
    n = int(ipaddress.IPv4Address(ip))
    if n in (0, norm.NORM_NODE_ANY):
        raise BroadcastError(f"{ip} cannot be a NORM node id")
    return n


def resolve(host: str, hosts: Mapping[str, str] | None) -> str:
    """A host's IPv4 address: `hosts[host]` (e.g. `Client.hosts()`), or the
    name itself if it is an address."""
    if hosts and host in hosts:
        return hosts[host]
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        raise BroadcastError(f"no IPv4 address known for host {host!r} (pass hosts=client.hosts())") from None


@dataclass(frozen=True)
class Destination:
    """One NORM session of the PS: `address` (group or a worker's unicast) and
    the workers it must reach."""

    address: str
    workers: tuple[str, ...]
    multicast: bool


def destinations(job: Any) -> list[Destination]:
    """Where the PS sends the job's object, from the controller's answer: the
    group (the workers not addressed by the PS, if the plan has a tree) and one
    unicast session per worker of `ps_unicast`. Addresses of unicast sessions
    are host names here; `Sender` resolves them."""
    if getattr(job, "state", "planned") != "planned" or not job.rate:
        raise BroadcastError(f"job {job.id} is not planned with a rate (state {job.state}, rate {job.rate})")
    direct = tuple(w for w in job.workers if w in set(job.ps_unicast))
    via_tree = tuple(w for w in job.workers if w not in set(job.ps_unicast))
    out = []
    if via_tree:
        if not job.sends_multicast:
            raise BroadcastError(f"job {job.id}: workers {', '.join(via_tree)} are neither on a tree nor PS-addressed")
        out.append(Destination(job.group_address, via_tree, True))
    out += [Destination(w, (w,), False) for w in direct]
    return out


def job_key(job: Any, key: bytes | None, insecure: bool, who: str) -> bytes | None:
    """The key a Sender or Receiver uses: `key`, else the job's `auth_key`;
    `BroadcastError` if there is none (unless `insecure`) or it is not 32 bytes."""
    key = key if key is not None else getattr(job, "auth_key", None)
    if key is None:
        if insecure:
            return None
        raise BroadcastError(
            f"job {job.id}: a {who} needs the job's broadcast key: the Job that Client.register returns carries "
            "it (auth_key); hand it to the workers out of band (Job.with_key, or key=)")
    if len(key) != KEY_BYTES:
        raise BroadcastError(f"job {job.id}: a broadcast key is {KEY_BYTES} bytes, not {len(key)}")
    return key


def _as_bytes(data: bytes | bytearray | memoryview | str | Path) -> bytes:
    if isinstance(data, (str, Path)):
        return Path(data).read_bytes()
    return bytes(data)


# -- sender -------------------------------------------------------------------------------

class Sender:
    """The PS's side: NORM sessions for the job's destinations, open until `close`.

    `hosts` maps host names to IPv4 addresses (`Client.hosts()`); `me` is the PS
    (default `job.ps`). `node_ids` overrides a host's NORM node id (default:
    its address; tests on one machine need distinct ones). `interface` is the
    interface multicast leaves by (default: the one holding the PS's address).
    `parity` repair segments per `block` data segments, `auto_parity` of them
    sent with every block unasked. Segments go at `rate_share` of the plan;
    `segment` bytes of data per NORM message (default: the most that fits the
    interface's `mtu`, itself read from the interface, else 1500; a larger
    segment is sent as IP fragments). `grtt` is NORM's first round-trip
    estimate (s), which its probes then correct; receivers wait up to `backoff`
    × GRTT before they NACK a loss (1, not NORM's 4: a job's few workers need
    little NACK suppression, and on a loaded fabric the GRTT grows to most of a
    second, which NORM's 4 made seconds per repair round). `buffer_bytes`: NORM's repair
    state per session (`normwire.BUFFER_BYTES`). `key` is the job's broadcast key (default
    `job.auth_key`); without one it refuses to start, unless `insecure` (tests
    of the old, unsigned behaviour). `tos`: the IP TOS byte of every packet of the
    sessions (default: the system's, 0), e.g. a DSCP that the fabric prioritises."""

    def __init__(
        self,
        job: Any,
        hosts: Mapping[str, str] | None = None,
        *,
        me: str | None = None,
        node_ids: Mapping[str, int] | None = None,
        interface: str | None = None,
        port: int | None = None,
        rate_share: float = 0.995,
        block: int = 64,
        parity: int = 16,
        auto_parity: int = 0,
        segment: int | None = None,
        mtu: int | None = None,
        grtt: float = 0.05,
        backoff: float = 1.0,
        buffer_bytes: int = BUFFER_BYTES,
        ttl: int = 32,
        multicast_loopback: bool = False,
        tx_loss: float = 0.0,
        key: bytes | None = None,
        insecure: bool = False,
        tos: int | None = None,
    ) -> None:
        self.instance = None
        self._open = threading.Lock()    # set_rate (any thread) against close: no call on freed sessions
        self.key = job_key(job, key, insecure, "Sender")
        check_tos(tos)
        check_buffer(buffer_bytes)
        self._seq = 0
        if not 0 < rate_share <= 1:
            raise ValueError(f"rate_share must be in (0, 1], not {rate_share}")
        if not 0.001 <= grtt <= 2.0:
            raise ValueError(f"grtt must be 0.001..2 s, not {grtt}")
        if not 0 <= backoff <= 16:
            raise ValueError(f"backoff must be 0..16, not {backoff}")
        if not 0 <= auto_parity <= parity or block < 1 or block + parity > 255:
            raise ValueError("need 0 <= auto_parity <= parity and block + parity <= 255")
        self.job = job
        self.hosts = dict(hosts or {})
        self.node_ids = dict(node_ids or {})
        self.me = me or job.ps
        self.ip = resolve(self.me, self.hosts)
        self.port = port or port_for(job.group_address)
        self.dests = destinations(job)
        self.interface = interface or interface_for(self.ip)
        self.mtu = mtu if mtu is not None else interface_mtu(self.interface) or DEFAULT_MTU
        self.segment = segment if segment is not None else max_segment(self.mtu)
        check_segment(self.segment, self.mtu)
        self.rate_share = rate_share
        self.rate = norm_rate(float(job.rate), rate_share, self.segment, self.mtu)
        self.instance = norm.Instance()
        self.lib = self.instance.lib
        self.sessions: dict[int, Destination] = {}
        self._keep: list[Any] = []       # buffers NORM reads from until it purges them
        try:
            for i, d in enumerate(self.dests):
                address = d.address if d.multicast else resolve(d.address, self.hosts)
                s = self.instance.session(address, self.port, self._node(self.me))
                # every session of this PS sends from its own port, so that NACKs and
                # ACKs (unicast, to where the data came from) reach the right session
                norm.check(self.lib.NormSetTxPort(s, 0, False, self.ip.encode()), f"NormSetTxPort({self.ip})")
                self.lib.NormSetRxPortReuse(s, True, None, None, 0)
                if d.multicast:
                    if self.interface:
                        norm.check(self.lib.NormSetMulticastInterface(s, self.interface.encode()),
                                   f"NormSetMulticastInterface({self.interface})")
                    self.lib.NormSetTTL(s, ttl)
                    self.lib.NormSetMulticastLoopback(s, multicast_loopback)
                if tx_loss:
                    self.lib.NormSetTxLoss(s, float(tx_loss))
                if tos is not None:
                    norm.check(self.lib.NormSetTOS(s, tos), f"NormSetTOS({tos})")
                self.lib.NormSetCongestionControl(s, False, False)
                self.lib.NormSetTxRate(s, self.rate)
                self.lib.NormSetGroupSize(s, len(d.workers))
                norm.check(self.lib.NormSetFragmentation(s, self.segment > max_segment(self.mtu)),
                           "NormSetFragmentation")
                self.lib.NormSetGrttEstimate(s, grtt)
                self.lib.NormSetBackoffFactor(s, float(backoff))
                self.lib.NormSetGrttMax(s, 2.0)
                self.lib.NormSetTxCacheBounds(s, max(buffer_bytes, 1 << 20) * 4, 1, 16)
                self.lib.NormSetTxSocketBuffer(s, 4 << 20)
                norm.check(self.lib.NormStartSender(s, (self.lib.NormGetRandomSessionId() + i) & 0xFFFF,
                                                    buffer_bytes, self.segment, block, parity, 0),
                           f"NormStartSender({address}:{self.port})")
                self.lib.NormSetAutoParity(s, auto_parity)
                self.sessions[s] = d
        except BaseException:
            self.close()
            raise

    def _node(self, host: str) -> int:
        return self.node_ids[host] if host in self.node_ids else node_id_for(resolve(host, self.hosts))

    def set_rate(self, planned_bps: float) -> None:
        """The job's payload rate is now `planned_bps` (the controller changed it: a job
        broadcasting): every session at once goes at its NORM rate (`norm_rate`, as at the
        start), also mid-`send`, from any thread (libnorm's calls take its instance's lock;
        `send` keeps no rate). ValueError unless finite and > 0; BroadcastError once closed."""
        if not math.isfinite(bps := float(planned_bps)) or bps <= 0:
            raise ValueError(f"a rate must be finite and positive, not {planned_bps!r}")
        rate = norm_rate(bps, self.rate_share, self.segment, self.mtu)
        with self._open:
            if self.instance is None:
                raise BroadcastError(f"job {self.job.id}: the Sender is closed")
            for s in self.sessions:
                self.lib.NormSetTxRate(s, rate)
            self.rate = rate

    def send(self, data: bytes | bytearray | memoryview | str | Path, timeout: float = 300.0) -> BroadcastReport:
        """Send one object to every worker and wait until each has confirmed all
        of it; `BroadcastIncomplete` (with the report) if some never did within
        `timeout` seconds. `data` is bytes or a path to a file."""
        payload = _as_bytes(data)
        if len(payload) > MAX_OBJECT:
            raise BroadcastError(f"an object is at most {MAX_OBJECT} bytes, not {len(payload)}")
        info = make_info(hashlib.sha256(payload).digest(), len(payload), self.job.id, self.key, self.next_seq())
        return self.send_raw(payload, info, timeout)

    def next_seq(self) -> int:
        """The next object's sequence number: increasing, also across Senders of
        one PS (nanoseconds since the epoch), so that receivers refuse replays."""
        self._seq = max(self._seq + 1, time.time_ns())
        return self._seq

    def send_raw(self, payload: bytes, info: bytes, timeout: float = 300.0) -> BroadcastReport:
        """`send` with the NORM info given as is (tests use it to send an object
        whose digest lies)."""
        start = time.monotonic()
        buf = ctypes.create_string_buffer(payload, len(payload)) if payload else ctypes.create_string_buffer(1)
        self._keep.append(buf)
        if len(self._keep) > 16:
            del self._keep[0]
        objects = {}
        acked: dict[int, set[str]] = {}
        for s, d in self.sessions.items():
            obj = self.lib.NormDataEnqueue(s, buf, len(payload), info, len(info))
            if not obj:
                raise BroadcastError(f"NormDataEnqueue to {d.address} failed (tx cache full?)")
            objects[s] = obj
            acked[s] = set()
            self._watermark(s, d, obj)
        pending = set(self.sessions)
        deadline = start + timeout
        rounds = 1
        while pending:
            ev = self.instance.next_event(deadline - time.monotonic())
            if ev is None:
                break
            if ev.session not in pending or ev.type != norm.EV["TX_WATERMARK_COMPLETED"]:
                if ev.type == norm.EV["SEND_ERROR"]:
                    log.warning("NORM send error on the session to %s", self.sessions.get(ev.session))
                continue
            d = self.sessions[ev.session]
            for w in d.workers:
                if self.lib.NormGetAckingStatus(ev.session, self._node(w)) == norm.ACK_SUCCESS:
                    acked[ev.session].add(w)
            if acked[ev.session] >= set(d.workers):
                pending.discard(ev.session)
            elif time.monotonic() < deadline:
                log.info("job %s: %s not confirmed yet; asking again", self.job.id,
                         ", ".join(sorted(set(d.workers) - acked[ev.session])))
                self._watermark(ev.session, d, objects[ev.session], skip=acked[ev.session])
                rounds += 1
        report = BroadcastReport(
            self.job.id, len(payload), time.monotonic() - start, self.rate,
            [SessionReport(d.address, d.workers, d.multicast, tuple(w for w in d.workers if w in acked[s]))
             for s, d in self.sessions.items()],
            rounds, max(self.lib.NormGetGrttEstimate(s) for s in self.sessions) if self.sessions else None,
        )
        if report.missing:
            raise BroadcastIncomplete(
                f"job {self.job.id}: {', '.join(report.missing)} did not confirm the object "
                f"({len(payload)} bytes) within {timeout:g} s", report)
        return report

    def _watermark(self, s: int, d: Destination, obj: int, skip: set[str] = frozenset()) -> None:
        for w in d.workers:
            if w not in skip:
                self.lib.NormAddAckingNode(s, self._node(w))
        norm.check(self.lib.NormSetWatermark(s, obj, True), f"NormSetWatermark({d.address})")

    def close(self) -> None:
        with self._open:
            if self.instance is not None:
                for s in list(self.sessions):
                    self.lib.NormStopSender(s)
                self.instance.close()
                self.instance = None
                self._keep.clear()

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- receiver -----------------------------------------------------------------------------

class Receiver:
    """A worker's side: one NORM session on the job's port that joins the group
    and also accepts the session's packets at this host's unicast address
    (unicast branches, PS-addressed copies). Objects are returned in the order
    they complete, by `receive`, each checked against its digest.

    `me` is this worker (its name in the job, for its address and node id), or
    give `ip`. It stays open between objects (training iterations) to answer
    the sender's acknowledgement requests; `close` when done. `key` is the
    job's broadcast key (default `job.auth_key`), `ps_ip` the PS's address
    (default: the job's PS resolved with `hosts`): objects are accepted only
    from there and with a valid HMAC. Without a key it refuses to start, unless
    `insecure` (tests of the old behaviour: any sender, nothing checked but the digest).
    `tos`, `buffer_bytes`: as the Sender's (its NACKs and ACKs; the PS's session)."""

    def __init__(
        self,
        job: Any,
        hosts: Mapping[str, str] | None = None,
        *,
        me: str | None = None,
        ip: str | None = None,
        node_id: int | None = None,
        interface: str | None = None,
        port: int | None = None,
        buffer_bytes: int = BUFFER_BYTES,
        rx_loss: float = 0.0,
        bind: str | None = None,
        key: bytes | None = None,
        ps_ip: str | None = None,
        insecure: bool = False,
        tos: int | None = None,
    ) -> None:
        self.instance = None
        self.insecure = insecure
        check_tos(tos)
        check_buffer(buffer_bytes)
        self.key = job_key(job, key, insecure, "Receiver")
        self.ps_ip = ps_ip or (None if insecure else resolve(job.ps, hosts))
        self.last_seq = -1                       # the last accepted object's sequence number
        self.refused: deque[tuple[str | None, str]] = deque(maxlen=64)   # (sender address, why), newest last
        self._logged: dict[tuple[str | None, str], float] = {}
        if ip is None:
            if me is None:
                raise ValueError("name this worker (me=) or give its address (ip=)")
            ip = resolve(me, hosts)
        self.job = job
        self.ip = ip
        self.port = port or port_for(job.group_address)
        self.interface = interface or interface_for(ip)
        self.instance = norm.Instance()
        self.lib = self.instance.lib
        self.done: deque[bytes | BroadcastError] = deque()
        self.lock = threading.Lock()
        try:
            # a worker the PS addresses itself (hybrid, unicast) gets only the PS's unicast
            # session: its session is its own address, and it does not join the group, so
            # that it never sees the group session too (the same sender twice)
            self.direct = me is not None and me in set(getattr(job, "ps_unicast", ()))
            address = ip if self.direct else job.group_address
            s = self.instance.session(address, self.port, node_id or node_id_for(ip))
            self.session = s
            # bound to the wildcard address (or `bind`): packets to the group and to this
            # host's own address (a unicast branch) both reach it
            self.lib.NormSetRxPortReuse(s, True, bind.encode() if bind else None, None, 0)
            if self.interface and not self.direct:
                norm.check(self.lib.NormSetMulticastInterface(s, self.interface.encode()),
                           f"NormSetMulticastInterface({self.interface})")
            # its NACKs and ACKs leave from the job's port (not an ephemeral one), so that the
            # fabric can tell them from other traffic (southbound.planned_dscp)
            norm.check(self.lib.NormSetTxPort(s, self.port, True, None), f"NormSetTxPort({self.port})")
            if rx_loss:
                self.lib.NormSetRxLoss(s, float(rx_loss))
            if tos is not None:  # its NACKs and ACKs
                norm.check(self.lib.NormSetTOS(s, tos), f"NormSetTOS({tos})")
            self.lib.NormSetDefaultUnicastNack(s, True)
            self.lib.NormSetDefaultSyncPolicy(s, norm.SYNC_ALL)
            self.lib.NormSetRxSocketBuffer(s, 4 << 20)
            norm.check(self.lib.NormStartReceiver(s, buffer_bytes), f"NormStartReceiver({address}:{self.port})")
        except BaseException:
            self.close()
            raise
        self.pending: dict[int, int] = {}   # objects in progress: handle -> size

    def receive(self, timeout: float = 300.0) -> bytes:
        """The next whole object, checked: `CorruptObject` if its bytes do not
        match the announced digest or length, `IncompleteObject` if the sender
        aborted it, `ReceiveTimeout` if none completed within `timeout` s."""
        deadline = time.monotonic() + timeout
        while not self.done:
            ev = self.instance.next_event(deadline - time.monotonic())
            if ev is None:
                if time.monotonic() >= deadline:
                    missing = None
                    for obj in self.pending:
                        missing = self.lib.NormObjectGetBytesPending(obj)
                    what = f"{missing} bytes of the object in progress still missing" if missing is not None \
                        else "no object started"
                    if self.refused:
                        what += f"; {len(self.refused)} objects from other senders or unauthenticated refused"
                    raise ReceiveTimeout(f"job {self.job.id}: no complete object within {timeout:g} s ({what})",
                                         missing)
                continue
            self._handle(ev)
        item = self.done.popleft()
        if isinstance(item, BroadcastError):
            raise item
        return item

    def _handle(self, ev: norm.Event) -> None:
        lib = self.lib
        if ev.type == norm.EV["RX_OBJECT_NEW"] and ev.object:
            why = self._not_from_ps(ev.object)
            if why:  # not the PS: not even buffered
                self._refuse(ev.object, why, cancel=True)
                return
            self.pending[ev.object] = lib.NormObjectGetSize(ev.object)
        elif ev.type == norm.EV["RX_OBJECT_INFO"] and ev.object and ev.object in self.pending and self.key:
            why = info_refusal(norm.object_info(lib, ev.object), self.key, self.job.id, self.last_seq)
            if why:  # a forged info: dropped before its data is received
                self.pending.pop(ev.object, None)
                self._refuse(ev.object, why, cancel=True)
        elif ev.type == norm.EV["RX_OBJECT_ABORTED"] and ev.object:
            if ev.object not in self.pending:
                return  # refused already, or never this job's PS's
            size = self.pending.pop(ev.object)
            info = parse_info(norm.object_info(lib, ev.object))
            if info and info[2] != self.job.id:
                return
            self.done.append(IncompleteObject(
                f"job {self.job.id}: the sender aborted an object of {size} bytes before it was complete here"))
        elif ev.type == norm.EV["RX_OBJECT_COMPLETED"] and ev.object:
            self.pending.pop(ev.object, None)
            if lib.NormObjectGetType(ev.object) != norm.OBJECT_DATA:
                return
            outcome = self._check(ev.object)
            if outcome is not None:
                self.done.append(outcome)

    def _not_from_ps(self, obj: int) -> str | None:
        if self.insecure:
            return None
        address = norm.object_sender_address(self.lib, obj)
        if address != self.ps_ip:
            return f"not the job's PS ({self.job.ps} at {self.ps_ip})"
        return None

    def _refuse(self, obj: int, why: str, cancel: bool = False) -> None:
        """Refuse an object: recorded, logged (rate-limited), never delivered."""
        address = norm.object_sender_address(self.lib, obj)
        self.refused.append((address, why))
        now = time.monotonic()
        kind = (address, why.split(" (")[0][:60])
        if now - self._logged.get(kind, -REFUSAL_LOG_S) >= REFUSAL_LOG_S:
            self._logged.pop(kind, None)
            self._logged[kind] = now
            while len(self._logged) > REFUSAL_TABLE:
                del self._logged[next(iter(self._logged))]
            log.error("job %s: refused an object from NORM sender %s: %s; still waiting for the PS's",
                      self.job.id, address or "(unknown address)", why)
        if cancel:
            self.lib.NormObjectCancel(obj)

    def _check(self, obj: int) -> bytes | BroadcastError | None:
        """The object's bytes, a `CorruptObject`, or None: refused (not from the
        PS, or not authenticated) and not delivered."""
        why = self._not_from_ps(obj)
        raw = norm.object_info(self.lib, obj)
        if why is None and self.key is not None:
            why = info_refusal(raw, self.key, self.job.id, self.last_seq)
        if why is not None:
            self._refuse(obj, why)
            return None
        info = parse_signed(raw)
        if info is None:
            return CorruptObject(f"job {self.job.id}: an object arrived without this library's digest info")
        digest, size, job_id = info.digest, info.size, info.job_id
        if job_id != self.job.id:
            return CorruptObject(f"job {self.job.id}: an object of job {job_id!r} arrived on this job's session")
        if self.key is not None:
            self.last_seq = info.seq
        data = norm.object_data(self.lib, obj)
        if len(data) != size:
            return CorruptObject(f"job {self.job.id}: object of {len(data)} bytes, announced {size}")
        got = hashlib.sha256(data).digest()
        if got != digest:
            return CorruptObject(f"job {self.job.id}: SHA-256 of the {size} bytes received is {got.hex()[:16]}…, "
                                 f"the sender announced {digest.hex()[:16]}…: refused")
        return data

    def serve(self, seconds: float) -> None:
        """Keep answering the sender (ACKs, NACKs) for `seconds` more; objects
        that complete meanwhile are kept for `receive`."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ev = self.instance.next_event(left)
            if ev is not None:
                self._handle(ev)

    def finish(self, timeout: float, done: threading.Event | None = None) -> bool:
        """Before leaving: keep answering the PS (its acknowledgement requests,
        its repairs) until `done` is set (by whoever knows the PS has every
        confirmation, e.g. its send returned), the PS's NORM sender has gone
        quiet (NORM reports the remote sender inactive: measured about 37 s
        after the PS closed its `Sender`, at a round-trip estimate of 45 ms) or
        `timeout` seconds passed; True unless the timeout ended it.

        Why: a worker that leaves as soon as it holds the last object can leave
        before the PS's request for its acknowledgement reaches it (the request
        follows the repair that completed the object, or its answer was lost;
        NORM asks again at intervals of its round-trip estimate, which a loaded
        fabric stretches), and the PS's `send` then fails (`BroadcastIncomplete`)
        although this worker has every byte. A fixed linger is only a guess at
        that interval. Objects that complete meanwhile are kept for `receive`."""
        end = time.monotonic() + timeout
        quiet = (norm.EV["REMOTE_SENDER_INACTIVE"], norm.EV["REMOTE_SENDER_PURGED"])
        while not (done is not None and done.is_set()):
            left = end - time.monotonic()
            if left <= 0:
                return False
            ev = self.instance.next_event(min(left, 0.1) if done is not None else left)
            if ev is None:
                continue
            if ev.type in quiet and (self.insecure or norm.node_address(self.lib, ev.sender) == self.ps_ip):
                return True
            self._handle(ev)
        return True

    def close(self) -> None:
        if self.instance is not None:
            if getattr(self, "session", None):
                self.lib.NormStopReceiver(self.session)
            self.instance.close()
            self.instance = None

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- one object each ----------------------------------------------------------------------

def broadcast(job: Any, data: bytes | str | Path, hosts: Mapping[str, str] | None = None, *,
              timeout: float = 300.0, **options: Any) -> BroadcastReport:
    """Send one object to the job's workers (see `Sender`) and return the report
    once every worker confirmed it."""
    with Sender(job, hosts, **options) as tx:
        return tx.send(data, timeout)


def receive(job: Any, hosts: Mapping[str, str] | None = None, *, me: str | None = None,
            timeout: float = 300.0, linger: float = 2.0, **options: Any) -> bytes:
    """Receive one object of the job (see `Receiver`), checked against its
    digest. The session stays up `linger` more seconds in the background to
    confirm the object to the sender."""
    rx = Receiver(job, hosts, me=me, **options)
    try:
        data = rx.receive(timeout)
    except BaseException:
        rx.close()
        raise

    def finish() -> None:
        try:
            rx.serve(linger)
        finally:
            rx.close()

    threading.Thread(target=finish, name="norm-linger", daemon=True).start()
    return data


__all__: Sequence[str] = (
    "BUFFER_BYTES", "BroadcastError", "BroadcastIncomplete", "BroadcastReport", "CorruptObject", "IncompleteObject",
    "Receiver", "ReceiveTimeout", "Sender", "broadcast", "destinations", "info_refusal", "make_info",
    "object_mac", "port_for", "receive",
)
