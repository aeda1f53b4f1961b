"""The client's exceptions: one per way a request to the controller can end badly.

Every error answer of the REST API is `{"error": {"code", "message", "field"}}`
(docs/controller.md, Errors); `ApiError` carries those three and the HTTP status,
and its subclasses name the answers a caller is likely to handle.
"""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Anything the client raises."""


class ApiError(ClientError):
    """The controller refused the request: its HTTP `status` and the API's error
    `code`, `message` and `field` (the offending field, or None)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        where = f" ({field})" if field else ""
        super().__init__(f"{status} {code}{where}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    @classmethod
    def from_answer(cls, status: int, body: bytes) -> ApiError:
        """The error an answer's body describes; a body that is not the API's error
        shape (a proxy's page, say) still gives an error with the status."""
        import json

        try:
            detail = json.loads(body)["error"]
            code, message, field = str(detail["code"]), str(detail["message"]), detail.get("field")
        except (ValueError, KeyError, TypeError):
            code, message, field = "http_error", body[:200].decode("utf-8", "replace").strip() or "no body", None
        kind = {401: Unauthorized, 404: NotFound, 409: Conflict}.get(status, ApiError)
        return kind(status, code, message, field if isinstance(field, str) else None)


class Unauthorized(ApiError):
    """401: a token is required and was missing or wrong."""


class NotFound(ApiError):
    """404: no job with this id (or an unknown path: a wrong `url`)."""


class Conflict(ApiError):
    """409: a job with this id exists with a different spec, or (code not_planned) a broadcast
    announced for a job no plan serves."""


class Unreachable(ClientError):
    """No answer from the controller after every retry (the last cause chained)."""


class JobFailed(ClientError):
    """The job was registered but the controller gave up on it (state `failed`:
    its hosts were never found). `job` is the job as last seen."""

    def __init__(self, job: Any) -> None:
        super().__init__(f"job {job.id} failed: {job.error}")
        self.job = job


class WaitTimeout(ClientError):
    """The job was registered but no plan included it within the wait's timeout.
    `job` is the job as last seen (state `pending`); it stays registered."""

    def __init__(self, job: Any, timeout: float) -> None:
        missing = f", waiting for hosts {', '.join(job.missing_hosts)}" if job.missing_hosts else ""
        super().__init__(f"job {job.id} is still pending after {timeout:g} s{missing}")
        self.job = job
        self.timeout = timeout


class InsecureTransport(ClientError, ValueError):
    """The token would cross the network in clear: an http:// URL whose host is not
    loopback (127.0.0.0/8, ::1, localhost). Raised before anything is sent; use
    https:// (the controller's `api.tls`)."""


class UntrustedCertificate(ClientError):
    """The controller's TLS certificate did not verify (unknown CA, wrong host name,
    expired): give the CA that signed it (`Client(ca_file=...)`, `--ca-file`).
    Never retried: it would fail again."""


class RedirectRefused(ClientError):
    """A redirect to a URL the cluster does not advertise (not a member listed by
    `GET /cluster` of the configured controller), or to another scheme: not
    followed, and nothing (the token least of all) was sent there."""
