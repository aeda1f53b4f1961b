"""The offline tools: commands run by hand, never by the running controller.

It owns these commands and the pages they write:

- `bench` (`python -m controller bench`) times the planner and writes
  docs/performance.md, with its §5 from `phases`, §6 from `registration` and §7
  from `warm`;
- `evaluate` (`python -m controller evaluate`) runs the paper-style simulation,
  writes its CSV and docs/evaluation.md; `evaluate_figures` draws the figures,
  `evaluate_regimes` figure 8 (where planning matters: the regimes of
  `algorithm.regimes`);
- `registration` (`bench-registration`) times job registration against a
  controller process it starts; `admission_quality` (`bench-admission`) compares
  the λ served between re-optimisations with a full plan's;
- `simulate-cluster` (`cluster_report`, its text `cluster_text`) runs the
  flow-level simulation of a fabric over hours of job arrivals and departures
  (`cluster_sim`, the arrival stream `cluster_workload`) and writes its section
  of docs/evaluation.md and its figures;
- `report` holds what they share (fresh-interpreter runs, markdown, machine facts).

It may import `controller.algorithm` and `controller.planner` (it calls the
planner like any other client), `controller.config` (`InputError`, the instance
format), `controller.arguments` (exit codes, argument types), and the
controller's own `controller.core` and `controller.store` only where it measures
the controller's policy or state (`admission_quality` and `cluster_sim` read
`core.planning.ADMISSION_GUARD`, `registration` preloads a `store.sqlite.JobStore`;
`cluster_sim` takes its policy as a `config.schema.PlannerConfig`).
It never imports `controller.app`, the southbound or the northbound, and nothing
in the controller process imports it: `controller.app.cli` registers its commands.
"""
