"""The process: what `python -m controller` runs.

Owns the wiring of the controller process (`run`: the core, the REST API, the
OpenFlow and P4Runtime backends, several instances on one etcd store with
`cluster`) and the command line (`cli`: every subcommand; the argument types are
`controller.arguments`; `tenant_token`: minting a tenant's API token; `heap`:
the start-up plan's objects frozen out of the cyclic collector's full collections).

May import every package of the project: it is the top layer, and nothing imports it.
"""
