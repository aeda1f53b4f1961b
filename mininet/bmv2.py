"""A Mininet switch that runs BMv2's simple_switch_grpc, so a fabric can be built of P4 switches.

Usage (as root, with simple_switch_grpc on PATH):

    from mininet.net import Mininet
    from bmv2 import BMv2Switch            # this file, imported by path
    net = Mininet(switch=BMv2Switch, controller=None)
    s = net.addSwitch("leaf-0", grpc_port=50053, device_id=3, log_dir="/tmp/run")

Each switch runs its own `simple_switch_grpc` process, started with `--no-p4`
(the controller installs the pipeline with SetForwardingPipelineConfig), its
own gRPC port (`--grpc-server-addr`, on 127.0.0.1), its device id, and
`--cpu-port` (255, the CPU_PORT_NUMBER of p4src/sizes.p4) for packet-in/out.
Its data ports are Mininet's port numbers of its interfaces (1, 2, ... in the
order the links were added, or the `port1`/`port2` given to addLink), which is
the controller's default port map when links are added in topology order.

- Thrift: BMv2 built with thrift wants a thrift port of its own per switch
  (`--thrift-port`), one built without it rejects the option. Which one is on
  PATH is read from its `--help`, once per binary.
- Logs: one file per switch, `LOG_DIR/bmv2-NAME.log`, with what the process
  prints (start-up, errors). `log_level` ('info', 'debug', 'trace') adds BMv2's
  own per-packet log there too: slow, for debugging only.
- Processes: each switch is a process group of its own with a pid file in
  `LOG_DIR/bmv2-NAME.pid`; `stop` ends it (SIGTERM, then SIGKILL) and removes
  the file, and `end_stale(LOG_DIR)` ends what a crashed earlier run left.
  A gRPC port that something else already holds is an error at start, not a
  switch that silently talks to the wrong process.
- `restart()` kills the switch process (as a crash would) and starts a new one
  with the same ports: it comes back with no pipeline and no entries.

`fabric_ports(names)` gives, as the controller config's defaults assume, the
gRPC port base_port + n and device id n + 1 of the n-th switch (from 0).

This directory is a folder of scripts, never a Python package (no __init__.py:
it would shadow the real `mininet` package).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from mininet.log import info
from mininet.node import Switch

CPU_PORT = 255
DEFAULT_BASE_PORT = 50051
THRIFT_BASE_PORT = 9090


def fabric_ports(switch_names: list[str], base_port: int = DEFAULT_BASE_PORT) -> dict[str, tuple[int, int]]:
    """Switch name -> (gRPC port, device id) as the controller's defaults assume."""
    return {name: (base_port + n, n + 1) for n, name in enumerate(switch_names)}


@functools.cache
def has_thrift(binary: str) -> bool:
    """Whether this simple_switch_grpc takes --thrift-port (built with thrift)."""
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30, check=False)
    return "--thrift-port" in r.stdout + r.stderr


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _group_alive(pid: int) -> bool:
    """Whether the process group `pid` leads still has a running process. A leader
    that has exited but is not reaped yet (a zombie: our own child until
    Popen.wait) counts as gone; simple_switch_grpc starts no other process."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # the leader is reaped, another member of its group is left
    return state != "Z"


def _end_group(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM the process group `pid` leads, SIGKILL it if it is still there after `timeout`."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _group_alive(pid):
                return
            time.sleep(0.05)


def end_stale(log_dir: str | Path) -> list[str]:
    """End the switch processes whose pid files a crashed earlier run left in `log_dir`
    (only those still running simple_switch_grpc); returns their names."""
    ended = []
    for pidfile in Path(log_dir).glob("bmv2-*.pid"):
        try:
            pid = int(pidfile.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            cmdline = b""
        if b"simple_switch" in cmdline:
            _end_group(pid)
            ended.append(pidfile.stem.removeprefix("bmv2-"))
        pidfile.unlink(missing_ok=True)
    return ended


class BMv2Switch(Switch):
    """A BMv2 simple_switch_grpc switch. Parameters: `grpc_port`, `device_id`,
    `thrift_port` (default 9090 + device id; used only by a BMv2 built with
    thrift), `cpu_port` (255), `log_dir` (default /tmp), `log_level` (None: no
    per-packet log), `binary` (default simple_switch_grpc on PATH), `tls`
    ((cert, key, ca) paths: P4Runtime over TLS, clients must present a
    certificate `ca` signs; None: plain TCP), `nice` (the process's scheduling
    niceness, default 0; negative: ahead of the hosts and the controller, see
    emu_fabric.SWITCH_NICE)."""

    def __init__(
        self,
        name: str,
        grpc_port: int = DEFAULT_BASE_PORT,
        device_id: int = 1,
        thrift_port: int | None = None,
        cpu_port: int = CPU_PORT,
        log_dir: str = "/tmp",
        log_level: str | None = None,
        binary: str | None = None,
        tls: tuple | None = None,
        nice: int = 0,
        **kwargs,
    ) -> None:
        super().__init__(name, **kwargs)
        self.nice = nice
        self.grpc_port = grpc_port
        self.device_id = device_id
        self.thrift_port = thrift_port if thrift_port is not None else THRIFT_BASE_PORT + device_id
        self.cpu_port = cpu_port
        self.log_path = Path(log_dir) / f"bmv2-{name}.log"
        self.pid_path = Path(log_dir) / f"bmv2-{name}.pid"
        self.log_level = log_level
        self.binary = binary or shutil.which("simple_switch_grpc")
        self.tls = tls
        self.process: subprocess.Popen | None = None

    @classmethod
    def setup(cls) -> None:
        if shutil.which("simple_switch_grpc") is None:
            raise RuntimeError("simple_switch_grpc not found on PATH (BMv2 with its gRPC server)")

    def command(self) -> list[str]:
        ports = []
        for port, intf in sorted(self.intfs.items()):
            if intf.name != "lo" and port > 0:
                ports += ["-i", f"{port}@{intf.name}"]
        thrift = ["--thrift-port", str(self.thrift_port)] if has_thrift(self.binary) else []
        logging = ["--log-console", "-L", self.log_level] if self.log_level else []
        # every thread of the switch inherits the niceness it starts with
        niceness = ["nice", "-n", str(self.nice)] if self.nice else []
        return [
            *niceness,
            self.binary,
            "--no-p4",
            "--device-id", str(self.device_id),
            *thrift,
            *logging,
            *ports,
            "--",
            "--grpc-server-addr", f"127.0.0.1:{self.grpc_port}",
            "--cpu-port", str(self.cpu_port),
            *self._tls_args(),
        ]

    def _tls_args(self) -> list[str]:
        if self.tls is None:
            return []
        cert, key, ca = (str(x) for x in self.tls)
        return ["--grpc-server-ssl", "--grpc-server-cacert", ca, "--grpc-server-cert", cert,
                "--grpc-server-key", key, "--grpc-server-with-client-auth"]

    def start(self, controllers) -> None:  # noqa: ARG002 - BMv2 dials no controller; ours dials it
        if self.binary is None:
            raise RuntimeError("simple_switch_grpc not found on PATH")
        if _port_open(self.grpc_port):
            raise RuntimeError(f"{self.name}: gRPC port {self.grpc_port} is already in use (a stale switch?)")
        cmd = self.command()
        info(f"*** {self.name}: {' '.join(cmd)}\n")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log:
            log.write(f"# {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n")
            log.flush()
            # the switch process runs in the namespace Mininet's switches share: its ports are the veth ends
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        self.pid_path.write_text(f"{self.process.pid} {self.name}\n")
        if not self.wait_ready():
            self.stop_process()
            tail = self.log_path.read_text()[-1500:]
            raise RuntimeError(f"{self.name}: simple_switch_grpc did not open port {self.grpc_port}; "
                               f"{self.log_path}:\n{tail}")

    def wait_ready(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            if _port_open(self.grpc_port):
                return True
            time.sleep(0.1)
        return False

    def stop_process(self) -> None:
        """End the switch process (its whole group) and remove its pid file."""
        if self.process is not None:
            _end_group(self.process.pid)
            self.process.wait(5)
        self.process = None
        self.pid_path.unlink(missing_ok=True)

    def restart(self, down_s: float = 0.0) -> None:
        """Kill the switch process as a crash would (no pipeline, no entries
        survive), wait `down_s`, start a fresh one with the same ports."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
            self.process = None
        deadline = time.monotonic() + 10
        while _port_open(self.grpc_port) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(down_s)
        self.start([])

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's signature
        self.stop_process()
        super().stop(deleteIntfs)
