"""Signed LLDP probes (controller.southbound.lldp): round trip, forgery, staleness,
replay, the secret's config and store, and the config keys."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.config.load import config_from_dict
from controller.config.schema import LldpConfig
from controller.config.strict import ConfigError
from controller.southbound import lldp
from controller.southbound.lldp import Probe, ProbeSigner
from controller.store.sqlite import JobStore

SECRET = b"0123456789abcdef0123"
NOW = 1_800_000_000.0

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
ports = st.integers(0, 2**32 - 1)


def signer(secret: bytes = SECRET, max_age_s: float = 30.0) -> ProbeSigner:
    return ProbeSigner(secret, max_age_s, clock=lambda: NOW)


@settings(max_examples=200, deadline=None)
@given(names, ports)
def test_round_trip(switch, port):
    s = signer()
    frame = s.frame(switch, port)
    got = s.verify(frame, NOW + 1)
    assert isinstance(got, Probe)
    assert (got.switch, got.port, got.timestamp_ms) == (switch, port, int(NOW * 1000))
    assert lldp.parse_lldp(frame) == (switch, port)


def _signed_span(frame: bytes) -> tuple[int, int]:
    """From the chassis TLV to the end of the signed TLV: every byte but the TTL's
    is signed, is the MAC, or frames them."""
    return 14, len(frame) - 2  # up to the end TLV


@settings(max_examples=300, deadline=None)
@given(names, ports, st.data())
def test_any_bit_flip_in_the_signed_fields_is_refused(switch, port, data):
    s = signer()
    frame = bytearray(s.frame(switch, port))
    start, end = _signed_span(bytes(frame))
    ttl_at = frame.index(bytes([(3 << 9 | 2) >> 8, (3 << 9 | 2) & 0xFF]) + lldp.LLDP_TTL_S.to_bytes(2, "big"))
    skip = set(range(ttl_at, ttl_at + 4))  # the TTL TLV is not signed
    positions = [i for i in range(start, end) if i not in skip]
    i = data.draw(st.sampled_from(positions))
    bit = data.draw(st.integers(0, 7))
    frame[i] ^= 1 << bit
    got = s.verify(bytes(frame), NOW)
    assert not isinstance(got, Probe), (i, bit)
    assert got in lldp.REASONS


def test_each_refusal_reason():
    s = signer()
    assert s.verify(lldp.lldp_frame("s1", 3), NOW) == lldp.UNSIGNED
    assert s.verify(signer(b"another secret, long enough").frame("s1", 3), NOW) == lldp.BAD_SIGNATURE
    assert s.verify(s.frame("s1", 3, now=NOW - 31), NOW) == lldp.STALE
    assert s.verify(s.frame("s1", 3, now=NOW + 31), NOW) == lldp.STALE  # from the future
    assert isinstance(s.verify(s.frame("s1", 3, now=NOW - 29), NOW), Probe)
    frame = s.frame("s1", 3)
    assert isinstance(s.verify(frame, NOW), Probe)
    assert s.verify(frame, NOW + 1) == lldp.REPLAYED
    assert s.verify(frame, NOW + 31) == lldp.STALE
    # another LLDP speaker's frame, and what is not LLDP at all
    other = bytearray(lldp.lldp_frame("s1", 3))
    other[14 + 3] ^= 0xFF  # not our chassis prefix
    assert s.verify(bytes(other), NOW) == lldp.NOT_OURS
    assert s.verify(b"\x00" * 60, NOW) == lldp.NOT_OURS
    # a malformed signed TLV (too short) is unsigned
    short = lldp.lldp_frame("s1", 3, signature=b"\x00" * 10)
    assert s.verify(short, NOW) == lldp.UNSIGNED


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=16, max_size=64), st.binary(min_size=16, max_size=64), names, ports)
def test_a_wrong_secret_is_refused(a, b, switch, port):
    if a == b:
        return
    assert signer(b).verify(signer(a).frame(switch, port), NOW) == lldp.BAD_SIGNATURE


def test_nonces_are_bounded_and_forgotten_when_stale():
    s = ProbeSigner(SECRET, 30.0, clock=lambda: NOW, max_nonces=10)
    for i in range(25):
        assert isinstance(s.verify(s.frame("s1", i), NOW), Probe)
    assert s.remembered() == 10
    s.verify(s.frame("s1", 1, now=NOW + 40), NOW + 40)
    assert s.remembered() == 1


def test_a_secret_shorter_than_16_bytes_is_refused():
    with pytest.raises(ValueError):
        ProbeSigner(b"short")


def test_the_secret_from_the_config_else_kept_in_the_store(tmp_path):
    store = JobStore(tmp_path / "s.db")
    try:
        assert lldp.secret_for(LldpConfig(secret="x" * 16), store) == b"x" * 16
        assert store.get_state(lldp.STATE_KEY) is None
        first = lldp.secret_for(LldpConfig(), store)
        assert len(first) == 32
        assert lldp.secret_for(LldpConfig(), store) == first  # kept: a restart, another instance
    finally:
        store.close()
    again = JobStore(tmp_path / "s.db")
    try:
        assert lldp.secret_for(LldpConfig(), again) == first
    finally:
        again.close()


def test_config_keys(monkeypatch):
    base = {"topology": {"leaf_spine": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1}}}
    c = config_from_dict({**base, "southbound": {"lldp": {"secret": "s" * 16, "max_age_s": 10}}})
    assert c.southbound.lldp == LldpConfig("s" * 16, None, 10)
    monkeypatch.setenv("MCAST_LLDP_SECRET", "e" * 20)
    c = config_from_dict({**base, "southbound": {"lldp": {"secret_env": "MCAST_LLDP_SECRET"}}})
    assert c.southbound.lldp.secret == "e" * 20
    for bad, key in (({"secret": "short"}, "southbound.lldp.secret"),
                     ({"secret_env": "MCAST_NOT_SET_ANYWHERE"}, "southbound.lldp.secret_env"),
                     ({"secret": "s" * 16, "secret_env": "MCAST_LLDP_SECRET"}, "southbound.lldp.secret_env"),
                     ({"max_age_s": 0}, "southbound.lldp.max_age_s")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            config_from_dict({**base, "southbound": {"lldp": bad}})
    assert c.admit == "declared"
    assert config_from_dict({}).admit == "any"
    assert config_from_dict({"southbound": {"admit": "declared"}}).admit == "declared"
    assert config_from_dict({**base, "southbound": {"admit": "any"}}).admit == "any"
    with pytest.raises(ConfigError, match=r"southbound\.admit"):
        config_from_dict({"southbound": {"admit": "some"}})
    c = config_from_dict({"southbound": {"switches": {"s1": {"dpid": 1, "edge_ports": [1, 2]}}}})
    assert c.southbound.switches["s1"].edge_ports == (1, 2)
    assert c.admit == "declared"


def test_the_one_lldp_interval_under_its_name_or_its_older_one():
    def interval(southbound: dict) -> tuple[float, float]:
        sb = config_from_dict({"southbound": southbound}).southbound
        return sb.lldp.interval_s, sb.p4runtime.lldp_interval_s

    assert interval({}) == (5.0, 5.0)
    assert interval({"lldp": {"interval_s": 2}}) == (2.0, 2.0)
    assert interval({"p4runtime": {"lldp_interval_s": 3}}) == (3.0, 3.0)  # the older name
    assert interval({"lldp": {"interval_s": 0}}) == (0.0, 0.0)  # no probes
    with pytest.raises(ConfigError, match=r"southbound\.lldp\.interval_s.*older name"):
        interval({"lldp": {"interval_s": 2}, "p4runtime": {"lldp_interval_s": 3}})
    with pytest.raises(ConfigError, match=r"southbound\.p4runtime\.lldp_timeout_s.*must be > the LLDP interval"):
        interval({"lldp": {"interval_s": 20}})
    with pytest.raises(ConfigError, match=r"southbound\.lldp\.interval_s"):
        interval({"lldp": {"interval_s": -1}})
    # the timeout is checked against the interval wherever it is given
    assert interval({"lldp": {"interval_s": 1}, "p4runtime": {"lldp_timeout_s": 3}}) == (1.0, 1.0)
    with pytest.raises(ConfigError, match=r"lldp_timeout_s.*must be > the LLDP interval"):
        interval({"p4runtime": {"lldp_interval_s": 4, "lldp_timeout_s": 3}})
