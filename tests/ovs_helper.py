"""A private Open vSwitch instance for tests (userspace datapath; no kernel module).

`OvsInstance` starts its own ovsdb-server and ovs-vswitchd as child processes
(not --detach, so they are reaped) with every socket, database and log in a
fresh temporary directory, so it never touches a system OVS. Bridges use
datapath_type=netdev and OpenFlow 1.3; links between bridges are patch ports.

    with OvsInstance() as ovs:
        ovs.add_bridge("mcab12s0", dpid=1, controller="tcp:127.0.0.1:6653")
        ovs.add_patch("mcab12s0", 1, "mcab12s1", 2)
        print(ovs.ofctl("dump-flows", "mcab12s0"))

Requirements: root, and the ovsdb-tool / ovsdb-server / ovs-vswitchd / ovs-vsctl /
ovs-ofctl programs (Debian package openvswitch-switch). `unavailable()` says why
an instance cannot be started here, or None.

A killed test run cannot stop its instance, and the daemons (sessions of their
own), the bridges' and the datapath's tap devices and the hosts' namespaces
outlive it; the next instance in the machine's namespace then fails. So every
instance is recorded in REGISTRY (its owner's pid, its daemons' pids, its
bridges and namespaces), and `start` first ends the instances whose owner is
dead: their daemons (a pid counts only while its command line still names the
instance's directory), namespaces, tap devices and directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mininet"))  # scripts, not a package
from emu_sockbuf import _alive  # noqa: E402 - is a pid alive (the emulation's own check)
from ovs_daemon import _cmdline  # noqa: E402 - a pid's command line, "" once it is gone

PROGRAMS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl")
SCHEMA_PATHS = ("/usr/share/openvswitch/vswitch.ovsschema", "/usr/local/share/openvswitch/vswitch.ovsschema")
REGISTRY = Path("/run/mcast-tests/ovs")  # one JSON record per running instance (module docstring)
DATAPATH_TAP = "ovs-netdev"  # the userspace datapath's own tap device (one per machine namespace)


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}", f"/usr/local/sbin/{name}") if os.access(p, os.X_OK)),
        None,
    )


def _schema() -> str | None:
    return next((p for p in SCHEMA_PATHS if os.path.exists(p)), None)


def unavailable() -> str | None:
    """Why OVS cannot be started here (a reason for pytest.skip), or None."""
    if os.name != "posix" or os.geteuid() != 0:
        return "needs root (Open vSwitch creates network devices)"
    missing = [p for p in PROGRAMS if _which(p) is None]
    if missing:
        return f"Open vSwitch is not installed (missing {', '.join(missing)}; apt-get install openvswitch-switch)"
    if _schema() is None:
        return "the Open vSwitch schema vswitch.ovsschema is not installed"
    return None


def openflow_unavailable() -> str | None:
    """Why the controller cannot be tested against Open vSwitch here (`unavailable`,
    or os-ken missing), or None."""
    reason = unavailable()
    if reason is None:
        try:
            import os_ken  # noqa: F401
        except ImportError:
            reason = "os-ken is not installed (pip install os-ken)"
    return reason


class OvsInstance:
    def __init__(self, startup_timeout: float = 15.0) -> None:
        self.dir = tempfile.mkdtemp(prefix="ovs", dir="/tmp")  # short: unix socket paths are limited
        self.db_sock = os.path.join(self.dir, "db.sock")
        self.env = dict(os.environ, OVS_RUNDIR=self.dir, OVS_LOGDIR=self.dir, OVS_DBDIR=self.dir, OVS_SYSCONFDIR=self.dir)
        self.timeout = startup_timeout
        self.procs: list[subprocess.Popen] = []
        self.bridges: list[str] = []
        self.namespaces: list[str] = []

    # -- processes ----------------------------------------------------------------------------
    def start(self) -> OvsInstance:
        end_orphans()
        try:
            self._record()
            db = os.path.join(self.dir, "conf.db")
            subprocess.run([_which("ovsdb-tool"), "create", db, _schema()], check=True, capture_output=True, env=self.env)
            self._spawn(
                [_which("ovsdb-server"), db, f"--remote=punix:{self.db_sock}", "--log-file=" + self._log("ovsdb-server"),
                 "--unixctl=" + os.path.join(self.dir, "ovsdb-server.ctl")]
            )
            self._wait(lambda: os.path.exists(self.db_sock), "ovsdb-server socket")
            self.vsctl("--no-wait", "init")
            self._spawn(
                [_which("ovs-vswitchd"), f"unix:{self.db_sock}", "--log-file=" + self._log("ovs-vswitchd"),
                 "--unixctl=" + os.path.join(self.dir, "ovs-vswitchd.ctl")]
            )
            self._wait(self._vswitchd_ready, "ovs-vswitchd")
        except BaseException:
            self.stop()
            raise
        return self

    def _log(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.log")

    def _spawn(self, argv: list[str]) -> None:
        out = open(self._log(os.path.basename(argv[0]) + ".out"), "wb")
        try:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True))
        finally:
            out.close()
        self._record()

    @property
    def _record_path(self) -> Path:
        return REGISTRY / f"{os.path.basename(self.dir)}.json"

    def _record(self) -> None:
        """What a later instance must end if this one's owner dies without `stop`."""
        REGISTRY.mkdir(parents=True, exist_ok=True)
        record = {"owner": os.getpid(), "dir": self.dir, "pids": [p.pid for p in self.procs],
                  "bridges": self.bridges, "namespaces": self.namespaces}
        tmp = self._record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self._record_path)

    def _vswitchd_ready(self) -> bool:
        r = subprocess.run([_which("ovs-vsctl"), f"--db=unix:{self.db_sock}", "--timeout=2", "show"],
                           capture_output=True, env=self.env)
        return r.returncode == 0 and os.path.exists(os.path.join(self.dir, "ovs-vswitchd.ctl"))

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode}; see {self.dir}")
            if ready():
                return
            time.sleep(0.05)
        raise TimeoutError(f"{what} not ready within {self.timeout} s; see {self.dir}")

    def stop(self) -> None:
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)  # takes its veth pair along
        self.namespaces.clear()
        for br in reversed(self.bridges):
            try:
                self.vsctl("--if-exists", "del-br", br, timeout=5)
            except Exception:  # noqa: BLE001 - best effort; the processes go anyway
                pass
        self.bridges.clear()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
        self._record_path.unlink(missing_ok=True)

    def __enter__(self) -> OvsInstance:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- commands ---------------------------------------------------------------------------------
    def vsctl(self, *args: str, timeout: float = 10) -> str:
        r = subprocess.run([_which("ovs-vsctl"), f"--db=unix:{self.db_sock}", f"--timeout={int(timeout)}", *args],
                           capture_output=True, text=True, env=self.env, timeout=timeout + 5)
        if r.returncode != 0:
            raise RuntimeError(f"ovs-vsctl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def ofctl(self, command: str, bridge: str, *args: str, timeout: float = 10) -> str:
        r = subprocess.run([_which("ovs-ofctl"), "-O", "OpenFlow13", command, bridge, *args],
                           capture_output=True, text=True, env=self.env, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"ovs-ofctl {command} {bridge}: {r.stderr.strip()}")
        return r.stdout

    def add_bridge(self, name: str, dpid: int, controller: str | None = None) -> None:
        """A userspace OpenFlow 1.3 bridge with datapath id `dpid`, fail mode secure
        (no flows of its own), optionally connected to `controller` (tcp:HOST:PORT)."""
        if len(name) > 15:
            raise ValueError(f"bridge name {name!r} longer than 15 characters")
        self.bridges.append(name)
        self._record()  # before its tap device exists: a run killed in between leaves none unrecorded
        self.vsctl(
            "add-br", name, "--", "set", "bridge", name, "datapath_type=netdev", "protocols=OpenFlow13",
            "fail_mode=secure", f"other-config:datapath-id={dpid:016x}",
        )
        if controller:
            self.set_controller(name, controller)

    def set_controller(self, bridge: str, controller: str) -> None:
        self.vsctl("set-controller", bridge, controller)
        # reconnect fast after a controller restart (default back-off is up to 8 s)
        self.vsctl("--", "set", "controller", bridge, "max_backoff=1000", "inactivity_probe=5000")

    def add_patch(self, a: str, a_port: int, b: str, b_port: int) -> None:
        """A link: patch port number `a_port` on bridge `a` peered with `b_port` on `b`."""
        pa, pb = f"{a}p{a_port}", f"{b}p{b_port}"
        self.vsctl(
            "add-port", a, pa, "--", "set", "interface", pa, "type=patch", f"options:peer={pb}", f"ofport_request={a_port}",
            "--", "add-port", b, pb, "--", "set", "interface", pb, "type=patch", f"options:peer={pa}", f"ofport_request={b_port}",
        )

    def add_host(self, bridge: str, port: int, ns: str, ip: str, mac: str, prefix: int = 8) -> None:
        """A host: network namespace `ns` whose interface eth0 (`ip`/`prefix`, `mac`) is
        the peer of a veth port numbered `port` on `bridge`. Removed by `stop`."""
        outside = f"{bridge}h{port}"
        if len(outside) > 15:
            raise ValueError(f"interface name {outside!r} longer than 15 characters")
        run = lambda *argv: subprocess.run(argv, check=True, capture_output=True, text=True)  # noqa: E731
        self.namespaces.append(ns)
        self._record()
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", outside, "type", "veth", "peer", "name", f"{outside}x")
        run("ip", "link", "set", f"{outside}x", "netns", ns)
        run("ip", "-n", ns, "link", "set", f"{outside}x", "name", "eth0")
        run("ip", "-n", ns, "link", "set", "eth0", "address", mac)
        run("ip", "-n", ns, "addr", "add", f"{ip}/{prefix}", "dev", "eth0")
        run("ip", "-n", ns, "link", "set", "eth0", "up")
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "link", "set", outside, "up")
        self.vsctl("add-port", bridge, outside, "--", "set", "interface", outside, f"ofport_request={port}")

    def host_run(self, ns: str, *argv: str, timeout: float = 10) -> subprocess.CompletedProcess:
        """Run a command inside host namespace `ns` (never raises for its exit code)."""
        return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=timeout)


# -- instances whose owner died ---------------------------------------------------------------------
def end_orphans() -> list[str]:
    """End every recorded instance whose owner process is dead (module docstring);
    what was ended, for a log line."""
    ended: list[str] = []
    if not REGISTRY.is_dir():
        return ended
    live_instances = 0
    for path in sorted(REGISTRY.glob("*.json")):
        try:
            record = json.loads(path.read_text())
            owner, directory = int(record["owner"]), str(record["dir"])
            pids = [int(p) for p in record["pids"]]
            bridges, namespaces = [str(b) for b in record["bridges"]], [str(n) for n in record["namespaces"]]
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)  # unreadable: nothing to go by
            continue
        if _alive(owner):
            live_instances += 1
            continue
        for pid in pids:
            if _alive(pid) and directory in _cmdline(pid):
                os.kill(pid, signal.SIGKILL)
                ended.append(f"pid {pid}")
        deadline = time.monotonic() + 5
        while any(_alive(pid) and directory in _cmdline(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for ns in namespaces:
            if subprocess.run(["ip", "netns", "delete", ns], capture_output=True).returncode == 0:
                ended.append(f"netns {ns}")
        for dev in bridges:
            if subprocess.run(["ip", "link", "delete", dev], capture_output=True).returncode == 0:
                ended.append(f"link {dev}")
        shutil.rmtree(directory, ignore_errors=True)
        path.unlink(missing_ok=True)
    if ended and live_instances == 0:  # the dead datapath's tap; a live instance would own it
        if subprocess.run(["ip", "link", "delete", DATAPATH_TAP], capture_output=True).returncode == 0:
            ended.append(f"link {DATAPATH_TAP}")
    return ended
