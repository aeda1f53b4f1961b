"""Mastership of the OpenFlow switches when several controller instances share
them (docs/ha.md).

Every instance connects to every switch. The leader of term T asks each switch
for role MASTER with generation id T (a newer leader's is larger: the switch
refuses an older one as stale); the followers ask for role SLAVE, so that the
switches refuse their writes. `Roles` keeps this instance's term and the
largest term it has seen, sends the role requests (`claim`, `take`,
`release`, `demote`) and reads the refusals a switch answers with (`refused`).
With a single instance (no cluster) no role request is sent: the switches keep
every controller EQUAL.
"""

from __future__ import annotations

import logging
import threading
import time

from controller.core.service import ClusterRole
from controller.southbound.openflow.channel import Channel, Pending, Switch

log = logging.getLogger("controller.ofctl")

CLAIM_TIMEOUT_S = 2.0
MAX_STALE_RETRIES = 100


class Roles:
    """This instance's role on the switches (see the module docstring)."""

    def __init__(self, channel: Channel, cluster: ClusterRole | None) -> None:
        self._channel = channel
        self.cluster = cluster
        self._lock = threading.Lock()
        self.term: int | None = None  # the term this instance leads in; None: a follower
        self.known_term = 0  # the largest term seen (the generation id of role requests)
        self.refused_not_master = 0  # writes a switch refused because we were not its master
        self.stale_role = 0  # role requests a switch refused as stale (a newer leader exists)

    @property
    def ha(self) -> bool:
        """Several instances share the switches."""
        return self.cluster is not None

    def may_write(self, term: int | None) -> bool:
        """Whether this instance may write to switches now as the leader of `term`
        (always, for a single instance)."""
        if self.cluster is None:
            return True
        return term is not None and self.cluster.may_write(term)

    def follow(self, term: int) -> None:
        """The leader's term as a follower sees it (generation id of its SLAVE requests)."""
        with self._lock:
            self.known_term = max(self.known_term, term)

    def demote(self, sw: Switch, term: int | None = None) -> int | None:
        """Send `sw` a SLAVE role request (generation id `term`, default the newest
        term known); its xid, None if the connection is closed."""
        if term is None:
            leader = self.cluster.leader_term() if self.cluster is not None else None
            self.follow(leader or 0)
        return self._send(sw, slave=True, term=term)

    def _send(self, sw: Switch, slave: bool, term: int | None) -> int | None:
        dp = sw.dp
        ofp, parser = dp.ofproto, dp.ofproto_parser
        gen = self.known_term if term is None else term
        req = parser.OFPRoleRequest(dp, ofp.OFPCR_ROLE_SLAVE if slave else ofp.OFPCR_ROLE_MASTER, gen)
        dp.set_xid(req)
        self._channel.note(req.xid, sw.name, f"role request {'SLAVE' if slave else 'MASTER'} gen {gen}")
        if not dp.send_msg(req):
            return None
        return req.xid

    def claim(self, switches: list[Switch], term: int, timeout: float = CLAIM_TIMEOUT_S) -> list[str]:
        """Become master of `switches` with generation id `term` (role requests sent
        together, replies awaited together); the names of those that confirmed."""
        waits = []
        for sw in switches:
            ofp, parser = sw.dp.ofproto, sw.dp.ofproto_parser
            req = parser.OFPRoleRequest(sw.dp, ofp.OFPCR_ROLE_MASTER, term)
            try:
                waits.append((sw, self._channel.request(sw, req, f"role request MASTER gen {term}"), req.xid))
            except ConnectionError as e:
                log.error("%s", e)
        confirmed = []
        deadline = time.monotonic() + timeout
        for sw, pending, xid in waits:
            ok = pending.event.wait(max(0.0, deadline - time.monotonic()))
            self._channel.done(xid)
            if not ok or pending.error or not pending.bodies:
                log.error("switch %s: not master in term %d (%s)", sw.name, term, pending.error or "no role reply")
                continue
            reply = pending.bodies[0]
            if reply.role != sw.dp.ofproto.OFPCR_ROLE_MASTER:
                log.error("switch %s: role reply %d, not MASTER, in term %d", sw.name, reply.role, term)
                continue
            with self._channel.lock:
                sw.master_term = term
                sw.actual = None  # another instance programmed it: read it back before any write
            confirmed.append(sw.name)
        return confirmed

    def take(self, term: int, switches: list[Switch]) -> list[str]:
        """This instance leads in `term`: become master of `switches` (the connected
        ones; later ones are claimed as they connect); those that confirmed."""
        with self._lock:
            self.term = term
            self.known_term = max(self.known_term, term)
        t0 = time.monotonic()
        confirmed = self.claim(switches, term)
        log.info("term %d: master of %d of %d switches in %.3f s", term, len(confirmed), len(switches), time.monotonic() - t0)
        return confirmed

    def release(self, term: int, switches: list[Switch]) -> None:
        """No longer the leader: send SLAVE role requests (the switches refuse our writes)."""
        with self._lock:
            if self.term == term:
                self.term = None
        with self._channel.lock:
            for sw in switches:
                sw.master_term = None
        for sw in switches:
            try:
                self._send(sw, slave=True, term=term)
            except Exception:  # noqa: BLE001
                log.exception("switch %s: cannot send the SLAVE role request", sw.name)

    def refused(self, msg, switch: str, what: str, pending: Pending | None) -> bool:
        """Read error `msg` (to message `what` on `switch`) as a refusal of this
        instance's role; True if it was one (then it is handled)."""
        ofp = msg.datapath.ofproto
        if not self.ha:
            return False
        if msg.type == ofp.OFPET_BAD_REQUEST and msg.code == ofp.OFPBRC_IS_SLAVE:
            # a write while the switch has another master (os-ken's LLDP packet-outs
            # on a follower; a deposed leader's late writes)
            self.refused_not_master += 1
            (log.warning if self.term is not None else log.debug)(
                "switch %s refused %s: this instance is not its master (term %s)", switch, what, self.term)
            if pending is not None:
                pending.error = "not master"
                pending.event.set()
            return True
        if msg.type == ofp.OFPET_ROLE_REQUEST_FAILED:
            self.stale_role += 1
            log.warning("switch %s refused %s (code %d): a newer leader holds it", switch, what, msg.code)
            if self.term is None and "SLAVE" in what and self.stale_role <= MAX_STALE_RETRIES:
                # a follower that did not know the leader's term yet: again, with the newest one known
                sw = Switch(switch, msg.datapath)
                threading.Timer(0.5, self.demote, (sw,)).start()
            if pending is not None:
                pending.error = ("role request refused as stale" if msg.code == ofp.OFPRRFC_STALE
                                 else f"role request failed, code {msg.code}")
                pending.event.set()
            return True
        return False
