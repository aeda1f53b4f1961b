"""What a model broadcast (`controller.client.broadcast`) reports: its errors and
the sender's report. Split from `broadcast` (which re-exports every name) to
keep modules small. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.client.errors import ClientError


class BroadcastError(ClientError):
    """A broadcast could not be done as asked."""


class CorruptObject(BroadcastError):
    """A received object's bytes do not match the digest or length its sender
    announced: refused, never returned."""


class IncompleteObject(BroadcastError):
    """The sender aborted an object before this receiver had all of it."""


class ReceiveTimeout(BroadcastError):
    """No complete object arrived in time (`pending`: bytes still missing of the
    object in progress, or None if none had started)."""

    def __init__(self, message: str, pending: int | None = None) -> None:
        super().__init__(message)
        self.pending = pending


class BroadcastIncomplete(BroadcastError):
    """Some workers never confirmed the whole object within the timeout."""

    def __init__(self, message: str, report: BroadcastReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class SessionReport:
    address: str
    workers: tuple[str, ...]
    multicast: bool
    acked: tuple[str, ...] = ()


@dataclass
class BroadcastReport:
    job_id: str
    size: int
    seconds: float
    tx_rate_bps: float           # NORM's rate (bit/s of messages) when the send ended (Sender.set_rate)
    sessions: list[SessionReport] = field(default_factory=list)
    rounds: int = 1              # watermark rounds (acknowledgement requests) it took
    grtt_s: float | None = None  # NORM's group round-trip estimate at the end (the largest of the sessions')

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(w for s in self.sessions for w in s.workers if w not in s.acked)
