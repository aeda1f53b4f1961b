"""The southbound: from a plan to the entries of real switches (docs/architecture.md).

One backend package per switch protocol, over a shared layer. The config chooses
the backend per switch; the service hands both the same translation inputs.

Shared (this package; pure: no sockets, no clock, no files, except the queue):
- `addresses`: multicast group addresses of jobs and default host addresses.
- `layout`: what both translations need from a plan (hosts' addresses, each
  job's tree, branches, replicating and metering switches), backend-free.
- `reconcile`: the make-before-break difference between desired and actual
  OpenFlow state, and a strict model of a switch applying it; the P4Runtime
  backend reuses its `InconsistentOp`.
- `sync_queue`: the work queue of a backend's sync worker.

Backends:
- `openflow`: OpenFlow 1.3. `openflow.state` (the desired flows, groups and
  meters of every switch for a plan, pure, in the spirit of Faucet's `valve_of`),
  `openflow.tracer` (follows a packet through the desired tables, like Faucet's
  `fakeoftable`, so that tests ask "where does this packet go?" rather than "was
  this message sent?") and `openflow.app`, the os-ken app that sends only what
  the pure functions return.
- `p4runtime`: P4Runtime for p4src/mcast.p4 (docs/p4.md). `p4runtime.state`
  (the desired P4 state, pure), `p4info`, `codec`, `packets`, `tracer` (a model
  of how the program forwards), `client` (the backend: one gRPC connection per
  switch) and `reader` (a read-only client, for the emulation).
"""
