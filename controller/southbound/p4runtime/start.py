"""Starting the P4Runtime backend: from the config's P4Runtime switches and the
program files, a `P4RuntimeBackend` attached to the core (`controller.app.run`
calls `start_backend`; with several instances, on the leader only, with the
term as its election id). With `southbound.p4runtime.tls` every switch is
reached over TLS with the controller's client certificate
(`connection.tls_credentials`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from controller.config import Config
from controller.config.programs import DEFAULT_PROGRAM, program as program_named
from controller.core.service import ControllerService
from controller.southbound.p4runtime.backend import P4RuntimeBackend
from controller.southbound.p4runtime.connection import tls_credentials
from controller.southbound.p4runtime.p4info import P4Info
from controller.southbound.p4runtime.pipeline import P4SwitchSpec, make_pipeline, p4_specs, read_device_config

log = logging.getLogger("controller.p4runtime")


def load_backend(
    switches: Mapping[str, P4SwitchSpec] | Iterable[P4SwitchSpec],
    p4info_path: str | Path,
    device_config_path: str | Path | None,
    program: str = DEFAULT_PROGRAM,
    **kwargs,
) -> P4RuntimeBackend:
    """A backend from files: the P4Info (text) and the device config of `program`
    (`read_device_config`); a switch running another program gets that program's
    committed P4Info and default device config (`p4runtime.programs`)."""
    specs = list(switches.values()) if isinstance(switches, Mapping) else list(switches)
    p4info = P4Info.load(p4info_path)
    device_config = read_device_config(program, device_config_path)
    pipelines = {}
    for other in sorted({sp.program for sp in specs} - {program}):
        files = program_named(other)
        pipelines[other] = make_pipeline(P4Info.load(files.p4info), read_device_config(other, files.device_config), other)
    return P4RuntimeBackend(specs, p4info, device_config, program=program, pipelines=pipelines, **kwargs)


def start_backend(service: ControllerService, config: Config, election_id: int | None = None) -> P4RuntimeBackend | None:
    """Start the backend for the config's P4Runtime switches (None if there are none).
    `election_id` replaces the configured one (HA: the leader's term, docs/ha.md)."""
    specs = p4_specs(service.inventory)
    if not specs:
        return None
    s = config.southbound.p4runtime
    backend = load_backend(
        specs, s.p4info, s.device_config, program=s.program,
        election_id=s.election_id if election_id is None else election_id, lldp_interval_s=config.southbound.lldp.interval_s, lldp_timeout_s=s.lldp_timeout_s,
        packet_in_pps=s.packet_in_pps, arbitration_retry_s=s.arbitration_retry_s, credentials=tls_credentials(s.tls),
        fast_failover=(s.heartbeat_interval_s, s.failover_timeout_s) if s.fast_failover else None,
    )
    if s.fast_failover and not any(backend.pipeline_of(name).failover for name in specs):
        log.warning("southbound.p4runtime.fast_failover: no P4 switch runs a program with a failover table"
                    " (only v1model's has one, docs/p4.md): no backups")
    backend.attach(service)
    return backend
