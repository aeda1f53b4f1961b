"""emu_sockbuf: the raised default send buffer is held by the emulations that
run and put back by the last one; a run that died is dropped from the record.
On files of the test's own in place of the sysctl (nothing here touches the
machine's setting)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "mininet"))  # scripts, not a package (it would shadow mininet)

import emu_sockbuf  # noqa: E402


class _Setting:
    """A stand-in for the sysctl: a value, read and written."""

    def __init__(self, value: int) -> None:
        self.value = value

    def read(self) -> int:
        return self.value

    def write(self, value: int) -> None:
        self.value = value


def _files(tmp_path: Path, value: int = 212992) -> tuple[_Setting, Path]:
    return _Setting(value), tmp_path / "run" / "wmem.json"


def test_the_last_holder_puts_the_machines_value_back(tmp_path):
    v, record = _files(tmp_path)
    a = emu_sockbuf.acquire(8 << 20, v.read, v.write, record=record)
    assert v.value == 8 << 20
    b = emu_sockbuf.acquire(8 << 20, v.read, v.write, record=record)
    emu_sockbuf.release(a, v.write, record=record)
    assert v.value == 8 << 20  # b still holds it
    emu_sockbuf.release(b, v.write, record=record)
    assert v.value == 212992
    assert not record.exists()


def test_a_larger_setting_of_the_machine_is_left_alone(tmp_path):
    v, record = _files(tmp_path, 16 << 20)
    t = emu_sockbuf.acquire(8 << 20, v.read, v.write, record=record)
    assert v.value == 16 << 20
    emu_sockbuf.release(t, v.write, record=record)
    assert v.value == 16 << 20


def test_a_run_that_died_holding_it_does_not_keep_it_raised(tmp_path):
    sysctl, record = tmp_path / "wmem_default", tmp_path / "run" / "wmem.json"
    sysctl.write_text("212992\n")
    # a holder in another process that ends without releasing (a crashed run), through the
    # same SendBuffer an emulation uses, on a file in place of the sysctl
    code = ("import sys, pathlib; sys.path.insert(0, sys.argv[1]); import emu_sockbuf; "
            "b = emu_sockbuf.SendBuffer(8 << 20, pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])); "
            "c = b.raised(); c.__enter__(); import os; os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(REPO / "mininet"), str(sysctl), str(record)], check=True)
    assert int(sysctl.read_text()) == 8 << 20
    # the next raise records the machine's value, not the raised one the dead run left
    buf = emu_sockbuf.SendBuffer(8 << 20, sysctl, record)
    with buf.raised():
        assert buf.read() == 8 << 20
    buf.close()
    assert int(sysctl.read_text()) == 212992
    assert not record.exists()


def test_the_default_covers_the_deepest_emulated_queue():
    import emu_iterations

    # the priority split's two FIFOs of the default length, ~2.3 KB of socket memory per full frame
    assert emu_sockbuf.SEND_BUFFER >= 2 * emu_iterations.queue_packets(0, None) * 2304
