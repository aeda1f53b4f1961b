"""The P4Runtime backend for the program p4src/mcast.p4 (docs/p4.md).

Pure, no protobuf or sockets:
- `state`: the desired P4 state of every switch for a plan, its diff and ordered
  batches, and a strict switch model.
- `tracer`: a model of how mcast.p4 forwards, over P4 states (the tests' oracle).
- `packets`: LLDP probes, ARP, the source of a source-check copy, link liveness.

Over the P4Runtime protobufs (the `p4runtime` extra):
- `p4info`: the P4Info and every id resolved by name; canonical byte strings.
- `codec`: state values <-> `p4.v1` protobufs; wildcard reads.
- `client`: the backend (one gRPC connection per switch; attaches to the service).
- `reader`: a read-only client, which the emulation checks BMv2 with.
"""
