"""The P4 program, its P4Info and the names the backend uses agree.

- The p4runtime stubs import (so CI checks the pinned protobuf/grpcio pair).
- p4src/build/mcast.p4info.txt is p4c's output (tests/test_bmv2.py compiles
  the program and compares); its ids are p4c's, never computed here.
- Every table, match field (kind, width), action, parameter (width) and
  controller-header field the backend uses is in the P4Info and declared so in
  p4src/mcast.p4; every table's size is the constant of p4src/sizes.p4.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controller.southbound.p4runtime import entities as p4_state
from controller.southbound.p4runtime.p4info import (
    DEFAULT_P4INFO,
    P4Info,
    P4InfoError,
    decode,
    encode,
)

P4SRC = Path(__file__).resolve().parent.parent / "p4src"

def test_p4runtime_stubs_import():
    import google.protobuf
    import grpc
    from google.rpc import status_pb2  # noqa: F401
    from p4.config.v1 import p4info_pb2
    from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

    assert hasattr(p4runtime_pb2_grpc, "P4RuntimeStub") and grpc.__version__
    assert google.protobuf.__version__.startswith("3.20.")
    assert "multicast_group_entry" in p4runtime_pb2.PacketReplicationEngineEntry.DESCRIPTOR.fields_by_name
    assert p4info_pb2.P4Info.DESCRIPTOR.fields_by_name["tables"]


@pytest.fixture(scope="module")
def info() -> P4Info:
    return P4Info.load(DEFAULT_P4INFO)


# -- the P4 source ----------------------------------------------------------------------------------
def source() -> str:
    text = (P4SRC / "mcast.p4").read_text() + (P4SRC / "sizes.p4").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def block(text: str, start: int) -> str:
    """The text between the brace at or after `start` and its match."""
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    raise AssertionError("unbalanced braces")


def control(text: str, name: str) -> str:
    m = re.search(rf"\bcontrol\s+{name}\s*\(", text)
    assert m, f"control {name} not declared in mcast.p4"
    return block(text, m.end())


def widths(text: str) -> dict[str, int]:
    """typedef name -> bits."""
    return {n: int(w) for w, n in re.findall(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", text)}


def bit_width(type_text: str, typedefs: dict[str, int]) -> int:
    m = re.fullmatch(r"bit<(\d+)>", type_text.strip())
    return int(m.group(1)) if m else typedefs[type_text.strip()]


STANDARD_METADATA = {"ingress_port": 9, "egress_rid": 16}  # v1model.p4


def field_width(name: str, text: str, typedefs: dict[str, int]) -> int:
    parts = name.split(".")
    if parts[0] == "standard_metadata":
        return STANDARD_METADATA[parts[1]]
    assert parts[0] == "hdr", name
    struct = block(text, re.search(r"struct\s+headers_t\b", text).end())
    htype = re.search(rf"(\w+)\s+{parts[1]}\s*;", struct).group(1)
    header = block(text, re.search(rf"header\s+{htype}\b", text).end())
    wtype = re.search(rf"([\w<>]+)\s+{parts[2]}\s*;", header).group(1)
    return bit_width(wtype, typedefs)


def defines(text: str) -> dict[str, int]:
    return {n: int(v) for n, v in re.findall(r"#define\s+(\w+)\s+(\d+)\b", text)}


def test_every_table_and_field_the_backend_uses_is_in_the_p4info_and_the_source(info):
    text = source()
    typedefs = widths(text)
    consts = defines(text)
    for table, fields in p4_state.USED_TABLES.items():
        t = info.table(table)
        ctl, name = table.split(".")
        body = control(text, ctl)
        m = re.search(rf"\btable\s+{name}\s*\{{", body)
        assert m, f"table {table} not declared in mcast.p4"
        tbody = block(body, m.start())
        keys = re.findall(r"([\w.]+)\s*:\s*(exact|lpm|ternary|range|optional)\s*;", block(tbody, tbody.index("key")))
        assert [(f.name, f.match_kind) for f in t.fields] == keys  # the P4Info has exactly the source's keys
        for fname, kind in fields:
            f = t.field(fname)
            assert f.match_kind == kind
            assert f.bitwidth == field_width(fname, text, typedefs), fname
        size = re.search(r"size\s*=\s*(\w+)\s*;", tbody).group(1)
        assert t.size == consts.get(size, None) or str(t.size) == size, table


def test_every_action_and_parameter_the_backend_uses_is_in_the_p4info_and_the_source(info):
    text = source()
    typedefs = widths(text)
    for action, params in p4_state.USED_ACTIONS.items():
        a = info.action(action)
        ctl, name = action.split(".")
        m = re.search(rf"\baction\s+{name}\s*\(([^)]*)\)", control(text, ctl))
        assert m, f"action {action} not declared in mcast.p4"
        declared = [p.strip().rsplit(None, 1) for p in m.group(1).split(",") if p.strip()]
        assert [p.name for p in a.params] == [n for _, n in declared]
        for (ptype, pname), p in zip(declared, a.params):
            assert p.bitwidth == bit_width(ptype, typedefs), f"{action}.{pname}"
        assert [p.name for p in a.params] == list(params)
    # the tables that use them list them
    assert info.action(p4_state.SET_MCAST_GROUP).id in info.table(p4_state.MCAST_TABLE).action_ids
    assert info.action(p4_state.REWRITE_TO_UNICAST).id in info.table(p4_state.REWRITE_TABLE).action_ids
    lpm = info.table(p4_state.LPM_TABLE)
    assert lpm.implementation_id == info.profile(p4_state.ECMP_PROFILE).id
    assert info.action(p4_state.SET_EGRESS_PORT).id in lpm.action_ids
    assert info.profile(p4_state.ECMP_PROFILE).size == defines(text)["ECMP_MEMBERS"]


def test_controller_headers_match_the_source(info):
    text = source()
    typedefs = widths(text)
    for header, fields in p4_state.USED_PACKET_METADATA.items():
        h = info.packet_header(header)
        m = re.search(rf'@controller_header\("{header}"\)\s*header\s+(\w+)', text)
        assert m, f"no @controller_header(\"{header}\") in mcast.p4"
        declared = re.findall(r"([\w<>]+)\s+(\w+)\s*;", block(text, m.end()))
        assert [(f.name, f.bitwidth) for f in h.fields] == [(n, bit_width(t, typedefs)) for t, n in declared]
        for name in fields:
            h.field(name)
    assert defines(text)["CPU_PORT_NUMBER"] == 255


def test_meters_counters_and_constants_match_the_source(info):
    text = source()
    body = control(text, "McastIngress")
    for name, (unit, table) in p4_state.USED_METERS.items():
        m = info.meter(name)
        short = name.split(".")[1]
        if table is None:
            decl = re.search(rf"\bmeter\((\w+),\s*MeterType\.(\w+)\)\s+{short}\s*;", body)
            assert decl and m.direct_table_id == 0 and m.size == int(decl.group(1)), name
        else:
            decl = re.search(rf"\bdirect_meter<[\w<>]+>\(MeterType\.(\w+)\)\s+{short}\s*;", body)
            tbody = block(body, re.search(rf"\btable\s+{table.split('.')[1]}\s*\{{", body).start())
            assert decl and re.search(rf"meters\s*=\s*{short}\s*;", tbody), name
            assert m.direct_table_id == info.table(table).id
        assert m.unit == unit == decl.groups()[-1].upper(), name
    for name, table in p4_state.USED_DIRECT_COUNTERS.items():
        short = name.split(".")[1]
        assert re.search(rf"\bdirect_counter\(CounterType\.packets_and_bytes\)\s+{short}\s*;", body), name
        assert info.counter(name).direct_table_id == info.table(table).id and info.counter(name).unit == "BOTH"
    consts = defines(text)
    assert (consts["CPU_PORT_NUMBER"], consts["CPU_CLONE_SESSION"]) == (p4_state.CPU_PORT, p4_state.CPU_CLONE_SESSION)
    with pytest.raises(P4InfoError, match="no meter"):
        info.meter("McastIngress.nope")


def test_p4info_helper_refuses_unknown_names_and_values(info):
    with pytest.raises(P4InfoError, match="no table 'McastIngress.nope'"):
        info.table("McastIngress.nope")
    with pytest.raises(P4InfoError, match="no parameter"):
        info.action(p4_state.SET_EGRESS_PORT).param("group")
    with pytest.raises(P4InfoError, match="no table with id"):
        info.table_by_id(info.action(p4_state.MCAST_DROP).id)
    assert encode(0, 9) == b"\x00" and encode(511, 9) == b"\x01\xff" and encode(0xE0000001, 32) == bytes.fromhex("e0000001")
    assert decode(b"\x00\x00\x01\xff", 9) == 511
    with pytest.raises(ValueError):
        encode(512, 9)
    with pytest.raises(ValueError):
        decode(b"\x02\x00", 9)


def test_an_unreadable_p4info_is_a_located_error(tmp_path):
    bad = tmp_path / "x.txt"
    bad.write_text("tables { preamble { id: nope } }")
    with pytest.raises(P4InfoError, match="x.txt: not a P4Info"):
        P4Info.load(bad)
    with pytest.raises(P4InfoError, match="cannot read"):
        P4Info.load(tmp_path / "missing.txt")
