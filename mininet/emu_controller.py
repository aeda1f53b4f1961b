"""The controller process of an emulation run, and a small REST client for it.

Owns one `python -m controller run --config FILE --of-port P` subprocess (the
real controller, unchanged), started in the caller's network namespace, from
this checkout (cwd and PYTHONPATH: the repository this file is in). The REST
port is read from the controller's own "api listening on URL" line, so the
config may ask for port 0. It is up once that line and the southbound's line
(`ready`: "openflow listening on" for Open vSwitch, "p4runtime:" for a fabric
of P4 switches only, which opens no OpenFlow listener) are in its log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class ControllerError(RuntimeError):
    pass


class ControllerProcess:
    """`python -m controller run` as a child process, with its log in `log`."""

    def __init__(self, config: str | Path, of_port: int, log: str | Path, python: str = sys.executable,
                 ready: str = "openflow listening on") -> None:
        self.config, self.of_port, self.log = Path(config), of_port, Path(log)
        self.python = python
        self.ready = ready
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None

    def start(self, timeout: float = 60.0) -> ControllerProcess:
        """Start it; returns once both the REST API and the southbound (`ready`) are up.
        A restart appends to the same log."""
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.log.parent.mkdir(parents=True, exist_ok=True)
        offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [self.python, "-m", "controller", "run", "--config", str(self.config), "--of-port", str(self.of_port)],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ControllerError(f"the controller exited with {self.proc.returncode}; see {self.log}")
            with open(self.log, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            m = re.search(r"api listening on (\S+)", text)
            if m and self.ready in text:
                self.url = m.group(1)
                return self
            time.sleep(0.1)
        raise ControllerError(f"the controller did not start within {timeout:.0f} s; see {self.log}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def kill(self) -> None:
        """SIGKILL: a crash, not a clean stop."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
                return None
        return proc.returncode

    # -- REST ---------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 30) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw) if raw else None
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def get(self, path: str) -> object:
        status, body = self.request("GET", path)
        if status != 200:
            raise ControllerError(f"GET {path}: {status} {body}")
        return body

    def wait_connected(self, n: int, timeout: float = 60.0) -> list[dict]:
        """Wait until GET /switches shows `n` switches, all connected."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                sw = self.get("/switches")["switches"]
                last = sum(s["connected"] for s in sw)
                if len(sw) == n and last == n:
                    return sw
            except (OSError, ControllerError):
                pass
            time.sleep(0.2)
        raise ControllerError(f"only {last} of {n} switches connected after {timeout:.0f} s; see {self.log}")
