"""Open vSwitch for the emulation: start, check and stop it, and clean up a crashed run.

Owns the ovsdb-server and ovs-vswitchd processes of one emulation run. Nothing
on this machine starts Open vSwitch for us (no service manager) and the kernel
has no openvswitch module, so the bridges use the userspace datapath
(datapath_type=netdev).

Every file of the instance (database, sockets, pid files, logs) lives in one run
directory (default /run/mcast-emu/<purpose>), and `activate()` exports
OVS_RUNDIR & co. so that the plain `ovs-vsctl` / `ovs-ofctl` that Mininet runs
talk to this instance. Why not the system paths (/var/run/openvswitch): an
Open vSwitch that something else started there is left alone.

One userspace datapath per network namespace: its port is a tap device named
`ovs-netdev`, so a second netdev instance in the same namespace cannot create
bridges. The emulation therefore runs in a network namespace of its own
(`emu_netns.private_netns`), which also keeps its veth names and addresses
apart from everything else on the machine.

A crashed run (SIGKILL, power loss of the parent) leaves its daemons running:
`clean_stale()` reads the pid files of the run directory and ends exactly those
processes (checked by their command line), then removes the directory.

    ovs = OvsDaemon("/run/mcast-emu/demo")
    ovs.clean_stale()
    ovs.start()
    ovs.activate()
    ...
    ovs.stop()
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Self

PROGRAMS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl")
SCHEMA_PATHS = ("/usr/share/openvswitch/vswitch.ovsschema", "/usr/local/share/openvswitch/vswitch.ovsschema")
DEFAULT_ROOT = Path("/run/mcast-emu")


def which(name: str) -> str | None:
    """The path of an Open vSwitch program (they live in sbin, not always on PATH)."""
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin"):
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return None


def schema() -> str | None:
    return next((p for p in SCHEMA_PATHS if os.path.exists(p)), None)


def unavailable() -> str | None:
    """Why Open vSwitch cannot be started here (a reason to skip), or None."""
    if os.name != "posix" or os.geteuid() != 0:
        return "needs root (Open vSwitch and Mininet create network devices)"
    missing = [p for p in PROGRAMS if which(p) is None]
    if missing:
        return f"Open vSwitch is not installed (missing {', '.join(missing)}; make setup installs it)"
    if schema() is None:
        return "the Open vSwitch schema vswitch.ovsschema is not installed"
    return None


def emulation_unavailable() -> str | None:
    """Why an emulation (Open vSwitch, Mininet and the controller's os-ken app)
    cannot run here (a reason to skip), or None."""
    reason = unavailable()
    if reason is not None:
        return reason
    try:
        import mininet.net  # noqa: F401
        import os_ken  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed (make setup installs it)"
    return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_pid(pid: int, must_contain: str, timeout: float = 5.0) -> bool:
    """End process `pid` if it is still the one we started (its command line
    contains `must_contain`): SIGTERM, then SIGKILL. True if it was ours."""
    if pid <= 1 or must_contain not in _cmdline(pid):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if must_contain not in _cmdline(pid):
            return True
        try:
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        except ChildProcessError:
            pass
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


class OvsDaemon:
    """One Open vSwitch instance (ovsdb-server + ovs-vswitchd) in `rundir`."""

    def __init__(self, rundir: str | Path, startup_timeout: float = 20.0) -> None:
        self.dir = Path(rundir)
        self.db = self.dir / "conf.db"
        self.db_sock = self.dir / "db.sock"
        self.timeout = startup_timeout
        self.procs: list[subprocess.Popen] = []

    @property
    def env(self) -> dict[str, str]:
        d = str(self.dir)
        return {"OVS_RUNDIR": d, "OVS_DBDIR": d, "OVS_LOGDIR": d, "OVS_SYSCONFDIR": d}

    def activate(self) -> None:
        """Point every later ovs-vsctl / ovs-ofctl of this process and its children
        (Mininet's switch shells) at this instance."""
        os.environ.update(self.env)

    # -- life cycle ---------------------------------------------------------------------------
    def clean_stale(self) -> list[int]:
        """End the daemons (and any process listed in *.pid) of a previous run in
        this directory and remove it. Returns the pids ended."""
        ended = []
        if self.dir.is_dir():
            for pidfile in sorted(self.dir.glob("*.pid")):
                try:
                    lines = pidfile.read_text().splitlines()
                    pid = int(lines[0].strip())
                except (OSError, ValueError, IndexError):
                    continue
                # OVS's own pid files hold the pid; `record_pid` adds a marker line
                marker = lines[1] if len(lines) > 1 and lines[1] else str(self.dir)
                if kill_pid(pid, marker):
                    ended.append(pid)
            shutil.rmtree(self.dir, ignore_errors=True)
        return ended

    def record_pid(self, name: str, pid: int, marker: str) -> None:
        """Remember another process of this run (the controller, a Mininet shell)
        so that `clean_stale` ends it after a crash; `marker` is a string of its
        command line that tells it apart from an unrelated process with a reused pid."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / f"{name}.pid").write_text(f"{pid}\n{marker}\n")

    def start(self) -> OvsDaemon:
        """Create a fresh database and start both daemons; returns once
        `ovs-vsctl show` answers."""
        if self.running():
            raise RuntimeError(f"an Open vSwitch already runs in {self.dir}; call clean_stale() first")
        self.clean_stale()
        self.dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **self.env)
        try:
            subprocess.run([which("ovsdb-tool"), "create", str(self.db), schema()], check=True, capture_output=True, env=env)
            self._spawn(
                "ovsdb-server",
                [str(self.db), f"--remote=punix:{self.db_sock}", f"--pidfile={self.dir}/ovsdb-server.pid",
                 f"--unixctl={self.dir}/ovsdb-server.ctl", f"--log-file={self.dir}/ovsdb-server.log"],
                env,
            )
            self._wait(lambda: self.db_sock.exists(), "ovsdb-server")
            self.vsctl("--no-wait", "init")
            self._spawn(
                "ovs-vswitchd",
                [f"unix:{self.db_sock}", f"--pidfile={self.dir}/ovs-vswitchd.pid",
                 f"--unixctl={self.dir}/ovs-vswitchd.ctl", f"--log-file={self.dir}/ovs-vswitchd.log"],
                env,
            )
            self._wait(self.running, "ovs-vswitchd")
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, program: str, args: list[str], env: dict[str, str]) -> None:
        with open(self.dir / f"{program}.out", "wb") as out:
            # own session: a Ctrl-C to the demo's terminal must not kill the switches
            # before the demo's teardown has deleted its bridges
            self.procs.append(
                subprocess.Popen([which(program), *args], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            )

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with {p.returncode}; see {self.dir}/*.log")
            if ready():
                return
            time.sleep(0.05)
        raise TimeoutError(f"{what} did not start within {self.timeout:.0f} s; see {self.dir}/*.log")

    def running(self) -> bool:
        """ovsdb-server answers and ovs-vswitchd is up (its control socket exists)."""
        if not self.db_sock.exists() or not (self.dir / "ovs-vswitchd.ctl").exists():
            return False
        r = subprocess.run([which("ovs-vsctl"), f"--db=unix:{self.db_sock}", "--timeout=2", "show"],
                           check=False, capture_output=True, env=dict(os.environ, **self.env))
        return r.returncode == 0

    def stop(self) -> None:
        """Delete every bridge, stop both daemons, remove the run directory."""
        if self.db_sock.exists():
            try:
                for br in self.vsctl("list-br", timeout=5).split():
                    self.vsctl("--if-exists", "del-br", br, timeout=5)
            except (RuntimeError, subprocess.TimeoutExpired):
                pass  # the daemons go anyway
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
        self.clean_stale()  # daemons of this directory we did not start ourselves

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- commands ---------------------------------------------------------------------------------
    def vsctl(self, *args: str, timeout: float = 10) -> str:
        r = subprocess.run([which("ovs-vsctl"), f"--db=unix:{self.db_sock}", f"--timeout={int(timeout)}", *args],
                           check=False, capture_output=True, text=True, env=dict(os.environ, **self.env), timeout=timeout + 5)
        if r.returncode != 0:
            raise RuntimeError(f"ovs-vsctl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def ofctl(self, command: str, bridge: str, *args: str, timeout: float = 10) -> str:
        r = subprocess.run([which("ovs-ofctl"), "-O", "OpenFlow13", command, bridge, *args],
                           check=False, capture_output=True, text=True, env=dict(os.environ, **self.env), timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"ovs-ofctl {command} {bridge}: {r.stderr.strip()}")
        return r.stdout
