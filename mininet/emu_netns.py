"""A private network namespace for the calling thread (and the processes it starts).

Owns nothing but the switch of namespaces. The emulation runs in a namespace of
its own because a userspace Open vSwitch datapath needs a tap device named
`ovs-netdev` (one per namespace: a second instance on the machine, e.g. a test's
private OVS, could not create bridges), and so that the switches' veth names and
the hosts' addresses never meet anything else on the machine. Processes forked
from this thread (Open vSwitch, the controller, Mininet's shells) inherit it; a
Mininet host gets a namespace of its own inside it as usual.

The REST API and the OpenFlow listener of the controller are on 127.0.0.1 of that
namespace; `ovs-vsctl` / `ovs-ofctl` reach Open vSwitch through unix sockets, so
they work from any namespace.

    with private_netns():
        ...  # lo is up, nothing else exists
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


@contextlib.contextmanager
def private_netns() -> Iterator[None]:
    """Move the calling thread into a new network namespace with lo up; move it
    back on exit. The namespace disappears once its last process has ended."""
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        try:
            subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True)
            yield
        finally:
            _check(_libc.setns(original, CLONE_NEWNET), "setns back to the original network namespace")
    finally:
        os.close(original)
