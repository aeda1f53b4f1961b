"""The API's tenants: `api.tenants` (inline) or `api.tokens_file` (a YAML or JSON
file of the same shape, relative to the config file's directory), and minting a
tenant's token (`mint_token`, the `tenant-token` command).

    api:
      tenants:
        team-a: {token_sha256: 64 hex digits, max_jobs: 10, max_demand: 4.0e+10, max_workers: 32}

Only the sha256 of a token is stored: a plaintext `token` key is refused with an
error saying how to make the hash. The file is read once, when the config is
loaded (the controller has no reload path: restart it to change tenants).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path
from typing import Any

from controller.config.fields import file_path
from controller.config.schema import MIN_TOKEN_LENGTH, TenantConfig
from controller.config.strict import CONFIG, ConfigError, parse_config_text, read_text
from controller.config.strict import key as _key

TENANT_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
_NAME_RE = re.compile(TENANT_NAME_PATTERN)
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
TOKEN_BYTES = 32  # a minted token: 32 random bytes, base64url (43 characters)
_KEYS = ("token_sha256", "max_jobs", "max_demand", "max_workers")


def token_sha256(token: str) -> str:
    """The hex sha256 of a bearer token, as `api.tenants.NAME.token_sha256` holds it."""
    return hashlib.sha256(token.encode()).hexdigest()


def check_name(name: object, where: str) -> str:
    """A tenant name: 1 to 32 lower-case letters, digits, '_' or '-', starting with a letter."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise CONFIG.fail(where, f"a tenant name is 1 to 32 lower-case letters, digits, '_' or '-', starting "
                                 f"with a letter; got {name!r}")
    return name


def mint_token() -> str:
    """A new random token (at least `MIN_TOKEN_LENGTH` characters)."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    assert len(token) >= MIN_TOKEN_LENGTH
    return token


def tenant_yaml(name: str, token: str, max_jobs: int | None = None, max_demand: float | None = None,
                max_workers: int | None = None) -> str:
    """The line of `api.tenants` (or of a tokens file) for tenant `name` with `token`."""
    fields = [f"token_sha256: {token_sha256(token)}"]
    for what, value in (("max_jobs", max_jobs), ("max_demand", max_demand), ("max_workers", max_workers)):
        if value is not None:
            fields.append(f"{what}: {value:.6e}" if isinstance(value, float) else f"{what}: {value}")
    return f"{name}: {{{', '.join(fields)}}}"


def _one(name: str, value: Any, where: str) -> TenantConfig:
    if isinstance(value, dict) and "token" in value:
        raise CONFIG.fail(_key(where, "token"), "a plaintext token is not accepted: give token_sha256, its sha256 "
                                                "(python -m controller tenant-token NAME prints a new token and the line)")
    raw = CONFIG.mapping(value, where, required=("token_sha256",), optional=_KEYS[1:])
    digest = CONFIG.string(raw["token_sha256"], _key(where, "token_sha256"))
    if not _SHA256_RE.fullmatch(digest):
        raise CONFIG.fail(_key(where, "token_sha256"), "expected the sha256 of the token: 64 lower-case hex digits")
    max_jobs = CONFIG.integer(raw["max_jobs"], _key(where, "max_jobs"), 1) if "max_jobs" in raw else None
    max_demand = CONFIG.number(raw["max_demand"], _key(where, "max_demand")) if "max_demand" in raw else None
    max_workers = CONFIG.integer(raw["max_workers"], _key(where, "max_workers"), 1) if "max_workers" in raw else None
    return TenantConfig(name, digest, max_jobs, max_demand, max_workers)


def read_tenant_map(value: Any, where: str) -> tuple[TenantConfig, ...]:
    """A mapping NAME -> {token_sha256, max_jobs, max_demand, max_workers}; names
    and hashes unique."""
    raw = CONFIG.mapping(value, where, optional=tuple(value) if isinstance(value, dict) else ())
    out: list[TenantConfig] = []
    owner: dict[str, str] = {}
    for name, entry in raw.items():
        at = _key(where, str(name))
        tenant = _one(check_name(name, at), entry, at)
        if tenant.token_sha256 in owner:
            raise CONFIG.fail(_key(at, "token_sha256"), f"the same token as tenant {owner[tenant.token_sha256]}")
        owner[tenant.token_sha256] = name
        out.append(tenant)
    return tuple(out)


def read_tenants(raw: dict, where: str, base: Path, admin_token: str | None) -> tuple[TenantConfig, ...]:
    """The tenants of the `api` section `raw` (keys `tenants` or `tokens_file`, not both);
    none shares the admin token (`api.token`)."""
    if "tenants" in raw and "tokens_file" in raw:
        raise CONFIG.fail(_key(where, "tokens_file"), "give either tenants or tokens_file, not both")
    if "tenants" in raw:
        tenants = read_tenant_map(raw["tenants"], _key(where, "tenants"))
    elif "tokens_file" in raw:
        path = file_path(raw["tokens_file"], _key(where, "tokens_file"), base)
        try:
            text = read_text(path, ConfigError)
        except ConfigError as e:
            raise ConfigError(f"{_key(where, 'tokens_file')}: {e}") from None
        try:
            data = parse_config_text(text, "json" if path.suffix.lower() == ".json" else "yaml")
            tenants = read_tenant_map(data, "")
        except ConfigError as e:
            raise ConfigError(f"{_key(where, 'tokens_file')}: {path}: {e}") from None
    else:
        return ()
    if admin_token is not None:
        admin = token_sha256(admin_token)
        for t in tenants:
            if t.token_sha256 == admin:
                raise CONFIG.fail(_key(where, "tenants"), f"tenant {t.name} has the admin token (api.token)")
    return tenants
