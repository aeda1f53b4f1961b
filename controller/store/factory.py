"""The store a config names: SQLite, or etcd shared by several instances."""

from __future__ import annotations

from controller.config import StoreConfig
from controller.store.base import Store
from controller.store.etcd import EtcdJobStore
from controller.store.sqlite import JobStore


def open_store(config: StoreConfig) -> Store:
    """The store `config.store` (a `config.StoreConfig`) names: the SQLite file, or
    etcd (`controller.store.etcd`, shared by several instances: docs/ha.md)."""
    if config.backend == "etcd":
        return EtcdJobStore.from_config(config.etcd)
    return JobStore(config.path)
