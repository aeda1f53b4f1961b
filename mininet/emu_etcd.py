"""A private etcd server (tests, the HA emulation and `make demo-ha`): its own data
directory, client and peer ports on 127.0.0.1 chosen free, a child process (not
daemonised) stopped at the end; started with --max-txn-ops 10000 (docs/ha.md).

    with EtcdServer(tmp_path) as etcd:
        print(etcd.url)      # http://127.0.0.1:PORT, the v3 gateway is under /v3/

`EtcdServer(dir, tls={cert, key, ca})` serves https:// and requires client
certificates signed by `ca` (tests/test_etcd_tls.py); `args` adds etcd flags.

`unavailable()` says why no etcd can be started here (a reason for pytest.skip).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def etcd_binary() -> str | None:
    return shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)


def unavailable() -> str | None:
    if etcd_binary() is None:
        return "etcd is not installed (apt-get install etcd-server)"
    import importlib.util

    if importlib.util.find_spec("etcd3gw") is None:  # found, not imported (its import warns about eventlet)
        return "the etcd3gw client is not installed (pip install -e '.[etcd]')"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdServer:
    """With `tls` ({cert, key, ca} PEM paths) the client URL is https:// and etcd
    requires a client certificate signed by `ca`; `args` are more etcd flags."""

    def __init__(self, directory: Path, name: str = "etcd", tls: dict | None = None, args: tuple[str, ...] = ()) -> None:
        self.dir = Path(directory) / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.tls = tls
        self.args = tuple(args)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.client_port}"
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "etcd.log"

    def _health_context(self):
        if not self.tls:
            return None
        import ssl

        context = ssl.create_default_context(cafile=str(self.tls["ca"]))
        context.load_cert_chain(str(self.tls["cert"]), str(self.tls["key"]))
        return context

    def start(self, timeout: float = 20.0) -> EtcdServer:
        peer = f"http://127.0.0.1:{self.peer_port}"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [etcd_binary(), "--name", "test", "--data-dir", str(self.dir / "data"),
                 "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"test={peer}", "--max-txn-ops", "10000", *self._tls_args(), *self.args],
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1, context=self._health_context()) as r:
                    if json.loads(r.read()).get("health") == "true":
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy within {timeout} s: {self.log.read_text()[-2000:]}")

    def _tls_args(self) -> list[str]:
        if not self.tls:
            return []
        return ["--cert-file", str(self.tls["cert"]), "--key-file", str(self.tls["key"]),
                "--client-cert-auth", "--trusted-ca-file", str(self.tls["ca"])]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> EtcdServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
