"""Running two independent pure computations of one plan at the same time.

`both(background, foreground)` runs `background()` in a forked child process and
`foreground()` here, and returns both results. The child is created and reaped
within the call (no pool, no state kept between calls); its result comes back
pickled through a pipe. Both callables must be pure (no I/O, no clock): the
result is then the same as running them one after the other, so the plan does not
depend on whether a second core was used. Where fork is unavailable, or the
child fails for any reason, `background()` simply runs here afterwards.

In the controller process other threads (REST, OpenFlow, P4Runtime) run at the
same time; the child inherits none of them and takes none of their locks: it only
runs `background` (numpy and Python, no I/O, no HiGHS) and leaves with `os._exit`.

Threads would not help: the work is Python and small numpy operations that hold
the GIL. A fork shares the parent's memory copy-on-write, so the network and its
memo are not copied or pickled; only the (small) result is.
"""

from __future__ import annotations

import os
import pickle
import select
from collections.abc import Callable
from typing import TypeVar

A = TypeVar("A")
B = TypeVar("B")

#: Below this much work (Σ workers over the jobs) a fork and the pickled result cost
#: more than they save (measured on fat-trees; a fork costs ~10-50 ms of page copying).
MIN_WORK = 1500

#: How long the parent waits for the child's result once its own half is done. A
#: forked child of a threaded process could in principle block on a lock some
#: other thread held at the fork; it is then killed and its work done here.
CHILD_TIMEOUT_S = 60.0


def worth_forking(work: int, min_work: int | None = None) -> bool:
    """A second process pays: enough work, fork exists, and a CPU is idle.

    A forked child is slower than the same work here (its first write to every
    shared page copies it), so on a machine whose CPUs are all busy with other
    work it only adds load: the one-minute load average must leave a CPU free.
    This reads the machine's state, but only decides where the work runs, never
    what it computes.
    """
    limit = MIN_WORK if min_work is None else min_work
    cpus = os.cpu_count() or 1
    if work < limit or cpus < 2 or not hasattr(os, "fork"):
        return False
    try:
        busy = os.getloadavg()[0]
    except OSError:
        return True
    return busy <= cpus - 0.5


def both(background: Callable[[], A], foreground: Callable[[], B], fork: bool) -> tuple[A, B]:
    """(background(), foreground()), the first in a forked child when `fork` is true."""
    if not fork:
        return background(), foreground()
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:
        return background(), foreground()
    if pid == 0:  # the child: compute, send, leave without running the parent's exit handlers
        code = 0
        try:
            os.close(r)
            data = pickle.dumps(background(), protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:  # noqa: BLE001 - any failure: the parent recomputes
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    try:
        fg = foreground()
        chunks, complete = _read_all(r, CHILD_TIMEOUT_S)
    except BaseException:
        os.close(r)
        _reap(pid, kill=True)
        raise
    os.close(r)
    ok = _reap(pid, kill=not complete)  # a child that hangs (a lock it inherited held) is killed
    ok = ok and complete
    if ok and chunks:
        try:
            return pickle.loads(b"".join(chunks)), fg
        except Exception:  # noqa: BLE001 - a truncated result: recompute
            pass
    return background(), fg


def _read_all(fd: int, timeout_s: float) -> tuple[list[bytes], bool]:
    """Everything the child writes until it closes the pipe; (chunks, False) if that
    takes longer than `timeout_s` after the foreground work is done."""
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            return chunks, False
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return chunks, True
        chunks.append(chunk)


def _reap(pid: int, kill: bool) -> bool:
    """Wait for the child (killing it first if asked); True if it exited cleanly."""
    if kill:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return False
    return os.waitstatus_to_exitcode(status) == 0
