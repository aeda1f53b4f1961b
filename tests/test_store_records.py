"""Job records read back from a store are checked (issue 23, `store.records`):
a record with a NaN, infinite or negative demand or weight, a host of the wrong
type, a bad id, a field of the wrong type, a bad group address or an oversize
list is refused (logged, counted once, skipped), never planned, and never stops
the store or the controller. Records are written by hand, past the store's own
writes: SQLite rows with sqlite3, etcd keys with the gateway.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import uuid
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

import etcd_helper
from controller.algorithm.model import Job
from controller.config import build_topology
from controller.core.service import ControllerService
from controller.northbound.api import create_app
from controller.store.base import BadRecord
from controller.store.records import MAX_WORKERS, job_from_record
from controller.store.sqlite import JobStore

from test_rest_api import job_body, make_config

GOOD = {"ps": "h0", "workers": ["h1", "h2"], "demand": 1e9, "weight": 1.0, "group_address": "239.1.0.1"}

BAD = [  # (what is wrong, the record's changes, the field the error names)
    ("NaN demand", {"demand": math.nan}, "demand"),
    ("infinite demand", {"demand": math.inf}, "demand"),
    ("negative demand", {"demand": -1.0}, "demand"),
    ("zero weight", {"weight": 0}, "weight"),
    ("NaN weight", {"weight": math.nan}, "weight"),
    ("a demand as text", {"demand": "1e9"}, "demand"),
    ("a boolean weight", {"weight": True}, "weight"),
    ("a PS that is a number", {"ps": 7}, "ps"),
    ("a PS that is a list", {"ps": ["h0"]}, "ps"),
    ("an empty PS", {"ps": ""}, "ps"),
    ("a worker that is an object", {"workers": ["h1", {"x": 1}]}, "workers[1]"),
    ("workers as text", {"workers": "h1,h2"}, "workers"),
    ("no workers", {"workers": []}, "workers"),
    ("too many workers", {"workers": [f"h{i}" for i in range(1, MAX_WORKERS + 2)]}, "workers"),
    ("a worker twice", {"workers": ["h1", "h1"]}, "workers"),
    ("the PS among the workers", {"workers": ["h0", "h1"]}, "workers"),
    ("a unicast group address", {"group_address": "10.0.0.1"}, "group_address"),
    ("a group address that is no address", {"group_address": "239.1.0.300"}, "group_address"),
    ("a group address that is a number", {"group_address": 4009820161}, "group_address"),
    ("a short key", {"auth_key": b"k" * 5}, "auth_key"),
    ("a key that is not base64", {"auth_key": "!!!"}, "auth_key"),
    ("a tenant that is no name", {"tenant": "Team A; drop"}, "tenant"),
    ("a tenant that is a number", {"tenant": 7}, "tenant"),
]


@pytest.mark.parametrize("what, change, field", BAD, ids=[b[0] for b in BAD])
def test_a_bad_record_is_refused_naming_the_field(what, change, field):
    with pytest.raises(BadRecord, match=rf"somewhere: {field.replace('[', '.').replace(']', '.')}: "):
        job_from_record("job-1", {**GOOD, **change}, "somewhere")


@pytest.mark.parametrize("job_id", ["", "bad id", "-x", "x" * 65, 17, None])
def test_a_bad_id_is_refused(job_id):
    with pytest.raises(BadRecord, match="somewhere: id: "):
        job_from_record(job_id, GOOD, "somewhere")


def test_a_missing_field_or_a_record_that_is_no_object_is_refused():
    with pytest.raises(BadRecord, match="demand: missing"):
        job_from_record("j", {k: v for k, v in GOOD.items() if k != "demand"}, "somewhere")
    with pytest.raises(BadRecord, match="record: expected an object"):
        job_from_record("j", ["h0"], "somewhere")


def test_a_good_record_is_read():
    job, address, key, tenant = job_from_record("job-1", {**GOOD, "auth_key": "a" * 43 + "="}, "somewhere")
    assert job == Job("job-1", "h0", ("h1", "h2"), 1e9, 1.0) and address == "239.1.0.1" and len(key) == 32
    assert tenant is None
    assert job_from_record("job-1", {**GOOD, "tenant": "team-a"}, "somewhere")[3] == "team-a"


# -- SQLite ---------------------------------------------------------------------------------

def sqlite_rows(path):
    """Good rows and bad ones, past the store's own writes."""
    with JobStore(path) as store:
        store.add(Job("good-1", "host-0", ("host-1", "host-2"), 1e9, 1.0), "239.1.0.1")
    conn = sqlite3.connect(path)
    rows = [
        ("bad id!", "host-0", '["host-1"]', 1e9, 1.0, None, None),
        ("inf-demand", "host-0", '["host-1"]', math.inf, 1.0, None, None),
        ("blob-ps", b"\x00\x01", '["host-1"]', 1e9, 1.0, None, None),
        ("workers-not-json", "host-0", "host-1,host-2", 1e9, 1.0, None, None),
        ("workers-object", "host-0", '{"a": 1}', 1e9, 1.0, None, None),
        ("worker-number", "host-0", "[5]", 1e9, 1.0, None, None),
        ("oversize", "host-0", json.dumps([f"h{i}" for i in range(MAX_WORKERS + 1)]), 1e9, 1.0, None, None),
        ("unicast", "host-0", '["host-1"]', 1e9, 1.0, "10.1.2.3", None),
        ("short-key", "host-0", '["host-1"]', 1e9, 1.0, None, b"short"),
    ]
    conn.executemany("INSERT INTO jobs (id, ps, workers, demand, weight, group_address, auth_key)"
                     " VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    with JobStore(path) as store:
        store.add(Job("good-2", "host-3", ("host-4",), 2e9, 2.0), "239.1.0.2")
    return len(rows)


def test_sqlite_skips_bad_rows_logs_and_counts_them_once(tmp_path, caplog):
    path = tmp_path / "jobs.sqlite"
    bad = sqlite_rows(path)
    with JobStore(path) as store, caplog.at_level(logging.ERROR, logger="controller.store.records"):
        assert [sj.job.id for sj in store.jobs()] == ["good-1", "good-2"]
        assert store.skipped_records == bad
        assert store.jobs() and store.skipped_records == bad  # read again: not counted again
        assert store.get("inf-demand") is None and store.get("good-2").job.weight == 2.0
        assert len(store) == 2 + bad  # the rows are there, left as they are
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == bad
    assert any("demand: must be a finite number" in m for m in logged)
    assert any("group_address: 10.1.2.3 is not a multicast address" in m for m in logged)


def test_a_controller_starts_on_a_store_with_bad_rows_and_plans_only_the_good_jobs(tmp_path):
    path = tmp_path / "jobs.sqlite"
    bad = sqlite_rows(path)
    config = make_config()
    service = ControllerService(config, build_topology(config), store=JobStore(path))
    service.start()
    try:
        with TestClient(create_app(service, config), base_url="http://127.0.0.1") as client:
            assert {j["id"] for j in client.get("/jobs").json()["jobs"]} == {"good-1", "good-2"}
            health = client.get("/healthz").json()
            assert health["store_records_skipped"] == bad and health["jobs"] == 2
            assert client.post("/jobs", json=job_body(5, id="new")).status_code in (201, 202)
            plan = client.get("/plan?wait=1")
            assert plan.status_code == 200, plan.text
            assert {j["id"] for j in plan.json()["jobs"]} <= {"good-1", "good-2", "new"}
    finally:
        service.close()


# -- etcd -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory):
    reason = etcd_helper.unavailable()
    if reason:
        pytest.skip(reason)
    with etcd_helper.EtcdServer(tmp_path_factory.mktemp("etcd")) as server:
        yield server


def test_etcd_skips_bad_records_logs_and_counts_them_once(etcd_server, caplog):
    from controller.store.etcd import EtcdClient, EtcdJobStore, put

    prefix = f"/t-{uuid.uuid4().hex[:8]}/"
    client = EtcdClient([etcd_server.url], timeout=2.0)
    store = EtcdJobStore(client, prefix)
    store.add(Job("good-1", "h0", ("h1", "h2"), 1e9, 1.0), "239.1.0.1")
    raw = {  # the JSON text as another writer might have left it
        "nan-demand": '{"ps": "h0", "workers": ["h1"], "demand": NaN, "weight": 1}',
        "neg-weight": '{"ps": "h0", "workers": ["h1"], "demand": 1e9, "weight": -2}',
        "ps-number": '{"ps": 12, "workers": ["h1"], "demand": 1e9, "weight": 1}',
        "bad id with spaces": json.dumps(GOOD),
        "not-json": "{ps: h0",
        "a-list": '["h0", "h1"]',
        "unicast": json.dumps({**GOOD, "group_address": "192.168.1.1"}),
        "oversize": json.dumps({**GOOD, "workers": [f"w{i}" for i in range(MAX_WORKERS + 1)]}),
        "huge": json.dumps({**GOOD, "pad": "x" * (1 << 20)}),
    }
    ok, _, _ = client.txn([], [put(f"{prefix}jobs/{k}", v) for k, v in raw.items()])
    assert ok
    store.add(Job("good-2", "h3", ("h4",), 2e9, 1.0), "239.1.0.2")
    with caplog.at_level(logging.ERROR, logger="controller.store.records"):
        assert [sj.job.id for sj in store.jobs()] == ["good-1", "good-2"]
        assert store.skipped_records == len(raw)
        store.jobs()
        assert store.skipped_records == len(raw)
        assert store.get("nan-demand") is None
    assert len(caplog.records) == len(raw)
    messages = " ".join(r.getMessage() for r in caplog.records)
    for field in ("demand", "weight", "ps", "id", "record", "group_address", "workers"):
        assert f": {field}: " in messages, field
    # the good jobs' addresses can still be set: the bad records are left alone
    store.set_group_addresses({"good-1": "239.1.0.5", "nan-demand": "239.1.0.6"})
    assert store.get("good-1").group_address == "239.1.0.5"
    assert store.delete("good-2") and [sj.job.id for sj in store.jobs()] == ["good-1"]
