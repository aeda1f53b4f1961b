"""`southbound.openflow.tls_socket.SerializedTls`: one SSLSocket, one reading and
one writing thread (os-ken's native hub), never inside OpenSSL together.

Without it the OpenFlow connections over TLS broke while the controller sent and
read at once: Open vSwitch logged "SSL_read: unexpected eof" and the switches
reconnected every few seconds (seen in the learned leaf-spine emulation over
TLS, 2 to 3 reconnects a minute; none with it).
"""

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

from controller.southbound.openflow.tls_socket import SerializedTls


class OneAtATime:
    """Stands in for an SSLSocket: counts the times two threads were inside it at
    once. A call takes a little while (as SSL_read / SSL_write do with the GIL
    released); reads find data every other call, writes take half of what they get.
    Its descriptor is always ready, so a wait never blocks."""

    def __init__(self) -> None:
        self._pair = socket.socketpair()
        self._pair[1].send(b"r")  # readable and writable for good
        self._count = threading.Lock()
        self.inside = 0
        self.overlaps = 0
        self.calls = 0

    def _enter(self) -> None:
        with self._count:
            self.inside += 1
            self.calls += 1
            if self.inside > 1:
                self.overlaps += 1
        time.sleep(0.0005)

    def _leave(self) -> None:
        with self._count:
            self.inside -= 1

    def gettimeout(self) -> float | None:
        return 5.0

    def close(self) -> None:
        for s in self._pair:
            s.close()

    def setblocking(self, flag: bool) -> None:
        pass

    def fileno(self) -> int:
        return self._pair[0].fileno()

    def recv(self, n: int) -> bytes:
        self._enter()
        try:
            if self.calls % 2:
                raise ssl.SSLWantReadError()
            return b"x" * n
        finally:
            self._leave()

    def send(self, data) -> int:
        self._enter()
        try:
            return max(1, len(data) // 2)
        finally:
            self._leave()

    def sendall(self, data) -> None:
        view = memoryview(data)
        while view:
            view = view[self.send(view):]


def _read_and_write_together(sock, rounds: int = 200) -> None:
    def reader() -> None:
        for _ in range(rounds):
            while True:
                try:
                    if sock.recv(8):
                        break
                except ssl.SSLWantReadError:  # the bare stand-in: nothing to read yet
                    pass

    def writer() -> None:
        for _ in range(rounds):
            sock.sendall(b"y" * 16)

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"


def test_a_reader_and_a_writer_never_enter_the_tls_socket_together():
    bare = OneAtATime()
    _read_and_write_together(bare, rounds=100)
    bare.close()
    assert bare.overlaps > 0, "the stand-in did not see two threads inside it at once: it measures nothing"
    fake = OneAtATime()
    _read_and_write_together(SerializedTls(fake))
    fake.close()
    assert fake.calls > 400 and fake.overlaps == 0, (fake.calls, fake.overlaps)


@pytest.fixture
def tls_pair(tmp_path):
    """(server side as SerializedTls, client side SSLSocket), handshaken, over loopback."""
    ca = tls_helper.new_ca()
    server = tls_helper.pem_files(ca, tmp_path, "controller")
    client = tls_helper.pem_files(ca, tmp_path, "switch")
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(server["cert"], server["key"])
    sctx.load_verify_locations(server["ca"])
    sctx.verify_mode = ssl.CERT_REQUIRED
    cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cctx.load_cert_chain(client["cert"], client["key"])
    cctx.load_verify_locations(client["ca"])
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    out: dict = {}

    def connect() -> None:
        out["client"] = cctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")

    t = threading.Thread(target=connect)
    t.start()
    raw, _ = listener.accept()
    listener.close()
    tls = sctx.wrap_socket(raw, server_side=True)
    t.join(10)
    tls.settimeout(5.0)
    ours = SerializedTls(tls)
    yield ours, out["client"]
    ours.close()
    out["client"].close()


def test_a_stream_read_and_written_at_once_arrives_whole_and_in_order(tls_pair):
    # the peer echoes; one thread writes 20,000 small messages while another reads
    # the echo 8 bytes at a time (an OpenFlow header), as os-ken's two loops do
    ours, peer = tls_pair
    n, payload = 20_000, bytes(range(100))

    def echo() -> None:
        while data := peer.recv(65536):
            peer.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    got = bytearray()
    errors: list = []

    def reader() -> None:
        try:
            while len(got) < n * len(payload):
                data = ours.recv(8)
                if not data:
                    errors.append("end of stream")
                    return
                got.extend(data)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    t = threading.Thread(target=reader)
    t.start()
    for _ in range(n):
        ours.sendall(payload)
    t.join(60)
    assert not errors and not t.is_alive(), errors
    assert bytes(got) == payload * n


def test_recv_waits_for_the_timeout_then_raises_like_a_socket(tls_pair):
    ours, peer = tls_pair
    ours.settimeout(0.3)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        ours.recv(8)
    assert 0.25 <= time.monotonic() - t0 < 2.0
    peer.sendall(b"hello")
    assert ours.recv(8) == b"hello"


def test_the_peer_closing_ends_the_stream(tls_pair):
    ours, peer = tls_pair
    peer.sendall(b"last")
    peer.close()
    assert ours.recv(8) == b"last"
    assert ours.recv(8) == b""
