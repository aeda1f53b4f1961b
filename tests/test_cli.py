"""The command line, run as `python -m controller` in a subprocess (and in-process
where an algorithm has to be made to refuse)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import controller.planner
from controller.algorithm import ALGORITHMS
from controller.algorithm.model import PlanningError
from controller.algorithm.workload import reference_instance
from controller.app.cli import main
from controller.config.instance import instance_to_dict, read_instance

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fattree4.json"


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "controller", *map(str, args)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


def without_runtime(plans: list[dict]) -> list[dict]:
    return [{k: v for k, v in p.items() if k != "runtime_s"} for p in plans]


# -- plan ---------------------------------------------------------------------------


def test_plan_prints_summary_and_table():
    r = cli("plan", "--instance", EXAMPLE, "--algorithm", "unicast")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines[0] == "fat-tree: 20 switches, 16 hosts, 3 jobs"
    assert "λ/LP" in r.stdout and "Gbit/s" in r.stdout
    row = next(line for line in lines if "unicast" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    plan = controller.planner.run(read_instance(EXAMPLE), "unicast")
    assert cells[:6] == [
        "unicast",
        f"{plan.lam:.4f}",
        f"{plan.throughput / 1e9:.2f}",
        "—",  # unicast has no LP bound and no lp-rounding plan ran
        "0",
        "0",
    ]


def test_plan_json_is_the_only_thing_on_stdout():
    r = cli("plan", "--instance", EXAMPLE, "--algorithm", "unicast", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)  # the whole of stdout is one JSON document
    assert list(data) == ["plans"]
    assert [p["algorithm"] for p in data["plans"]] == ["unicast"]
    plan = data["plans"][0]
    assert [j["id"] for j in plan["jobs"]] == ["train-000", "train-001", "train-002"]
    assert all(j["mode"] == "unicast" for j in plan["jobs"])


def test_plan_json_has_one_plan_per_requested_algorithm(monkeypatch, capsys):
    real = controller.planner.run

    def run_as(instance, algorithm, objective="max-concurrent", seed=0):
        return dataclasses.replace(real(instance, "unicast", objective, seed), algorithm=algorithm)

    monkeypatch.setattr(controller.planner, "run", run_as)
    code = main(["plan", "--instance", str(EXAMPLE), "--algorithm", "spt,unicast,greedy,spt", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [p["algorithm"] for p in json.loads(out)["plans"]] == ["spt", "unicast", "greedy"]


def test_plan_out_writes_the_file_and_keeps_stdout_empty(tmp_path):
    out = tmp_path / "plans.json"
    r = cli("plan", "--fattree", "4", "--jobs", "2", "--algorithm", "unicast", "--json", "--out", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert [p["algorithm"] for p in json.loads(out.read_text())["plans"]] == ["unicast"]


def test_generate_then_plan_round_trip(tmp_path):
    inst = tmp_path / "inst.json"
    r = cli("generate", "--fattree", "4", "--jobs", "3", "--seed", "7", "--group-capacity", "2", "--out", inst)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    expected = reference_instance(4, 3, group_capacity=2, seed=7)
    assert instance_to_dict(read_instance(inst)) == instance_to_dict(expected)

    from_file = cli("plan", "--instance", inst, "--algorithm", "unicast", "--json")
    generated = cli(
        "plan", "--fattree", "4", "--jobs", "3", "--seed", "7", "--group-capacity", "2", "--algorithm", "unicast", "--json"
    )
    assert from_file.returncode == generated.returncode == 0
    assert without_runtime(json.loads(from_file.stdout)["plans"]) == without_runtime(
        json.loads(generated.stdout)["plans"]
    )


def test_generate_leaf_spine_to_stdout():
    r = cli("generate", "--leaf-spine", "3,2,4", "--jobs", "2", "--min-workers", "2", "--max-workers", "3", "--oversubscribed")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert len(data["jobs"]) == 2
    assert all(2 <= len(j["workers"]) <= 3 for j in data["jobs"])
    uplinks = [l["capacity"] for l in data["topology"]["links"] if l["b"].startswith("spine")]
    assert uplinks and set(uplinks) == {5e9}


# -- check --------------------------------------------------------------------------


@pytest.fixture
def plan_file(tmp_path):
    path = tmp_path / "plans.json"
    r = cli("plan", "--instance", EXAMPLE, "--algorithm", "unicast", "--out", path, "--json")
    assert r.returncode == 0, r.stderr
    return path


def test_check_accepts_a_valid_plan(plan_file):
    r = cli("check", "--instance", EXAMPLE, "--plan", plan_file)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "plan (unicast): OK\n"


def test_check_rejects_a_tampered_plan(plan_file):
    data = json.loads(plan_file.read_text())
    job = data["plans"][0]["jobs"][1]
    job["rate"] = 50e9  # above its demand and above every link
    plan_file.write_text(json.dumps(data))
    r = cli("check", "--instance", EXAMPLE, "--plan", plan_file)
    assert r.returncode == 1
    assert r.stdout.startswith("plan (unicast): ")
    assert f"{job['id']}: rate 50000000000.0 outside [0, demand" in r.stdout
    assert "> capacity" in r.stdout


# -- bad input ----------------------------------------------------------------------


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


BAD_INPUTS = {
    "odd fat-tree": (["plan", "--fattree", "3", "--jobs", "2"], "fat-tree arity k must be an even number"),
    "negative jobs": (["generate", "--fattree", "4", "--jobs", "-1"], "--jobs: must be a non-negative integer, got -1"),
    "jobs missing": (["plan", "--fattree", "4"], "--jobs is required"),
    "jobs with an instance file": (["plan", "--instance", str(EXAMPLE), "--jobs", "2"], "--jobs applies only"),
    "bad leaf-spine shape": (["generate", "--leaf-spine", "2,2", "--jobs", "1"], "LEAVES,SPINES,HOSTS_PER_LEAF"),
    "zero spines": (["generate", "--leaf-spine", "2,0,2", "--jobs", "1"], "must be a positive integer, got 0"),
    "min above max workers": (
        ["generate", "--fattree", "4", "--jobs", "1", "--min-workers", "5", "--max-workers", "3"],
        "min_workers <= max_workers",
    ),
    "negative group capacity": (
        ["plan", "--fattree", "4", "--jobs", "1", "--group-capacity", "-2"],
        "--group-capacity: must be a non-negative integer",
    ),
    "infinite capacity": (["generate", "--fattree", "4", "--jobs", "1", "--capacity", "inf"], "--capacity: must be a positive"),
    "rack locality above 1": (["generate", "--fattree", "4", "--jobs", "1", "--rack-locality", "2"], "within [0, 1]"),
    "unknown algorithm": (["plan", "--instance", str(EXAMPLE), "--algorithm", "unicast,magic"], "unknown algorithm 'magic'"),
    "unknown objective": (["plan", "--instance", str(EXAMPLE), "--objective", "fastest"], "invalid choice: 'fastest'"),
    "two sources": (["plan", "--instance", str(EXAMPLE), "--fattree", "4"], "not allowed with"),
    "no subcommand": ([], "required: COMMAND"),
    "unknown subcommand": (["frobnicate"], "invalid choice: 'frobnicate'"),
    "missing instance file": (["plan", "--instance", "/nonexistent/inst.json"], "/nonexistent/inst.json: cannot read"),
    "instance not JSON": (
        ["plan", "--instance", "{tmp}/broken.json"],
        "broken.json: not JSON: Expecting value (line 1, column 14)",
    ),
    "instance with unknown host": (
        ["plan", "--instance", "{tmp}/badhost.json"],
        "badhost.json: jobs[0].workers[1]: unknown host 'h99'",
    ),
    "unwritable output": (["generate", "--fattree", "4", "--jobs", "1", "--out", "/nonexistent/x.json"], "cannot write"),
    "check with a bad plan": (
        ["check", "--instance", str(EXAMPLE), "--plan", "{tmp}/badplan.json"],
        "badplan.json: top level: unknown field 'plan'",
    ),
}


@pytest.mark.parametrize("argv, message", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, argv, message):
    _write(tmp_path, "broken.json", '{"topology": ')
    bad = json.loads(EXAMPLE.read_text())
    bad["jobs"][0]["workers"][1] = "h99"
    _write(tmp_path, "badhost.json", json.dumps(bad))
    _write(tmp_path, "badplan.json", json.dumps({"plan": {}}))
    r = cli(*(a.replace("{tmp}", str(tmp_path)) for a in argv))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    assert message in lines[0]
    assert r.stdout == ""


# -- refusals -----------------------------------------------------------------------


@pytest.fixture
def ilp_refuses(monkeypatch):
    real = controller.planner.run

    def run(instance, algorithm, objective="max-concurrent", seed=0):
        if algorithm == "ilp":
            raise PlanningError("instance too large for the exact ILP")
        return dataclasses.replace(real(instance, "unicast", objective, seed), algorithm=algorithm)

    monkeypatch.setattr(controller.planner, "run", run)


def test_all_leaves_out_a_refusing_algorithm(ilp_refuses, capsys):
    code = main(["plan", "--instance", str(EXAMPLE), "--algorithm", "all", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    assert [p["algorithm"] for p in json.loads(out)["plans"]] == [a for a in ALGORITHMS if a != "ilp"]
    assert err == "note: ilp left out: instance too large for the exact ILP\n"


def test_a_named_algorithm_that_refuses_is_an_error(ilp_refuses, capsys):
    code = main(["plan", "--instance", str(EXAMPLE), "--algorithm", "unicast,ilp", "--json"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert err == "error: ilp refused: instance too large for the exact ILP\n"
