"""The OpenFlow listener's TLS refusals, without a switch (`app.run._reporting_listener`
around os-ken's listener with the options `southbound.openflow.tls` gives it): a
client certificate of another CA, none, and a peer that never finishes the
handshake are each refused, counted (`switch_tls`) and logged; a certificate the
CA signs reaches the OpenFlow handler, as a `SerializedTls` (os-ken reads and
writes it from two threads: tests/test_tls_socket.py). Open vSwitch end to end:
tests/test_openflow_tls_ovs.py."""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tls_helper  # noqa: E402

pytest.importorskip("os_ken", reason="os-ken is not installed (pip install -e '.[openflow]')")

from controller.app import run  # noqa: E402
from controller.core.counters import Counters  # noqa: E402
from controller.southbound.openflow.tls_socket import SerializedTls  # noqa: E402


def _wait(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_refused_handshakes_are_counted_and_logged_and_a_good_one_is_handled(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(run, "TLS_HANDSHAKE_TIMEOUT_S", 0.5)
    ca, rogue_ca = tls_helper.new_ca(), tls_helper.new_ca()
    ctl = tls_helper.pem_files(ca, tmp_path, "controller")
    good = tls_helper.pem_files(ca, tmp_path, "switch")
    rogue = tls_helper.pem_files(rogue_ca, tmp_path, "rogue")
    counters = Counters()
    handled = []
    # the arguments os-ken's OpenFlowController.server_loop gives its listener with ca_certs
    server = run._reporting_listener(counters)(
        ("127.0.0.1", 0), lambda sock, addr: handled.append((sock, addr)), ssl_ctx=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER),
        keyfile=str(ctl["key"]), certfile=str(ctl["cert"]), cert_reqs=ssl.CERT_REQUIRED, ca_certs=str(ctl["ca"]),
    )
    port = server.server.getsockname()[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def client(files: dict | None) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=ctl["ca"])
        if files is not None:
            context.load_cert_chain(files["cert"], files["key"])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            try:
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    tls.recv(1)  # TLS 1.3: the server's verdict on our certificate arrives after our Finished
            except (ssl.SSLError, OSError):
                pass

    caplog.set_level("WARNING", logger="controller.core.counters")
    client(rogue)
    _wait(lambda: counters.refusals().get("switch_tls") == 1)
    client(None)
    _wait(lambda: counters.refusals().get("switch_tls") == 2)
    idle = socket.create_connection(("127.0.0.1", port))  # never says a word
    _wait(lambda: counters.refusals().get("switch_tls") == 3)
    idle.close()
    assert handled == []
    refusals = [r.getMessage() for r in caplog.records if "switch_tls" in r.getMessage()]
    assert len(refusals) == 1 and "at OpenFlow peer 127.0.0.1: TLS handshake failed" in refusals[0]  # once a minute
    assert "CERTIFICATE_VERIFY_FAILED" in refusals[0]
    threading.Thread(target=client, args=(good,), daemon=True).start()
    _wait(lambda: len(handled) == 1)
    assert counters.refusals() == {"switch_tls": 3}
    sock, addr = handled[0]
    assert isinstance(sock, SerializedTls) and addr[0] == "127.0.0.1"
    sock.close()
