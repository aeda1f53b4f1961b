"""`python -m controller jobs add | list | show | delete`: the job commands, over
`controller.client.Client` against a running controller.

Every subcommand takes `--url` (default `$MCAST_CONTROLLER_URL`, else
http://127.0.0.1:8080), the token (`--token`, or the environment variable
`--token-env` names, default `MCAST_CONTROLLER_TOKEN`: a token on the command
line is visible to other users in `ps`), `--ca-file` (default `$MCAST_CA_FILE`:
the CA certificates, PEM, that an https:// controller's certificate must be
signed by; without it the system's CAs), and `--json` for the API's JSON on
stdout instead of a table. Exit codes as the rest of the CLI: 0 success; 1 the
controller is unreachable, failed (5xx), or the job was not planned in time or
failed; 2 bad arguments or a request the controller refused (4xx: invalid job,
unknown id, id taken by another spec, wrong token), one `error: ...` line on
stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from controller.arguments import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, bit_rate, note, positive_number
from controller.client.client import DEFAULT_URL, Client, Job, encode_key
from controller.client.errors import ApiError, ClientError, JobFailed, WaitTimeout

URL_ENV, TOKEN_ENV, CA_ENV = "MCAST_CONTROLLER_URL", "MCAST_CONTROLLER_TOKEN", "MCAST_CA_FILE"


def format_rate(bps: float | None) -> str:
    if bps is None:
        return "—"
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"


# -- output -----------------------------------------------------------------------------


PIPE_WIDTH = 400  # columns of a table written to a pipe or a file


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def jobs_table(jobs: list[Job]):
    """A rich table with one row per job."""
    from rich.table import Table

    table = Table()
    for heading in ("id", "state", "mode", "rate", "demand", "group", "ps", "workers"):
        table.add_column(heading, justify="right" if heading in ("rate", "demand") else "left", overflow="fold",
                         no_wrap=heading in ("id", "group"))  # an id or an address is one word: never split
    for j in jobs:
        table.add_row(j.id, j.state, j.mode or "—", format_rate(j.rate), format_rate(j.demand), j.group_address or "—", j.ps,
                      ", ".join(j.workers))
    return table


def job_table(job: Job):
    """A rich two-column table of one job, its plan's structure included."""
    from rich.table import Table

    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    s = job.structure or {}
    rows = [
        ("id", job.id), ("state", job.state), ("ps", job.ps), ("workers", ", ".join(job.workers)),
        ("demand", format_rate(job.demand)), ("weight", f"{job.weight:g}"), ("group address", job.group_address or "—"),
        ("rate", format_rate(job.rate)), ("mode", job.mode or "—"),
        ("PS unicast to", ", ".join(job.ps_unicast) or "—"),
        ("groups at", ", ".join(s.get("groups", [])) or "—"),
        ("entries at", ", ".join(s.get("entries", [])) or "—"),
        ("unicast branches", ", ".join(f"{b['from']}→{b['to']}" for b in s.get("branches", [])) or "—"),
    ]
    if job.missing_hosts:
        rows.append(("waiting for", ", ".join(job.missing_hosts)))
    if job.error:
        rows.append(("error", job.error))
    for key, value in rows:
        table.add_row(key, value)
    return table


def _show(args: argparse.Namespace, data: Any, table) -> None:
    if args.json:
        _print_json(data)
    else:
        from rich.console import Console

        console = Console()
        if not console.is_terminal:  # a pipe or a file: no terminal width to fit, never wrap a row
            console = Console(width=PIPE_WIDTH)
        console.print(table)


# -- subcommands -----------------------------------------------------------------------


def client_from_args(args: argparse.Namespace) -> Client:
    token = args.token if args.token is not None else os.environ.get(args.token_env) or None
    return Client(args.url, token, timeout=args.http_timeout, retries=args.retries, ca_file=args.ca_file or None)


def cmd_add(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    try:
        job = client.register(args.ps, args.workers, args.demand, args.weight, args.id,
                              wait=not args.no_wait, timeout=args.wait)
    except (WaitTimeout, JobFailed) as e:
        _show(args, e.job.raw, job_table(e.job))
        raise
    _show(args, job.raw, job_table(job))
    if args.key_file:
        if job.auth_key is None:
            sys.stderr.write(f"warning: job {job.id} was registered already under another key; {args.key_file} "
                             "not written\n")
        else:
            _write_key(args.key_file, encode_key(job.auth_key))
    return EXIT_OK


def _write_key(path: str, text: str) -> None:
    """The job key, alone on a line, in a file only its owner can read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")


def cmd_list(args: argparse.Namespace) -> int:
    jobs = client_from_args(args).list()
    _show(args, {"jobs": [j.raw for j in jobs]}, jobs_table(jobs))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    job = client_from_args(args).get(args.job_id)
    _show(args, job.raw, job_table(job))
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    done: list[dict[str, Any]] = []
    try:
        for job_id in args.job_ids:
            deleted = client.delete(job_id, missing_ok=args.missing_ok)
            done.append({"id": job_id, "deleted": deleted})
            if not args.json:
                note(f"{job_id}: {'deleted' if deleted else 'no such job'}")
    finally:
        if args.json:  # what was done before an error too, as one document
            _print_json({"jobs": done})
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    """Run a jobs subcommand; client errors become one `error:` line and an exit code."""
    try:
        return args.jobs_run(args)
    except ApiError as e:
        note(f"error: {e}")
        return EXIT_BAD_INPUT if e.status < 500 else EXIT_FAILED
    except ValueError as e:  # a malformed --url, an unreadable --ca-file, a token bound for http:// off loopback
        note(f"error: {e}")
        return EXIT_BAD_INPUT
    except ClientError as e:
        note(f"error: {e}")
        return EXIT_FAILED


def register(sub) -> None:
    """Add `jobs` and its subcommands to the CLI's subparsers `sub`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get(URL_ENV, DEFAULT_URL),
                        help=f"the controller's REST API (default ${URL_ENV}, else {DEFAULT_URL})")
    common.add_argument("--token", help="bearer token (prefer --token-env: a command line is visible in ps)")
    common.add_argument("--token-env", default=TOKEN_ENV, metavar="NAME",
                        help=f"environment variable holding the token (default {TOKEN_ENV})")
    common.add_argument("--ca-file", default=os.environ.get(CA_ENV), metavar="PEM",
                        help=f"CA certificates that an https:// controller's certificate must be signed by "
                             f"(default ${CA_ENV}, else the system's CAs)")
    common.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")
    common.add_argument("--http-timeout", type=positive_number, default=30.0, metavar="S",
                        help="timeout of each HTTP request (default 30; above the controller's planner.wait_s)")
    common.add_argument("--retries", type=int, choices=range(0, 11), default=4, metavar="N",
                        help="retries of a request after a connection error or a 5xx (default 4)")

    p = sub.add_parser("jobs", help="register, list, show and delete jobs on a running controller")
    jobs = p.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    p.set_defaults(run=run)

    a = jobs.add_parser("add", parents=[common], help="register a job and wait for its plan")
    a.add_argument("ps", help="the parameter server: a host name or IPv4 address")
    a.add_argument("workers", nargs="+", help="the workers (host names or IPv4 addresses)")
    a.add_argument("--demand", type=bit_rate, required=True, help="the rate the job wants, bit/s (1e9, 500M, 2G)")
    a.add_argument("--weight", type=positive_number, default=1.0, help="the job's weight (default 1)")
    a.add_argument("--id", help="the job's id (default a fresh job-<uuid>; the same id and spec again is no error)")
    a.add_argument("--no-wait", action="store_true", help="do not wait for a plan beyond the controller's own wait")
    a.add_argument("--wait", type=positive_number, default=60.0, metavar="S",
                   help="how long to wait for the job to be planned (default 60; exit 1 if it is not)")
    a.add_argument("--key-file", metavar="PATH",
                   help="write the job's broadcast key (base64url; its workers need it) to PATH, mode 0600")
    a.set_defaults(jobs_run=cmd_add)

    ls = jobs.add_parser("list", parents=[common], help="every job, in creation order")
    ls.set_defaults(jobs_run=cmd_list)

    s = jobs.add_parser("show", parents=[common], help="one job and its plan")
    s.add_argument("job_id")
    s.set_defaults(jobs_run=cmd_show)

    d = jobs.add_parser("delete", parents=[common], help="delete jobs; returns once a plan without them is in place")
    d.add_argument("job_ids", nargs="+", metavar="job_id")
    d.add_argument("--missing-ok", action="store_true", help="an unknown id is no error")
    d.set_defaults(jobs_run=cmd_delete)
