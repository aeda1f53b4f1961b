"""The core: the state of the running controller, and its planning loop.

Owns, one module per concern (docs/architecture.md, "The core"):
- `wiring`: the topology (declared, or discovered on the wire: `discovered`)
  and its port map;
- `devices`: the switches, their backends, connection state and limits;
- `links`: links down and held down, missing links, capacities;
- `hosts`: hosts' MACs and the one host-learning decision of both backends
  (pinned hosts, moves confirmed by a probe: `host_moves`);
- `jobs`: the registered jobs, their group addresses and their store;
- `culprits`: which changed job(s) a planner failure comes from (bisection);
- `tenants`: who asks (`Principal`), which jobs it may see, its quotas;
- `changes`: the change accounting every part reports to;
- `planning`: the debounced planning loop, one re-plan in steps; `moves`: the
  jobs a plan moves and its edges on the full topology; `phases`: the jobs'
  announced broadcasts and the served plan at their rates;
- `served`: the plan being served; `updates`: what the backends receive
  (`PlanUpdate`) and answer (`BackendReport`);
- `remembered`: what the wire taught, kept across restarts; `served_store`:
  the served plan's structures, kept across restarts and takeovers;
- `errors`, `stats`, `counters`, `port_rates` (measured load), `sources`
  (where each fact comes from);
- `service`: the facade that builds the parts and joins them.

May import `controller.algorithm`, `controller.planner`, `controller.addressing`,
`controller.config` and `controller.store`. It imports no backend
(`controller.southbound`), not the northbound and not the process: backends
report facts to its parts and receive its plans through `planning.on_plan`.
"""
