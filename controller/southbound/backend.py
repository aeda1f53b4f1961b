"""What a southbound backend is to the rest of the controller: a provider.

A backend
- reports facts to the core's parts, through the service it is given:
  `service.devices` (a switch connected, disconnected, controlled by another
  client; its limits and port speeds; a full table), `service.wiring` (a port,
  an LLDP link), `service.hosts` (a host's ARP or unknown-source IPv4, which the
  core decides on), `service.links` (through `liveness.LinkLiveness`),
  `service.load` and `service.counters` (port and job counters, refused updates);
- receives every plan as a `PlanUpdate` (`on_plan`, registered with
  `service.planning.on_plan`; in the planning thread, before the requests
  waiting for the plan are answered) and answers what its translation writes
  (`BackendReport`);
- translates the plan itself, once, into its own switches' desired state, and
  reconciles its switches in its own threads.

With several controller instances (docs/ha.md) the process also makes each
backend take and release mastership of its switches (`Mastership`).

The OpenFlow backend is its manager (`openflow.manager.OpenFlowManager`: the
plans, the desired state) and its os-ken app (`openflow.app.MulticastOFCtl`:
the switches); the P4Runtime backend is one object
(`p4runtime.backend.P4RuntimeBackend`).
"""

from __future__ import annotations

from typing import Protocol

from controller.core.updates import BackendReport, PlanUpdate


class PlanTaker(Protocol):
    """The part of a backend that takes the core's plans."""

    def on_plan(self, update: PlanUpdate) -> BackendReport | None:
        """Translate `update` into the desired state of this backend's switches
        (once), start reconciling them, and say what the translation writes."""
        ...


class Mastership(Protocol):
    """The part of a backend that takes and releases its switches when this
    instance becomes, or stops being, the leader of several (docs/ha.md)."""

    def take_mastership(self, term: int) -> list[str] | None:
        """Become master of the switches as the leader of `term`; those that confirmed."""
        ...

    def release_mastership(self, term: int) -> None:
        """No longer the leader of `term`: hand the switches back."""
        ...

    def shutdown(self) -> None:
        ...
