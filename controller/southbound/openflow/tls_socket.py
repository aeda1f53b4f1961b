"""A TLS socket that one thread reads while another writes.

os-ken 4.x runs each switch connection on native threads: one thread blocks in
`recv` while another calls `sendall` (the send queue: flow-mods, packet-outs,
the echo requests every second), both on the one `ssl.SSLSocket`. OpenSSL does
not allow one connection to be used by two threads at once, and CPython's ssl
module releases the GIL inside SSL_read and SSL_write, so the two calls run
together and the connection's state breaks: seen as records the switch cannot
read, an "unexpected eof" at Open vSwitch, bytes lost from the stream. Over TLS
the switches then dropped and reconnected every few seconds whenever the
controller was sending while reading (every link down, every flow re-sent; a
learned network's start could stall), plain TCP never.

`SerializedTls` wraps the accepted, handshaken SSLSocket: the socket underneath
is made non-blocking, every SSL call is made under one lock, and a thread that
must wait (nothing to read, the send buffer full) waits for the file descriptor
outside the lock, so the reader never holds up the writer, nor the other way
round. The timeout os-ken sets (`settimeout`) is kept as the longest wait
without progress, raising `TimeoutError` (`socket.timeout`) as a blocking
socket does. Owns nothing else; imports only the standard library.
"""

from __future__ import annotations

import select
import ssl
import threading
import time
from typing import Any


class SerializedTls:
    """An `ssl.SSLSocket` safe for one reading and one writing thread (module docstring).
    Every other attribute is the socket's own."""

    def __init__(self, tls: ssl.SSLSocket) -> None:
        self._tls = tls
        self._timeout: float | None = tls.gettimeout()
        self._lock = threading.Lock()
        tls.setblocking(False)

    # -- what os-ken's Datapath calls ----------------------------------------------------------
    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def gettimeout(self) -> float | None:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def recv(self, n: int) -> bytes:
        """Up to `n` bytes of the stream; b"" at its end; TimeoutError if none came within the timeout."""
        deadline = self._deadline()
        while True:
            with self._lock:
                try:
                    return self._tls.recv(n)
                except ssl.SSLWantReadError:
                    want = select.POLLIN
                except ssl.SSLWantWriteError:
                    want = select.POLLOUT
            self._wait(want, deadline)

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        """Send all of `data`; TimeoutError if the peer took nothing for the timeout."""
        view = memoryview(data).cast("B")
        deadline = self._deadline()
        while view:
            with self._lock:
                try:
                    sent = self._tls.send(view)
                except ssl.SSLWantWriteError:
                    want = select.POLLOUT
                except ssl.SSLWantReadError:
                    want = select.POLLIN
                else:
                    view = view[sent:]
                    deadline = self._deadline()
                    continue
            self._wait(want, deadline)

    def send(self, data: bytes | bytearray | memoryview) -> int:
        self.sendall(data)
        return len(data)

    def shutdown(self, how: int) -> None:
        with self._lock:
            self._tls.shutdown(how)

    def close(self) -> None:
        with self._lock:
            self._tls.close()

    def __getattr__(self, name: str) -> Any:  # fileno, getpeername, setsockopt, ...
        return getattr(self._tls, name)

    # -- waiting outside the lock --------------------------------------------------------------
    def _deadline(self) -> float | None:
        return None if self._timeout is None else time.monotonic() + self._timeout

    def _wait(self, event: int, deadline: float | None) -> None:
        fd = self._tls.fileno()
        if fd < 0:
            raise OSError("the socket is closed")
        poller = select.poll()
        poller.register(fd, event)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("timed out")
            ready = poller.poll(None if left is None else max(1, int(left * 1000) + 1))
            if ready:
                return  # readable / writable, or an error or hang-up the next SSL call reports
