"""Prometheus metrics of the controller service, read at scrape time.

A custom collector asks the service for its numbers (`ControllerService.stats`)
whenever /metrics is scraped, so nothing has to be updated on the way; every app
gets its own `CollectorRegistry`, so two apps in one process (tests) never share
or collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from controller.core.counters import JOIN_BUCKETS
from controller.core.devices import SwitchStatus
from controller.core.service import ControllerService

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


_INF = float("inf")

# the per-switch gauges: (metric, help, its value for a switch; None leaves the switch out)
SWITCH_GAUGES: tuple[tuple[str, str, Callable[[SwitchStatus], float | None]], ...] = (
    ("mcast_switch_groups_used", "Replication groups the plan uses per switch.", lambda sw: sw.groups_used),
    ("mcast_switch_group_capacity", "Replication group budget G(v) per switch (+Inf: unlimited).",
     lambda sw: _INF if sw.group_capacity is None else sw.group_capacity),
    ("mcast_switch_entries_used", "Multicast forwarding entries the plan uses per switch.", lambda sw: sw.entries_used),
    ("mcast_switch_entry_capacity", "Multicast entry budget F(v) per switch (+Inf: unlimited).",
     lambda sw: _INF if sw.entry_capacity is None else sw.entry_capacity),
    ("mcast_switch_learned_group_capacity",
     "Group budget learned from a table-full error, per switch that has one (kept until restart).",
     lambda sw: sw.learned_group_capacity),
    ("mcast_switch_learned_entry_capacity",
     "Entry budget learned from a table-full error, per switch that has one (kept until restart).",
     lambda sw: sw.learned_entry_capacity),
    ("mcast_switch_reported_group_capacity",
     "Groups the switch says it holds (OpenFlow group features, or the P4 target's group ids), per switch that said.",
     lambda sw: sw.reported_group_capacity),
    ("mcast_switch_reported_entry_capacity",
     "Entries of the multicast table the switch says it holds (OpenFlow table features, or the P4Info), per switch that said.",
     lambda sw: sw.reported_entry_capacity),
    ("mcast_switch_flows", "Flows in the desired state per switch.", lambda sw: sw.flows),
    ("mcast_switch_connected", "1 if the switch is connected (over OpenFlow or P4Runtime), else 0.",
     lambda sw: int(sw.connected)),
    ("mcast_switch_other_primary",
     "1 if another P4Runtime client is primary for the switch (the controller does not program it), else 0.",
     lambda sw: int(sw.other_primary)),
)


class ServiceCollector(Collector):
    """The service's jobs, plan quality, plan time, table use and counters."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        s = self.service.stats()
        yield GaugeMetricFamily("mcast_jobs", "Registered jobs.", value=s.jobs)
        cluster = self.service.cluster
        if cluster is not None:  # several instances sharing an etcd store (docs/ha.md)
            status = cluster.status()
            yield GaugeMetricFamily("mcast_ha_leader", "1 while this instance is the leader (plans and programs the switches), else 0.",
                                    value=int(status["role"] == "leader"))
            leader = status["leader"]
            yield GaugeMetricFamily("mcast_ha_term", "Term of the leader as this instance knows it (0: no leader known).",
                                    value=leader["term"] if leader else 0)
            yield CounterMetricFamily("mcast_ha_terms_won", "Elections this instance has won.", value=cluster.election.terms_won)
        yield GaugeMetricFamily(
            "mcast_plan_lambda",
            "Lambda of the current plan: the smallest fraction of its demand any job gets (NaN before the first plan).",
            value=float("nan") if s.lam is None else s.lam,
        )
        yield GaugeMetricFamily(
            "mcast_plan_throughput_bits_per_second",
            "Sum of the planned rates of all jobs in the current plan.",
            value=float("nan") if s.throughput is None else s.throughput,
        )
        yield GaugeMetricFamily(
            "mcast_plan_seconds",
            "Run time of the planner for the current plan.",
            value=float("nan") if s.plan_seconds is None else s.plan_seconds,
        )
        yield CounterMetricFamily("mcast_planner_seconds", "Total planner run time of all re-plans.", value=s.plan_seconds_total)
        yield GaugeMetricFamily("mcast_plan_generation", "Number of the current plan (1 for the first).", value=s.generation)
        yield GaugeMetricFamily(
            "mcast_replan_pending", "1 while job changes wait for a re-plan (debounce) or a link for the end of its hold-down, else 0.", value=int(s.pending)
        )
        yield CounterMetricFamily("mcast_replans", "Re-plans installed.", value=s.replans)
        yield CounterMetricFamily("mcast_rate_updates", "Served plans published again at new phase rates "
                                  "(jobs announcing their broadcasts).", value=s.rate_updates)
        yield CounterMetricFamily("mcast_incremental_plans", "Plans made by admission (planner.incremental).",
                                  value=s.incremental_plans)
        reopt = CounterMetricFamily("mcast_reoptimisations", "Full re-optimisations after incremental plans, by outcome.",
                                    labels=["outcome"])
        for outcome in ("adopted", "kept"):
            reopt.add_metric([outcome], s.reoptimisations.get(outcome, 0))
        yield reopt
        yield GaugeMetricFamily("mcast_last_plan_churn_jobs", "Jobs of the previous plan whose structure the last plan changed.",
                                value=s.churn_jobs)
        yield CounterMetricFamily("mcast_plan_churn_jobs", "Jobs whose structure a plan changed, over all plans.",
                                  value=s.churn_jobs_total)
        yield GaugeMetricFamily("mcast_last_plan_entries_written",
                                "Switch entries the backends' translations of the last plan added, changed or removed.",
                                value=s.entries_written)
        by_backend = GaugeMetricFamily("mcast_last_plan_entries_written_by_backend",
                                       "mcast_last_plan_entries_written, per backend.", labels=["backend"])
        for backend, n in sorted(s.entries_by_backend.items()):
            by_backend.add_metric([backend], n)
        yield by_backend
        yield CounterMetricFamily("mcast_plan_entries_written",
                                  "Switch entries the backends' translations added, changed or removed, over all plans.",
                                  value=s.entries_written_total)
        yield CounterMetricFamily("mcast_replan_failures", "Re-plans that failed (the previous plan stayed).", value=s.replan_failures)
        yield CounterMetricFamily("mcast_planner_failed_jobs",
                                  "Jobs failed because the planner failed with them (planned without them).",
                                  value=s.planner_failed_jobs)
        yield CounterMetricFamily(
            "mcast_openflow_errors",
            "OpenFlow error messages received from switches.",
            value=s.openflow_errors,
        )
        yield CounterMetricFamily(
            "mcast_p4runtime_errors",
            "P4Runtime updates refused by switches (capacity signals included).",
            value=s.p4runtime_errors,
        )
        yield CounterMetricFamily(
            "mcast_p4runtime_not_primary",
            "Times a P4Runtime switch was found to have another primary client (its writes refused to us).",
            value=s.p4runtime_not_primary,
        )
        packet_ins = CounterMetricFamily(
            "mcast_packet_ins",
            "Host packets that reached the controller: ARP, and IPv4 copies from sources a switch did not know.",
            labels=["kind"],
        )
        for kind, n in sorted(s.packet_ins.items()):
            packet_ins.add_metric([kind], n)
        yield packet_ins
        refused = CounterMetricFamily(
            "mcast_refused",
            "What the controller refused from the wire, by kind (a forged LLDP probe, a spoofed host, a rogue switch, ...).",
            labels=["kind"],
        )
        for kind, n in sorted(s.refusals.items()):
            refused.add_metric([kind], n)
        yield refused
        failovers = CounterMetricFamily(
            "mcast_failovers",
            "Jobs whose tree lost a link that went down: moved to a backup by the switch (data_plane) or left to the re-plan (controller).",
            labels=["by"],
        )
        for by, n in sorted(self.service.counters.failovers().items()):
            failovers.add_metric([by], n)
        yield failovers
        count, total, longest = self.service.counters.failover_repairs()
        yield SummaryMetricFamily(
            "mcast_failover_repair_seconds",
            "Data-plane failovers a switch measured (P4): from the last packet heard on the watched port to the first packet the backup carried.",
            count_value=count, sum_value=total,
        )
        yield GaugeMetricFamily("mcast_failover_repair_seconds_max", "The longest of mcast_failover_repair_seconds.",
                                value=longest)
        yield from self._host_joins()
        yield CounterMetricFamily(
            "mcast_openflow_table_full_errors",
            "OpenFlow errors saying a group, flow or meter table is full (also counted in mcast_openflow_errors).",
            value=s.table_full_errors,
        )
        for name, text, value in SWITCH_GAUGES:
            family = GaugeMetricFamily(name, text, labels=["switch"])
            for sw in s.switches:
                v = value(sw)
                if v is not None:  # a switch with nothing to say is left out
                    family.add_metric([sw.id], v)
            yield family
        job_packets = CounterMetricFamily(
            "mcast_job_packets",
            "Packets that matched a job's multicast entry on a P4 switch (its direct counter; at the PS's edge "
            "switch: what the PS sent, before the job's meter).",
            labels=["job", "switch"],
        )
        job_bytes = CounterMetricFamily(
            "mcast_job_bytes", "Bytes (Ethernet frames) of those packets.", labels=["job", "switch"]
        )
        for (job, switch), (packets, octets) in sorted(self.service.counters.job_counters().items()):
            job_packets.add_metric([job, switch], packets)
            job_bytes.add_metric([job, switch], octets)
        yield from (job_packets, job_bytes)
        guard = CounterMetricFamily(
            "mcast_source_guard_drops",
            "Packets the data plane's source guard refused at a switch port (issue 22): IPv4 and ARP from an edge "
            "port whose source address and MAC are not a known host's there (sent to the controller alone, never "
            "forwarded), and anything else from an edge port. Read from the switches at scrape time (OpenFlow: the "
            "guard flows' packet counts; P4: the source_guard_drops counter); only ports that refused something.",
            labels=["switch", "port"],
        )
        for (switch, port), packets in sorted(self.service.counters.guard_drops().items()):
            guard.add_metric([switch, str(port)], packets)
        yield guard
        svc = self.service
        yield GaugeMetricFamily("mcast_links", "Links of the topology.", value=len(svc.wiring.topology.links))
        yield GaugeMetricFamily("mcast_links_down", "Links planned around: reported down, or a switch disconnected.",
                                value=len(svc.links.links_down()))
        yield GaugeMetricFamily("mcast_links_held_down",
                                "Links up again but kept out of the plan until their hold-down ends (planner.link_hold_down_s).",
                                value=len(svc.links.held_down()))
        yield CounterMetricFamily("mcast_link_flaps",
                                  "Link flaps: a link went down while held down, or less than planner.link_hold_down_max_s "
                                  "after it rejoined the plan (each doubles that link's hold-down).",
                                  value=s.link_flaps)
        rate = GaugeMetricFamily(
            "mcast_link_rate_bps",
            "Measured load of a link from node a to node b, bit/s (OpenFlow port statistics, "
            "southbound.openflow.port_stats_s); only directions measured recently (never P4 switches).",
            labels=["a", "b"],
        )
        for (a, b), (a_to_b, b_to_a) in sorted(svc.load.link_rates().items()):
            if a_to_b is not None:
                rate.add_metric([a, b], a_to_b)
            if b_to_a is not None:
                rate.add_metric([b, a], b_to_a)
        yield rate
        yield GaugeMetricFamily("mcast_link_ends_discovered",
                                "Switch link ends whose port was learned from the wire (LLDP, or a host's ARP).",
                                value=len(svc.wiring.observed_ports()))
        yield GaugeMetricFamily("mcast_links_unexpected", "Links seen by LLDP that the topology does not have (ignored).",
                                value=len(svc.wiring.unexpected_links()))
        yield GaugeMetricFamily("mcast_links_missing",
                                "Declared links between connected switches that LLDP has not seen from either end.",
                                value=len(svc.links.missing()))
        yield GaugeMetricFamily("mcast_hosts_unexpected",
                                "Hosts seen where the declared topology has none (an unknown address, or a known one at "
                                "another switch; ignored).", value=len(svc.hosts.unexpected()))
        yield GaugeMetricFamily("mcast_switches_unexpected",
                                "Switches that connected with an id the declared topology does not give (ignored).",
                                value=len(svc.devices.unexpected_switches()))

    def _host_joins(self) -> Iterator[Metric]:
        counters = self.service.counters
        joins = HistogramMetricFamily(
            "mcast_host_join_seconds",
            "Learned network: from a host's first packet to the plan with its unicast routes handed to the "
            "backends (stage planned) or acknowledged by the switches (stage installed, seen by held ARP answers).",
            labels=["stage"],
        )
        recent = GaugeMetricFamily(
            "mcast_host_join_recent_seconds",
            "Quantiles of the last host joins (mcast_host_join_seconds), by stage.",
            labels=["stage", "quantile"],
        )
        for stage, (buckets, _, total) in sorted(counters.host_joins().items()):
            cumulative, acc = [], 0
            for bound, n in zip([*map(str, JOIN_BUCKETS), "+Inf"], buckets):
                acc += n
                cumulative.append((bound, acc))
            joins.add_metric([stage], cumulative, total)
            for q in (0.5, 0.99):
                value = counters.host_join_quantile(stage, q)
                if value is not None:
                    recent.add_metric([stage, str(q)], value)
        yield joins
        yield recent


def make_registry(service: ControllerService) -> CollectorRegistry:
    """A fresh registry holding only the service's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of `registry`."""
    return generate_latest(registry)
