"""A read-only P4Runtime client: what a P4 switch holds, decoded as the backend decodes it.

P4Runtime's Read RPC needs no stream and no arbitration, so this client never
competes with the controller for primary and never writes: the emulation
(mininet/emu_fabric.py) reads every BMv2 switch with it to check delivery
(`p4runtime.tracer.p4_trace`), budgets and leftovers against what is really installed.

    reader = P4Reader("127.0.0.1:50051", device_id=1)
    state, notes = reader.read_state()   # p4runtime.entities.P4SwitchState; notes: entities not understood
    reader.close()

The Read is the backend's own wildcard read (`p4runtime.codec.wildcard_reads` of the
tables the backend writes, the ECMP profile's members, every multicast group),
decoded with `p4runtime.codec.state_from_entities` and the same P4Info.
"""

from __future__ import annotations

from pathlib import Path

import grpc
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.southbound.p4runtime.codec import state_from_entities, wildcard_reads
from controller.southbound.p4runtime.entities import FAILOVER_TABLES, P4SwitchState
from controller.southbound.p4runtime.p4info import DEFAULT_P4INFO, P4Info
from controller.southbound.p4runtime.connection import RPC_TIMEOUT_S, TABLES, P4RuntimeError, open_channel
from controller.southbound.p4runtime.pipeline import has_failover


class P4Reader:
    """Reads one P4Runtime device (see the module docstring)."""

    def __init__(self, address: str, device_id: int, p4info: P4Info | str | Path = DEFAULT_P4INFO,
                 credentials: grpc.ChannelCredentials | None = None) -> None:
        """`credentials`: `connection.tls_credentials` of a switch that speaks TLS (None: plain TCP)."""
        self.address = address
        self.device_id = device_id
        self.p4info = p4info if isinstance(p4info, P4Info) else P4Info.load(p4info)
        self._tables = TABLES + (tuple(FAILOVER_TABLES) if has_failover(self.p4info) else ())  # as the backend writes
        self._channel = open_channel(address, credentials, options=())
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)

    def read_state(self, timeout: float = RPC_TIMEOUT_S) -> tuple[P4SwitchState, list[str]]:
        """Every entry of the backend's tables, every profile member and multicast group;
        P4RuntimeError when the switch does not answer (or has no pipeline yet)."""
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id, entities=wildcard_reads(self.p4info, self._tables))
        try:
            entities = [e for resp in self._stub.Read(req, timeout=timeout) for e in resp.entities]
        except grpc.RpcError as e:
            raise P4RuntimeError(f"{self.address} (device {self.device_id}): Read: {e.code().name}: {e.details()}") from None
        return state_from_entities(self.p4info, entities)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> P4Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
