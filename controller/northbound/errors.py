"""The error answers of the REST API: every 4xx and 5xx is
``{"error": {"code", "message", "field"}}``, FastAPI's own validation errors
included, and a refusal of the core (`ServiceError`) gets its HTTP status here.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from controller.core.errors import ServiceError, Unavailable
from controller.core.jobs import JOB_ID_PATTERN

PAGING_PARAMETERS = ("limit", "after", "offset", "generation")  # northbound.paging: 400 when bad
_STATUS = {"duplicate_id": 409, "plan_changed": 409, "not_found": 404, "quota_jobs": 429, "quota_demand": 429, "quota_workers": 403,
           "admin_only": 403, "too_many_jobs": 429,
           "not_planned": 409}


def error_response(status: int, code: str, message: str, field: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "field": field}}, status, headers=headers)


def service_status(e: ServiceError) -> int:
    if isinstance(e, Unavailable):
        return 503
    if e.code in _STATUS:
        return _STATUS[e.code]
    if e.code == "store_refused":
        return 409
    return 422


def _field_of(loc: tuple | list) -> str | None:
    parts = list(loc)
    if parts and parts[0] == "body":
        parts = parts[1:]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or None


# pydantic error on a field -> the code the service gives for the same mistake
_FIELD_CODES = {"id": "invalid_id", "demand": "invalid_demand", "weight": "invalid_weight", "auth_key": "invalid_auth_key"}


def validation_response(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {"type": "invalid", "loc": ("body",), "msg": "invalid request"}
    kind, loc = first.get("type", ""), tuple(first.get("loc", ()))
    field = _field_of(loc)
    if kind == "json_invalid":
        return error_response(400, "invalid_json", "the request body is not valid JSON")
    if loc == ("body",):
        if kind == "missing":
            return error_response(400, "invalid_json", "the request body is empty; expected a JSON object")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if not (ctype == "application/json" or ctype.endswith("+json")):
            return error_response(
                415, "unsupported_media_type", "the request body must be JSON (Content-Type: application/json)"
            )
        return error_response(422, "invalid_type", "the request body must be a JSON object")
    if len(loc) > 1 and loc[0] == "query" and loc[1] in PAGING_PARAMETERS:  # bad paging: a malformed request
        return error_response(400, "invalid_query", f"{loc[1]}: {first.get('msg', 'invalid value')}", str(loc[1]))
    if kind == "extra_forbidden":
        return error_response(422, "unknown_field", f"unknown field {field!r}", field)
    if kind == "missing":
        return error_response(422, "missing_field", f"missing field {field!r}", field)
    top = loc[1] if len(loc) > 1 and loc[0] == "body" else None
    if top == "workers" and kind == "too_short":
        return error_response(422, "empty_workers", "a job needs at least one worker", field)
    code = _FIELD_CODES.get(top, "invalid_value")
    if code in ("invalid_demand", "invalid_weight"):
        return error_response(422, code, f"{top} must be a positive finite number", field)
    if code == "invalid_id":
        return error_response(422, code, f"a job id must match {JOB_ID_PATTERN}", field)
    message = first.get("msg", "invalid value")
    return error_response(422, code, f"{field}: {message}" if field else message, field)


