"""Model broadcast over NORM (controller/client/norm.py, broadcast.py).

The pure parts (addressing, destinations, the info format) run anywhere. The
transfers run the real libnorm between processes in network namespaces of their
own (a PS and three workers on one Linux bridge, no Mininet, no Open vSwitch):
skipped, with the reason, when not root, when `ip` is missing, or when Debian's
libnorm1 is not installed. The bridge floods multicast to every port, so these
tests check the protocol and the library; the switches' unicast branches
(multicast packets rewritten to a worker's own address) are checked in
Mininet by tests/test_emulation_broadcast.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from controller.client import Job, encode_key
from controller.client import broadcast as bc
from controller.client import norm, normwire

REPO = Path(__file__).resolve().parent.parent
PEER = REPO / "mininet" / "norm_peer.py"
HOSTS = {"ps": "10.9.0.1", "w1": "10.9.0.2", "w2": "10.9.0.3", "w3": "10.9.0.4"}
IFACES = {"ps": "v1", "w1": "v2", "w2": "v3", "w3": "v4"}
KEY = bytes(range(100, 132))  # the jobs' broadcast key (as the registrant got it from the controller)


def job(mode: str = "multicast", ps_unicast: tuple[str, ...] = (), rate: float = 5e7, group: str = "239.1.0.5",
        job_id: str = "j1") -> dict:
    entries = [] if mode == "unicast" else ["edge-0-0"]
    return {"id": job_id, "ps": "ps", "workers": ["w1", "w2", "w3"], "demand": 1e8, "weight": 1.0,
            "group_address": group, "state": "planned", "rate": rate, "mode": mode,
            "structure": {"entries": entries, "ps_unicast": list(ps_unicast)}, "auth_key": encode_key(KEY)}


# -- pure -----------------------------------------------------------------------------------

def test_destinations_follow_the_plan():
    multicast = bc.destinations(Job.from_json(job()))
    assert multicast == [bc.Destination("239.1.0.5", ("w1", "w2", "w3"), True)]
    hybrid = bc.destinations(Job.from_json(job("hybrid", ("w3",))))
    assert hybrid == [bc.Destination("239.1.0.5", ("w1", "w2"), True), bc.Destination("w3", ("w3",), False)]
    unicast = bc.destinations(Job.from_json(job("unicast", ("w1", "w2", "w3"))))
    assert [d.address for d in unicast] == ["w1", "w2", "w3"] and not any(d.multicast for d in unicast)
    # a worker neither on a tree nor PS-addressed cannot be reached: refused, not ignored
    with pytest.raises(bc.BroadcastError, match="neither on a tree"):
        bc.destinations(Job.from_json(job("unicast", ("w1",))))
    pending = dict(job(), state="pending", rate=None, structure=None)
    with pytest.raises(bc.BroadcastError, match="not planned"):
        bc.destinations(Job.from_json(pending))


def test_port_and_node_ids():
    assert bc.port_for("239.1.0.5") == bc.port_for("239.1.0.5")
    ports = {bc.port_for(f"239.1.{i // 256}.{i % 256}") for i in range(4096)}
    assert len(ports) == 4096 and min(ports) >= 32768 and max(ports) <= 65535
    assert bc.node_id_for("10.0.0.1") == 0x0A000001
    with pytest.raises(bc.BroadcastError):
        bc.node_id_for("255.255.255.255")
    assert bc.resolve("host-1", {"host-1": "10.0.0.2"}) == "10.0.0.2"
    assert bc.resolve("10.0.0.7", None) == "10.0.0.7"
    with pytest.raises(bc.BroadcastError, match="no IPv4 address"):
        bc.resolve("host-9", {})


def test_info_round_trip_and_rate():
    digest = hashlib.sha256(b"abc").digest()
    info = bc.make_info(digest, 3, "resnet")
    assert bc.parse_info(info) == (digest, 3, "resnet")
    assert bc.parse_info(b"not ours") is None and bc.parse_info(None) is None


def test_wire_accounting():
    # MTU 1500: a 1440-byte segment is a 1472-byte NORM message, one 1514-byte frame
    assert normwire.max_segment(1500) == 1440 and normwire.max_segment(9000) == 8940
    assert normwire.fragments(1472) == 1 and normwire.frame_bytes(1472) == 1514
    # one byte more leaves as two packets: the second fragment has its own IPv4 and Ethernet headers
    assert normwire.fragments(1473) == 2 and normwire.frame_bytes(1473) == 1473 + 8 + 2 * 34
    # 5880 bytes of data fill four fragments of 1480 bytes exactly (with the UDP and NORM headers)
    assert normwire.fragments(5880 + 32) == 4 and normwire.frame_bytes(5912) == 4 * 1514
    assert normwire.data_share(1440) == pytest.approx(1440 / 1514)
    assert normwire.data_share(5880) == pytest.approx(5880 / 6056)
    # the plan is a payload rate: NORM's rate (messages only) sends the segments at the asked
    # share of it, their frames then at that share of the meter's rate (plan x 1514/1440)
    for segment in (1440, 5880, 8840):
        r = normwire.norm_rate(9e6, 0.995, segment)
        message = segment + normwire.NORM_DATA_HEADER
        assert r * segment / message == pytest.approx(9e6 * 0.995)
        assert r * normwire.frame_bytes(message) / message <= 9e6 * normwire.WIRE_FACTOR * 0.995 * (1 + 1e-12)
    assert normwire.norm_rate(9e6, 0.995, 1440) * 1514 / 1472 == pytest.approx(9e6 * 1514 / 1440 * 0.995)
    # smaller segments carry more headers per byte than the controller reserved: less payload,
    # the frames still at the share of the meter's rate
    r = normwire.norm_rate(9e6, 0.995, 1000)
    assert r * normwire.frame_bytes(1032) / 1032 == pytest.approx(9e6 * normwire.WIRE_FACTOR * 0.995)
    assert r * 1000 / 1032 < 9e6 * 0.995
    assert bc.norm_rate is normwire.norm_rate


def test_the_clients_wire_factor_is_the_controllers():
    # the client (standard library only) keeps a copy of the factor the planner and the meters use
    from controller.algorithm import wire

    assert normwire.WIRE_FACTOR == wire.wire_factor() == pytest.approx(1514 / 1440)
    assert normwire.max_segment(normwire.DEFAULT_MTU) == wire.SEGMENT
    assert normwire.frame_bytes(wire.SEGMENT + normwire.NORM_DATA_HEADER) == wire.SEGMENT + wire.HEADER


def test_sender_refuses_bad_settings_before_opening_anything():
    j = Job.from_json(job())
    for options, field in (({"segment": 10}, "segment"), ({"segment": 0}, "segment"), ({"mtu": 0}, "mtu"), ({"segment": 70000}, "segment"), ({"mtu": 100}, "mtu"),
                           ({"rate_share": 1.2}, "rate_share"), ({"rate_share": 0}, "rate_share"),
                           ({"grtt": 0}, "grtt"), ({"backoff": -1}, "backoff"), ({"tos": 256}, "tos"),
                           ({"tos": -1}, "tos"), ({"buffer_bytes": 1024}, "buffer_bytes"),
                           ({"buffer_bytes": 4 << 30}, "buffer_bytes"), ({"buffer_bytes": 8.5e6}, "buffer_bytes")):
        with pytest.raises(ValueError, match=field):
            bc.Sender(j, HOSTS, **options)
    for bad in (0, 4 << 30, True):
        with pytest.raises(ValueError, match="buffer_bytes"):
            bc.Receiver(j, HOSTS, me="w1", buffer_bytes=bad)


def test_the_hmac_check():
    digest = hashlib.sha256(b"weights").digest()
    good = bc.make_info(digest, 7, "j1", KEY, seq=5)
    assert bc.info_refusal(good, KEY, "j1") is None
    assert bc.parse_info(good) == (digest, 7, "j1")
    # a wrong key, a tampered digest, length or sequence, another job, no signature, no info
    assert "HMAC" in bc.info_refusal(good, bytes(32), "j1")
    parsed = bc.parse_signed(good)
    for field, value in (("digest", hashlib.sha256(b"forged").digest()), ("size", 8), ("seq", 6)):
        tampered = bc.make_info(*(dict(parsed._asdict(), **{field: value})[k] for k in ("digest", "size", "job_id")),
                                seq=dict(parsed._asdict(), **{field: value})["seq"])
        tampered = tampered[:-len(b"j1") - 32] + parsed.mac + b"j1"  # the original HMAC kept
        assert "HMAC" in bc.info_refusal(tampered, KEY, "j1"), field
    assert "of job 'j2'" in bc.info_refusal(bc.make_info(digest, 7, "j2", KEY, seq=5), KEY, "j1")
    assert "HMAC" in bc.info_refusal(bc.make_info(digest, 7, "j1", None, seq=5), KEY, "j1")
    assert "unauthenticated" in bc.info_refusal(None, KEY, "j1")
    assert "unauthenticated" in bc.info_refusal(b"MCBN1" + digest, KEY, "j1")
    # an old object replayed: refused once a later one was accepted
    assert "replay" in bc.info_refusal(good, KEY, "j1", after_seq=5)
    assert bc.info_refusal(good, KEY, "j1", after_seq=4) is None


def test_no_key_no_broadcast():
    unkeyed = Job.from_json(dict(job(), auth_key=None))
    with pytest.raises(bc.BroadcastError, match="needs the job's broadcast key"):
        bc.Sender(unkeyed, HOSTS)
    with pytest.raises(bc.BroadcastError, match="needs the job's broadcast key"):
        bc.Receiver(unkeyed, HOSTS, me="w1")
    with pytest.raises(bc.BroadcastError, match="32 bytes"):
        bc.Receiver(unkeyed, HOSTS, me="w1", key=b"short")


def test_missing_library_is_a_clear_error(tmp_path):
    with pytest.raises(norm.NormUnavailable, match="apt-get install libnorm1"):
        norm.load(str(tmp_path / "libnorm-nowhere.so"), fallback=False)


# -- real NORM over loopback, in this process (libnorm only, no root) ------------------------

LOOPBACK = {"ps": "127.0.0.1", "w1": "127.0.0.2", "w2": "127.0.0.3", "w3": "127.0.0.4"}
needs_libnorm = pytest.mark.skipif(not norm.available(), reason="libnorm1 is not installed (apt-get install libnorm1)")


@needs_libnorm
def test_set_rate_changes_every_session_s_norm_rate():
    # the controller raised the job's payload rate: NORM's rate of every session (as libnorm
    # reports it) follows, computed as at the start (with the Sender's own rate_share)
    j = Job.from_json(job("unicast", ("w1", "w2", "w3"), rate=4e6, job_id="j-set-rate"))
    with bc.Sender(j, LOOPBACK, mtu=1500, rate_share=0.9) as tx:
        assert tx.rate == pytest.approx(normwire.norm_rate(4e6, 0.9, tx.segment, 1500))
        tx.set_rate(9e6)
        assert tx.rate == pytest.approx(normwire.norm_rate(9e6, 0.9, tx.segment, 1500))
        assert len(tx.sessions) == 3
        assert [tx.lib.NormGetTxRate(s) for s in tx.sessions] == pytest.approx([tx.rate] * 3)
        for bad in (0, -1e6, float("nan"), float("inf"), "fast"):
            with pytest.raises(ValueError):
                tx.set_rate(bad)
        assert [tx.lib.NormGetTxRate(s) for s in tx.sessions] == pytest.approx([tx.rate] * 3)
        assert tx.rate == pytest.approx(normwire.norm_rate(9e6, 0.9, tx.segment, 1500))  # the bad ones changed nothing
    with pytest.raises(bc.BroadcastError, match="closed"):
        tx.set_rate(1e6)  # never a call on freed sessions


@needs_libnorm
def test_a_rate_raised_mid_send_takes_effect_at_once():
    # a PS sends 600 kB to one worker at 2 Mbit/s (2.4 s at least: NORM's pacing never goes
    # faster than asked, only slower on a loaded machine); 0.3 s in, another thread raises
    # the rate tenfold: the object is confirmed within 60 % of the time the first rate needs
    # (about 0.6 s: 0.3 s at 2, the rest at 20 Mbit/s). Without set_rate acting during the
    # send, it could not finish before 2.4 s
    j = Job.from_json(dict(job("unicast", ("w1",), rate=2e6, job_id="j-raise"), workers=["w1"]))
    data = os.urandom(600_000)
    got: list = []
    # the worker's socket bound to its own address: the PS's sessions bind the job's port on
    # the wildcard address in this namespace too, and the kernel would share the data among them
    with bc.Receiver(j, LOOPBACK, me="w1", bind="127.0.0.2") as rx, bc.Sender(j, LOOPBACK, mtu=1500) as tx:
        sent = threading.Event()

        def worker() -> None:
            got.append(rx.receive(timeout=30))
            rx.finish(30, sent)

        threads = [threading.Thread(target=worker, daemon=True),
                   threading.Timer(0.3, tx.set_rate, args=(2e7,))]
        for t in threads:
            t.start()
        try:
            report = tx.send(data, timeout=30)
        finally:
            sent.set()
            for t in threads:
                t.join(30)
    assert got == [data]
    floor = len(data) * 8 / (2e6 * 0.995)
    assert report.seconds < 0.6 * floor, (report.seconds, floor)
    assert report.tx_rate_bps == pytest.approx(normwire.norm_rate(2e7, 0.995, tx.segment, 1500))  # at the end


# -- real NORM between network namespaces ----------------------------------------------------

def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    if not norm.available():
        return "libnorm1 is not installed (apt-get install libnorm1)"
    return None


needs_netns = pytest.mark.skipif(_unavailable() is not None, reason=_unavailable() or "")


class Net:
    """A PS and three workers, each in its own namespace, on one bridge."""

    def __init__(self) -> None:
        self.prefix = f"nb{uuid.uuid4().hex[:6]}"
        self.names = [self.prefix + "hub"] + [self.prefix + n for n in HOSTS]
        try:
            self._build()
        except BaseException:
            self.close()  # no namespace left behind by a half-built net
            raise

    def _build(self) -> None:
        hub = self.ns("hub")
        self._ip("netns", "add", hub)
        self._ip("-n", hub, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
        self._ip("-n", hub, "link", "set", "br0", "up")
        for i, (name, addr) in enumerate(HOSTS.items(), start=1):
            ns = self.ns(name)
            self._ip("netns", "add", ns)
            self._ip("link", "add", IFACES[name], "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns", hub)
            self._ip("-n", hub, "link", "set", f"p{i}", "master", "br0", "up")
            self._ip("-n", ns, "addr", "add", f"{addr}/24", "dev", IFACES[name])
            self._ip("-n", ns, "link", "set", IFACES[name], "up")
            self._ip("-n", ns, "link", "set", "lo", "up")

    def ns(self, name: str) -> str:
        return self.prefix + name

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def link(self, host: str, up: bool) -> None:
        self._ip("-n", self.ns(host), "link", "set", IFACES[host], "up" if up else "down")

    def peer(self, host: str, spec: dict) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns(host), sys.executable, str(PEER), json.dumps(spec)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=REPO)

    def close(self) -> None:
        for n in self.names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


@pytest.fixture(scope="module")
def net():
    n = Net()
    try:
        yield n
    finally:
        n.close()


@pytest.fixture(scope="module")
def blob(tmp_path_factory) -> tuple[Path, str]:
    data = os.urandom(2_000_000)
    path = tmp_path_factory.mktemp("norm") / "object.bin"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def run(net: Net, j: dict, blob: tuple[Path, str], *, receivers=("w1", "w2", "w3"), rx_options=None,
        send_extra=None, objects: int = 1, rx_timeout: float = 30.0, during=None,
        rx_extra=None) -> tuple[dict, dict]:
    """Start the receivers, then the sender; `during(sender_proc)` runs while it
    sends. Returns (sender outcome, {worker: receiver outcome})."""
    rx = {}
    for w in receivers:
        spec = {"role": "receive", "job": j, "hosts": HOSTS, "me": w, "timeout": rx_timeout, "objects": objects,
                "options": (rx_options or {}).get(w, {})}
        spec.update(rx_extra or {})
        rx[w] = net.peer(w, spec)
    for w, p in rx.items():  # each prints {"ready": true} once its session is open
        line = p.stdout.readline()
        assert json.loads(line) == {"ready": True}, (w, line, p.stderr.read() if p.poll() is not None else "")
    spec = {"role": "send", "job": j, "hosts": HOSTS, "data": str(blob[0]), "timeout": 30.0, "objects": objects}
    spec.update(send_extra or {})
    tx = net.peer("ps", spec)
    if during:
        during(tx)
    out, err = tx.communicate(timeout=120)
    sent = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"stderr": err}
    for p in rx.values():  # receivers with `finish` leave now (the others ignore it)
        try:
            p.stdin.write("stop\n")
            p.stdin.flush()
        except OSError:
            pass
    got = {}
    for w, p in rx.items():
        o, e = p.communicate(timeout=120)
        got[w] = json.loads(o.strip().splitlines()[-1]) if o.strip() else {"stderr": e}
    return sent, got


def intact(got: dict, sha: str, size: int) -> bool:
    return all(r.get("results") and all(x.get("ok") and x["sha256"] == sha and x["size"] == size
                                         for x in r["results"]) for r in got.values())


@needs_netns
def test_multicast_job_every_byte_intact_through_5_percent_receive_loss(net, blob):
    # each receiver drops 5% of what it receives (NormSetRxLoss): NACKs by unicast to the
    # PS, repairs by parity; every worker still gets the exact object and confirms it
    loss = {w: {"rx_loss": 5.0} for w in ("w1", "w2", "w3")}
    sent, got = run(net, job(), blob, rx_options=loss)
    assert "error" not in sent, sent
    assert intact(got, blob[1], blob[0].stat().st_size), got
    (session,) = sent["report"]["sessions"]
    assert session[0] == "239.1.0.5" and session[2] is True and sorted(session[3]) == ["w1", "w2", "w3"]


@needs_netns
def test_hybrid_and_unicast_jobs_reach_ps_addressed_workers_by_unicast(net, blob):
    size = blob[0].stat().st_size
    sent, got = run(net, job("hybrid", ("w3",), group="239.1.0.6", job_id="j-hybrid"), blob)
    assert "error" not in sent, sent
    assert intact(got, blob[1], size), got
    sessions = {s[0]: s for s in sent["report"]["sessions"]}
    assert sessions["239.1.0.6"][3] == ["w1", "w2"] and sessions["w3"][2] is False and sessions["w3"][3] == ["w3"]

    sent, got = run(net, job("unicast", ("w1", "w2", "w3"), group="239.1.0.7", job_id="j-unicast"), blob,
                    rx_options={w: {"rx_loss": 3.0} for w in ("w1", "w2", "w3")})
    assert "error" not in sent, sent
    assert intact(got, blob[1], size), got
    assert sorted(s[0] for s in sent["report"]["sessions"]) == ["w1", "w2", "w3"]


def _tx_bytes(net: Net, host: str) -> int:
    out = subprocess.run(["ip", "-n", net.ns(host), "-s", "-j", "link", "show", IFACES[host]], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)[0]["stats64"]["tx"]["bytes"]


@needs_netns
@pytest.mark.parametrize("segment", [None, 5880])
def test_segments_leave_the_ps_at_the_planned_rate(net, blob, segment):
    # the plan is a payload rate (2 MB at 4 Mbit/s here): NORM is set to send the segments at
    # rate_share (0.995) of it (exact: the report's tx rate); the PS's interface counts every
    # frame it sends (Ethernet header on, as the switch's meter does), and over the whole
    # object its frames are the object's bytes times frame / segment bytes (1514 / 1440 with
    # the most MTU 1500 allows, 6056 / 5880 with 4-fragment segments), plus the object's info,
    # NORM's commands and probes (within 2 %). In the middle of the object the frames never
    # leave faster than 0.995 of the meter's rate (plan x 1514/1440) allows, within 3 %;
    # slower only when the machine is loaded (libnorm's pacing loses time when its thread runs
    # late: measured 0.56-0.85 of it with the emulations of other sessions running), so the
    # lower bound is loose. The accounting before (frames at the plan: NORM at 0.9674 of it)
    # fails the tx rate
    rate, samples = 4e6, []
    seg = segment or normwire.max_segment(1500)
    frame_per_byte = normwire.frame_bytes(seg + normwire.NORM_DATA_HEADER) / seg

    def stamp() -> tuple[float, int]:
        t0 = time.monotonic()
        n = _tx_bytes(net, "ps")
        return (t0 + time.monotonic()) / 2, n  # a busy machine may take a while to run `ip`

    def sample(_tx):
        samples.append(stamp())  # the sender's process is starting: nothing sent yet
        time.sleep(0.7)  # past the start (the object's info, the first probe)
        samples.append(stamp())
        time.sleep(2.5)
        samples.append(stamp())

    extra = {"options": {"segment": segment}} if segment else {}
    group = "239.1.0.14" if segment is None else "239.1.0.15"
    sent, got = run(net, job(rate=rate, group=group, job_id=f"j-rate-{segment}"), blob, send_extra=extra,
                    during=sample)
    end = stamp()
    assert "error" not in sent, sent
    assert intact(got, blob[1], blob[0].stat().st_size), got
    assert sent["report"]["tx_rate_bps"] == pytest.approx(normwire.norm_rate(rate, 0.995, seg))
    assert sent["report"]["tx_rate_bps"] * seg / (seg + normwire.NORM_DATA_HEADER) == pytest.approx(0.995 * rate)
    (_, b_start), (t0, b0), (t1, b1) = samples
    size = blob[0].stat().st_size
    assert size * frame_per_byte <= end[1] - b_start <= size * frame_per_byte * 1.02, (end[1] - b_start, size)
    frames_bps = (b1 - b0) * 8 / (t1 - t0)
    meter_share = 0.995 * rate * normwire.WIRE_FACTOR
    assert 0.5 * meter_share <= frames_bps <= meter_share * 1.03, (frames_bps, meter_share)


@needs_netns
def test_a_worker_stays_until_the_ps_has_its_confirmation(net, blob):
    # every worker loses 20 % of what it receives, so it completes the object on a repair;
    # with `finish` it then answers the PS until told the PS's send returned, and the PS has
    # every confirmation. Leaving at once instead (linger 0: what a fixed linger shorter
    # than NORM's interval between acknowledgement requests amounts to on a loaded fabric)
    # fails the PS's send with BroadcastIncomplete: checked, in 3 runs of 3
    loss = {w: {"rx_loss": 20.0} for w in ("w1", "w2", "w3")}
    sent, got = run(net, job(rate=2e7, group="239.1.0.16", job_id="j-finish"), blob, rx_options=loss,
                    send_extra={"timeout": 15.0}, rx_extra={"finish": 60.0})
    assert "error" not in sent, sent
    assert intact(got, blob[1], blob[0].stat().st_size), got
    assert sorted(w for s in sent["report"]["sessions"] for w in s[3]) == ["w1", "w2", "w3"], sent
    # each left when told (long before its 60 s)
    assert all(r["finished"] and r["closed_at"] - r["results"][0]["done_at"] < 30 for r in got.values()), got


@needs_netns
def test_successive_objects_on_one_session_each_checked(net, blob):
    # the example's iterations: one Sender and one Receiver, several objects in order
    sent, got = run(net, job(group="239.1.0.8", job_id="j-iter"), blob, objects=3, send_extra={"objects": 3})
    assert "error" not in sent, sent
    assert all(len(r["results"]) == 3 for r in got.values()), got
    assert intact(got, blob[1], blob[0].stat().st_size), got


@needs_netns
def test_an_object_whose_digest_does_not_match_is_refused(net, blob):
    # the sender announces the SHA-256 of other bytes: NORM delivers the object whole,
    # and every receiver refuses it (CorruptObject) instead of returning it
    sent, got = run(net, job(group="239.1.0.9", job_id="j-lie"), blob, send_extra={"lie": True, "ack_timeout": 5})
    for w, r in got.items():
        (res,) = r["results"]
        assert res == {"ok": False, "error": "CorruptObject", "message": res["message"]}, (w, r)
        assert "SHA-256" in res["message"] and "refused" in res["message"]


@needs_netns
def test_worker_cut_off_mid_transfer_is_repaired(net, blob):
    # w2's link goes down for 1 s in the middle of a 2 MB object at 8 Mbit/s (about 2 s):
    # w2 NACKs what it missed once back, and gets the exact object; nobody gets bad data
    def cut(_tx):
        time.sleep(0.9)
        net.link("w2", False)
        time.sleep(1.0)
        net.link("w2", True)

    sent, got = run(net, job(rate=8e6, group="239.1.0.10", job_id="j-cut"), blob, during=cut)
    assert "error" not in sent, sent
    assert intact(got, blob[1], blob[0].stat().st_size), got


@needs_netns
def test_sender_gone_mid_transfer_is_reported_never_returned(net, blob):
    # the PS dies a second into a 4 s object: no worker returns data; each reports it
    def kill(tx):
        time.sleep(1.5)
        tx.kill()

    sent, got = run(net, job(rate=4e6, group="239.1.0.11", job_id="j-dead"), blob, during=kill, rx_timeout=8.0)
    for w, r in got.items():
        (res,) = r["results"]
        assert res["ok"] is False and res["error"] in ("ReceiveTimeout", "IncompleteObject"), (w, r)
        assert "missing" in res["message"] or "aborted" in res["message"]


@needs_netns
def test_a_worker_that_never_listens_is_named_by_the_sender(net, blob):
    sent, got = run(net, job(group="239.1.0.12", job_id="j-absent"), blob, receivers=("w1", "w2"),
                    send_extra={"timeout": 6.0})
    assert sent.get("error") == "BroadcastIncomplete" and sent["missing"] == ["w3"], sent
    assert intact(got, blob[1], blob[0].stat().st_size), got


@needs_netns
def test_forged_senders_are_refused_and_the_real_object_received_intact(net, blob, tmp_path):
    # two forgers on the job's group, with this library's info layout: one from another host
    # (w3's address) that even holds the job's key (only the source check stops it), one from
    # the PS's own host (its address) with a wrong key (only the HMAC stops it). Each worker
    # refuses both (logged, with the sender's address), delivers neither, and then receives
    # the PS's real object intact.
    j = job(group="239.1.0.13", job_id="j-forged")
    forged = tmp_path / "forged.bin"
    forged.write_bytes(os.urandom(200_000))
    wrong = encode_key(bytes(32))
    rx = {}
    for w in ("w1", "w2"):
        spec = {"role": "receive", "job": j, "hosts": HOSTS, "me": w, "timeout": 40.0, "objects": 1}
        rx[w] = net.peer(w, spec)
    for w, p in rx.items():
        assert json.loads(p.stdout.readline()) == {"ready": True}, w
    forgers = [
        net.peer("w3", {"role": "send", "job": j, "hosts": HOSTS, "data": str(forged), "timeout": 4.0,
                        "options": {"me": "w3"}}),
        net.peer("ps", {"role": "send", "job": j, "hosts": HOSTS, "data": str(forged), "timeout": 4.0,
                        "auth_key": wrong, "options": {"node_ids": {"ps": 0x0A09FF01}}}),
    ]
    for f in forgers:  # each sent its object (NORM may confirm a cancelled one: that is no delivery)
        out, err = f.communicate(timeout=60)
        outcome = json.loads(out.strip().splitlines()[-1])
        assert "start_at" in outcome, (outcome, err)
    real = net.peer("ps", {"role": "send", "job": j, "hosts": HOSTS, "data": str(blob[0]), "timeout": 8.0})
    out, err = real.communicate(timeout=120)
    sent = json.loads(out.strip().splitlines()[-1])
    assert sent.get("error") in (None, "BroadcastIncomplete"), (sent, err)  # w3 does not listen
    assert "missing" not in sent or sent["missing"] == ["w3"], sent
    got, logs = {}, {}
    for w, p in rx.items():
        o, e = p.communicate(timeout=120)
        got[w], logs[w] = json.loads(o.strip().splitlines()[-1]), e
    assert intact(got, blob[1], blob[0].stat().st_size), got
    for w, r in got.items():
        reasons = {(addr, why.split(" (")[0].split(":")[0]) for addr, why in r["refused"]}
        assert ("10.9.0.4", "not the job's PS") in reasons, (w, r["refused"])
        assert any(addr == "10.9.0.1" and "HMAC" in why for addr, why in r["refused"]), (w, r["refused"])
        assert "refused an object from NORM sender 10.9.0.4" in logs[w] and "HMAC" in logs[w], logs[w]


# every distinct (source, sport, destination, dport, TOS byte) of the IPv4/UDP frames an
# interface receives, until a line on stdin (then printed as JSON); the ports are None in
# a fragment after the first (no UDP header)
_UDP_CAPTURE = r"""
import json, select, socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0800))
s.bind((sys.argv[1], 0))
print("ready", flush=True)
seen = set()
while True:
    r, _, _ = select.select([s, sys.stdin], [], [], 1.0)
    if sys.stdin in r:
        break
    if s in r:
        frame = s.recv(65535)
        ihl = (frame[14] & 15) * 4
        if len(frame) > 34 and frame[23] == 17:
            u = 14 + ihl
            first = int.from_bytes(frame[20:22], "big") & 0x1FFF == 0 and len(frame) >= u + 4
            sport, dport = (int.from_bytes(frame[u:u + 2], "big"), int.from_bytes(frame[u + 2:u + 4], "big")) \
                if first else (None, None)
            seen.add((socket.inet_ntoa(frame[26:30]), sport, socket.inet_ntoa(frame[30:34]), dport, frame[15]))
print(json.dumps(sorted(seen, key=str)), flush=True)
"""


def _captures(net, hosts) -> dict[str, subprocess.Popen]:
    """`_UDP_CAPTURE` on each of `hosts`' interfaces, ready."""
    caps = {h: subprocess.Popen(["ip", "netns", "exec", net.ns(h), sys.executable, "-c", _UDP_CAPTURE, IFACES[h]],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for h in hosts}
    for h, c in caps.items():
        assert c.stdout.readline().strip() == "ready", (h, c.stderr.read())
    return caps


def _captured(caps) -> dict[str, list[tuple]]:
    """Stop the captures: host -> its (source, sport, destination, dport, TOS) records."""
    seen = {}
    for h, c in caps.items():
        out, _ = c.communicate("stop\n", timeout=30)
        seen[h] = [tuple(x) for x in json.loads(out.strip().splitlines()[-1])]
    return seen


@needs_netns
def test_tos_marks_the_sessions_packets_both_ways(net, blob):
    # `tos` on the Sender marks its data (and commands); on a Receiver, its NACKs and ACKs:
    # what a fabric that prioritises the planned class needs (docs/emulation.md)
    caps = _captures(net, ("ps", "w1"))
    tos = 46 << 2  # DSCP EF
    sent, got = run(net, job(group="239.1.0.21", job_id="j-tos"), blob, send_extra={"options": {"tos": tos}},
                    rx_options={w: {"tos": tos} for w in ("w1", "w2", "w3")})
    seen = {}  # host -> {source: sorted TOS bytes of every frame from it}
    for h, records in _captured(caps).items():
        by_source: dict[str, set[int]] = {}
        for src, _, _, _, t in records:
            by_source.setdefault(src, set()).add(t)
        seen[h] = {src: sorted(ts) for src, ts in by_source.items()}
    assert "error" not in sent, sent
    assert intact(got, blob[1], blob[0].stat().st_size), got
    assert seen["w1"].get(HOSTS["ps"]) == [tos], seen  # every frame from the PS
    assert seen["ps"].get(HOSTS["w1"]) == [tos], seen  # every answer of the worker
    with pytest.raises(ValueError, match="tos"):
        bc.Receiver(Job.from_json(job()), HOSTS, me="w1", tos=300)


@needs_netns
def test_the_sessions_ports_are_what_the_planned_class_matches(net, blob):
    # southbound.planned_dscp: the PS's data go to the job's port (`port_for`) from an
    # ephemeral port of its own per session; the workers' NACKs and ACKs (unicast, to
    # the PS) leave from the job's port, toward the session's ephemeral port
    caps = _captures(net, ("ps", "w1", "w3"))
    j = job("hybrid", ("w3",), group="239.1.0.22", job_id="j-ports")
    port = bc.port_for("239.1.0.22")
    sent, got = run(net, j, blob)
    # (source, sport, destination, dport) of every datagram's first fragment
    seen = {h: sorted({r[:4] for r in records if r[1] is not None}) for h, records in _captured(caps).items()}
    assert "error" not in sent, sent
    assert intact(got, blob[1], blob[0].stat().st_size), got

    data = {x for x in seen["w1"] + seen["w3"] if x[0] == HOSTS["ps"]}
    assert {x[2] for x in data} == {"239.1.0.22", HOSTS["w3"]}, seen  # the group session, w3's own
    assert {x[3] for x in data} == {port}, seen
    assert all(x[1] != port for x in data), seen  # sent from ephemeral ports
    feedback = [x for x in seen["ps"] if x[0] in (HOSTS["w1"], HOSTS["w3"])]
    assert {x[0] for x in feedback} == {HOSTS["w1"], HOSTS["w3"]}, seen
    assert {(x[1], x[2]) for x in feedback} == {(port, HOSTS["ps"])}, seen
    assert {x[3] for x in feedback} <= {x[1] for x in data}, seen


@needs_netns
def test_default_buffers_keep_the_peers_small(net, blob):
    # NORM allocates and touches a session's whole buffer when it starts (a receiver: when it
    # first hears the PS); the old 64 MiB default cost 0.12 s of CPU and ~200 MB per
    # 3-destination PS, and stalled every peer's NORM thread when a cluster's jobs started at
    # once (docs/emulation.md, "NORM's buffers"). The same hybrid job (3 sessions) with the
    # default buffers and with 64 MiB ones: every byte arrives either way, the default's peers
    # stay far smaller.
    j = job("hybrid", ps_unicast=("w2", "w3"))
    peaks = {}
    for label, size in (("default", None), ("64 MiB", 64 << 20)):
        options = {} if size is None else {"buffer_bytes": size}
        sent, got = run(net, j, blob, rx_options={w: options for w in ("w1", "w2", "w3")},
                        send_extra={"options": options})
        assert "error" not in sent, sent
        assert intact(got, blob[1], blob[0].stat().st_size), got
        peaks[label] = (sent["maxrss_kb"] >> 10, max(g["maxrss_kb"] for g in got.values()) >> 10)
    print("peak MB (PS, largest worker):", peaks)
    # measured (each peer's VmHWM): PS 53 against 222 MB, largest worker 37 against 93 MB
    assert peaks["default"][0] < 100 and peaks["default"][1] < 60, peaks
    assert peaks["64 MiB"][0] > peaks["default"][0] + 100 and peaks["64 MiB"][1] > peaks["default"][1] + 30, peaks


def _line(proc: subprocess.Popen, timeout: float = 60.0) -> dict:
    """The next JSON line of a peer, or a failed test (never a hang)."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert box and box[0], f"no line within {timeout} s: {proc.stderr.read() if proc.poll() is not None else ''}"
    return json.loads(box[0])


@needs_netns
def test_kept_sessions_send_one_object_per_request(net, blob):
    # norm_peer's serve mode, as the iteration benchmark keeps a job's sessions open across its
    # iterations: one Sender and its Receivers, an object per "send", each worker's outcome a
    # line as soon as it holds the object; a hybrid job, so a multicast and a unicast session
    j = job("hybrid", ps_unicast=("w3",))
    rx = {w: net.peer(w, {"role": "receive", "job": j, "hosts": HOSTS, "me": w, "serve": True})
          for w in ("w1", "w2", "w3")}
    tx = None
    try:
        for p in rx.values():
            assert _line(p) == {"ready": True}
        tx = net.peer("ps", {"role": "send", "job": j, "hosts": HOSTS, "data": str(blob[0]), "timeout": 30.0,
                             "serve": True})
        assert _line(tx) == {"ready": True}
        ends = []
        for _ in range(2):
            tx.stdin.write("send\n")
            tx.stdin.flush()
            sent = _line(tx)
            assert "error" not in sent, sent
            assert sorted(w for s in sent["report"]["sessions"] for w in s[3]) == ["w1", "w2", "w3"]
            for w, p in rx.items():
                got = _line(p)
                assert got["ok"] and got["sha256"] == blob[1] and got["size"] == blob[0].stat().st_size, (w, got)
                assert sent["start_at"] < got["done_at"] <= sent["end_at"] + 5.0, (w, got, sent)
            ends.append(sent["end_at"])
        tx.stdin.write("quit\n")
        tx.stdin.flush()
        assert _line(tx)["role"] == "send"
        for p in rx.values():
            p.stdin.write("stop\n")
            p.stdin.flush()
            final = _line(p)
            assert final["role"] == "receive" and final["refused"] == [] and final["closed_at"] > ends[-1]
    finally:
        for p in [*rx.values(), tx]:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


@needs_netns
def test_a_serving_sender_takes_rate_lines_at_once_even_mid_send(net, tmp_path):
    # norm_peer's serve mode reads stdin in a thread: "rate <bps>" applies at once, even while a
    # send runs (the harness raises a broadcasting job's rate); the outcome lists the rates set
    # during the send. 600 kB at 2 Mbit/s need 2.4 s at least; raised tenfold 0.3 s in, the
    # object is confirmed within 60 % of that. Bad rate lines are reported on stderr and
    # ignored; a rate set between sends holds for the next; "quit" during a send ends after it
    data = os.urandom(600_000)
    path = tmp_path / "object.bin"
    path.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    j = job(rate=2e6, group="239.1.0.21", job_id="j-serve-rate")
    rx = {w: net.peer(w, {"role": "receive", "job": j, "hosts": HOSTS, "me": w, "serve": True})
          for w in ("w1", "w2", "w3")}
    tx = None

    def tell(line: str) -> None:
        tx.stdin.write(line + "\n")
        tx.stdin.flush()

    def worker_lines() -> None:
        for w, p in rx.items():
            got = _line(p)
            assert got["ok"] and got["sha256"] == sha, (w, got)

    try:
        for p in rx.values():
            assert _line(p) == {"ready": True}
        tx = net.peer("ps", {"role": "send", "job": j, "hosts": HOSTS, "data": str(path), "timeout": 30.0,
                             "serve": True})
        assert _line(tx) == {"ready": True}
        for bad in ("rate fast", "rate -1", "rate", "rate 1e6 2e6", "rate nan"):
            tell(bad)
        tell("send")
        time.sleep(0.3)
        tell("rate 2e7")
        sent = _line(tx)
        assert "error" not in sent, sent
        worker_lines()
        floor = len(data) * 8 / (2e6 * 0.995)
        assert sent["report"]["seconds"] < 0.6 * floor, (sent["report"]["seconds"], floor)
        ((at, bps),) = sent["rates"]
        assert bps == 2e7 and sent["start_at"] < at < sent["end_at"], sent
        seg = normwire.max_segment(1500)
        assert sent["report"]["tx_rate_bps"] == pytest.approx(normwire.norm_rate(2e7, 0.995, seg))
        tell("rate 2e6")  # between sends: the next one goes at it
        tell("send")
        tell("quit")
        sent = _line(tx)
        assert "error" not in sent and sent["rates"] == [], sent
        assert sent["report"]["tx_rate_bps"] == pytest.approx(normwire.norm_rate(2e6, 0.995, seg))
        assert sent["report"]["seconds"] >= 0.9 * floor, sent["report"]["seconds"]
        worker_lines()
        assert _line(tx)["role"] == "send"  # quit: after the send it came during
        tx.wait(30)
        err = tx.stderr.read()
        assert err.count("norm_peer: ignored") == 5, err
    finally:
        for p in rx.values():
            if p.poll() is None:
                p.stdin.write("stop\n")
                p.stdin.flush()
        for p in [*rx.values(), tx]:
            if p is not None:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
