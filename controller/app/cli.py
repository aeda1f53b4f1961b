"""The command line: `python -m controller plan | generate | check | jobs | ...`.

Exit codes (`controller.arguments`): 0 success; 1 a plan was refused (`plan`) or
violates its instance (`check`); 2 bad input or bad arguments, reported as one
`error: ...` line on stderr. Machine-readable output goes to stdout (or --out); notes and progress go
to stderr. A subcommand is a function that registers its subparser; `COMMANDS`
lists them, so a new one (for example `bench`) is added in one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

from controller import planner
from controller.algorithm import ALGORITHMS, OBJECTIVES
from controller.algorithm.model import Instance, Plan, PlanningError
from controller.algorithm.network import Network
from controller.algorithm.topologies import GBIT, fat_tree, leaf_spine
from controller.algorithm.validate import plan_violations
from controller.algorithm.workload import DEMANDS, WorkloadSpec, generate_jobs
from controller.app import run as run_command
from controller.app import tenant_token
from controller.arguments import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    non_negative_int,
    note,
    positive_int,
    positive_number,
    probability,
)
from controller.config.instance import (
    InputError,
    dump_json,
    instance_to_dict,
    plans_to_json,
    read_instance,
    read_plans,
    write_json,
)
from controller.client import cli as jobs_command
from controller.offline import admission_quality, bench, cluster_report, evaluate, load, registration


class Refused(Exception):
    """An algorithm named explicitly refused to plan the instance."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one `error:` line and exit 2."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see '{self.prog} --help')\n")


# -- argument types (the generic ones are in controller.arguments) ----------------------


def leaf_spine_shape(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected LEAVES,SPINES,HOSTS_PER_LEAF, got {text!r}")
    return tuple(positive_int(p.strip()) for p in parts)  # type: ignore[return-value]


class Selection(NamedTuple):
    """The algorithms to run; with `everything`, refusals are left out instead of failing."""

    names: tuple[str, ...]
    everything: bool = False


def algorithm_list(text: str) -> Selection:
    if text == "all":
        return Selection(ALGORITHMS, True)
    names: list[str] = []
    for name in (n.strip() for n in text.split(",")):
        if name not in ALGORITHMS:
            raise argparse.ArgumentTypeError(
                f"unknown algorithm {name!r}; choose from {', '.join(ALGORITHMS)} or all"
            )
        if name not in names:
            names.append(name)
    return Selection(tuple(names))


# -- instances from arguments ---------------------------------------------------------


def _add_generator_arguments(p: argparse.ArgumentParser, *, from_file: bool) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    if from_file:
        source.add_argument("--instance", metavar="FILE", help="instance JSON (docs/architecture.md, Formats)")
    source.add_argument("--fattree", type=positive_int, metavar="K", help="generate a k-ary fat-tree (k even)")
    source.add_argument(
        "--leaf-spine",
        type=leaf_spine_shape,
        metavar="LEAVES,SPINES,HOSTS_PER_LEAF",
        help="generate a leaf-spine fabric",
    )
    g = p.add_argument_group("generated instances")
    g.add_argument("--jobs", type=non_negative_int, metavar="N", help="number of jobs to generate")
    g.add_argument("--group-capacity", type=non_negative_int, metavar="G", help="replication groups per switch (default: unlimited)")
    g.add_argument("--entry-capacity", type=non_negative_int, metavar="F", help="multicast entries per switch (default: unlimited)")
    g.add_argument("--capacity", type=positive_number, metavar="BITS", help="link capacity in bit/s (default: 1e10)")
    g.add_argument("--oversubscribed", action="store_true", default=None, help="halve core (fat-tree) or spine (leaf-spine) links")
    g.add_argument("--min-workers", type=positive_int, metavar="A", help="fewest workers per job (default: 4)")
    g.add_argument("--max-workers", type=positive_int, metavar="B", help="most workers per job (default: 32)")
    g.add_argument("--rack-locality", type=probability, metavar="P", help="probability of drawing a worker from the PS's rack first (default: 0)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed of the workload and the algorithms (default: 0)")


GENERATOR_OPTIONS = ("jobs", "group_capacity", "entry_capacity", "capacity", "oversubscribed", "min_workers", "max_workers", "rack_locality")


def instance_from_args(args: argparse.Namespace) -> Instance:
    """The instance that --instance names or that the generator options describe."""
    if getattr(args, "instance", None) is not None:
        for name in GENERATOR_OPTIONS:
            if getattr(args, name) is not None:
                flag = "--" + name.replace("_", "-")
                raise InputError(f"{flag} applies only to a generated instance (--fattree or --leaf-spine)")
        return read_instance(args.instance)
    if args.jobs is None:
        raise InputError("--jobs is required with --fattree and --leaf-spine")
    capacity = 10 * GBIT if args.capacity is None else args.capacity
    try:
        if args.fattree is not None:
            topo = fat_tree(
                args.fattree, capacity, 2.0 if args.oversubscribed else 1.0, args.group_capacity, args.entry_capacity
            )
        else:
            leaves, spines, hosts = args.leaf_spine
            topo = leaf_spine(
                leaves,
                spines,
                hosts,
                capacity,
                capacity / 2 if args.oversubscribed else None,
                args.group_capacity,
                args.entry_capacity,
            )
        defaults = WorkloadSpec(args.jobs)
        spec = WorkloadSpec(
            args.jobs,
            defaults.min_workers if args.min_workers is None else args.min_workers,
            defaults.max_workers if args.max_workers is None else args.max_workers,
            DEMANDS,
            0.0 if args.rack_locality is None else args.rack_locality,
            args.seed,
        )
        return Instance(topo, generate_jobs(topo, spec))
    except ValueError as e:
        raise InputError(str(e)) from None


# -- output ---------------------------------------------------------------------------


def _emit(data: dict, out: str | None) -> None:
    """Write JSON to the file `out`, or to stdout."""
    if out is None:
        sys.stdout.write(dump_json(data))
    else:
        write_json(data, out)


def instance_summary(instance: Instance) -> str:
    topo = instance.topology
    kind = Network(topo).kind
    return f"{kind}: {len(topo.switches)} switches, {len(topo.hosts)} hosts, {len(instance.jobs)} jobs"


def plans_table(plans: Sequence[Plan], title: str | None = None):
    """A rich table with one row per plan."""
    from rich.table import Table  # rich (~35 ms to import) only where a table is printed, not on every start-up

    reference = next((p.lp_bound for p in plans if p.algorithm == "lp-rounding" and p.lp_bound), None)
    table = Table(title=title)
    table.add_column("algorithm")
    for heading in ("λ", "Gbit/s", "λ/LP", "groups", "entries", "runtime s"):
        table.add_column(heading, justify="right")
    for p in plans:
        bound = reference or p.lp_bound
        table.add_row(
            p.algorithm,
            f"{p.lam:.4f}",
            f"{p.throughput / GBIT:.2f}",
            f"{p.lam / bound:.3f}" if bound else "—",
            str(sum(s.groups_used for s in p.switches)),
            str(sum(s.entries_used for s in p.switches)),
            f"{p.runtime_s:.3f}",
        )
    return table


# -- subcommands ----------------------------------------------------------------------


def run_algorithms(instance: Instance, selection: Selection, objective: str, seed: int) -> list[Plan]:
    """Plan with each selected algorithm. A refusal (PlanningError) is left out with a
    note when all algorithms were asked for, and raised as `Refused` otherwise."""
    plans: list[Plan] = []
    progress = None
    algorithms = selection.names
    if len(algorithms) > 1 and sys.stderr.isatty():
        from rich.console import Console  # rich only for a progress bar on a terminal
        from rich.progress import Progress

        progress = Progress(console=Console(stderr=True), transient=True)
        progress.start()
        task = progress.add_task("planning", total=len(algorithms))
    try:
        for name in algorithms:
            if progress is not None:
                progress.update(task, description=f"planning: {name}")
            try:
                plans.append(planner.run(instance, name, objective, seed))
            except PlanningError as e:
                if not selection.everything:
                    raise Refused(f"{name} refused: {e}") from None
                note(f"note: {name} left out: {e}")
            if progress is not None:
                progress.advance(task)
    finally:
        if progress is not None:
            progress.stop()
    return plans


def cmd_plan(args: argparse.Namespace) -> int:
    instance = instance_from_args(args)
    plans = run_algorithms(instance, args.algorithm, args.objective, args.seed)
    for p in plans:
        for line in p.notes:
            note(f"note: {p.algorithm}: {line}")
    if args.json or args.out is not None:
        _emit(plans_to_json(plans, instance.topology), args.out)
    if not args.json:
        from rich.console import Console  # rich only for the table, as plans_table

        console = Console()
        console.print(instance_summary(instance), highlight=False)
        console.print(plans_table(plans))
    return EXIT_OK


def add_plan_command(sub) -> None:
    p = sub.add_parser("plan", help="plan an instance with one or more algorithms")
    _add_generator_arguments(p, from_file=True)
    p.add_argument(
        "--algorithm",
        type=algorithm_list,
        default=Selection(("lp-rounding",)),
        metavar="NAME[,NAME...]|all",
        help=f"{', '.join(ALGORITHMS)} or all (default: lp-rounding)",
    )
    p.add_argument("--objective", choices=OBJECTIVES, default="max-concurrent", help="default: max-concurrent")
    p.add_argument("--json", action="store_true", help='print {"plans": [...]} instead of a table')
    p.add_argument("--out", metavar="FILE", help="write the plans' JSON to FILE")
    p.set_defaults(run=cmd_plan)


def cmd_generate(args: argparse.Namespace) -> int:
    instance = instance_from_args(args)
    _emit(instance_to_dict(instance), args.out)
    return EXIT_OK


def add_generate_command(sub) -> None:
    p = sub.add_parser("generate", help="write a reference instance (docs/architecture.md, Reference workloads)")
    _add_generator_arguments(p, from_file=False)
    p.add_argument("--out", metavar="FILE", help="write the instance to FILE instead of stdout")
    p.set_defaults(run=cmd_generate)


def cmd_check(args: argparse.Namespace) -> int:
    instance = read_instance(args.instance)
    plans = read_plans(args.plan, instance)
    status = EXIT_OK
    for i, p in enumerate(plans):
        label = f"plan {i} ({p.algorithm})" if len(plans) > 1 else f"plan ({p.algorithm})"
        problems = plan_violations(instance, p)
        if not problems:
            print(f"{label}: OK")
            continue
        status = EXIT_FAILED
        print(f"{label}: {len(problems)} violation{'s' if len(problems) != 1 else ''}")
        for problem in problems:
            print(f"  {problem}")
    return status


def add_check_command(sub) -> None:
    p = sub.add_parser("check", help="check plans against their instance (docs/architecture.md, Formats)")
    p.add_argument("--instance", required=True, metavar="FILE", help="instance JSON")
    p.add_argument("--plan", required=True, metavar="FILE", help='one plan or {"plans": [...]}')
    p.set_defaults(run=cmd_check)


# One register function per subcommand, in the order --help lists them; add a new
# subcommand by appending its own.
COMMANDS: list[Callable] = [
    add_plan_command,
    add_generate_command,
    add_check_command,
    bench.register,  # offline/bench.py
    evaluate.register,  # offline/evaluate.py
    registration.register,  # offline/registration.py: bench-registration
    load.register,  # offline/load.py: bench-load (locust)
    admission_quality.register,  # offline/admission_quality.py: bench-admission
    cluster_report.register,  # offline/cluster_report.py: simulate-cluster
    run_command.register,  # app/run.py: the controller process
    jobs_command.register,  # client/cli.py: jobs add|list|show|delete
    tenant_token.register,  # app/tenant_token.py: mint a tenant's API token
]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m controller",
        description="Plan throughput-maximising multicast for distributed-training jobs.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already reported
        return e.code if isinstance(e.code, int) else EXIT_BAD_INPUT
    try:
        return args.run(args)
    except InputError as e:
        note(f"error: {e}")
        return EXIT_BAD_INPUT
    except Refused as e:
        note(f"error: {e}")
        return EXIT_FAILED
    except BrokenPipeError:  # stdout closed early (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
