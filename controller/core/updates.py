"""What the core hands the backends after each plan, and what they hand back.

The contract between the planning loop and the southbound backends: a backend
receives a `PlanUpdate` (the generation, the served plan and everything the
translation needs, so it never pulls anything back from the core), translates it
into its own switches' desired state, once, and answers with a `BackendReport`
(how many entries its desired state adds, changes or removes, and what each of
its switches holds), which the core shows in GET /plan, /healthz, /switches and
/metrics. Nothing here knows a backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller.addressing.hosts import HostAddress
from controller.addressing.ports import PortMap
from controller.algorithm.model import Plan
from controller.algorithm.network import Network


@dataclass(frozen=True)
class TranslationInputs:
    """What a plan is translated from: the planning network (the topology without
    the down links, with the effective budgets), the plan made on it (before its
    edges are renumbered to the full topology), the port map, the hosts'
    addresses and learned MACs, and each job's group address. Every backend
    translates from the same inputs, so they agree."""

    network: Network
    plan: Plan
    ports: PortMap
    hosts: Mapping[str, HostAddress]
    group_addresses: Mapping[str, str | None]
    host_macs: Mapping[str, str] = field(default_factory=dict)  # learned MACs, over the hosts' own

    def job_of_address(self, address: str) -> str | None:
        """The job holding group address `address` in this plan's inputs."""
        for job, held in self.group_addresses.items():
            if held == str(address):
                return job
        return None


@dataclass(frozen=True)
class PlanUpdate:
    """A new plan, as every backend receives it: its generation, the plan as
    served (on the full topology: what the API shows) and the inputs its
    translation needs (`inputs.plan` is the same plan on the planning network)."""

    generation: int
    plan: Plan
    inputs: TranslationInputs


@dataclass(frozen=True)
class SwitchEntries:
    """What a backend's desired state puts on one switch, as GET /switches shows it
    (OpenFlow: flows, meters other than the packet-in meter, and groups: the plan's
    replication groups and fast failover's, `southbound.openflow.failover`)."""

    flows: int = 0
    meters: int = 0
    groups: int = 0


@dataclass(frozen=True)
class BackendReport:
    """A backend's answer to a `PlanUpdate`: `entries_written`, the entries (flows,
    groups, meters; P4 table entries, groups, members, meter configs) its desired
    state adds, changes or removes against its previous one; `switches`, what
    each of its switches holds."""

    backend: str
    entries_written: int
    switches: Mapping[str, SwitchEntries] = field(default_factory=dict)


# what a backend registers with the planning loop (`Planning.on_plan`)
PlanListener = Callable[[PlanUpdate], "BackendReport | None"]
