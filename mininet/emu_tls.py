"""TLS for an emulation's southbound: a private CA and its certificates, made with openssl.

`make_pki(directory)` writes, with the openssl commands docs/security.md gives a
user ("A CA and certificates with openssl"):
- ca.crt / ca.key: the emulation's CA;
- controller.crt / controller.key: the controller's certificate (OpenFlow
  server, P4Runtime client);
- switch.crt / switch.key: the certificate every switch of the emulation
  presents (Open vSwitch as an OpenFlow client through `set-ssl`, BMv2 as a
  P4Runtime server with `--grpc-server-ssl`).
All switches run on this machine and are dialled or listen on 127.0.0.1, so one
switch certificate with that address as its subject alternative name serves them
all; a deployment gives each switch its own. RSA 2048 keeps the emulation's
start quick; the docs' commands use 3072.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SAN = "IP:127.0.0.1,DNS:localhost"


@dataclass(frozen=True)
class Pki:
    ca: Path
    controller_cert: Path
    controller_key: Path
    switch_cert: Path
    switch_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])}: {r.stderr.strip()}")


def unavailable() -> str | None:
    return None if shutil.which("openssl") else "openssl is missing (apt-get install openssl)"


def make_pki(directory: str | Path) -> Pki:
    """A CA, the controller's certificate and the switches' (see the module docstring)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-sha256", "-days", "30", "-nodes", "-keyout", "ca.key",
             "-out", "ca.crt", "-subj", "/CN=emulation southbound CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    for name in ("controller", "switch"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)
        (d / f"{name}.ext").write_text(f"subjectAltName={SAN}\nextendedKeyUsage=serverAuth,clientAuth\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "30", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d)
    return Pki(d / "ca.crt", d / "controller.crt", d / "controller.key", d / "switch.crt", d / "switch.key")
