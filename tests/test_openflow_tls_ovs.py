"""End to end: OpenFlow over TLS (`southbound.openflow.tls`, docs/security.md) with Open vSwitch.

The controller process listens with TLS only and requires a client certificate
its CA signs. A private OVS instance (tests/ovs_helper.py) holds the bridges of
the declared switches, connecting through `ssl:127.0.0.1:PORT`. `ovs-vsctl
set-ssl` is one setting per ovs-vswitchd (and two userspace vswitchds cannot share
a network namespace), so the test runs in two phases: first the switches present
a certificate another CA signs (they trust the controller's CA, so the refusal is
the controller's): no flow is installed, no switch is connected, and the
controller counts and logs the refused handshakes; then `set-ssl` gives them a
certificate the controller's CA signs, and every switch gets its flows.

Skipped, with the reason, when not root, when Open vSwitch, os-ken or trustme is missing.
Run it under `flock /tmp/emu.lock` on a shared machine.
"""

from __future__ import annotations

import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ovs_helper  # noqa: E402
import tls_helper  # noqa: E402
from test_openflow_ovs import OUR_COOKIE, WAIT_S, Controller, _free_port, _poll  # noqa: E402

_reason = ovs_helper.openflow_unavailable()
pytestmark = pytest.mark.skipif(_reason is not None, reason=_reason or "")

CONFIG = """\
api: {{host: 127.0.0.1, port: 0}}
store: {{path: {store}}}
planner: {{debounce_s: 0.05, max_delay_s: 0.2, wait_s: 10}}
topology:
  leaf_spine: {{leaves: 2, spines: 1, hosts_per_leaf: 1}}
southbound:
  openflow:
    tls: {{cert: certs/controller.crt, key: certs/controller.key, ca: certs/controller-ca.crt}}
"""


def _our_flows(ovs, bridge: str) -> list[str]:
    return [x for x in ovs.ofctl("dump-flows", bridge).splitlines()[1:] if OUR_COOKIE in x]


def _metric(url: str, line_start: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=15) as r:
        text = r.read().decode()
    values = [float(x.split()[-1]) for x in text.splitlines() if x.startswith(line_start)]
    return values[0] if values else 0.0


def test_only_switches_with_a_certificate_of_the_controllers_ca_are_programmed(tmp_path):
    from controller.config import build_topology, load_config, switch_backends

    ca, rogue_ca = tls_helper.new_ca(), tls_helper.new_ca()
    tls_helper.pem_files(ca, tmp_path / "certs", "controller")
    good = tls_helper.pem_files(ca, tmp_path / "certs", "switch")
    rogue = tls_helper.pem_files(rogue_ca, tmp_path / "certs", "rogue")
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(CONFIG.format(store=tmp_path / "jobs.sqlite"))
    config = load_config(cfg)
    assert config.southbound.openflow.tls.cert == tmp_path / "certs" / "controller.crt"
    topo = build_topology(config)
    dpid = {name: b.dpid for name, b in switch_backends(config, topo).items()}
    names = [topo.name(v) for v in topo.switches]
    tag = uuid.uuid4().hex[:5]
    bridge = {name: f"tl{tag}s{i}" for i, name in enumerate(names)}
    of_port = _free_port()
    target = f"ssl:127.0.0.1:{of_port}"

    ovs = ovs_helper.OvsInstance()
    ctl = Controller(cfg, of_port, tmp_path / "controller.log")
    try:
        ctl.start()
        ovs.start()
        # -- a certificate from another CA: refused -------------------------------------------
        ovs.vsctl("set-ssl", str(rogue["key"]), str(rogue["cert"]), str(good["ca"]))
        for name in names:
            ovs.add_bridge(bridge[name], dpid=dpid[name], controller=target)
        _poll(lambda: "refused (switch_tls) at OpenFlow peer 127.0.0.1" in ctl.log_text(), WAIT_S,
              "the controller's log of the refused handshake")
        _poll(lambda: _metric(ctl.url, 'mcast_refused_total{kind="switch_tls"}') >= 3, WAIT_S,
              "a refusal counted for every switch")  # each bridge retries about every second
        assert all(_our_flows(ovs, bridge[n]) == [] for n in names)
        _, body = ctl.request("GET", "/switches")
        assert not any(s["connected"] for s in body["switches"]), body
        # -- a certificate the controller's CA signs: every switch is programmed ----------------
        ovs.vsctl("set-ssl", str(good["key"]), str(good["cert"]), str(good["ca"]))

        def programmed():
            for name in names:
                assert _our_flows(ovs, bridge[name]), f"{name}: no flows yet"
            _, body = ctl.request("GET", "/switches")
            connected = {s["id"] for s in body["switches"] if s["connected"]}
            assert connected == set(names), connected
            return True

        _poll(programmed, WAIT_S, "the flows of the switches with good certificates")
        log = ctl.log_text()
        assert "OpenFlow southbound is plain TCP" not in log and "(TLS)" in log
        assert "Traceback" not in log  # a refusal is one WARNING, not a traceback
    finally:
        ctl.stop()
        ovs.stop()


def test_without_tls_the_controller_warns_once_at_start(tmp_path):
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(CONFIG.format(store=tmp_path / "jobs.sqlite").split("southbound:")[0])
    ctl = Controller(cfg, _free_port(), tmp_path / "controller.log")
    try:
        ctl.start()
        log = ctl.log_text()
        assert log.count("OpenFlow southbound is plain TCP") == 1 and "P4Runtime southbound" not in log
        assert "(TLS)" not in log
    finally:
        ctl.stop()
