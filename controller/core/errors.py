"""The errors the core answers requests with (the northbound maps them to HTTP).

Every refusal is a `ServiceError` with a machine-readable `code`, a message and the
offending `field`; `HostsCutOff` is not a refusal but a state of the network in
which no plan can be made (the last plan stays).
"""

from __future__ import annotations


class ServiceError(Exception):
    """A refused request: a machine-readable `code`, a message and the offending `field`."""

    code = "bad_request"

    def __init__(self, message: str, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code


class InvalidJob(ServiceError):
    """The job is malformed: code is one of invalid_id, unknown_host, empty_workers,
    duplicate_worker, ps_among_workers, invalid_demand, invalid_weight,
    demand_too_large, weight_too_large, too_many_workers."""

    code = "invalid_job"


class DuplicateJob(ServiceError):
    code = "duplicate_id"


class UnknownJob(ServiceError):
    code = "not_found"


class NotPlanned(ServiceError):
    """The job is registered but no plan serves it (pending or failed)."""

    code = "not_planned"


class Unavailable(ServiceError):
    """The service cannot do it now (no group address left, no plan yet)."""

    code = "unavailable"


class HostsCutOff(ValueError):
    """The links that are down leave some host unable to reach another: no plan."""
