"""The P4Runtime backend for the programs p4src/mcast.p4 (BMv2) and p4src/tna/mcast.p4
(Tofino 1 and 2), which share their P4Runtime names (docs/p4.md).

Pure, no protobuf or sockets:
- `state`: the desired P4 state of every switch for a plan, its diff and ordered
  batches, and a strict switch model.
- `tracer`: a model of how mcast.p4 forwards, over P4 states (the tests' oracle).
- `packets`: LLDP probes, ARP, the source of a source-check copy, link liveness.
- `programs`: the programs a switch may run (v1model, tofino, tofino2): P4Info
  and device config files, CPU port, group-id limit.

Over the P4Runtime protobufs (the `p4runtime` extra):
- `p4info`: the P4Info and every id resolved by name; canonical byte strings.
- `codec`: state values <-> `p4.v1` protobufs; wildcard reads.
- `client`: the backend (one gRPC connection per switch; attaches to the service).
- `reader`: a read-only client, which the emulation checks BMv2 with.
"""
