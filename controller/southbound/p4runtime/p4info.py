"""The P4Info of the data plane, and every P4Runtime id resolved by name (docs/architecture.md).

The P4Runtime backend writes no numeric id: tables, match fields, actions,
action parameters, action profiles, meters, counters and packet-in/out metadata are looked up here
by their fully qualified P4 names (`McastIngress.multicast`, `hdr.ipv4.dstAddr`,
...), in the P4Info that p4c produced for p4src/mcast.p4 (kept in p4src/build/),
or bf-p4c for p4src/tna/mcast.p4 (p4src/build/tofino*/: the same names).
A name that the P4Info lacks is a `P4InfoError` naming it, raised when the
backend starts, not a wrong id on the wire.

Also here: the P4Runtime byte-string encoding of values (canonical: the shortest
big-endian string, at least one byte; a value must fit its bit width).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[3]
DEFAULT_P4INFO = REPO / "p4src" / "build" / "mcast.p4info.txt"
DEFAULT_DEVICE_CONFIG = REPO / "p4src" / "build" / "mcast.json"

MATCH_KINDS = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}


class P4InfoError(ValueError):
    """A name the backend needs is missing from the P4Info, or the P4Info is unreadable."""


@dataclass(frozen=True)
class FieldInfo:
    id: int
    name: str
    bitwidth: int
    match_kind: str  # "exact", "lpm", ...


@dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str
    params: tuple[ParamInfo, ...]

    def param(self, name: str) -> ParamInfo:
        for p in self.params:
            if p.name == name:
                return p
        raise P4InfoError(f"action {self.name} has no parameter {name!r}")


@dataclass(frozen=True)
class TableInfo:
    id: int
    name: str
    size: int
    fields: tuple[FieldInfo, ...]
    action_ids: frozenset[int]  # actions an entry may use (not the default-only ones)
    default_only_ids: frozenset[int]
    implementation_id: int  # 0: direct actions; else an action profile's id

    def field(self, name: str) -> FieldInfo:
        for f in self.fields:
            if f.name == name:
                return f
        raise P4InfoError(f"table {self.name} has no match field {name!r}")


@dataclass(frozen=True)
class ProfileInfo:
    id: int
    name: str
    size: int
    with_selector: bool
    max_group_size: int
    table_ids: frozenset[int]


@dataclass(frozen=True)
class MeterInfo:
    """A meter or counter (indirect: `size` cells; direct: of table `direct_table_id`);
    `unit` is the P4Info's name of its unit ("BYTES", "PACKETS", "BOTH")."""

    id: int
    name: str
    unit: str
    size: int
    direct_table_id: int  # 0: indirect


@dataclass(frozen=True)
class PacketHeaderInfo:
    """A controller header (`packet_in` / `packet_out`): metadata name -> (id, bitwidth)."""

    id: int
    name: str
    fields: tuple[ParamInfo, ...]

    def field(self, name: str) -> ParamInfo:
        for f in self.fields:
            if f.name == name:
                return f
        raise P4InfoError(f"controller header {self.name} has no metadata {name!r}")


class P4Info:
    """Name and id lookups over one `p4info_pb2.P4Info`."""

    def __init__(self, message: p4info_pb2.P4Info) -> None:
        self.message = message
        self._tables = {t.preamble.name: _table(t) for t in message.tables}
        self._actions = {
            a.preamble.name: ActionInfo(
                a.preamble.id, a.preamble.name, tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in a.params)
            )
            for a in message.actions
        }
        self._profiles = {
            p.preamble.name: ProfileInfo(
                p.preamble.id, p.preamble.name, p.size, p.with_selector, p.max_group_size, frozenset(p.table_ids)
            )
            for p in message.action_profiles
        }
        self._headers = {
            c.preamble.name: PacketHeaderInfo(
                c.preamble.id, c.preamble.name, tuple(ParamInfo(m.id, m.name, m.bitwidth) for m in c.metadata)
            )
            for c in message.controller_packet_metadata
        }
        meter_unit = p4info_pb2.MeterSpec.Unit.Name
        counter_unit = p4info_pb2.CounterSpec.Unit.Name
        self._meters = {
            m.preamble.name: MeterInfo(m.preamble.id, m.preamble.name, meter_unit(m.spec.unit), m.size, 0)
            for m in message.meters
        }
        self._meters.update(
            {
                m.preamble.name: MeterInfo(m.preamble.id, m.preamble.name, meter_unit(m.spec.unit), 0, m.direct_table_id)
                for m in message.direct_meters
            }
        )
        self._counters = {
            c.preamble.name: MeterInfo(c.preamble.id, c.preamble.name, counter_unit(c.spec.unit), c.size, 0)
            for c in message.counters
        }
        self._counters.update(
            {
                c.preamble.name: MeterInfo(c.preamble.id, c.preamble.name, counter_unit(c.spec.unit), 0, c.direct_table_id)
                for c in message.direct_counters
            }
        )
        self._by_id: dict[int, object] = {}
        for group in (self._tables, self._actions, self._profiles, self._headers, self._meters, self._counters):
            for item in group.values():
                if item.id in self._by_id:
                    raise P4InfoError(f"id {item.id} is used twice ({item.name})")
                self._by_id[item.id] = item

    @classmethod
    def load(cls, path: str | Path = DEFAULT_P4INFO) -> P4Info:
        """Read a P4Info in text format (what p4c writes with --p4runtime-files x.txt)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise P4InfoError(f"{p}: cannot read the P4Info: {e.strerror or e}") from None
        message = p4info_pb2.P4Info()
        try:
            text_format.Parse(text, message)
        except text_format.ParseError as e:
            raise P4InfoError(f"{p}: not a P4Info in text format: {e}") from None
        return cls(message)

    # -- by name ------------------------------------------------------------------------------
    def _named(self, found: Mapping[str, T], name: str, what: str) -> T:
        try:
            return found[name]
        except KeyError:
            raise P4InfoError(f"the P4Info has no {what} {name!r}") from None

    def table(self, name: str) -> TableInfo:
        return self._named(self._tables, name, "table")

    def action(self, name: str) -> ActionInfo:
        return self._named(self._actions, name, "action")

    def profile(self, name: str) -> ProfileInfo:
        return self._named(self._profiles, name, "action profile")

    def packet_header(self, name: str) -> PacketHeaderInfo:
        return self._named(self._headers, name, "controller header")

    def meter(self, name: str) -> MeterInfo:
        """A meter, direct or indirect."""
        return self._named(self._meters, name, "meter")

    def counter(self, name: str) -> MeterInfo:
        """A counter, direct or indirect."""
        return self._named(self._counters, name, "counter")

    # -- by id --------------------------------------------------------------------------------
    def _of_id(self, kind: type, id_: int):
        item = self._by_id.get(id_)
        if not isinstance(item, kind):
            raise P4InfoError(f"the P4Info has no {kind.__name__[:-4].lower()} with id {id_}")
        return item

    def table_by_id(self, id_: int) -> TableInfo:
        return self._of_id(TableInfo, id_)

    def action_by_id(self, id_: int) -> ActionInfo:
        return self._of_id(ActionInfo, id_)

    def profile_by_id(self, id_: int) -> ProfileInfo:
        return self._of_id(ProfileInfo, id_)

    def meter_by_id(self, id_: int) -> MeterInfo:
        item = self._by_id.get(id_)
        if not isinstance(item, MeterInfo) or item.name not in self._meters:
            raise P4InfoError(f"the P4Info has no meter with id {id_}")
        return item

    def tables(self) -> tuple[TableInfo, ...]:
        return tuple(self._tables.values())

    def actions(self) -> tuple[ActionInfo, ...]:
        return tuple(self._actions.values())

    def profiles(self) -> tuple[ProfileInfo, ...]:
        return tuple(self._profiles.values())


def _table(t: p4info_pb2.Table) -> TableInfo:
    fields = []
    for m in t.match_fields:
        kind = MATCH_KINDS.get(m.match_type)
        if kind is None:
            raise P4InfoError(f"table {t.preamble.name}: field {m.name} has an unsupported match kind")
        fields.append(FieldInfo(m.id, m.name, m.bitwidth, kind))
    entry_actions = frozenset(r.id for r in t.action_refs if r.scope != p4info_pb2.ActionRef.DEFAULT_ONLY)
    default_only = frozenset(r.id for r in t.action_refs if r.scope == p4info_pb2.ActionRef.DEFAULT_ONLY)
    return TableInfo(t.preamble.id, t.preamble.name, t.size, tuple(fields), entry_actions, default_only, t.implementation_id)


# -- values -------------------------------------------------------------------------------------
def encode(value: int, bitwidth: int) -> bytes:
    """The canonical P4Runtime byte string of `value` in a field of `bitwidth` bits."""
    if not 0 <= value < (1 << bitwidth):
        raise ValueError(f"value {value} does not fit in {bitwidth} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode(data: bytes, bitwidth: int) -> int:
    """The value of a P4Runtime byte string (canonical or padded); it must fit `bitwidth`."""
    value = int.from_bytes(data, "big")
    if not data or value >= (1 << bitwidth):
        raise ValueError(f"byte string {data.hex() or '(empty)'} does not fit in {bitwidth} bits")
    return value
