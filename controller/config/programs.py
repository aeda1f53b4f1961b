"""The data-plane programs a P4Runtime switch may run, and what the backend must know of each.

A switch's `program` (config: `southbound.p4runtime.program`, or per switch
`southbound.switches.NAME.program`) names one of `PROGRAMS`:

- `v1model`: p4src/mcast.p4 on BMv2 (simple_switch_grpc), P4Info and BMv2 JSON
  committed in p4src/build/;
- `tofino`, `tofino2`: p4src/tna/mcast.p4 compiled by bf-p4c for Tofino 1
  (TNA) and Tofino 2 (T2NA), P4Info committed in p4src/build/tofino*/.

Everything else (tables, actions, fields, sizes) is read from the P4Info by name
(`p4info`); what is not in a P4Info lives here: the CPU port the clone session
sends to, how many multicast group ids the replication engine accepts, and the
default device config. The Tofino device config is the compiler's binary,
packaged for the switch's P4Runtime server: it is not committed, so a Tofino
program has none unless the config names one (docs/p4.md, "Tofino").

Pure: paths and numbers, no protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BUILD = Path(__file__).resolve().parents[2] / "p4src" / "build"


@dataclass(frozen=True)
class Program:
    name: str
    p4info: Path
    device_config: Path | None  # None: none committed (it must be configured)
    cpu_port: int  # CPU_PORT_NUMBER of the program's sizes header
    max_groups: int  # multicast group ids 1..max_groups are accepted by the target


PROGRAMS: dict[str, Program] = {
    # BMv2 accepts group ids 1..32767 and refuses 32768 and above (docs/p4.md,
    # "What BMv2 answers"), although v1model's mcast_grp is 16 bits
    "v1model": Program("v1model", BUILD / "mcast.p4info.txt", BUILD / "mcast.json", 255, 32767),
    # Tofino's PRE: 64K multicast group ids (MGID 0: no group); the PCIe CPU port
    # of a 2-pipe Tofino 1, and of Tofino 2 (p4src/tna/sizes.p4)
    "tofino": Program("tofino", BUILD / "tofino" / "mcast.p4info.txt", None, 192, 65535),
    "tofino2": Program("tofino2", BUILD / "tofino2" / "mcast.p4info.txt", None, 0, 65535),
}
DEFAULT_PROGRAM = "v1model"


def program(name: str) -> Program:
    """The program called `name`; ValueError naming the known ones otherwise."""
    try:
        return PROGRAMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown P4 program {name!r} (one of {', '.join(PROGRAMS)})") from None
