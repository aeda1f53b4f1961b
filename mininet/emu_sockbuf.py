"""Linux's default socket send buffer, raised while the switches open their ports.

Owns `net.core.wmem_default` and the record of who raised it. Nothing else in
the emulation writes it.

Why: a switch of the emulation (Open vSwitch's userspace datapath, or BMv2
through libpcap) sends each frame out of a port through an AF_PACKET socket of
that port. A frame waiting in the port's emulated link queue (the tc FIFO of the
link, 1000 frames by default, two with the priority class) still counts against
that socket's send buffer until it leaves the queue. With Linux's default buffer
(212,992 bytes: about 90 full frames at 2,304 bytes of socket memory each) a
port whose queue holds more than that refuses the next frame: the switch drops
it before tc sees it, whatever its class, and no counter the emulation reads
counts it (not tc, not the switch's port statistics, not the meters). The link
then behaves as a class-blind 90-frame queue with invisible drops, not as the
queue it was given. Found in issue 24 by capturing every host's interface: 5 %
of the NORM packets the parameter servers sent never reached their workers,
while every drop counter read zero, and the port sockets' memory sat at the
limit (`ss -0 -m` in the emulation's namespace).

Only the switches' sockets get the raised buffer: a socket reads the default
when it is created, so the default is raised while the switches start (and
while one restarts) and put back right after. The hosts' sockets keep Linux's
default, as a real host's: a blocking sender whose own queue is full waits
(with a larger buffer, a queue-full send fails with ENOBUFS instead).

The setting is global, and a private namespace may not write it, so
`SendBuffer` opens it in the machine's namespace, before the emulation enters
its own, and writes through that descriptor. Two emulations may overlap: each
raise adds a holder (its pid and a token) to a record under a lock, and the last
holder to leave puts the machine's own value back; a holder that died is dropped
from the record by the next raise or release (its pid is gone).

    buf = SendBuffer()          # in the machine's namespace
    ...                         # enter the emulation's namespace
    with buf.raised():
        ...                     # switches started here get SEND_BUFFER-byte port sockets
    buf.close()
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

SYSCTL = Path("/proc/sys/net/core/wmem_default")
RECORD = Path("/run/mcast-emu/wmem_default.json")
# the deepest queue an emulated port has: two FIFOs of 1000 frames (the priority class
# split, emu_iterations.prioritise) at ~2.3 KB of socket memory per full frame = 4.6 MB
SEND_BUFFER = 8 << 20


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked(record: Path) -> Iterator[dict]:
    """The record (original value, holders), read and written back under a lock."""
    record.parent.mkdir(parents=True, exist_ok=True)
    with open(record.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads(record.read_text()) if record.exists() else {}
        except ValueError:
            state = {}
        state.setdefault("holders", [])
        state["holders"] = [h for h in state["holders"] if _alive(int(h.split(":")[0]))]
        yield state
        if state["holders"]:
            record.write_text(json.dumps(state))
        else:
            record.unlink(missing_ok=True)


def acquire(size: int, read: Callable[[], int], write: Callable[[int], None], *, record: Path = RECORD) -> str:
    """Raise the default (`read`/`write`) to at least `size` bytes and hold it; the holder's token."""
    token = f"{os.getpid()}:{uuid.uuid4().hex}"
    with _locked(record) as state:
        current = read()
        if "original" not in state:  # else: a run that died holding it recorded the machine's value
            state["original"] = current
        if current < size:
            write(size)
        state["holders"].append(token)
    return token


def release(token: str, write: Callable[[int], None], *, record: Path = RECORD) -> None:
    """Let go of `token`; the last holder puts the original value back."""
    with _locked(record) as state:
        state["holders"] = [h for h in state["holders"] if h != token]
        if not state["holders"] and "original" in state:
            write(int(state["original"]))


class SendBuffer:
    """`net.core.wmem_default`, opened where it can be written (create it in the
    machine's namespace); `raised()` holds it at `size` bytes or more."""

    def __init__(self, size: int = SEND_BUFFER, sysctl: Path = SYSCTL, record: Path = RECORD) -> None:
        self.size = size
        self.record = record
        self.fd: int | None = os.open(sysctl, os.O_RDWR)

    def read(self) -> int:
        return int(os.pread(self.fd, 64, 0))

    def write(self, value: int) -> None:
        data = f"{value}\n".encode()
        os.pwrite(self.fd, data, 0)
        os.ftruncate(self.fd, len(data))  # a no-op on the sysctl; a plain file (tests) loses the old tail

    @contextlib.contextmanager
    def raised(self) -> Iterator[None]:
        token = acquire(self.size, self.read, self.write, record=self.record)
        try:
            yield
        finally:
            release(token, self.write, record=self.record)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
