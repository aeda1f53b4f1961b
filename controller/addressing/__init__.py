"""How the fabric is addressed: the vocabulary every layer above the planner shares.

- `hosts`: hosts' IPv4 and MAC addresses (configured, or Mininet's defaults),
  and the one spelling of a MAC address;
- `groups`: the pool of IPv4 multicast group addresses, one per job;
- `ports`: port maps, which port of a switch leads to which neighbour.

Pure values and functions (no sockets, files or clocks). Imports only
`controller.algorithm.model`; the config, the store, the core and both backends
import it.
"""
