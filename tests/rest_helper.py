"""The REST API in-process, as the REST tests drive it (tests/test_rest_api.py,
tests/test_paging.py, tests/test_browser_safety.py): a controller on a k=4 fat
tree whose planner answers at once, its job store in the test's directory, and a
FastAPI TestClient of its app. tests/conftest.py's `client` fixture is
`api_client` of the test module's `service` fixture.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient warns about httpx
    from fastapi.testclient import TestClient

from controller.config import Config, build_topology, config_from_dict
from controller.core.service import ControllerService
from controller.northbound.api import create_app
from controller.store.sqlite import JobStore

FAT_TREE = {"fattree": {"k": 4}}
# small switches: a plan of a few jobs already meets the group and entry limits
SMALL_SWITCHES = {**FAT_TREE, "group_capacity": 2, "entry_capacity": 6}


def api_config(api: dict[str, Any] | None = None, topology: dict[str, Any] | None = None) -> Config:
    """The config of a REST test: section `api`, `topology` (a k=4 fat tree by
    default), a planner without debounce (the tests' plans come at once)."""
    return config_from_dict({
        "api": api or {},
        "topology": topology or FAT_TREE,
        "planner": {"debounce_s": 0.0, "wait_s": 10.0},
    })


def make_service(tmp_path: Path, config: Config) -> ControllerService:
    """A controller of `config`, its jobs stored in `tmp_path`/jobs.sqlite (not started)."""
    return ControllerService(config, build_topology(config), store=JobStore(tmp_path / "jobs.sqlite"))


@contextmanager
def api_client(service: ControllerService, config: Config | None = None,
               base_url: str = "http://127.0.0.1") -> Iterator[TestClient]:
    """A TestClient of the REST app of `service` (with `config`, the service's by
    default), its requests sent to `base_url` (the Host header they carry)."""
    with TestClient(create_app(service, service.config if config is None else config), base_url=base_url) as c:
        yield c
