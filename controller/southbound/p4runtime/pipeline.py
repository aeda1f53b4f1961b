"""The programs a P4 switch runs, as the backend drives them: P4Info, device
config, cookie, table sizes and CPU port (`Pipeline`), and which switches of the
config are P4Runtime switches and what they can hold.

Each switch runs one program (`P4SwitchSpec.program`: `v1model` on BMv2,
`tofino`, `tofino2`; `config.programs`), driven through its own `Pipeline`:
every name the backend uses is checked in its P4Info when the backend starts. A
Tofino program without a device config installs its P4Info alone: the P4Runtime
protocol allows it and the test server accepts it, a real Tofino switch needs
its binary (docs/p4.md, "Tofino").
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from controller.algorithm.model import Topology
from controller.config import Config, Inventory
from controller.config.programs import DEFAULT_PROGRAM, PROGRAMS, program as program_named
from controller.southbound.p4runtime import entities as p4_state
from controller.southbound.p4runtime.connection import TABLES, P4RuntimeError
from controller.southbound.p4runtime.entities import (
    HOST_PORTS_TABLE,
    KNOWN_SOURCES_TABLE,
    LPM_TABLE,
    MCAST_TABLE,
    REWRITE_TABLE,
)
from controller.southbound.p4runtime.p4info import P4Info, P4InfoError
from controller.southbound.p4runtime.translate import P4Limits


@dataclass(frozen=True)
class P4SwitchSpec:
    """Where a P4 switch's P4Runtime server is, and the program it runs (`p4runtime.programs`)."""

    name: str
    address: str
    device_id: int
    program: str = DEFAULT_PROGRAM
    ports: tuple[int, ...] = ()  # in a learned network: where LLDP and host probes go out



def pipeline_cookie(p4info: P4Info, device_config: bytes) -> int:
    """A 64-bit cookie identifying the P4Info and device config together."""
    digest = hashlib.sha256(p4info.message.SerializeToString(deterministic=True) + b"\0" + device_config).digest()
    return int.from_bytes(digest[:8], "big")


def _check_tables_and_actions(
    p4info: P4Info,
    tables: Mapping[str, tuple[tuple[str, str], ...]],
    actions: Mapping[str, tuple[str, ...]],
) -> None:
    """Every match field of `tables` resolves in `p4info` by name with the match
    kind the backend writes, and every parameter of `actions` by name;
    P4InfoError naming the first that does not."""
    for table, fields in tables.items():
        for name, kind in fields:
            got = p4info.table(table).field(name).match_kind
            if got != kind:
                raise P4InfoError(f"table {table}: field {name} is matched {got}, the backend writes {kind}")
    for action, params in actions.items():
        for p in params:
            p4info.action(action).param(p)


def check_names(p4info: P4Info) -> None:
    """Every name the backend writes resolves in `p4info`, as the backend uses it
    (match kinds, parameters, meter units and tables); P4InfoError otherwise."""
    _check_tables_and_actions(p4info, p4_state.USED_TABLES, p4_state.USED_ACTIONS)
    for name, (unit, table) in p4_state.USED_METERS.items():
        m = p4info.meter(name)
        on = p4info.table(table).id if table else 0
        if (m.unit, m.direct_table_id) != (unit, on):
            raise P4InfoError(f"meter {name}: unit {m.unit} on table id {m.direct_table_id}, the backend needs {unit} on {table}")
    for name, table in p4_state.USED_DIRECT_COUNTERS.items():
        if p4info.counter(name).direct_table_id != p4info.table(table).id:
            raise P4InfoError(f"counter {name} is not the direct counter of {table}")
    for name, (unit, size) in p4_state.USED_COUNTERS.items():
        c = p4info.counter(name)
        if (c.unit, c.direct_table_id) != (unit, 0) or c.size < size:
            raise P4InfoError(f"counter {name}: unit {c.unit}, {c.size} cells, the backend needs {unit}, {size} cells")
    p4info.profile(p4_state.ECMP_PROFILE)
    for header, fields in p4_state.USED_PACKET_METADATA.items():
        for name in fields:
            p4info.packet_header(header).field(name)


def has_failover(p4info: P4Info) -> bool:
    """The program can fail over in the data plane (`p4runtime.failover`): False
    if it has no failover table (the Tofino program); P4InfoError if it has one
    whose names differ from what the backend writes."""
    try:
        p4info.table(p4_state.FAILOVER_TABLE)
    except P4InfoError:
        return False
    _check_tables_and_actions(p4info, p4_state.FAILOVER_TABLES, p4_state.FAILOVER_ACTIONS)
    return True


def p4_table_limits(p4info: P4Info) -> P4Limits:
    """The table sizes the translation keeps within, from the P4Info."""
    return P4Limits(
        p4info.table(MCAST_TABLE).size or None,
        p4info.table(LPM_TABLE).size or None,
        p4info.table(REWRITE_TABLE).size or None,
        p4info.profile(p4_state.ECMP_PROFILE).size or None,
        p4info.table(HOST_PORTS_TABLE).size or None,
        p4info.table(KNOWN_SOURCES_TABLE).size or None,
        p4info.table(p4_state.KNOWN_ARP_SOURCES_TABLE).size or None,
        p4info.table(p4_state.ARP_ROUTES_TABLE).size or None,
        p4info.table(p4_state.SWITCH_PORTS_TABLE).size or None,
        (p4info.table(p4_state.FAILOVER_TABLE).size or None) if has_failover(p4info) else None,
    )


@dataclass(frozen=True)
class Pipeline:
    """One program as the backend drives it on a switch: P4Info, device config (b""
    for none: SetForwardingPipelineConfig then carries the P4Info alone), cookie,
    table sizes and CPU port."""

    program: str
    p4info: P4Info
    device_config: bytes
    cookie: int
    limits: P4Limits
    cpu_port: int
    failover: bool = False  # it has the fast-failover table (`has_failover`)

    @property
    def tables(self) -> tuple[str, ...]:
        """Every table the backend writes on this program, so every one it reads back."""
        return TABLES + (tuple(p4_state.FAILOVER_TABLES) if self.failover else ())


def make_pipeline(p4info: P4Info, device_config: bytes, program: str = DEFAULT_PROGRAM) -> Pipeline:
    """The pipeline of `program` with this P4Info and device config; P4InfoError
    if the P4Info lacks a name the backend uses, ValueError for an unknown program."""
    check_names(p4info)
    return Pipeline(program, p4info, device_config, pipeline_cookie(p4info, device_config),
                    p4_table_limits(p4info), program_named(program).cpu_port, has_failover(p4info))



def read_device_config(program: str, path: str | Path | None) -> bytes:
    """The device config of a switch running `program` from `path`: BMv2's JSON for
    v1model (required: an error naming `make p4` without it); for a Tofino program
    what its P4Runtime server expects (the compiler's binary in its packaging), or
    b"" when none is given (the pipeline then carries the P4Info alone)."""
    if path is None:
        if program_named(program).device_config is None:
            return b""
        raise P4RuntimeError("no device config (BMv2 JSON) given: run `make p4` where p4c is installed")
    path = Path(path)
    try:
        return path.read_bytes()
    except OSError as e:
        raise P4RuntimeError(
            f"{path}: cannot read the device config ({e.strerror or e}); `make p4` builds it where p4c is installed"
        ) from None



# -- the controller process ---------------------------------------------------------------------------
def p4_specs(inventory: Inventory) -> dict[str, P4SwitchSpec]:
    """The P4Runtime switches of an inventory, as specs."""
    return {
        name: P4SwitchSpec(name, b.address, b.device_id, b.program or DEFAULT_PROGRAM, b.ports)
        for name, b in inventory.p4runtime.items()
    }


def p4_switches(config: Config, topology: Topology | None) -> dict[str, P4SwitchSpec]:
    """The P4Runtime switches of the config (of its declared topology, built from
    it when None; in a learned network the ones it lists), as specs."""
    return p4_specs(Inventory.of(config, topology))


# The multicast group ids BMv2 (simple_switch_grpc) accepts: 1..32767; it refuses
# 32768 and above (docs/p4.md, "What BMv2 answers"), although v1model's mcast_grp
# is 16 bits (p4_state.MAX_GROUP_ID). Each program's is in `p4runtime.programs`.
TARGET_MAX_GROUPS = PROGRAMS["v1model"].max_groups


def p4_limits(config: Config, inventory: Inventory) -> dict[str, tuple[int, int]]:
    """P4 switch -> (the groups its program's target accepts, the multicast table's
    size in its P4Info): what a P4 switch can hold, its G(v) and F(v) limits."""
    specs = p4_specs(inventory)
    s = config.southbound.p4runtime
    sizes: dict[str, int] = {}
    out = {}
    for name, spec in specs.items():
        if spec.program not in sizes:
            path = s.p4info if spec.program == s.program else program_named(spec.program).p4info
            sizes[spec.program] = P4Info.load(path).table(MCAST_TABLE).size
        out[name] = (program_named(spec.program).max_groups, sizes[spec.program])
    return out


def report_p4_limits(service, config: Config) -> None:
    """Tell the service what each P4 switch can hold (`p4_limits`), as limits the
    switch reported with source "p4info": the effective budgets are then the
    smallest of these, the configured and the learned ones (GET /switches shows
    which)."""
    if config.discovers:
        return  # a learned switch joins when it connects; the backend reports it then
    for name, (groups, entries) in p4_limits(config, service.inventory).items():
        service.devices.report_limits(name, max_groups=groups, max_entries=entries, source="p4info")

