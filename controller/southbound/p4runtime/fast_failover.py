"""The P4Runtime backend's fast failover at run time (`p4runtime.failover` has the
entities; docs/p4.md, "Fast failover").

- `backups`: the plan's backups (`algorithm.backups.choose_backups`, within the
  table budgets) on the switches whose program can fail over;
- `translated`: after each translation, where the heartbeats go and which
  multicast entries are idle backups;
- `beat`: one heartbeat out of the far end of every watched link (the
  `p4rt-heartbeat` thread calls it every `heartbeat_interval_s`);
- `link_down`: a link the controller judged dead (LLDP timeout at either end):
  counts, at both its ends, the jobs the switch fails over by itself and those
  only the re-plan repairs (/metrics `mcast_failovers_total{by}`), in the plan
  the link was in (`packet_io.expire_links` calls it before the re-plan starts);
- `report`: a switch's failover report (the first packet a backup carried,
  with how long the watched port had been silent): /metrics
  `mcast_failover_repair_seconds`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping

from controller.addressing.ports import PortMap
from controller.algorithm.backups import Backup, BackupCandidates, choose_backups
from controller.algorithm.model import Topology
from controller.core.service import ControllerService
from controller.core.updates import TranslationInputs
from controller.southbound.p4runtime.connection import SwitchConnection
from controller.southbound.p4runtime.entities import P4SwitchState
from controller.southbound.p4runtime.failover import failovers_at, heartbeat_ends, heartbeat_frame
from controller.southbound.periodic import every

log = logging.getLogger("controller.p4runtime")


class FastFailover:
    """Heartbeats and failover counting for the P4 switches (module docstring).
    `usable()` gives switch -> connection for the switches it may send to."""

    def __init__(self, service: ControllerService, usable: Callable[[], dict[str, SwitchConnection]],
                 heartbeat_interval_s: float, timeout_s: float) -> None:
        if heartbeat_interval_s <= 0 or timeout_s <= heartbeat_interval_s:
            raise ValueError(f"fast failover: the heartbeat interval ({heartbeat_interval_s} s) must be positive"
                             f" and shorter than the timeout ({timeout_s} s)")
        self._service = service
        self._usable = usable
        self.heartbeat_interval_s = heartbeat_interval_s
        self.timeout_us = int(timeout_s * 1e6)
        self._lock = threading.Lock()
        self._ends: frozenset[tuple[str, int]] = frozenset()
        self._idle: dict[str, frozenset[tuple]] = {}
        self._frame = heartbeat_frame()
        self._candidates = BackupCandidates()  # per job, kept between plans
        self._candidates_lock = threading.Lock()

    def backups(self, inputs: TranslationInputs, switches: Iterable[str]) -> tuple[Backup, ...]:
        """The plan's backups on `switches` (those whose program fails over)."""
        topo = inputs.network.topo
        with self._candidates_lock:  # not _lock: the heartbeats must not wait for this
            return choose_backups(topo, inputs.network.routing, inputs.plan,
                                  {topo.index[n] for n in switches if n in topo.index}, self._candidates)

    def translated(self, topo: Topology, ports: PortMap, backups: tuple[Backup, ...],
                   idle: dict[str, frozenset[tuple]], switches: Iterable[str]) -> None:
        """The backups of the latest translation, of `switches`: where heartbeats go,
        which entries are idle (a translated switch without any: none)."""
        with self._lock:
            self._ends = heartbeat_ends(topo, ports, backups)
            self._idle.update({n: idle.get(n, frozenset()) for n in switches})

    def beat(self) -> int:
        """One heartbeat out of every watched link's far end; how many were sent."""
        with self._lock:
            ends = self._ends
        conns = self._usable()
        n = 0
        for switch, port in sorted(ends):
            conn = conns.get(switch)
            if conn is not None:
                conn.packet_out(self._frame, port)
                n += 1
        return n

    def loop(self, stopping: threading.Event) -> None:
        every(stopping, self.heartbeat_interval_s, self.beat, "heartbeat round failed", log)

    def link_down(self, a: str, b: str, desired: Mapping[str, P4SwitchState]) -> None:
        """The link a - b was judged dead (an end of it timed out; `desired`: what its
        switches hold, as desired, in the plan it was in): count the failovers at
        both its ends (module docstring)."""
        topo, ports = self._service.wiring.topology_and_ports()
        moved = cut = 0
        for switch, neighbour in ((a, b), (b, a)):
            port = ports.get((topo.index.get(switch, -1), topo.index.get(neighbour, -1)))
            state = desired.get(switch)
            if state is None or port is None:
                continue
            with self._lock:
                idle = self._idle.get(switch, frozenset())
            m, c = failovers_at(state, port, idle)
            moved, cut = moved + m, cut + c
            if m or c:
                log.info("switch %s: port %d down: %d job(s) on a backup chosen by the switch, %d left to the re-plan",
                         switch, port, m, c)
        self._service.counters.failover("data_plane", moved)
        self._service.counters.failover("controller", cut)

    def report(self, switch: str, port: int, frame: bytes) -> None:
        """A failover report from `switch` (a packet-in): its watched `port` had been
        silent for the source MAC's microseconds when the backup carried its first packet."""
        if len(frame) < 14:
            return
        gap_s = int.from_bytes(frame[6:12], "big") / 1e6
        log.info("switch %s: port %d silent for %.1f ms: its jobs on their backups", switch, port, gap_s * 1e3)
        self._service.counters.failover_repair(gap_s)
