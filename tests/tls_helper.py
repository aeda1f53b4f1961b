"""Test certificates for TLS on the southbound (docs/security.md): a CA made with
`trustme`, and PEM files of a certificate it signs, written where a test wants them.

`pem_files(ca, dir, name)` writes NAME.crt, NAME.key (a certificate for 127.0.0.1
and localhost, usable by a server and by a client) and NAME-ca.crt (the CA) and
returns their paths as {cert, key, ca}, the shape of `southbound.*.tls`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

trustme = pytest.importorskip("trustme", reason="trustme is not installed (pip install -e '.[test]')")


def new_ca() -> trustme.CA:
    return trustme.CA()


def pem_files(ca: trustme.CA, where: Path, name: str) -> dict[str, Path]:
    where.mkdir(parents=True, exist_ok=True)
    cert = ca.issue_cert("127.0.0.1", "localhost", common_name=name)
    files = {"cert": where / f"{name}.crt", "key": where / f"{name}.key", "ca": where / f"{name}-ca.crt"}
    files["cert"].write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    files["key"].write_bytes(cert.private_key_pem.bytes())
    files["ca"].write_bytes(ca.cert_pem.bytes())
    return files
