"""The southbound: from a plan to the entries of real switches (docs/architecture.md).

This package holds the pure part of the OpenFlow 1.3 southbound, in the spirit of
Faucet's `valve_of` and `fakeoftable`: no os-ken, no sockets, no clock, no files.

- `addresses`: multicast group addresses of jobs and default host addresses.
- `openflow_state`: the desired flows, groups and meters of every switch for a plan.
- `reconcile`: the make-before-break difference between desired and actual state,
  and a strict model of a switch applying it.
- `tracer`: follows a packet through the desired tables, so that tests ask
  "where does this packet go?" rather than "was this message sent?".

The os-ken controller process calls these functions and only sends what they return.
"""
