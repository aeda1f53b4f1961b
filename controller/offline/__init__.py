"""The offline tools: commands run by hand, never by the running controller.

`bench` (`python -m controller bench`) times the planner and writes
docs/performance.md; `evaluate` (`python -m controller evaluate`) runs the
paper-style simulation and writes its CSV, `evaluate_figures` draws its figures,
and docs/evaluation.md. They call the planner (`controller.planner`,
`controller.algorithm`) like any other client; nothing in the controller process
(`controller.run`, `controller.service`, the northbound, the southbound) imports
this package. `controller.cli` registers the two commands lazily.
"""
