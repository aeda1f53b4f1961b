"""The load test's users (locust): every user is one tenant, with its own token,
that registers a job and deletes it again, over and over, paced by
`LOAD_PACE_S` seconds per cycle.

Run by `python -m controller bench-load` (controller/offline/load.py), which
starts the controller and writes `LOAD_TARGETS`: a JSON file with the API's
tenant tokens and the fabric's host names. A POST answered anything but 201 or
202, or a DELETE answered anything but 204, is a failure.
"""

from __future__ import annotations

import itertools
import json
import os
import random

from locust import HttpUser, constant_pacing, task

_TARGETS = json.loads(open(os.environ["LOAD_TARGETS"], encoding="utf-8").read())
_TOKENS: list[str] = _TARGETS["tokens"]
_HOSTS: list[str] = _TARGETS["hosts"]
_WORKERS = int(_TARGETS.get("workers", 3))
_NEXT = itertools.count()


class Tenant(HttpUser):
    wait_time = constant_pacing(float(os.environ.get("LOAD_PACE_S", "3")))

    def on_start(self) -> None:
        index = next(_NEXT)
        self.tenant = f"t{index % len(_TOKENS)}"
        self.client.headers["Authorization"] = f"Bearer {_TOKENS[index % len(_TOKENS)]}"
        self.rng = random.Random(index)
        self.cycle = itertools.count()

    @task
    def register_and_delete(self) -> None:
        hosts = self.rng.sample(_HOSTS, _WORKERS + 1)
        job_id = f"load-{self.tenant}-{next(self.cycle)}"
        body = {"id": job_id, "ps": hosts[0], "workers": hosts[1:], "demand": 1e8}
        with self.client.post("/jobs", json=body, name="POST /jobs", catch_response=True) as r:
            if r.status_code not in (201, 202):
                r.failure(f"POST /jobs answered {r.status_code}: {r.text[:200]}")
                return
            r.success()
        with self.client.delete(f"/jobs/{job_id}", name="DELETE /jobs/{id}", catch_response=True) as r:
            if r.status_code != 204:
                r.failure(f"DELETE answered {r.status_code}: {r.text[:200]}")
            else:
                r.success()
