"""The private etcd server of the tests: mininet/emu_etcd.py (shared with the HA
emulation and `make demo-ha`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mininet"))

from emu_etcd import EtcdServer, etcd_binary, free_port, unavailable  # noqa: E402,F401
