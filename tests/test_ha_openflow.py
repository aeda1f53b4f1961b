"""Several controller instances and Open vSwitch (docs/ha.md): mastership by
OpenFlow role requests, takeover without changing any switch entry, and the
switches refusing a deposed leader.

A 2x2 leaf-spine of private userspace OVS bridges (tests/ovs_helper.py), each
connected to every instance (one OpenFlow port per instance), etcd started here.

- the leader is MASTER of every bridge and the followers SLAVE (OVS's Controller
  table), and only the leader reads the bridges back and writes;
- SIGKILL of the leader: a follower becomes master of every bridge (the time
  from the kill to the last role reply is printed), reads the bridges back and
  sends nothing: flows, groups and meters are the same and no flow was re-added
  (durations go on);
- the generation id is the term: an OpenFlow connection that claims MASTER with
  the old leader's term is refused as stale, and its flow-mod as a SLAVE is
  refused (what a deposed leader's late writes meet);
- the leader frozen past its lease (SIGSTOP), then resumed: the other instance
  took every bridge, the old one steps down, entries unchanged.

Run under `flock /tmp/emu.lock` when other emulations may run on this host.
"""

from __future__ import annotations

import json
import re
import signal
import os
import socket
import struct
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import etcd_helper  # noqa: E402
import ovs_helper  # noqa: E402
from test_ha import TTL, poll, request  # noqa: E402
from test_openflow_ovs import Controller, _durations, _entries  # noqa: E402

reason = ovs_helper.openflow_unavailable() or etcd_helper.unavailable()
if reason:
    pytest.skip(reason, allow_module_level=True)

# planner.incremental on (the default): a new leader restores the structures its predecessor
# served (core.served_store, docs/ha.md), so the takeover changes no entry; no re-optimisation
# during a test (reoptimise_after_s): the takeover is what is compared
CONFIG = """\
api: {{host: 127.0.0.1, port: 0}}
store:
  backend: etcd
  etcd: {{endpoints: ["{etcd}"], prefix: "{prefix}", lease_ttl_s: {ttl}}}
planner: {{debounce_s: 0.05, max_delay_s: 0.2, wait_s: 10, reoptimise_after_s: 3600}}
topology:
  leaf_spine: {{leaves: 2, spines: 2, hosts_per_leaf: 2}}
  group_capacity: 2
"""

def _of_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999), so that an API bound
    to port 0 by another instance cannot take it before the OpenFlow listener does."""
    import random

    while True:
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue


OFPT_ERROR, OFPT_ECHO_REQUEST, OFPT_ECHO_REPLY, OFPT_FLOW_MOD, OFPT_ROLE_REQUEST, OFPT_ROLE_REPLY = 1, 2, 3, 14, 24, 25
OFPCR_ROLE_MASTER, OFPCR_ROLE_SLAVE = 2, 3


class Fabric:
    """OVS bridges of the 2x2 leaf-spine, etcd, and `n` controller instances."""

    def __init__(self, tmp_path: Path, n: int, raw_port: int | None = None) -> None:
        from controller.config import build_topology, load_config, switch_backends
        from controller.addressing.ports import default_port_map

        self.etcd = etcd_helper.EtcdServer(tmp_path).start()
        cfg = tmp_path / "controller.yaml"
        cfg.write_text(CONFIG.format(etcd=self.etcd.url, prefix=f"/ha-{uuid.uuid4().hex[:8]}/", ttl=TTL))
        config = load_config(cfg)
        topo = build_topology(config)
        self.switches = [topo.name(v) for v in topo.switches]
        dpid = {name: b.dpid for name, b in switch_backends(config, topo).items()}
        tag = uuid.uuid4().hex[:5]
        self.bridge = {name: f"mh{tag}s{i}" for i, name in enumerate(self.switches)}
        self.ports = [_of_port() for _ in range(n)]
        self.ovs = ovs_helper.OvsInstance()
        self.ctls = [Controller(cfg, p, tmp_path / f"controller-{i}.log") for i, p in enumerate(self.ports)]
        try:
            self.ovs.start()
            for name in self.switches:
                br = self.bridge[name]
                self.ovs.add_bridge(br, dpid=dpid[name])
                targets = [f"tcp:127.0.0.1:{p}" for p in self.ports]
                if raw_port is not None and name == self.switches[0]:
                    targets.append(f"tcp:127.0.0.1:{raw_port}")  # the test's own OpenFlow connection
                self.ovs.vsctl("set-controller", br, *targets)
                for uid in self.ovs.vsctl("get", "bridge", br, "controller").strip("[]\n ").split(", "):
                    self.ovs.vsctl("set", "controller", uid, "max_backoff=1000", "inactivity_probe=5000")
            pm = default_port_map(topo)
            for link in topo.links:
                a, b = topo.index[link.a], topo.index[link.b]
                if topo.is_switch(a) and topo.is_switch(b):
                    self.ovs.add_patch(self.bridge[link.a], pm[(a, b)], self.bridge[link.b], pm[(b, a)])
            for c in self.ctls:
                c.start()
        except BaseException:
            self.stop()
            raise

    def roles(self) -> dict[str, dict[int, str]]:
        """Per switch: OpenFlow port of each instance -> the role OVS gives it."""
        rows = json.loads(self.ovs.vsctl("--format=json", "--columns=_uuid,target,role", "list", "controller"))
        by_uuid = {r[0][1]: (r[1], r[2] if isinstance(r[2], str) else "") for r in rows["data"]}
        out = {}
        for name in self.switches:
            uids = self.ovs.vsctl("get", "bridge", self.bridge[name], "controller").strip("[]\n ").split(", ")
            out[name] = {int(by_uuid[u][0].rsplit(":", 1)[1]): by_uuid[u][1] for u in uids if u in by_uuid}
        return out

    def status(self, c) -> dict:
        return request(c.url + "/cluster", timeout=2)[1]

    def wait_roles(self, leader, among=None, timeout: float = 15.0) -> None:
        """Until OVS shows `leader` master of every bridge and every other live instance slave."""
        lport = self.ports[self.ctls.index(leader)]
        others = [self.ports[self.ctls.index(c)] for c in (among or self.ctls) if c is not leader]
        poll(lambda: all(r.get(lport) == "master" and all(r.get(p) == "slave" for p in others)
                         for r in self.roles().values()), timeout, f"OVS: {leader.url} master, the others slaves")

    def leader(self, among=None, timeout: float = 15.0):
        def check():
            st = {c: self.status(c) for c in (among or [c for c in self.ctls if c.proc and c.proc.poll() is None])}
            leaders = [c for c, s in st.items() if s["role"] == "leader"]
            if len(leaders) == 1 and all((s["leader"] or {}).get("url") == leaders[0].url for s in st.values()):
                return leaders[0]
            return None
        return poll(check, timeout, "one leader")

    def entries(self) -> dict:
        return {n: _entries(self.ovs, self.bridge[n]) for n in self.switches}

    def durations(self) -> dict:
        return {n: _durations(self.ovs, self.bridge[n]) for n in self.switches}

    def stop(self) -> None:
        for c in self.ctls:
            if c.proc is not None and c.proc.poll() is None:
                try:
                    os.kill(c.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
            c.stop()
        self.ovs.stop()
        self.etcd.stop()


def _log_time(line: str) -> float:
    stamp = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line).group(1)
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _install_jobs(fab: Fabric, leader) -> dict:
    for i, (ps, workers) in enumerate([("host-0", ["host-1", "host-2", "host-3"]), ("host-2", ["host-0", "host-3"])]):
        status, body, _ = request(leader.url + "/jobs", "POST", {"id": f"j{i}", "ps": ps, "workers": workers, "demand": 1e9})
        assert status == 201, body
    _, sw, _ = request(leader.url + "/switches")
    want = {s["id"]: s for s in sw["switches"]}

    def installed():
        e = fab.entries()
        for n in fab.switches:
            assert len(e[n]["flows"]) == want[n]["flows"] and len(e[n]["meters"]) == want[n]["meters"], n
        return e
    return poll(installed, 20, "the jobs' entries on every bridge")


def test_takeover_after_sigkill_changes_no_entry(tmp_path):
    fab = Fabric(tmp_path, 3)
    try:
        leader = fab.leader()
        fab.wait_roles(leader)  # the leader is master of every bridge, the followers slaves
        before = _install_jobs(fab, leader)
        time.sleep(1.0)
        # only the leader reconciled: the followers neither read the bridges back nor wrote
        assert re.search(r"sent \d+ operations", leader.log_text())
        for f in fab.ctls:
            if f is not leader:
                assert not re.search(r"sent \d+ operations|read back", f.log_text()), f.log
        durations = fab.durations()
        term = fab.status(leader)["term"]

        killed_at = time.time()
        leader.kill()
        rest = [c for c in fab.ctls if c is not leader]
        new = fab.leader(rest, timeout=TTL + 8)
        nport = fab.ports[fab.ctls.index(new)]
        st = poll(lambda: fab.status(new)["last_takeover"], 5, "the takeover record")
        assert st["term"] > term and st["switches_mastered"] == len(fab.switches), st
        takeover = st["mastered_at"] - killed_at
        print(f"SIGKILL -> master of all {len(fab.switches)} bridges: {takeover:.2f} s "
              f"(lease TTL {TTL} s; reload {st['reload_s']} s, role requests {st['mastership_s']} s)")
        assert takeover <= 3.0
        poll(lambda: all(r[nport] == "master" for r in fab.roles().values()), 15, "the new leader master in OVS")
        # it read every bridge back and sent nothing
        poll(lambda: new.log_text().count("read back") >= len(fab.switches), 15, "the new leader to read every bridge back")
        time.sleep(1.5)
        log = new.log_text()
        assert not re.search(r"sent \d+ operations", log), [x for x in log.splitlines() if "sent" in x]
        after = fab.entries()
        assert after == before
        later = fab.durations()
        assert set(later) == set(durations)
        for n in fab.switches:
            for flow, d in durations[n].items():
                assert later[n][flow] >= d, f"{n}: {flow} was re-added"
        # the jobs kept their addresses, and the new leader takes writes
        jobs = request(new.url + "/jobs")[1]["jobs"]
        assert [j["id"] for j in jobs] == ["j0", "j1"] and all(j["state"] == "planned" for j in jobs)
        # a job with switch entries (a unicast job has none: deleting it changes no bridge)
        victim = next(j["id"] for j in request(new.url + "/plan")[1]["jobs"] if j["mode"] != "unicast")
        status, _, _ = request(new.url + f"/jobs/{victim}", "DELETE")
        assert status == 204
        poll(lambda: fab.entries() != before, 10, "the deletion on the bridges")
    finally:
        fab.stop()


class RawOpenFlow:
    """The test's own OpenFlow 1.3 connection to a bridge (the bridge connects to it)."""

    def __init__(self, server: socket.socket, timeout: float = 20) -> None:
        server.settimeout(timeout)
        self.sock, _ = server.accept()
        self.sock.settimeout(5)
        self.xid = 100
        self.send(0, b"")  # HELLO

    def send(self, kind: int, body: bytes) -> int:
        self.xid += 1
        self.sock.sendall(struct.pack("!BBHI", 4, kind, 8 + len(body), self.xid) + body)
        return self.xid

    def _recv_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def answer(self, xid: int) -> tuple[int, bytes]:
        """The reply to `xid`: (message type, body); echo requests are answered."""
        while True:
            version, kind, length, rxid = struct.unpack("!BBHI", self._recv_exact(8))
            body = self._recv_exact(length - 8)
            if kind == OFPT_ECHO_REQUEST:
                self.sock.sendall(struct.pack("!BBHI", 4, OFPT_ECHO_REPLY, length, rxid) + body)
            elif rxid == xid:
                return kind, body

    def role(self, role: int, generation: int) -> tuple[int, bytes]:
        return self.answer(self.send(OFPT_ROLE_REQUEST, struct.pack("!I4xQ", role, generation)))

    def add_flow(self) -> int:
        body = struct.pack("!QQBBHHHIIIH2x", 0x4D43000000000000, 0, 0, 0, 0, 0, 7, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
        body += struct.pack("!HH4x", 1, 4)  # an empty OXM match
        return self.send(OFPT_FLOW_MOD, body)

    def barrier(self) -> tuple[int, bytes]:
        return self.answer(self.send(20, b""))

    def close(self) -> None:
        self.sock.close()


def test_switch_refuses_a_deposed_leaders_term_and_writes(tmp_path):
    raw_port = _of_port()
    fab = Fabric(tmp_path, 2, raw_port=raw_port)
    raw = server = None
    try:
        leader = fab.leader()
        old_term = fab.status(leader)["term"]
        fab.wait_roles(leader, [c for c in fab.ctls])
        leader.kill()
        new = fab.leader([c for c in fab.ctls if c is not leader], timeout=TTL + 8)
        new_term = fab.status(new)["term"]
        assert new_term > old_term
        fab.wait_roles(new, [new])
        br = fab.bridge[fab.switches[0]]
        # listen only now: the bridge retries its connection every second
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", raw_port))
        server.listen(1)
        raw = RawOpenFlow(server)
        # claiming MASTER with the old term: refused as stale (OFPET_ROLE_REQUEST_FAILED, OFPRRFC_STALE)
        kind, body = raw.role(OFPCR_ROLE_MASTER, old_term)
        assert kind == OFPT_ERROR and struct.unpack("!HH", body[:4]) == (11, 0), (kind, body[:4])
        # as a SLAVE (what the old master became when the new one claimed the bridge) a flow-mod is refused
        kind, _ = raw.role(OFPCR_ROLE_SLAVE, new_term)
        assert kind == OFPT_ROLE_REPLY
        flows_before = fab.ovs.ofctl("dump-flows", br).count("priority=7")
        xid = raw.add_flow()
        kind, body = raw.answer(xid)
        assert kind == OFPT_ERROR and struct.unpack("!HH", body[:4]) == (1, 10), (kind, body[:4])  # OFPBRC_IS_SLAVE
        assert fab.ovs.ofctl("dump-flows", br).count("priority=7") == flows_before == 0
        # the new leader is still master of that bridge
        nport = fab.ports[fab.ctls.index(new)]
        poll(lambda: fab.roles()[fab.switches[0]][nport] == "master", 10, "the new leader still master")
    finally:
        if raw is not None:
            raw.close()
        if server is not None:
            server.close()
        fab.stop()


def test_frozen_leader_resumed_steps_down_and_changes_nothing(tmp_path):
    fab = Fabric(tmp_path, 2)
    try:
        leader = fab.leader()
        fab.wait_roles(leader)
        before = _install_jobs(fab, leader)
        term = fab.status(leader)["term"]
        os.kill(leader.proc.pid, signal.SIGSTOP)
        try:
            other = next(c for c in fab.ctls if c is not leader)
            new = fab.leader([other], timeout=TTL + 8)
            assert fab.status(new)["term"] > term
            nport = fab.ports[fab.ctls.index(new)]
            poll(lambda: fab.status(new)["last_takeover"], 5, "the takeover")
        finally:
            os.kill(leader.proc.pid, signal.SIGCONT)
        poll(lambda: fab.status(leader)["role"] == "follower", 5, "the old leader to step down")
        assert "stepping down" in leader.log_text()
        poll(lambda: all(r[nport] == "master" for r in fab.roles().values()), 15, "the new leader master of every bridge")
        time.sleep(1.5)
        assert fab.entries() == before
        assert not re.search(r"sent \d+ operations", new.log_text())
        status, _, headers = request(leader.url + "/jobs", "POST", {"id": "x", "ps": "host-0", "workers": ["host-1"], "demand": 1e9})
        assert status == 307 and headers["location"] == new.url + "/jobs"
    finally:
        fab.stop()
