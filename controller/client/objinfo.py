"""The NORM info of a broadcast object (controller/client/broadcast.py) and its
authentication: what the PS announces with each object, and the check a worker
makes before it believes it.

The info is a magic, the SHA-256 of the object's bytes, their length, the
object's sequence number and an HMAC-SHA256 under the job's 32-byte key
(`Job.auth_key`) over (job id, sequence number, length, SHA-256), then the job
id (UTF-8). Standard library only; pure.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import NamedTuple

INFO_MAGIC = b"MCBN2"
_INFO = struct.Struct("!5s32sQQ32s")   # magic, SHA-256, length, sequence, HMAC; then the job id (UTF-8)
KEY_BYTES = 32


class Info(NamedTuple):
    """An object's NORM info, parsed."""

    digest: bytes
    size: int
    job_id: str
    seq: int
    mac: bytes


def object_mac(key: bytes, job_id: str, seq: int, size: int, data_digest: bytes) -> bytes:
    """HMAC-SHA256 under the job's key over (job id, sequence number, length, SHA-256)."""
    message = INFO_MAGIC + struct.pack("!QQ", seq, size) + data_digest + job_id.encode()
    return hmac.new(key, message, hashlib.sha256).digest()


def make_info(data_digest: bytes, size: int, job_id: str, key: bytes | None = None, seq: int = 0) -> bytes:
    """The NORM info of an object, signed with `key` (unsigned, a zero HMAC, without)."""
    mac = object_mac(key, job_id, seq, size, data_digest) if key is not None else bytes(32)
    return _INFO.pack(INFO_MAGIC, data_digest, size, seq, mac) + job_id.encode()


def parse_signed(info: bytes | None) -> Info | None:
    if not info or len(info) < _INFO.size or not info.startswith(INFO_MAGIC):
        return None
    _, digest, size, seq, mac = _INFO.unpack_from(info)
    return Info(digest, size, info[_INFO.size:].decode("utf-8", "replace"), seq, mac)


def parse_info(info: bytes | None) -> tuple[bytes, int, str] | None:
    """(SHA-256, length, job id) of an object's info; None if it is not this library's."""
    parsed = parse_signed(info)
    return None if parsed is None else (parsed.digest, parsed.size, parsed.job_id)


def info_refusal(info: bytes | None, key: bytes, job_id: str, after_seq: int = -1) -> str | None:
    """Why an object with this NORM info is refused for job `job_id` under `key`
    (None: authenticated). `after_seq`: the last sequence number accepted."""
    parsed = parse_signed(info)
    if parsed is None:
        return "no object info of this library (unauthenticated)"
    if parsed.job_id != job_id:
        return f"an object of job {parsed.job_id!r}, not of this job"
    if not hmac.compare_digest(parsed.mac, object_mac(key, job_id, parsed.seq, parsed.size, parsed.digest)):
        return "its HMAC is not valid under this job's key (forged or tampered)"
    if parsed.seq <= after_seq:
        return f"sequence number {parsed.seq} is not after the last accepted ({after_seq}): a replay"
    return None
