"""One emulation run: namespace, switches (Open vSwitch or BMv2), controller, Mininet fabric, traffic.

Owns the order of starting and stopping, the crash clean-up, the traffic
processes of `emu_traffic.py` in the Mininet hosts, and the measurements made
from their reports. The demo (demo.py), the calibration (calibrate.py) and
the tests (tests/test_emulation.py) all drive the emulation through `Emulation`:

    with Emulation("demo", Path("build/emu-demo"), bw_mbit=20, group_capacity=1) as emu:
        job = emu.add_job("j1", "host-0", ["host-5", "host-9"], 4e6)
        emu.converge([job["id"]])
        result = emu.run_traffic(duration=8)

Start: a crashed previous run of the same name cleaned up (its processes ended
by pid file, see ovs_daemon; and its BMv2 switches by their pid files, see
bmv2.end_stale), a private network namespace (emu_netns), Open vSwitch started
(backend "ovs" only: the "p4" fabric is BMv2 simple_switch_grpc switches the
controller programs over P4Runtime, no Open vSwitch), the controller config
written (emu_fabric.write_config), the controller process started, the Mininet
fabric built from the same config (while the switches open their ports'
sockets, Linux's default socket send buffer raised: emu_sockbuf; without it a
port refuses frames beyond ~90 queued, unseen by any counter), every switch connected and every unicast
route installed (read from the switches: ovs-ofctl, or P4Runtime Read), one
receiver per host started. Stop (also on an exception or Ctrl-C): traffic
processes, Mininet (with the BMv2 processes), controller, Open vSwitch, in
that order.

Options: `learned=True` runs the controller on a config that declares no
topology (emu_fabric.learned_config; every host announces itself after the
switches connect, and again every REANNOUNCE_S until the controller has located it); `tls=True` puts the southbound on TLS with a CA of the run's
own (emu_tls); `links` gives single links their own capacity, `openflow` adds keys to
`southbound.openflow` (fast failover: {"fast_failover": True}), `p4runtime` to
`southbound.p4runtime` (emu_fabric.write_config).

Delivery: where the PS sends comes from the controller's REST answer: the
group address if the structure has entries, plus the workers in
`structure.ps_unicast` (the unicast copies the PS emits itself). It is checked
against the switches' actual tables: `Fabric.trace` follows the group address
from the PS through them, and every worker must be reached exactly once, by
the switches or by the PS, no other host at all; the PS's link must carry one
copy per PS-addressed worker plus one for the tree if there is one. Until that
holds the switches are not yet programmed (or wrong).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from emu_controller import ControllerError, ControllerProcess
from emu_fabric import BACKENDS, Fabric, learned_config, write_config
import emu_sockbuf
from emu_netns import private_netns
from ovs_daemon import OvsDaemon

TRAFFIC = HERE / "emu_traffic.py"
PAYLOAD = 1400  # UDP payload bytes per datagram
BASE_PORT = 20000  # job i (registration order) uses UDP port BASE_PORT + i
RUN_ROOT = Path("/run/mcast-emu")
REANNOUNCE_S = 5.0  # learned network: a host not located after this long announces itself again


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_low_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999): a REST API bound to
    port 0 by another controller instance cannot take it before its listener does."""
    import random

    while True:
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue


class _QuietHtb(logging.Filter):
    """Mininet logs tc's harmless 'quantum of class ... is big' warning as an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "quantum of class" not in record.getMessage()


def poll(check, timeout: float, what: str, interval: float = 0.2):
    """Call `check` until it returns a true value; TimeoutError naming `what` and
    the last AssertionError / RuntimeError it raised otherwise."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except (AssertionError, RuntimeError, OSError) as e:
            last = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}: {last}")
        time.sleep(interval)


def _end_stale_bmv2(log_dir: Path) -> list[str]:
    """BMv2 switches a crashed run left (bmv2.end_stale: by pid file, checked by command line)."""
    if not log_dir.is_dir():
        return []
    from bmv2 import end_stale  # imports Mininet: only where there is a BMv2 run directory

    return end_stale(log_dir)


@dataclass
class JobState:
    """A registered job as the emulation tracks it."""

    id: str
    ps: str
    workers: list[str]
    demand: float
    port: int
    answer: dict = field(default_factory=dict)  # the last REST answer
    auth_key: str | None = field(default=None, repr=False)  # the job's broadcast key, from the POST's answer only
    dsts: list[str] = field(default_factory=list)  # where the PS sends
    ps_copies: list[str] = field(default_factory=list)  # workers the PS addresses itself
    sender: Any = None
    post_started: float = 0.0  # time.monotonic() when POST /jobs was sent
    post_s: float = 0.0  # how long POST /jobs took


class Emulation:
    """See the module docstring. `name` keys the run directory and the crash
    clean-up (/run/mcast-emu/NAME); `workdir` gets the config, logs and reports."""

    def __init__(
        self,
        name: str,
        workdir: str | Path,
        *,
        fattree_k: int | None = 4,
        leaf_spine: tuple[int, int, int] | None = None,
        bw_mbit: float = 20.0,
        group_capacity: int | str = "unlimited",
        switch_group_capacity: dict[str, int] | None = None,
        static_arp: bool = False,
        python: str = sys.executable,
        backend: str = "ovs",
        lldp_interval_s: float = 1.0,
        lldp_timeout_s: float = 3.0,
        planner: dict[str, Any] | None = None,
        lossy: dict[tuple[str, str], float] | None = None,
        ha_instances: int = 0,
        lease_ttl_s: int = 2,
        learned: bool = False,
        tls: bool = False,
        links: list[dict[str, Any]] | None = None,
        openflow: dict[str, Any] | None = None,
        p4runtime: dict[str, Any] | None = None,
        southbound: dict[str, Any] | None = None,  # more keys of the config's southbound (emu_fabric.write_config)
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.name = name
        self.backend = backend
        self.workdir = Path(workdir).resolve()
        self.opts = {"fattree_k": fattree_k, "leaf_spine": leaf_spine, "bw_mbit": bw_mbit,
                     "group_capacity": group_capacity, "switch_group_capacity": switch_group_capacity,
                     "backend": backend, "lldp_interval_s": lldp_interval_s, "lldp_timeout_s": lldp_timeout_s,
                     "planner": planner, "links": links, "openflow": openflow,
                     "p4runtime": p4runtime, "southbound": southbound}
        self.static_arp = static_arp
        # the controller learns the network (its config declares no topology: emu_fabric.learned_config)
        self.learned = learned
        self.tls = tls  # the southbound over TLS, with a CA of the run's own (emu_tls)
        if learned and (ha_instances or static_arp):
            raise ValueError("a learned emulation runs one controller, with ARP through the controller")
        self.lossy = lossy  # links with random loss, percent (emu_fabric: a user-space relay each)
        self.python = python
        self.rundir = RUN_ROOT / name
        # Open vSwitch's daemons (backend "ovs"), and with either backend the pid files of
        # the run's other processes (controller, Mininet shells, traffic) for a crash clean-up
        self.ovs = OvsDaemon(self.rundir)
        self.bmv2_dir = self.rundir / "bmv2"  # BMv2's pid files (the logs are copied to workdir/bmv2)
        self.ctl: ControllerProcess | None = None  # HA: the leader (`find_leader`)
        # HA (docs/ha.md): `ha_instances` controller processes on one etcd store, started here
        if ha_instances and backend != "ovs":
            raise ValueError("the HA emulation runs on Open vSwitch only")
        self.ha_instances = ha_instances
        self.lease_ttl_s = lease_ttl_s
        self.ctls: list[ControllerProcess] = []
        self.etcd = None
        self.fabric: Fabric | None = None
        self.jobs: dict[str, JobState] = {}
        self.receivers: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self._ns = None
        self._sockbuf: emu_sockbuf.SendBuffer | None = None  # the default send buffer, opened at start
        self._run = 0
        self._token = 0
        self._announced = 0.0  # when the hosts last announced themselves (learned network)
        self.reannounced = 0  # announcements repeated for hosts the controller had not located

    # -- life cycle ------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from mininet.log import lg, setLogLevel

        setLogLevel("warning")
        if not any(isinstance(f, _QuietHtb) for f in lg.filters):
            lg.addFilter(_QuietHtb())
        t0 = time.monotonic()
        # a crashed previous run of this name (in its own namespace): its BMv2 switches, then the rest
        ended: list = [f"bmv2 {n}" for n in _end_stale_bmv2(self.bmv2_dir)]
        ended += self.ovs.clean_stale()
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        (self.workdir / "traffic").mkdir(parents=True)
        self.log(f"start; processes of a previous run ended: {ended or 'none'}")
        # opened in the machine's namespace (a private one may not write it); raised while the
        # switches open their ports' sockets (Fabric.switch_sockets): emu_sockbuf says why
        self._sockbuf = emu_sockbuf.SendBuffer()
        self._ns = private_netns()
        self._ns.__enter__()
        if self.backend == "ovs":
            self.ovs.start()
            self.ovs.activate()
            self.log(f"Open vSwitch running in {self.rundir}")
        else:
            self.bmv2_dir.mkdir(parents=True, exist_ok=True)
        of_port = free_port()
        store_section = None
        extra_ports: list[int] = []
        if self.ha_instances:
            from emu_etcd import EtcdServer

            self.etcd = EtcdServer(self.workdir).start()
            self.ovs.record_pid("etcd", self.etcd.proc.pid, "etcd")
            store_section = {"backend": "etcd", "etcd": {"endpoints": [self.etcd.url], "prefix": f"/emu-{self.name}/",
                                                          "lease_ttl_s": self.lease_ttl_s}}
            extra_ports = [free_low_port() for _ in range(self.ha_instances - 1)]
            self.log(f"etcd at {self.etcd.url}")
        pki = None
        if self.tls:
            from emu_tls import make_pki

            pki = make_pki(self.workdir / "tls")
            if self.backend == "ovs":  # what every bridge presents, and the CA it accepts the controller by
                self.ovs.vsctl("set-ssl", str(pki.switch_key), str(pki.switch_cert), str(pki.ca))
        config = write_config(self.workdir / ("fabric.json" if self.learned else "controller.json"),
                              store=self.workdir / "jobs.sqlite", store_section=store_section, tls=pki, **self.opts)
        fabric_config = config
        if self.learned:
            config = learned_config(fabric_config, self.workdir / "controller.json")
        self.fabric = Fabric(fabric_config, of_port, static_arp=self.static_arp, backend=self.backend, log_dir=self.bmv2_dir,
                             lossy=self.lossy, extra_of_ports=tuple(extra_ports),
                             switch_tls=(pki.switch_cert, pki.switch_key, pki.ca) if pki is not None else None,
                             switch_sockets=self._sockbuf.raised)
        if self.backend == "p4":
            # the switches' gRPC ports are in Linux's ephemeral range: reserve them in this namespace,
            # or a port the kernel picks for another socket of the run (the controller's REST API
            # listens on port 0) can be one of them (seen: "gRPC port 50062 is already in use")
            grpc_ports = sorted(int(a.rsplit(":", 1)[1]) for a, _ in self.fabric.p4_address.values())
            subprocess.run(["sysctl", "-qw", "net.ipv4.ip_local_reserved_ports="
                            + ",".join(str(p) for p in grpc_ports)], check=True, capture_output=True)
        self.ctl = ControllerProcess(config, of_port, self.workdir / "controller.log", python=self.python,
                                     ready="openflow listening on" if self.backend == "ovs" else "p4runtime:")
        self.ctl.start()
        self.ovs.record_pid("controller", self.ctl.pid, str(config))
        self.ctls = [self.ctl]
        for n, port in enumerate(extra_ports, 1):
            c = ControllerProcess(config, port, self.workdir / f"controller-{n}.log", python=self.python)
            c.start()
            self.ovs.record_pid(f"controller-{n}", c.pid, str(config))
            self.ctls.append(c)
        if self.ha_instances:
            self.find_leader()
        self.log(f"controller pid {self.ctl.pid} (cwd {REPO}) at {self.ctl.url}, "
                 + (f"OpenFlow port {of_port}" if self.backend == "ovs" else "P4Runtime"))
        self.timings["controller_start_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        self.fabric.start()
        for mn, pid in self.fabric.switch_pids().items():
            self.ovs.record_pid(f"mn-{mn}", pid, f"mininet:{mn}")
        for mn, proc in self.fabric.relays.values():
            self.ovs.record_pid(f"lossy-{mn}", proc.pid, "lossy_link.py")
        self.timings["mininet_start_s"] = time.monotonic() - t1
        self.log("Mininet started")
        n_switches = len(self.fabric.topology.switches)
        self.ctl.wait_connected(n_switches, timeout=60)
        if self.learned:  # every host says where it is, as a host that comes up does
            for h in self.fabric.hosts.values():
                self.announce(h.name)
            self._announced = time.monotonic()
        poll(self._unicast_installed, 60, "the unicast routes on every switch", 0.5)
        self.log("every switch connected, unicast routes installed")
        for h in self.fabric.hosts.values():
            out = self.workdir / "traffic" / f"recv-{h.mn}.json"
            with open(self.workdir / "traffic" / f"recv-{h.mn}.err", "wb") as err:
                proc = self.fabric.host(h.name).popen(
                    [self.python, str(TRAFFIC), "recv", "--ip", h.ip, "--out", str(out), "--deadline", "3600"],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                )
            self.receivers[h.name] = (proc, out)
            self.ovs.record_pid(f"recv-{h.mn}", proc.pid, str(TRAFFIC))
        poll(lambda: all(out.exists() for _, out in self.receivers.values()), 30, "every receiver to start")
        self.timings["ready_s"] = time.monotonic() - t0
        self.log(f"receivers started; ready: {self.timings}")

    def wire(self, host: str, *args: str, timeout: float = 60.0) -> dict:
        """Run mininet/wire.py in `host` (a topology name) on its interface; its JSON answer."""
        node = self.fabric.host(host)
        iface = node.defaultIntf().name
        proc = node.popen([self.python, str(HERE / "wire.py"), args[0], "--iface", iface, *args[1:]],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"wire.py {' '.join(args)} in {host}: {err.decode(errors='replace')}")
        return json.loads(out.decode().strip().splitlines()[-1])

    def announce(self, host: str) -> None:
        """`host` sends one gratuitous ARP request for its own address."""
        h = self.fabric.hosts[host]
        self.wire(host, "announce", "--ip", h.ip, "--mac", h.mac)

    def cluster_status(self, ctl: ControllerProcess) -> dict:
        return ctl.get("/cluster")

    def find_leader(self, among: list[ControllerProcess] | None = None, timeout: float = 20.0) -> ControllerProcess:
        """HA: wait for one instance that leads and that every other live one follows;
        it becomes `self.ctl` (what the rest of the emulation talks to)."""
        def check():
            live = [c for c in (among or self.ctls) if c.proc is not None and c.proc.poll() is None]
            st = {c: self.cluster_status(c) for c in live}
            leaders = [c for c, s in st.items() if s["role"] == "leader"]
            if len(leaders) == 1 and all((s["leader"] or {}).get("url") == leaders[0].url for s in st.values()):
                return leaders[0]
            return None
        self.ctl = poll(check, timeout, "one leader every instance follows", 0.05)
        return self.ctl

    def log(self, message: str) -> None:
        """A timestamped line in WORKDIR/emulation.log."""
        with open(self.workdir / "emulation.log", "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {time.monotonic():.3f} {message}\n")

    def _unicast_installed(self) -> bool:
        n_hosts = len(self.fabric.hosts)
        for v in self.fabric.topology.switches:
            name = self.fabric.topology.name(v)
            n = self.fabric.unicast_routes(name)
            if n != n_hosts:
                raise AssertionError(f"{name}: {n} of {n_hosts} unicast routes; {self._routes_diagnosis()}")
        return True

    def _routes_diagnosis(self) -> str:
        """What the controller knows while routes are missing (the wait's error names
        it): the hosts it has located, the links it has, its last warning. In a
        learned network a host it has not located announces itself again every
        REANNOUNCE_S, as a host whose ARP went unanswered asks again: a switch drops
        what arrives before the controller has programmed its first entries."""
        try:
            located = {h["id"] for h in self.ctl.get("/hosts")["hosts"]}
            n_links = len(self.ctl.get("/links")["links"])
            last_error = self.ctl.get("/healthz")["last_error"]
        except (OSError, ControllerError) as e:
            return f"the controller did not answer: {e}"
        missing = sorted(h for h in self.fabric.hosts if h not in located)
        if self.learned and missing and time.monotonic() - self._announced >= REANNOUNCE_S:
            for h in missing:
                self.announce(h)
            self._announced = time.monotonic()
            self.reannounced += len(missing)
            self.log(f"announced again (not located yet): {', '.join(missing)}")
        warnings = [line for line in self.ctl.log.read_text(errors="replace").splitlines()
                    if " WARNING " in line or " ERROR " in line] if self.ctl.log.exists() else []
        return (f"the controller located {len(located)} of {len(self.fabric.hosts)} hosts "
                f"(missing: {', '.join(missing) or 'none'}; announced again: {self.reannounced}), "
                f"has {n_links} links, last plan error {last_error!r}, "
                f"last warning: {warnings[-1][:300] if warnings else 'none'}")

    def stop(self) -> None:
        """Tear everything down; safe to call twice and after a failed start."""
        if self.workdir.exists():
            self.log("stopping")
        for job in self.jobs.values():
            self._end(job.sender)
            job.sender = None
        for proc, _ in self.receivers.values():
            self._end(proc)
        self.receivers.clear()
        if self.fabric is not None:
            try:
                self.fabric.stop()
            except Exception as e:  # noqa: BLE001 - keep tearing down
                print(f"warning: stopping Mininet: {e!r}", file=sys.stderr)
            self.fabric.net = None
        for c in self.ctls:
            if c is not self.ctl:
                c.stop()
        if self.ctl is not None:
            self.ctl.stop()
        if self.etcd is not None:
            self.etcd.stop()
        if self.backend == "p4":
            _end_stale_bmv2(self.bmv2_dir)  # switches Mininet did not stop (a failed start)
            self._keep_bmv2_logs()
        self.ovs.stop()  # also ends anything recorded in the run directory
        if self._ns is not None:
            ns, self._ns = self._ns, None
            ns.__exit__(None, None, None)
        if self._sockbuf is not None:
            self._sockbuf.close()
            self._sockbuf = None
        if self.workdir.exists():
            self.log("stopped")

    def _keep_bmv2_logs(self) -> None:
        """The switches' logs, from the run directory (removed on stop) to workdir/bmv2."""
        if self.bmv2_dir.is_dir() and self.workdir.exists():
            (self.workdir / "bmv2").mkdir(exist_ok=True)
            for f in self.bmv2_dir.glob("bmv2-*.log"):
                shutil.copy(f, self.workdir / "bmv2" / f.name)

    @staticmethod
    def _end(proc) -> None:
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.stdin.write(b'{"cmd": "exit"}\n')
            proc.stdin.flush()
            proc.wait(3)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(5)

    # -- jobs -----------------------------------------------------------------------------------
    def add_job(self, job_id: str, ps: str, workers: list[str], demand: float, *, start_probe: bool = False) -> dict:
        """POST /jobs; starts the job's sender (idle) and makes every host's receiver
        join the job's group (members and non-members alike: non-members must get
        nothing). With `start_probe` the sender starts sending to the group at the
        answered rate at once (to time POST -> first packet)."""
        port = BASE_PORT + len(self.jobs)
        job = JobState(job_id, ps, list(workers), demand, port)
        h = self.fabric.hosts[ps]
        out = self.workdir / "traffic" / f"send-{job_id}.json"
        with open(self.workdir / "traffic" / f"send-{job_id}.err", "wb") as err:
            job.sender = self.fabric.host(ps).popen(
                [self.python, str(TRAFFIC), "send", "--job", job_id, "--ip", h.ip, "--port", str(port),
                 "--size", str(PAYLOAD), "--out", str(out), "--deadline", "3600"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
            )
        job.sender.out = out
        self.ovs.record_pid(f"send-{job_id}", job.sender.pid, str(TRAFFIC))
        poll(lambda: out.exists(), 30, f"the sender of {job_id} to start", 0.05)
        job.post_started = time.monotonic()
        status, body = self.ctl.request("POST", "/jobs", {"id": job_id, "ps": ps, "workers": workers, "demand": demand})
        job.post_s = time.monotonic() - job.post_started
        if status != 201:
            self._end(job.sender)
            raise RuntimeError(f"POST /jobs {job_id}: {status} {body}")
        job.answer = body
        job.auth_key = body.get("auth_key")  # given once, to the registrant: kept for the job's broadcasts
        self.jobs[job_id] = job
        for proc, _ in self.receivers.values():
            self._command(proc, {"cmd": "join", "job": job_id, "group": body["group_address"], "port": port})
        if start_probe:
            self._command(job.sender, {"cmd": "start", "run": 0, "dsts": [body["group_address"]], "rate": body["rate"],
                                       "duration": 30})
        return body

    def delete_job(self, job_id: str) -> None:
        job = self.jobs.pop(job_id)
        self._end(job.sender)
        status, body = self.ctl.request("DELETE", f"/jobs/{job_id}")
        if status != 204:
            raise RuntimeError(f"DELETE /jobs/{job_id}: {status} {body}")

    def refresh(self) -> None:
        """Read every job's current plan (later jobs and failures re-plan earlier ones)."""
        for job in self.jobs.values():
            job.answer = self.ctl.get(f"/jobs/{job.id}")

    @staticmethod
    def _command(proc, cmd: dict) -> None:
        proc.stdin.write((json.dumps(cmd) + "\n").encode())
        proc.stdin.flush()

    def tree_link(self, upper_from: str = "agg", upper_to: str = "core") -> tuple[str, str, list[str]]:
        """A switch-to-switch link (from a `upper_from*` to a `upper_to*` switch) of
        some job's current structure, and every job whose structure crosses it:
        (a, b, jobs). AssertionError if no job crosses such a link."""
        switches = {self.fabric.topology.name(v) for v in self.fabric.topology.switches}

        def links(job: JobState) -> set[frozenset[str]]:
            return {frozenset((e["from"], e["to"])) for e in job.answer["structure"]["edges"]}

        for job in self.jobs.values():
            for e in job.answer["structure"]["edges"]:
                a, b = e["from"], e["to"]
                if a in switches and b in switches and a.startswith(upper_from) and b.startswith(upper_to):
                    return a, b, [j for j, other in self.jobs.items() if frozenset((a, b)) in links(other)]
        raise AssertionError(f"no job crosses a {upper_from}-{upper_to} link")

    # -- where the PS sends --------------------------------------------------------------------
    def delivery(self, job: JobState, tables: dict | None = None) -> tuple[list[str], Counter]:
        """The workers the PS must address itself, and the trace of the group
        address through the installed tables (`tables`: what was read so far, shared
        between calls); AssertionError while the switches do not (yet) deliver the
        job's structure exactly."""
        a = job.answer
        assert a.get("state") == "planned" and a["rate"] and a["rate"] > 0, f"{job.id}: not planned: {a}"
        structure = a["structure"]
        trace = self.fabric.trace(job.ps, a["group_address"], tables)
        bad = {k: n for k, n in trace.items() if k[0] not in job.workers or n != 1 or k[1] == "stray"}
        assert not bad, f"{job.id}: the group reaches {bad} (only the workers, once each, should get it)"
        reached = {h for h, _ in trace}
        ps_copies = sorted(structure["ps_unicast"])  # the REST answer says whom the PS addresses itself
        missed = sorted(set(job.workers) - reached - set(ps_copies))
        assert not missed, f"{job.id}: neither the switches nor the PS reach {missed}"
        assert not reached & set(ps_copies), f"{job.id}: the switches also deliver {sorted(reached & set(ps_copies))}"
        first = next(e for e in structure["edges"] if e["from"] == job.ps)
        tree = 1 if structure["entries"] else 0
        assert first["copies"] == tree + len(ps_copies), (
            f"{job.id}: the PS link carries {first['copies']} copies in the plan, but the switches reach "
            f"{sorted(reached)} of {job.workers} ({len(ps_copies)} left to the PS, tree={tree})"
        )
        return ps_copies, trace

    def owned_entries(self, switch: str) -> dict[str, list[str]]:
        """The controller's flows (without their counters), groups and meters on an
        Open vSwitch switch, as sorted text: equal before and after means unchanged."""
        t = self.fabric.tables(switch)
        strip = re.compile(r"\b(duration|n_packets|n_bytes|idle_age|hard_age)=[^,\s]+,?\s*")
        # the controller's flows carry its cookie owner tag "MC" (0x4d43) in the top 16 bits
        flows = sorted(strip.sub("", ln) for ln in t.flow_lines if re.match(r"cookie=0x4d43[0-9a-f]{12},", ln))
        meters = sorted(re.sub(r"\s+", " ", m) for m in t.meters)
        groups = sorted(f"{g}:{b}" for g, b in t.groups.items())
        return {"flows": flows, "groups": groups, "meters": meters}

    def converge(self, job_ids: list[str] | None = None, timeout: float = 60.0) -> None:
        """Wait until the switches deliver every job's current structure; then set
        each job's destinations."""
        ids = list(self.jobs) if job_ids is None else job_ids

        def check() -> bool:
            self.refresh()
            tables: dict = {}  # every switch read once per check
            for jid in ids:
                job = self.jobs[jid]
                job.ps_copies, _ = self.delivery(job, tables)
                group = [job.answer["group_address"]] if job.answer["structure"]["entries"] else []
                job.dsts = group + [self.fabric.hosts[w].ip for w in job.ps_copies]
            return True

        poll(check, timeout, "the switches to deliver every job's plan", 0.3)

    # -- traffic ------------------------------------------------------------------------------------
    def start_traffic(self, duration: float, job_ids: list[str] | None = None) -> int:
        """Start a new run on every job's sender (current destinations and rates); returns the run id."""
        self._run += 1
        for jid in (list(self.jobs) if job_ids is None else job_ids):
            job = self.jobs[jid]
            self._command(job.sender, {"cmd": "start", "run": self._run, "dsts": job.dsts, "rate": job.answer["rate"],
                                       "duration": duration})
        return self._run

    def stop_traffic(self, job_id: str) -> None:
        """End the current run of a job's sender."""
        self._command(self.jobs[job_id].sender, {"cmd": "stop"})

    def join(self, host: str, job_id: str, group: str, port: int) -> None:
        """Make `host`'s receiver listen for `job_id` on UDP `port` and join `group`."""
        self._command(self.receivers[host][0], {"cmd": "join", "job": job_id, "group": group, "port": port})

    @staticmethod
    def _sends(job: JobState) -> tuple:
        """What the PS sends for the job's last REST answer: (to the group?, PS copies, rate)."""
        a = job.answer
        return bool(a["structure"]["entries"]), tuple(sorted(a["structure"]["ps_unicast"])), a["rate"]

    def follow(self, until: float, job_ids: list[str] | None = None, interval: float = 0.3) -> list[tuple[float, str]]:
        """Until time.monotonic() reaches `until`, keep the running senders on their
        jobs' current plans, as a PS polling GET /jobs/{id} would: when what a job's
        PS must send changes (group or not, its own unicast copies, rate), wait
        until the switches deliver the new structure (`delivery`), then point the
        sender at it. Returns (time, job id) of every change made."""
        ids = list(self.jobs) if job_ids is None else job_ids
        current = {jid: (bool(self.jobs[jid].dsts and self.jobs[jid].dsts[0] == self.jobs[jid].answer["group_address"]),
                         tuple(sorted(self.jobs[jid].ps_copies)), self.jobs[jid].answer["rate"]) for jid in ids}
        changes: list[tuple[float, str]] = []
        while time.monotonic() < until:
            tables: dict = {}
            for jid in ids:
                job = self.jobs[jid]
                try:
                    job.answer = self.ctl.get(f"/jobs/{jid}")
                    if job.answer.get("state") != "planned" or self._sends(job) == current[jid]:
                        continue
                    job.ps_copies, _ = self.delivery(job, tables)
                except (AssertionError, RuntimeError, OSError):
                    continue  # not planned or not delivered yet: look again next round
                group = [job.answer["group_address"]] if job.answer["structure"]["entries"] else []
                job.dsts = group + [self.fabric.hosts[w].ip for w in job.ps_copies]
                self.update_traffic(jid)
                current[jid] = self._sends(job)
                changes.append((time.monotonic(), jid))
            time.sleep(max(0.0, min(interval, until - time.monotonic())))
        return changes

    def update_traffic(self, job_id: str) -> None:
        """Point a running sender at its job's current destinations and rate."""
        job = self.jobs[job_id]
        self._command(job.sender, {"cmd": "update", "dsts": job.dsts, "rate": job.answer["rate"]})

    def reports(self, timeout: float = 20.0) -> tuple[dict[str, dict], dict[str, dict]]:
        """Fresh reports of every sender (by job) and receiver (by host)."""
        self._token += 1
        token = self._token
        procs = {("send", j.id): (j.sender, j.sender.out) for j in self.jobs.values()}
        procs.update({("recv", h): v for h, v in self.receivers.items()})
        for proc, _ in procs.values():
            self._command(proc, {"cmd": "report", "token": token})
        out: dict[tuple[str, str], dict] = {}

        def fresh() -> bool:
            for key, (_, path) in procs.items():
                if key not in out:
                    data = json.loads(path.read_text())
                    if data.get("token") == token:
                        out[key] = data
            assert len(out) == len(procs), f"{len(procs) - len(out)} reports pending"
            return True

        poll(fresh, timeout, "the traffic reports", 0.05)
        senders = {k[1]: v for k, v in out.items() if k[0] == "send"}
        receivers = {k[1]: v for k, v in out.items() if k[0] == "recv"}
        return senders, receivers

    def run_traffic(self, duration: float, job_ids: list[str] | None = None) -> dict[str, Any]:
        """One measured run of `duration` s for every job; returns `measure()`."""
        run = self.start_traffic(duration, job_ids)
        time.sleep(duration + 1.0)  # the run ends by itself; 1 s for the last datagrams in flight
        return self.measure(run)

    def measure(self, run: int) -> dict[str, Any]:
        """Per job and worker: planned rate, goodput, loss, duplicates, first arrival,
        longest gap; and what non-members received."""
        senders, receivers = self.reports()
        out: dict[str, Any] = {"run": run, "jobs": {}, "strays": []}
        for job in self.jobs.values():
            srun = next((r for r in senders[job.id]["runs"] if r["run"] == run), None)
            if srun is None:
                continue
            stopped = srun["stopped"] or time.monotonic()
            span = max(1e-9, stopped - srun["started"])
            ticks = srun["ticks"]
            workers = {}
            for w in job.workers:
                st = next((s for s in receivers[w]["streams"] if s["job"] == job.id and s["run"] == run), None)
                unique = st["unique"] if st else 0
                workers[w] = {
                    "received": unique,
                    "dups": st["dups"] if st else 0,
                    "goodput_bps": unique * PAYLOAD * 8 / span,
                    "loss": 1 - unique / ticks if ticks else 1.0,
                    "first_arrival_s": (st["first"] - srun["started"]) if st else None,
                    "last_arrival_s": (st["last"] - srun["started"]) if st else None,
                    "max_gap_s": st["max_gap"] if st else None,
                    "gap_at_s": (st["gap_at"] - srun["started"]) if st and st["gap_at"] is not None else None,
                    "max_delay_s": st["max_delay"] if st else None,
                    "via": "ps-unicast" if w in job.ps_copies else "switches",
                }
            a = job.answer
            out["jobs"][job.id] = {
                "id": job.id, "ps": job.ps, "mode": a["mode"], "planned_bps": a["rate"], "demand_bps": job.demand,
                "group": a["group_address"], "ticks": ticks, "duration_s": span, "skipped_s": srun["skipped_s"],
                "dsts": srun["dsts"], "ps_copies": job.ps_copies, "workers": workers,
                "measured_bps": min(w["goodput_bps"] for w in workers.values()),
                "loss": max(w["loss"] for w in workers.values()),
                "dups": sum(w["dups"] for w in workers.values()),
            }
        for host, rep in receivers.items():
            for st in rep["streams"]:
                job = self.jobs.get(st["job"])
                if st["run"] == run and (job is None or host not in job.workers):
                    out["strays"].append({"host": host, "job": st["job"], "packets": st["packets"]})
        return out

    # -- switches ------------------------------------------------------------------------------------
    def switch_usage(self) -> list[dict]:
        """Per switch: groups, multicast flows (P4: multicast table entries), meters
        and (P4) replica rewrites read from the switch (ovs-ofctl or P4Runtime Read),
        and the controller's budgets and counts."""
        ctl = {s["id"]: s for s in self.ctl.get("/switches")["switches"]}
        out = []
        for v in self.fabric.topology.switches:
            name = self.fabric.topology.name(v)
            u = self.fabric.usage(name)
            out.append({
                "id": name, "mininet": self.fabric.names[name], "groups_used": u["groups_used"],
                "group_capacity": ctl[name]["group_capacity"], "controller_groups_used": ctl[name]["groups_used"],
                "multicast_flows": u["multicast_flows"], "entry_capacity": ctl[name]["entry_capacity"],
                "controller_entries_used": ctl[name]["entries_used"],  # and fast failover's, from the switch:
                **{k: u[k] for k in ("meters", "rewrites", "ff_groups", "backup_flows")}})
        return out

    @staticmethod
    def over_budget(usage: list[dict]) -> list[str]:
        """Switches holding more groups or multicast entries than their budget."""
        return [u["id"] for u in usage
                if (u["group_capacity"] is not None and u["groups_used"] > u["group_capacity"])
                or (u.get("entry_capacity") is not None and u["multicast_flows"] > u["entry_capacity"])]

    def multicast_leftovers(self) -> dict[str, dict]:
        """Switches that still hold a multicast flow (priority 2000) or multicast
        table entry, a group, a meter or a replica rewrite."""
        left = {}
        for u in self.switch_usage():
            if u["groups_used"] or u["multicast_flows"] or u["meters"] or u["rewrites"]:
                left[u["id"]] = u
        return left
