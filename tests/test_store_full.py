"""A full disk under the SQLite store (issue 23): a write is refused with
`StoreFull` (the REST API answers 507 `insufficient_storage`), nothing is
half-written (neither in the file nor in the registry's memory), the controller's
other writes (its state table) fail without taking it down, and every write works
again once space returns.

The store lives on a small tmpfs mounted for the test (root only); a filler file
takes the rest of its space.
"""

from __future__ import annotations

import errno
import os
import subprocess
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from controller.algorithm.model import Job
from controller.config import build_topology
from controller.core.service import ControllerService
from controller.northbound.api import create_app
from controller.store.base import StoreFull
from controller.store.sqlite import JobStore

from test_rest_api import assert_error, job_body, make_config


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "disk"
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot mount a tmpfs: {e}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=10)


def fill(disk: Path) -> Path:
    """Take every free block of `disk` with a filler file (again: what a failed
    write's journal gave back)."""
    filler = disk / "filler"
    chunk = b"\0" * 4096
    with open(filler, "ab", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
        try:  # the last partial block
            while True:
                f.write(b"\0")
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    st = os.statvfs(disk)
    assert st.f_bavail == 0
    return filler


def job(i: int) -> Job:
    return Job(f"job-{i}", "h0", (f"h{i + 1}", f"h{i + 2}"), 1e9, 1.0)


def test_a_full_disk_refuses_writes_and_they_work_again_once_space_returns(small_disk):
    store = JobStore(small_disk / "jobs.sqlite")
    try:
        store.add(job(1), "239.1.0.1", b"k" * 32)
        store.put_state("ids", {"groups": [1, 2]})
        before = store.jobs()
        filler = fill(small_disk)

        with pytest.raises(StoreFull, match="full"):
            store.add(job(2), "239.1.0.2", b"k" * 32)
        with pytest.raises(StoreFull):
            store.put_state("ids", {"groups": list(range(5000))})
        with pytest.raises(StoreFull):
            store.set_group_addresses({"job-1": "239.1.0.9"})
        with pytest.raises(StoreFull):
            store.delete("job-1")
        # nothing half-written, and the store still reads
        assert store.jobs() == before and len(store) == 1
        assert store.get("job-2") is None
        assert store.get_state("ids") == {"groups": [1, 2]}

        filler.unlink()
        added = store.add(job(2), "239.1.0.2", b"k" * 32)
        assert [sj.job.id for sj in store.jobs()] == ["job-1", "job-2"] and added.seq > before[0].seq
        store.put_state("ids", {"groups": [3]})
        assert store.get_state("ids") == {"groups": [3]}
    finally:
        store.close()
    # and what was written after the disk filled is in the file
    with JobStore(small_disk / "jobs.sqlite") as again:
        assert [sj.job.id for sj in again.jobs()] == ["job-1", "job-2"]


def test_post_jobs_on_a_full_disk_is_507_and_nothing_is_registered(small_disk):
    config = make_config()
    service = ControllerService(config, build_topology(config), store=JobStore(small_disk / "jobs.sqlite"))
    service.start()
    try:
        with TestClient(create_app(service, config), base_url="http://127.0.0.1") as client:
            assert client.post("/jobs", json=job_body(0, id="first")).status_code in (201, 202)
            listed = client.get("/jobs").json()
            filler = fill(small_disk)

            r = client.post("/jobs", json=job_body(1, id="second"))
            assert_error(r, 507, "insufficient_storage")
            assert r.headers.get("Retry-After")
            assert client.get("/jobs").json() == listed  # not in the registry's memory either
            assert client.get("/jobs/second").status_code == 404
            assert [sj.job.id for sj in service.store.jobs()] == ["first"]
            # a delete on the full disk is refused too, and the job stays
            assert_error(client.delete("/jobs/first"), 507, "insufficient_storage")
            assert client.get("/jobs/first").status_code == 200
            assert client.get("/healthz").status_code == 200  # the controller is up

            filler.unlink()
            assert client.post("/jobs", json=job_body(1, id="second")).status_code in (201, 202)
            assert {j["id"] for j in client.get("/jobs").json()["jobs"]} == {"first", "second"}
            assert client.delete("/jobs/first").status_code in (200, 204)
    finally:
        service.close()


def test_etcd_out_of_space_is_store_full_and_writes_work_again_after_the_operator_frees_it(tmp_path):
    """etcd's own full disk: its space quota used up (the NOSPACE alarm) refuses every
    write; `StoreFull`, nothing written; once the operator compacts, defragments and
    disarms the alarm (docs/ha.md), writes work again."""
    import json
    import urllib.request

    import etcd_helper
    from controller.store.etcd import EtcdClient, EtcdJobStore

    reason = etcd_helper.unavailable()
    if reason:
        pytest.skip(reason)

    def call(url: str, path: str, body: dict) -> dict:
        request = urllib.request.Request(f"{url}/v3/{path}", json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())

    with etcd_helper.EtcdServer(tmp_path, args=("--quota-backend-bytes", str(1 << 20))) as server:
        store = EtcdJobStore(EtcdClient([server.url], 2.0), "/full/")
        store.add(job(1), "239.1.0.1", b"k" * 32)
        before = store.jobs()
        with pytest.raises(StoreFull, match="space quota"):
            for i in range(200):  # 60 kB each: the 1 MiB quota is gone long before
                store.put_state(f"filler-{i}", "x" * 60_000)
        with pytest.raises(StoreFull):
            store.add(job(2), "239.1.0.2", b"k" * 32)
        assert store.jobs() == before and store.get("job-2") is None

        # the operator: delete the filler, compact, defragment, disarm the alarm
        answer = call(server.url, "kv/deleterange", {"key": _b64("/full/state/"), "range_end": _b64("/full/state0")})
        revision = int(answer["header"]["revision"])
        call(server.url, "kv/compaction", {"revision": str(revision), "physical": True})
        call(server.url, "maintenance/defragment", {})
        member = call(server.url, "maintenance/status", {})["header"]["member_id"]
        call(server.url, "maintenance/alarm", {"action": "DEACTIVATE", "memberID": member, "alarm": "NOSPACE"})
        store.add(job(2), "239.1.0.2", b"k" * 32)
        assert [sj.job.id for sj in store.jobs()] == ["job-1", "job-2"]


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()
