"""The OpenFlow channel to the switches: per-switch bookkeeping and the requests in flight.

`Channel` tracks every message sent by its xid (so an error reply names the
switch, the message and the operation it carried), the requests that wait for a
reply (multipart replies collected until their last part, barriers), and the
parts of multipart replies the app reads piece by piece (limits, port
statistics). Nothing here decides anything; os-ken's event thread and the
app's worker share it under one lock.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field

from controller.southbound.openflow.entries import SwitchState
from controller.southbound.openflow.reconcile import Op

MAX_TRACKED_XIDS = 100_000
MAX_PARTIAL_REPLIES = 10_000  # multipart replies collected at once (a switch that never sends the last part)


@dataclass
class Switch:
    """A connected datapath, as the app keeps it."""

    name: str
    dp: object
    actual: SwitchState | None = None  # None: unknown, read it back first
    connected: bool = True
    retries: int = 0  # consecutive batches that ended in an error
    master_term: int | None = None  # HA: the term in which the switch confirmed us as its master


@dataclass
class Pending:
    """A multipart request or barrier waiting for its reply."""

    event: threading.Event = field(default_factory=threading.Event)
    bodies: list = field(default_factory=list)
    error: str | None = None


class Channel:
    """Messages sent and replies awaited, by xid (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: collections.OrderedDict[int, tuple[str, str, Op | None]] = collections.OrderedDict()
        self.pending: dict[int, Pending] = {}
        self._parts: collections.OrderedDict[tuple, list] = collections.OrderedDict()

    def send(self, sw: Switch, msg, what: str, op: Op | None = None) -> int:
        """Send `msg` to `sw`, remembering what it is (`what`, and the operation it
        carries); its xid. ConnectionError if the connection is closed."""
        dp = sw.dp
        if msg.xid is None:
            dp.set_xid(msg)
        self.note(msg.xid, sw.name, what, op)
        if not dp.send_msg(msg):
            raise ConnectionError(f"switch {sw.name}: connection closed")
        return msg.xid

    def note(self, xid: int, switch: str, what: str, op: Op | None = None) -> None:
        """Remember what message `xid` to `switch` is (the oldest are forgotten)."""
        with self.lock:
            self.sent[xid] = (switch, what, op)
            while len(self.sent) > MAX_TRACKED_XIDS:
                self.sent.popitem(last=False)

    def request(self, sw: Switch, msg, what: str) -> Pending:
        """Send a request whose reply is awaited (`Pending.event`)."""
        pending = Pending()
        sw.dp.set_xid(msg)
        with self.lock:
            self.pending[msg.xid] = pending
        self.send(sw, msg, what)
        return pending

    def done(self, xid: int) -> None:
        with self.lock:
            self.pending.pop(xid, None)

    def waiting(self, xid: int) -> Pending | None:
        with self.lock:
            return self.pending.get(xid)

    def what(self, xid: int) -> tuple[str, str, Op | None] | None:
        """(switch, what, operation) of a message sent, if it is still remembered."""
        with self.lock:
            return self.sent.get(xid)

    def reply(self, msg) -> None:
        """One part of a multipart reply to a request: collected; the request is
        answered with its last part."""
        pending = self.waiting(msg.xid)
        if pending is None:
            return
        body = msg.body if isinstance(msg.body, list) else [msg.body]
        pending.bodies.extend(body)
        if not (msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE):
            pending.event.set()

    def answered(self, xid: int, reply=None) -> None:
        """A one-part reply (a barrier, a role reply) to request `xid` arrived."""
        pending = self.waiting(xid)
        if pending is not None:
            if reply is not None:
                pending.bodies.append(reply)
            pending.event.set()

    def collect(self, key: tuple, msg) -> list | None:
        """A part of a multipart reply the app reads itself (limits, port
        statistics), collected under `key`: every part once the last arrived, else None."""
        body = msg.body if isinstance(msg.body, list) else [msg.body]
        with self.lock:
            parts = self._parts.setdefault(key, [])
            parts.extend(body)
            if msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                while len(self._parts) > MAX_PARTIAL_REPLIES:
                    self._parts.popitem(last=False)
                return None
            return self._parts.pop(key)
