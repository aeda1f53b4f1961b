"""schemathesis against every endpoint of the API with tenants configured, once as
the admin (`api.token`) and once as a tenant: no answer is a 5xx, and every
error answer has the one error shape. (tests/test_rest_api.py fuzzes the open,
loopback API without tokens.)"""

from __future__ import annotations

import pytest

from controller.config import build_topology, config_from_dict
from controller.config.tenants import token_sha256
from controller.core.service import ControllerService
from controller.core.tenants import Principal
from controller.northbound.api import create_app
from controller.store.sqlite import JobStore

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")

ADMIN = "admin-token-for-the-fuzz-test-0123"
TENANT = "tenant-token-for-the-fuzz-test-0123"
OTHER = "other-tenant-token-for-the-fuzz-0123"


@pytest.fixture
def app(tmp_path):
    config = config_from_dict({
        # schemathesis calls the app as http://testserver; the rate limit would answer most writes 429
        "api": {"port": 0, "token": ADMIN, "allowed_hosts": ["testserver"], "limits": {"rate": "100000/minute"},
                "tenants": {
            "team-a": {"token_sha256": token_sha256(TENANT), "max_jobs": 3, "max_workers": 4, "max_demand": 5e9},
            "team-b": {"token_sha256": token_sha256(OTHER)}}},
        "topology": {"fattree": {"k": 4}, "group_capacity": 2, "entry_capacity": 6},
        "planner": {"debounce_s": 0.0, "wait_s": 2.0},
    })
    service = ControllerService(config, build_topology(config), store=JobStore(tmp_path / "jobs.sqlite"))
    service.start()
    try:
        # a job of the other tenant and one of the admin: the tenant's fuzzing must not reach them
        service.register_job("host-0", ["host-1", "host-2"], 1e9, 1.0, "b-job", principal=Principal("team-b"))
        service.register_job("host-4", ["host-5", "host-6"], 1e9, 1.0, "admin-job")
        yield create_app(service, config), service
    finally:
        service.close()


@pytest.mark.parametrize("token", [ADMIN, TENANT], ids=["admin", "tenant"])
def test_fuzz_with_a_token_no_server_errors(app, token):
    from hypothesis import HealthCheck, given, settings

    asgi, service = app
    schema = schemathesis.openapi.from_asgi("/openapi.json", asgi, headers={"Authorization": f"Bearer {token}"})
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 9
    headers = {"Authorization": f"Bearer {token}"}
    statuses: set[int] = set()
    for operation in operations:

        @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def check(case):
            response = case.call(headers=headers)
            statuses.add(response.status_code)
            assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}"
            assert response.status_code != 401, "the token was not taken"
            if response.status_code >= 400:
                assert set(response.json()) == {"error"}

        check()
    assert any(s < 300 for s in statuses), statuses
    if token == TENANT:  # the tenant's fuzzing touched nobody else's job
        ids = {s.job.id for s in service.jobs.answers()[0]}
        assert {"b-job", "admin-job"} <= ids
