"""The OpenFlow 1.3 backend (docs/controller.md, "The OpenFlow pipeline").

- `state`: the desired flows, groups and meters of every switch for a plan (pure).
- `tracer`: follows a packet through those tables (pure; the tests' oracle).
- `app`: the os-ken app that connects switches to the service, reads them back
  and sends the make-before-break difference (`controller.southbound.reconcile`).
  `controller.run` loads it by its module path, `controller.southbound.openflow.app`.

Nothing here is imported by the P4Runtime backend except `state`'s id allocation
and port map helpers.
"""
