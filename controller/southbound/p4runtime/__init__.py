"""The P4Runtime backend for the programs p4src/mcast.p4 (BMv2) and p4src/tna/mcast.p4
(Tofino 1 and 2), which share their P4Runtime names (docs/p4.md).

Pure, no protobuf or sockets:
- `entities`: every P4 name the backend uses, and the frozen values a switch holds;
- `translate`: the desired P4 state of every switch for a plan, and the ids;
- `failover`: the fast-failover entities of a plan's backups, and the failovers a link down causes;
- `reconcile`: the diff, its ordered batches, and a strict switch model;
- `tracer`: a model of how mcast.p4 forwards (the tests' oracle);
- `packets`: ARP, the source of a source-check copy, link liveness.

Over the P4Runtime protobufs (the `p4runtime` extra):
- `p4info`: the P4Info and every id resolved by name; canonical byte strings;
- `codec`: state values <-> `p4.v1` protobufs; wildcard reads;
- `connection`: one switch's gRPC channel (TLS with `southbound.p4runtime.tls`), stream,
  pipeline, reads and writes;
- `pipeline`: the program each switch runs, and what the P4 switches can hold;
- `backend`: all P4 switches, kept in the desired state of the core's plans;
- `packet_io`: LLDP, hosts' packets and host probes;
- `fast_failover`: heartbeats, failover counts and the switches' repair reports;
- `start`: the backend from the config; `reader`: a read-only client (the emulation).

May import `controller.core`, `controller.config`, `controller.addressing`,
`controller.algorithm` and the shared southbound modules; never the OpenFlow backend.
"""
