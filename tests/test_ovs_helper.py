"""tests/ovs_helper.py: an instance whose test run was killed is ended by the next one.

The daemons run in sessions of their own and outlive a killed pytest, with the
bridges' tap devices and the hosts' namespaces; the next instance in the
machine's namespace then failed (seen: a killed run left every later
root-namespace Open vSwitch test failing until cleaned by hand).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import ovs_helper  # noqa: E402

pytestmark = pytest.mark.skipif(ovs_helper.unavailable() is not None, reason=ovs_helper.unavailable() or "")

BRIDGE, NS = "mcorph0", "mcorphns"


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def _netns() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_an_instance_whose_run_died_is_ended_when_the_next_starts():
    orphan = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(TESTS)!r})
        import ovs_helper
        ovs = ovs_helper.OvsInstance().start()
        ovs.add_bridge({BRIDGE!r}, dpid=1)
        ovs.add_host({BRIDGE!r}, 1, {NS!r}, "10.9.0.1", "02:00:00:00:09:01")
        print(json.dumps({{"dir": ovs.dir, "pids": [p.pid for p in ovs.procs]}}), flush=True)
        os._exit(0)  # killed: no stop
    """)
    out = subprocess.run([sys.executable, "-c", orphan], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    left = json.loads(out.stdout.strip().splitlines()[-1])
    try:
        # the orphan is really there
        assert all(ovs_helper._alive(pid) for pid in left["pids"]), left
        assert _link_exists(BRIDGE) and NS in _netns()
        with ovs_helper.OvsInstance() as ovs:
            assert not any(ovs_helper._alive(pid) and left["dir"] in ovs_helper._cmdline(pid) for pid in left["pids"])
            assert NS not in _netns()
            assert not os.path.exists(left["dir"])
            ovs.add_bridge(BRIDGE, dpid=1)  # its name is free again, and the new instance works
            assert "OFPST_FLOW reply" in ovs.ofctl("dump-flows", BRIDGE)
        assert not _link_exists(BRIDGE)
        assert not list(ovs_helper.REGISTRY.glob("*.json"))
    finally:  # whatever failed above: leave no orphan behind for later tests
        ovs_helper.end_orphans()
