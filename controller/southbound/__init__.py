"""The southbound: from the core's plans to the entries of real switches.

Each backend is a provider (docs/architecture.md, "The southbound"): it reports
facts to the core's parts (switches up and down, ports and their speeds, links
seen, hosts seen, counters, full tables), receives every `core.updates.PlanUpdate`
(the generation, the plan and everything its translation needs), translates it
into its own switches' desired state once, and reconciles its switches: desired
state diffed against actual, only the difference sent; start, change, reconnect
and restart use the one path. `backend.Backend` is that protocol.

Shared by both backends (this package's modules):
- `ids`: per-switch ids of jobs (groups, meters, replicas), kept across plans;
- `layout`: what both translations need from a plan (each job's tree,
  branches, replicating and metering switches);
- `reconcile`: the table-by-table diff and the strict model of a switch;
- `liveness`: a link's state from its switches and its ends;
- `probes`: the host probes of a discovered network;
- `periodic`: the loop of the backends' periodic threads (`every`: a round may fail);
- `lldp`: the signed LLDP probes (frame, signature, verification, the secret)
  and what a backend does with one it receives;
- `sync_queue`: the work queue of a backend's sync worker.

Backends: `openflow` (OpenFlow 1.3 through os-ken) and `p4runtime` (P4Runtime
for p4src/mcast.p4 on BMv2, and the TNA program on Tofino).

May import `controller.core` (the facts interface and `PlanUpdate`),
`controller.config`, `controller.addressing`, `controller.algorithm`. A backend
imports neither the other backend nor the northbound.
"""
