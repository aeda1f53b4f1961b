"""The Tofino data plane (p4src/tna/mcast.p4): compiled for TNA and T2NA, and its P4Info.

Marked `tofino` (needs the Tofino compiler, /opt/p4tofino/install: CI installs it and a
skip there is a failure, tests/conftest.py): bf-p4c compiles both targets from the
source once per session, with the Makefile's flags; the committed P4Info is byte for
byte what it writes, the committed bfrt.json the same JSON but for what bf-p4c
varies from run to run (p4src/tna/bfrt_same.py). Unmarked: the committed Tofino P4Infos
carry the v1model program's names (but for BMv2's fast failover), the multicast table size docs/p4.md states, and
the CPU ports of p4src/tna/sizes.p4 are the ones the backend uses.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from controller.southbound.p4runtime import entities as ps
from controller.southbound.p4runtime.pipeline import check_names
from controller.southbound.p4runtime.p4info import DEFAULT_P4INFO, P4Info
from controller.config.programs import PROGRAMS

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "p4src" / "tna" / "mcast.p4"
TOFINO_P4C = Path(os.environ.get("TOFINO_P4C", "/opt/p4tofino/install/bin/p4c"))
ARCH = {"tofino": "tna", "tofino2": "t2na"}
STAGES = {"tofino": 12, "tofino2": 20}
_spec = importlib.util.spec_from_file_location("bfrt_same", REPO / "p4src" / "tna" / "bfrt_same.py")
bfrt_same = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bfrt_same)


def makefile_flags() -> list[str]:
    """The flags `make p4` gives bf-p4c (one place: the Makefile's TOFINO_FLAGS)."""
    m = re.search(r"^TOFINO_FLAGS := (.*)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert m, "TOFINO_FLAGS is not in the Makefile"
    return shlex.split(m.group(1))


@pytest.fixture(scope="session")
def compiled(tmp_path_factory) -> dict[str, tuple[Path, float]]:
    """target -> (bf-p4c's output directory, seconds it took), both targets compiled once."""
    if not TOFINO_P4C.exists():
        pytest.skip(f"the Tofino compiler is not installed ({TOFINO_P4C}; ../shared/p4tools/install-tofino.sh installs it)")
    out = {}
    for target, arch in ARCH.items():
        d = tmp_path_factory.mktemp(target)
        t0 = time.monotonic()
        r = subprocess.run(
            [str(TOFINO_P4C), "--target", target, "--arch", arch, *makefile_flags(),
             "--p4runtime-files", str(d / "mcast.p4info.txt"), "-o", str(d), str(SOURCE)],
            capture_output=True, text=True, timeout=900,
        )
        assert r.returncode == 0, f"{target}: bf-p4c failed:\n{r.stdout}\n{r.stderr}"
        out[target] = (d, time.monotonic() - t0)
    return out


@pytest.mark.tofino
@pytest.mark.parametrize("target", sorted(ARCH))
def test_bf_p4c_compiles_the_source_and_writes_the_committed_p4info_and_bfrt_json(compiled, target):
    d, seconds = compiled[target]
    print(f"{target}: compiled in {seconds:.1f} s")
    assert (d / "pipe" / f"{target}.bin").stat().st_size > 0  # the assembler ran: it fits the chip
    committed = REPO / "p4src" / "build" / target
    assert (d / "mcast.p4info.txt").read_bytes() == (committed / "mcast.p4info.txt").read_bytes(), (
        f"p4src/build/{target}/mcast.p4info.txt is not what bf-p4c writes: run `make p4`"
    )
    # bf-p4c varies the Tofino 2 snapshot tables' order and one id from run to run: the
    # same JSON but for that (p4src/tna/bfrt_same.py)
    assert bfrt_same.canonical(json.loads((d / "bfrt.json").read_text())) == bfrt_same.canonical(
        json.loads((committed / "bfrt.json").read_text())
    ), f"p4src/build/{target}/bfrt.json is not what bf-p4c writes: run `make p4`"
    summary = (d / "pipe" / "logs" / "table_summary.log").read_text()
    used = [int(n) for n in re.findall(r"Number of stages for ingress table allocation: (\d+)", summary)]
    assert used and used[-1] <= STAGES[target], used


def test_bfrt_same_ignores_only_the_snapshot_tables_order_and_cfg_id():
    committed = json.loads((REPO / "p4src" / "build" / "tofino2" / "bfrt.json").read_text())
    tables = committed["tables"]
    snaps = [t for t in tables if t["name"].startswith("pipe.snapshot.")]
    assert snaps and any(t["name"] == "pipe.snapshot.cfg" for t in snaps)
    # as bf-p4c writes it some runs: the snapshot tables in another order, the cfg's id another
    varied = {**committed, "tables": [t for t in tables if t not in snaps] + [
        {**t, "id": t["id"] + 1, "depends_on": list(reversed(t.get("depends_on", [])))} if t["name"] == "pipe.snapshot.cfg" else t
        for t in reversed(snaps)
    ]}
    assert bfrt_same.canonical(varied) == bfrt_same.canonical(committed)
    # anything else differing is a difference
    mcast = next(t for t in tables if t["name"] == "pipe.McastIngress.multicast")
    resized = {**committed, "tables": [{**t, "size": 1} if t is mcast else t for t in tables]}
    assert bfrt_same.canonical(resized) != bfrt_same.canonical(committed)
    renumbered = {**committed, "tables": [{**t, "id": t["id"] + 1} if t is mcast else t for t in tables]}
    assert bfrt_same.canonical(renumbered) != bfrt_same.canonical(committed)


def docs_sizes() -> dict[str, int]:
    """program -> the multicast table size docs/p4.md states (its Tofino table)."""
    text = (REPO / "docs" / "p4.md").read_text()
    rows = re.findall(r"^\| `(tofino2?)` \|[^|]*\| ([\d,]+) \|", text, re.MULTILINE)
    return {name: int(n.replace(",", "")) for name, n in rows}


@pytest.mark.parametrize("program", ["tofino", "tofino2"])
def test_the_tofino_p4info_has_the_v1model_names_and_the_size_docs_state(program):
    tofino = P4Info.load(PROGRAMS[program].p4info)
    v1model = P4Info.load(DEFAULT_P4INFO)
    check_names(tofino)  # what the backend writes, with its match kinds and meter units
    m = tofino.message

    def names(msg):
        return {
            "tables": {t.preamble.name: [(f.name, f.bitwidth, f.match_type) for f in t.match_fields] for t in msg.tables},
            "actions": {a.preamble.name: [(p.name, p.bitwidth) for p in a.params] for a in msg.actions},
            "profiles": {p.preamble.name: (p.with_selector, p.max_group_size) for p in msg.action_profiles},
            "meters": {x.preamble.name: x.spec.unit for x in [*msg.meters, *msg.direct_meters]},
            "counters": {x.preamble.name: x.spec.unit for x in [*msg.counters, *msg.direct_counters]},
            "packet": {c.preamble.name: sorted((x.name, x.bitwidth) for x in c.metadata) for c in msg.controller_packet_metadata},
        }

    # but for BMv2's fast failover (docs/p4.md, "Fast failover": Tofino's would be its own mechanism)
    bmv2_only = {*ps.FAILOVER_TABLES, *ps.FAILOVER_ACTIONS, ps.FAILOVER_COUNTER}
    v1 = {kind: {k: v for k, v in items.items() if k not in bmv2_only} for kind, items in names(v1model.message).items()}
    assert names(m) == v1
    assert not bmv2_only & {k for items in names(m).values() for k in items}
    size = tofino.table(ps.MCAST_TABLE).size
    assert docs_sizes().get(program) == size
    assert size >= 65536  # the goal: at least 64K on Tofino 1


def test_the_cpu_ports_of_the_tofino_sizes_header_are_the_backend_s():
    text = (REPO / "p4src" / "tna" / "sizes.p4").read_text()
    m = re.search(r"#if __TARGET_TOFINO__ == 2\s+#define CPU_PORT_NUMBER (\d+)\s+#else\s+#define CPU_PORT_NUMBER (\d+)", text)
    assert m, "CPU_PORT_NUMBER is not defined per chip in p4src/tna/sizes.p4"
    assert (int(m.group(2)), int(m.group(1))) == (PROGRAMS["tofino"].cpu_port, PROGRAMS["tofino2"].cpu_port)
    m = re.search(r"#define CPU_CLONE_SESSION (\d+)", text)
    assert m and int(m.group(1)) == ps.CPU_CLONE_SESSION
