"""A Mininet switch that runs BMv2's simple_switch_grpc, so a fabric can be built of P4 switches.

Usage (as root, with simple_switch_grpc on PATH):

    from mininet.net import Mininet
    from bmv2 import BMv2Switch            # this file, imported by path
    net = Mininet(switch=BMv2Switch, controller=None)
    s = net.addSwitch("leaf-0", grpc_port=50053, device_id=3)

Each switch runs its own `simple_switch_grpc` process, started with `--no-p4`
(the controller installs the pipeline with SetForwardingPipelineConfig), its
own gRPC port (`--grpc-server-addr`), its own Thrift port, its device id, and
`--cpu-port` (255, the CPU_PORT_NUMBER of p4src/sizes.p4) for packet-in/out.
Its data ports are Mininet's port numbers of its interfaces (1, 2, ... in the
order the links were added), which is the controller's default port map when
links are added in the order of the topology's links.

`fabric_ports(topology)` gives, as in the controller config's defaults, the
gRPC port base_port + n and device id n + 1 of the n-th switch (from 0).

This directory is a folder of scripts, never a Python package (no __init__.py:
it would shadow the real `mininet` package).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

from mininet.log import error, info
from mininet.node import Switch

CPU_PORT = 255
DEFAULT_BASE_PORT = 50051
THRIFT_BASE_PORT = 9090


def fabric_ports(switch_names: list[str], base_port: int = DEFAULT_BASE_PORT) -> dict[str, tuple[int, int]]:
    """Switch name -> (gRPC port, device id) as the controller's defaults assume."""
    return {name: (base_port + n, n + 1) for n, name in enumerate(switch_names)}


class BMv2Switch(Switch):
    """A BMv2 simple_switch_grpc switch. Parameters: `grpc_port`, `device_id`,
    `thrift_port` (default 9090 + device id), `cpu_port` (255), `log_dir`
    (default /tmp), `binary` (default simple_switch_grpc on PATH)."""

    def __init__(
        self,
        name: str,
        grpc_port: int = DEFAULT_BASE_PORT,
        device_id: int = 1,
        thrift_port: int | None = None,
        cpu_port: int = CPU_PORT,
        log_dir: str = "/tmp",
        binary: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(name, **kwargs)
        self.grpc_port = grpc_port
        self.device_id = device_id
        self.thrift_port = thrift_port if thrift_port is not None else THRIFT_BASE_PORT + device_id
        self.cpu_port = cpu_port
        self.log_path = os.path.join(log_dir, f"bmv2-{name}.log")
        self.binary = binary or shutil.which("simple_switch_grpc")
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
        return [
            self.binary,
            "--no-p4",
            "--device-id", str(self.device_id),
            "--thrift-port", str(self.thrift_port),
            *ports,
            "--",
            "--grpc-server-addr", f"0.0.0.0:{self.grpc_port}",
            "--cpu-port", str(self.cpu_port),
        ]

    def start(self, controllers) -> None:  # noqa: ARG002 - BMv2 dials no controller; ours dials it
        if self.binary is None:
            raise RuntimeError("simple_switch_grpc not found on PATH")
        cmd = self.command()
        info(f"*** {self.name}: {' '.join(cmd)}\n")
        with open(self.log_path, "w") as log:
            # the switch process runs in the root namespace: its ports are the veth ends Mininet made
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        if not self.wait_ready():
            error(f"*** {self.name}: simple_switch_grpc did not open port {self.grpc_port}; see {self.log_path}\n")

    def wait_ready(self, timeout: float = 30.0) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process is not None and self.process.poll() is not None:
                return False
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", self.grpc_port)) == 0:
                    return True
            time.sleep(0.2)
        return False

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's signature
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
        super().stop(deleteIntfs)
