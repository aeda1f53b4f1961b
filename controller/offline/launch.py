"""Starting `python -m controller run` as a child process for the benchmarks that
measure the controller over REST (`registration`, `load`): the process, its log and
the API URL it announced."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controller.offline.report import project_root


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Launched:
    """A running controller process and the URL its API announced."""

    proc: subprocess.Popen
    url: str
    log: Path
    start_s: float

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


def launch(config: Path, log: Path, timeout_s: float = 600.0, env: dict[str, str] | None = None,
           southbound: bool = True) -> Launched:
    """Start the controller with `config` (no switch connected: it plans and computes
    every switch's desired state, nothing is sent) and wait until its API and its
    OpenFlow listener are up. Without `southbound` it runs with `--no-southbound`
    (no backend: the core and the API only) and only its API is waited for.
    Raises RuntimeError (naming the log) if it exits or does not start within `timeout_s`."""
    extra = [] if southbound else ["--no-southbound"]
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "controller", "run", "--config", str(config), "--of-port",
                                 str(free_port()), *extra], stdout=out, stderr=subprocess.STDOUT, cwd=project_root(),
                                env=env)
    started = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the controller exited with {proc.returncode}; see {log}")
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"the controller did not start within {timeout_s:.0f} s; see {log}")
            text = log.read_text(errors="replace")
            if ("openflow listening on" in text or not southbound) and "api listening on " in text:
                url = text.split("api listening on ")[1].split()[0]
                return Launched(proc, url, log, time.monotonic() - started)
            time.sleep(0.2)
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise
