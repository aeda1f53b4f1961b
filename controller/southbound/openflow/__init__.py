"""The OpenFlow 1.3 backend (docs/controller.md, "The OpenFlow pipeline").

Pure (no os-ken):
- `entries`: tables, priorities, cookies and the frozen flows, groups and meters;
- `translate`: the desired state of every OpenFlow switch for a plan;
- `failover`: the fast-failover groups and detour entries of a plan's backups
  (`algorithm.backups`), and the failovers a port going down causes;
- `reconcile`: make-before-break operations and a strict switch model;
- `manager`: a plan in, the desired state and the operations out (ids kept in
  the store);
- `tracer`: follows a packet through desired tables (the tests' oracle).

Over os-ken:
- `messages`: entries <-> os-ken messages; limits from the switches' replies;
- `channel`: per-switch bookkeeping and the requests in flight;
- `tls_socket`: a switch's TLS connection made safe for os-ken's reading and
  writing threads (standard library only);
- `roles`: mastership of the switches with several instances (docs/ha.md);
- `reconciler`: the sync worker (read back, diff, send in phases);
- `names`: which switch a datapath id is;
- `app`: the os-ken app, a thin shim that decodes events and hands them over.
  `controller.app.run` loads it by its module path,
  `controller.southbound.openflow.app`.

May import `controller.core`, `controller.config`, `controller.addressing`,
`controller.algorithm` and the shared southbound modules; never the P4Runtime
backend.
"""
