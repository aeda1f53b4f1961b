"""What the P4 switches show the controller, and what it sends them: LLDP probes
(signed, `controller.southbound.lldp`) out of every switch port where no host was
seen (`lldp.probe_ports`) and back in as
packet-ins (links, their ports and their liveness; a refused probe is dropped,
counted and logged), the hosts' packets copied to the CPU (ARP, unknown IPv4 sources:
handed to the core's one host-learning decision, whose answer is sent from
here), and the host probes of a discovered network.

A link between two P4 switches not seen by LLDP for `lldp_timeout_s` is dead
(`LinkLiveness`), and alive again when seen; a link whose ports disagree with
the port map is logged and kept in `BackendStats.lldp_mismatches`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from controller.addressing.hosts import normalise_mac
from controller.core.service import ControllerService
from controller.southbound import lldp
from controller.southbound.liveness import LinkLiveness
from controller.southbound.p4runtime.connection import SwitchConnection
from controller.southbound.p4runtime.packets import (
    ETH_ARP,
    ETH_IPV4,
    ETH_LLDP,
    LinkTracker,
    arp_reply,
    parse_arp,
    parse_ipv4_source,
)
from controller.southbound.probes import arp_probe, arp_reply_frame, send_probes
from controller.southbound.sync_queue import send_after_plan

log = logging.getLogger("controller.p4runtime")


class PacketIO:
    """Packets between the controller and the P4 switches (see the module docstring).

    `names` are the backend's switches; `usable()` gives switch -> connection for
    those it may send to; `ports(switch)` the ports a switch lists (a discovered
    network); `mismatches` collects the LLDP facts that disagree with the port map;
    `after_sync(fn)` runs `fn` after the syncs queued so far (held ARP answers)."""

    def __init__(
        self,
        service: ControllerService,
        names: Iterable[str],
        usable: Callable[[], dict[str, SwitchConnection]],
        ports: Callable[[str], tuple[int, ...]],
        links: LinkTracker,
        liveness: LinkLiveness,
        mismatches: set,
        clock: Callable[[], float],
        after_sync: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self._service = service
        # runs a callable once the backend's queued syncs are done (`sync_queue.after_sync`);
        # without a sync worker (tests), at once
        self._after_sync = after_sync or (lambda fn: fn())
        self._names = frozenset(names)
        self._usable = usable
        self._ports = ports
        self.links = links
        self._liveness = liveness
        self._mismatches = mismatches
        self.clock = clock
        self.signer = lldp.signer_for(service)

    def dead_end(self, switch: str, neighbour: str) -> bool:
        """The link end (switch, neighbour) has shown no LLDP probe for the timeout."""
        topo, ports = self._service.wiring.topology_and_ports()
        port = ports.get((topo.index[switch], topo.index[neighbour]))
        return port is not None and self.links.is_dead(switch, port)

    def send_lldp(self) -> int:
        """A signed LLDP probe out of every probed port (`lldp.probe_ports`) of every
        connected switch; returns how many."""
        n = 0
        for name, conn in sorted(self._usable().items()):
            for port in lldp.probe_ports(self._service, name, self._ports(name) if self._service.config.discovers else ()):
                conn.packet_out(self.signer.frame(name, port), port)
                n += 1
        return n

    def expire_links(self, dying: Callable[[str, str], None] | None = None) -> list[tuple[str, str]]:
        """Report the link ends not seen by LLDP for the timeout as down; returns them,
        (switch, neighbour). `dying(a, b)` is called first, once for each link a - b
        that was up until now (its other end had not timed out in an earlier round),
        before any is reported: the re-plan a report starts cannot have replaced the
        plan it sees. (The two ends of a link can time out rounds apart.)"""
        expired = self.links.expire(self.clock())
        if dying is not None:
            ends = {(src, port) for src, port, _, _ in expired}
            links: set[frozenset[str]] = set()
            for src, _, dst, dst_port in expired:
                link = frozenset((src, dst))
                if link in links or ((dst, dst_port) not in ends and self.links.is_dead(dst, dst_port)):
                    continue  # counted with this round's other end, or down since an earlier round
                links.add(link)
                dying(src, dst)
        out = []
        for src, _, dst, _ in expired:
            log.warning("link %s - %s: no LLDP probe seen for %.0f s", src, dst, self.links.timeout_s)
            self._liveness.update(src, dst)
            out.append((src, dst))
        return out

    def packet_in(self, switch: str, port: int, payload: bytes) -> None:
        """A packet-in from `switch` (it came in on `port`)."""
        if len(payload) < 14:
            return
        ethertype = int.from_bytes(payload[12:14], "big")
        if ethertype == ETH_LLDP:
            probe = lldp.receive(self._service, self.signer, switch, port, payload)
            if probe is None or probe.switch not in self._names:
                return
            src, src_port = probe.switch, probe.port
            wiring = self._service.wiring
            if self._service.config.discovers:  # a link of the discovered network: add it, and it is alive
                try:
                    wiring.learn_link(src, src_port, switch, port)
                except ValueError as e:
                    log.warning("LLDP %s:%d -> %s:%d: %s", src, src_port, switch, port, e)
                if self.links.observe(src, src_port, switch, port, self.clock()):
                    log.info("link %s - %s: LLDP probes seen again", src, switch)
                    self._liveness.update(src, switch)
                return
            # learn both ends (a miswired port swaps with the one the map had; a
            # link the topology lacks is only recorded by the service)
            for a_sw, a_port, b_sw in ((src, src_port, switch), (switch, port, src)):
                try:
                    wiring.learn_port(a_sw, a_port, b_sw)
                except ValueError as e:
                    log.warning("LLDP %s:%d -> %s: %s", a_sw, a_port, b_sw, e)
            expected = wiring.link_at(src, src_port)
            back = wiring.link_at(switch, port)
            if expected != switch or back != src:
                fact = (src, src_port, switch, port)
                if fact not in self._mismatches:
                    self._mismatches.add(fact)
                    log.warning(
                        "LLDP: %s port %d reaches %s port %d, but the port map says %s port %d leads to %s "
                        "and %s port %d to %s", src, src_port, switch, port, src, src_port, expected, switch, port, back,
                    )
                return
            if self.links.observe(src, src_port, switch, port, self.clock()):
                log.info("link %s - %s: LLDP probes seen again", src, switch)
                self._liveness.update(src, switch)
        elif ethertype == ETH_IPV4:
            # a source-check copy: the switch forwarded the packet itself; this copy
            # is for learning only (as the OpenFlow app learns from its table 0 copies)
            src = parse_ipv4_source(payload)
            if src is not None:
                self._service.hosts.on_ipv4(src[0], src[1], switch, port)
        elif ethertype == ETH_ARP:
            req = parse_arp(payload)
            if req is None:
                return
            hosts = self._service.hosts
            # a known host's ARP for a known host is routed by the switches
            # themselves (arp_routes); this is the copy: learn, answer, never pass on
            routed = self._known_source(switch, port, req.sender_ip, req.sender_mac) and (
                hosts.by_ip(req.target_ip) is not None)
            action = hosts.on_arp(switch, port, op=req.op, sender_ip=req.sender_ip, sender_mac=req.sender_mac,
                                  target_ip=req.target_ip, routed=routed)

            def send() -> None:
                if action.reply_mac is not None:
                    self._packet_out(((switch, port),), arp_reply(req, action.reply_mac))
                self._packet_out(action.forward_to, arp_probe(action.probe) if action.probe else payload)
                for r in action.replies:
                    self._packet_out(((r.switch, r.port),),
                                     arp_reply_frame(r.asker_ip, r.asker_mac, r.target_ip, r.target_mac))

            # held (a host that just joined) until the plan with its routes is on the switches
            send_after_plan(self._service.changes, self._service.counters, self._after_sync,
                            action.after_change, action.joined_at, send)

    # -- host probing (discovered network) ---------------------------------------------------------
    def probe(self, ips: Iterable[str]) -> int:
        """One ARP probe per address out of every edge port of every connected
        switch (never flooded through the fabric); the number of frames sent."""
        return send_probes(ips, self._usable(), self._service.hosts.edge_ports,
                           lambda name, port, frame: self._packet_out(((name, port),), frame))

    def _known_source(self, switch: str, port: int, ip: str, mac: str) -> bool:
        """True if (switch, port, ip, mac) is a known host's, as the switch's
        known-source entries say (the host there, with the MAC the service has)."""
        hosts = self._service.hosts
        host = hosts.by_ip(ip)
        if host is None or (switch, port) not in hosts.ports(host):
            return False
        try:
            return hosts.mac(host) == normalise_mac(mac)
        except ValueError:
            return False

    def _packet_out(self, ends: Iterable[tuple[str, int]], frame: bytes) -> None:
        """Send `frame` out of every (switch, port) of `ends`."""
        conns = self._usable()
        for sw_name, port in ends:
            conn = conns.get(sw_name)
            if conn is not None:
                conn.packet_out(frame, port)


    def send(self, switch: str, port: int, frame: bytes) -> None:
        """Send `frame` out of one port (a host probe: `service.hosts.probe_senders`)."""
        self._packet_out(((switch, port),), frame)
