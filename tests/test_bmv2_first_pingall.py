"""End to end on BMv2: a fresh learned leaf-spine passes pingall on its FIRST round.

No topology in the controller's config (it lists the P4Runtime switches only): a
leaf-spine of simple_switch_grpc switches in Mininet, 2 spines, 3 leaves, 2 hosts
per leaf, on ports and addresses of no pattern. Once every switch-to-switch link
is learned and the switches are programmed, and before any host has sent
anything, every host pings every other one once (`ping -c 1 -W 1`, as Mininet's
pingAll): none may fail. An ARP request for a host not seen yet is passed on out
of the edge ports (packet-outs), and its answer is held until the new host's
routes are on the switches. Prints the loss and the p50/p99 of the host joins
(/metrics `mcast_host_join_recent_seconds`).

Runs where simple_switch_grpc and p4c are on PATH, as root with Mininet
(tests/bmv2_fabric.py); marked `bmv2`.
"""

from __future__ import annotations

import re
import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bmv2_fabric import P4C, SKIP_REASON, SWITCH, http, poll  # noqa: E402
from test_bmv2_learned import LearnedBmv2Fabric  # noqa: E402

pytestmark = [
    pytest.mark.bmv2,
    pytest.mark.skipif(not (P4C and SWITCH), reason=SKIP_REASON),
]

# switch -> (device id, {port: peer})
SWITCHES = {
    "leaf-a": (31, {3: "spine-p", 6: "spine-q"}),
    "leaf-b": (32, {1: "spine-p", 4: "spine-q"}),
    "leaf-c": (33, {5: "spine-p", 2: "spine-q"}),
    "spine-p": (41, {2: "leaf-a", 7: "leaf-b", 4: "leaf-c"}),
    "spine-q": (42, {5: "leaf-a", 1: "leaf-b", 3: "leaf-c"}),
}
HOSTS = {
    "h1": ("leaf-a", 1, "192.168.40.11", "0a:31:00:00:40:11"),
    "h2": ("leaf-a", 8, "192.168.40.93", "0a:31:00:00:40:93"),
    "h3": ("leaf-b", 2, "192.168.52.7", "0a:32:00:00:52:07"),
    "h4": ("leaf-b", 6, "192.168.52.140", "0a:32:00:00:52:8c"),
    "h5": ("leaf-c", 4, "192.168.61.3", "0a:33:00:00:61:03"),
    "h6": ("leaf-c", 7, "192.168.61.250", "0a:33:00:00:61:fa"),
}


@pytest.fixture
def fabric(monkeypatch):
    import test_bmv2_learned

    monkeypatch.setattr(test_bmv2_learned, "SWITCHES", SWITCHES)
    monkeypatch.setattr(test_bmv2_learned, "HOSTS", HOSTS)
    monkeypatch.setattr(test_bmv2_learned, "BASE_PORT", 50351)
    return LearnedBmv2Fabric


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=15) as r:
        return r.read().decode()


def test_a_fresh_learned_bmv2_leaf_spine_passes_its_first_pingall(tmp_path, fabric):
    wire = {tuple(sorted(((a, pa), (b, next(p for p, x in SWITCHES[b][1].items() if x == a)))))
            for a, (_, peers) in SWITCHES.items() for pa, b in peers.items()}
    with fabric(tmp_path, 50351) as fab:
        url = fab.url

        def links():
            body = http("GET", f"{url}/links")[1]
            return {tuple(sorted(((ln["a"]["node"], ln["a"]["port"]), (ln["b"]["node"], ln["b"]["port"]))))
                    for ln in body["links"] if ln["a"]["node"] in SWITCHES and ln["b"]["node"] in SWITCHES}

        poll(lambda: links() == wire, 60, "every switch-to-switch link, with both ports")

        def programmed():  # every switch written, and a sync after the last link was learned
            text = fab.log.read_text()
            last = max(m.end() for m in re.finditer(r"link \S+ port \d+ - \S+ port \d+ learned", text))
            updated = r"switch (\S+): \d+ updates"
            return set(re.findall(updated, text)) >= set(SWITCHES) and re.search(updated, text[last:])

        poll(programmed, 30, "every switch to be programmed")
        assert http("GET", f"{url}/hosts")[1]["hosts"] == []  # nobody has spoken yet
        pairs = [(a, b) for a in HOSTS for b in HOSTS if a != b]
        failed = [f"{a}->{b}" for a, b in pairs
                  if " 0% packet loss" not in fab.net.get(a).cmd(f"ping -c 1 -W 1 {HOSTS[b][2]}")]
        text = _metrics(url)
        q = {(m[2], m[1]): float(m[3]) for m in re.finditer(
            r'^mcast_host_join_recent_seconds\{quantile="([0-9.]+)",stage="(\w+)"\} (\S+)$', text, re.M)}
        print(f"\nBMv2 leaf-spine: first pingall lost {len(failed)}/{len(pairs)} "
              f"({100 * len(failed) / len(pairs):.1f} %); host join p50/p99: planned "
              f"{q.get(('planned', '0.5'))}/{q.get(('planned', '0.99'))} s, installed "
              f"{q.get(('installed', '0.5'))}/{q.get(('installed', '0.99'))} s")
        assert not failed, f"first pingall: {len(failed)}/{len(pairs)} failed: {', '.join(failed[:8])}"
