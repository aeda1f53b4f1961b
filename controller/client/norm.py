"""A ctypes binding of the few NORM calls the broadcast uses (`broadcast.py`).

NORM (NACK-Oriented Reliable Multicast, RFC 5740) comes from the C library of
the NRL NORM project, packaged by Debian as `libnorm1` (`apt-get install
libnorm1`); its API is declared in `normApi.h` (`libnorm-dev`, not needed at
run time). Only the functions declared in `_PROTOTYPES` are bound, each with
its argument and result types, so a wrong call fails in Python instead of
corrupting memory.

`load()` opens the library once; if it is missing, `NormUnavailable` says how
to install it. The library runs its own thread per instance; events are read
with `Instance.next_event(timeout)`, which waits on the instance's descriptor.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import socket
import threading
from dataclasses import dataclass

from controller.client.errors import ClientError

LIBRARY_NAMES = ("libnorm.so.1", "libnorm.so")


class NormUnavailable(ClientError):
    """libnorm (Debian's libnorm1) cannot be loaded."""


class NormError(ClientError):
    """A NORM call failed (its name and what it was asked to do)."""


# -- constants from normApi.h (NORM 1.5) --------------------------------------------------
NORM_NODE_ANY = 0xFFFFFFFF

# NormEventType
EVENT_NAMES = (
    "INVALID", "TX_QUEUE_VACANCY", "TX_QUEUE_EMPTY", "TX_FLUSH_COMPLETED", "TX_WATERMARK_COMPLETED",
    "TX_CMD_SENT", "TX_OBJECT_SENT", "TX_OBJECT_PURGED", "TX_RATE_CHANGED", "LOCAL_SENDER_CLOSED",
    "REMOTE_SENDER_NEW", "REMOTE_SENDER_RESET", "REMOTE_SENDER_ADDRESS", "REMOTE_SENDER_ACTIVE",
    "REMOTE_SENDER_INACTIVE", "REMOTE_SENDER_PURGED", "RX_CMD_NEW", "RX_OBJECT_NEW", "RX_OBJECT_INFO",
    "RX_OBJECT_UPDATED", "RX_OBJECT_COMPLETED", "RX_OBJECT_ABORTED", "RX_ACK_REQUEST", "GRTT_UPDATED",
    "CC_ACTIVE", "CC_INACTIVE", "ACKING_NODE_NEW", "SEND_ERROR", "USER_TIMEOUT",
)
EV = {name: i for i, name in enumerate(EVENT_NAMES)}

# NormAckingStatus
ACK_INVALID, ACK_FAILURE, ACK_PENDING, ACK_SUCCESS = range(4)
# NormSyncPolicy
SYNC_CURRENT, SYNC_STREAM, SYNC_ALL = range(3)
# NormObjectType
OBJECT_NONE, OBJECT_DATA, OBJECT_FILE, OBJECT_STREAM = range(4)
# NormProbingMode
PROBE_NONE, PROBE_PASSIVE, PROBE_ACTIVE = range(3)


class _Event(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("session", ctypes.c_void_p), ("sender", ctypes.c_void_p),
                ("object", ctypes.c_void_p)]


@dataclass(frozen=True)
class Event:
    type: int
    session: int | None
    sender: int | None
    object: int | None

    @property
    def name(self) -> str:
        return EVENT_NAMES[self.type] if 0 <= self.type < len(EVENT_NAMES) else f"EVENT_{self.type}"


_P = ctypes.c_void_p
_B = ctypes.c_bool
_U16 = ctypes.c_uint16
_U32 = ctypes.c_uint32
_SIZE = ctypes.c_int64  # NormSize is off_t (64-bit on Debian amd64)
_PROTOTYPES: dict[str, tuple] = {
    # name: (restype, argtypes)
    "NormGetVersion": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)] * 3),
    "NormCreateInstance": (_P, [_B]),
    "NormDestroyInstance": (None, [_P]),
    "NormStopInstance": (None, [_P]),
    "NormGetDescriptor": (ctypes.c_int, [_P]),
    "NormGetNextEvent": (_B, [_P, ctypes.POINTER(_Event), _B]),
    "NormCreateSession": (_P, [_P, ctypes.c_char_p, _U16, _U32]),
    "NormDestroySession": (None, [_P]),
    "NormGetLocalNodeId": (_U32, [_P]),
    "NormSetTxPort": (_B, [_P, _U16, _B, ctypes.c_char_p]),
    "NormSetRxPortReuse": (None, [_P, _B, ctypes.c_char_p, ctypes.c_char_p, _U16]),
    "NormSetMulticastInterface": (_B, [_P, ctypes.c_char_p]),
    "NormSetTTL": (_B, [_P, ctypes.c_uint8]),
    "NormSetTOS": (_B, [_P, ctypes.c_uint8]),
    "NormSetMulticastLoopback": (_B, [_P, _B]),
    "NormSetTxLoss": (None, [_P, ctypes.c_double]),
    "NormSetRxLoss": (None, [_P, ctypes.c_double]),
    "NormGetRandomSessionId": (_U16, []),
    "NormStartSender": (_B, [_P, _U16, _U32, _U16, _U16, _U16, ctypes.c_uint8]),
    "NormStopSender": (None, [_P]),
    "NormSetTxRate": (None, [_P, ctypes.c_double]),
    "NormGetTxRate": (ctypes.c_double, [_P]),
    "NormSetTxSocketBuffer": (_B, [_P, ctypes.c_uint]),
    "NormSetCongestionControl": (None, [_P, _B, _B]),
    "NormSetAutoParity": (None, [_P, ctypes.c_ubyte]),
    "NormSetGroupSize": (None, [_P, ctypes.c_uint]),
    "NormSetBackoffFactor": (None, [_P, ctypes.c_double]),
    "NormSetFragmentation": (_B, [_P, _B]),
    "NormSetGrttEstimate": (None, [_P, ctypes.c_double]),
    "NormSetGrttMax": (None, [_P, ctypes.c_double]),
    "NormGetGrttEstimate": (ctypes.c_double, [_P]),
    "NormSetTxRobustFactor": (None, [_P, ctypes.c_int]),
    "NormSetTxCacheBounds": (None, [_P, _SIZE, _U32, _U32]),
    "NormDataEnqueue": (_P, [_P, ctypes.c_void_p, _U32, ctypes.c_char_p, ctypes.c_uint]),
    "NormSetWatermark": (_B, [_P, _P, _B]),
    "NormAddAckingNode": (_B, [_P, _U32]),
    "NormGetAckingStatus": (ctypes.c_int, [_P, _U32]),
    "NormGetNextAckingNode": (_B, [_P, ctypes.POINTER(_U32), ctypes.POINTER(ctypes.c_int)]),
    "NormStartReceiver": (_B, [_P, _U32]),
    "NormStopReceiver": (None, [_P]),
    "NormSetRxSocketBuffer": (_B, [_P, ctypes.c_uint]),
    "NormSetDefaultUnicastNack": (None, [_P, _B]),
    "NormSetDefaultSyncPolicy": (None, [_P, ctypes.c_int]),
    "NormSetDefaultRxRobustFactor": (None, [_P, ctypes.c_int]),
    "NormObjectGetType": (ctypes.c_int, [_P]),
    "NormObjectHasInfo": (_B, [_P]),
    "NormObjectGetInfoLength": (_U16, [_P]),
    "NormObjectGetInfo": (_U16, [_P, ctypes.c_char_p, _U16]),
    "NormObjectGetSize": (_SIZE, [_P]),
    "NormObjectGetBytesPending": (_SIZE, [_P]),
    "NormObjectGetSender": (_P, [_P]),
    "NormObjectCancel": (None, [_P]),
    "NormDataAccessData": (_P, [_P]),
    "NormNodeGetId": (_U32, [_P]),
    "NormNodeGetAddress": (_B, [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(_U16)]),
}

_lib: ctypes.CDLL | None = None
_lock = threading.Lock()


def load(path: str | None = None, *, fallback: bool = True) -> ctypes.CDLL:
    """The NORM library with the prototypes above (loaded once). `path` or
    `$MCAST_LIBNORM` names a library file, tried first (only, without
    `fallback`); otherwise libnorm.so.1 as Debian's libnorm1 installs it.
    `NormUnavailable` if it cannot be loaded."""
    global _lib
    with _lock:
        if _lib is not None and path is None:
            return _lib
        first = path or os.environ.get("MCAST_LIBNORM")
        candidates = [first] if first else []
        if fallback or not first:
            candidates += list(LIBRARY_NAMES)
            found = ctypes.util.find_library("norm")
            if found:
                candidates.append(found)
        errors = []
        for name in candidates:
            try:
                lib = ctypes.CDLL(name)
            except OSError as e:
                errors.append(str(e))
                continue
            missing = [f for f in _PROTOTYPES if not hasattr(lib, f)]
            if missing:
                errors.append(f"{name}: lacks {', '.join(missing)}")
                continue
            for fname, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, fname)
                fn.restype = restype
                fn.argtypes = argtypes
            if path is None:
                _lib = lib
            return lib
        raise NormUnavailable(
            "the NORM library (libnorm.so.1) is not installed: on Debian or Ubuntu, "
            "`apt-get install libnorm1` (make setup does it as root); tried "
            + "; ".join(errors)
        )


def available() -> bool:
    try:
        load()
    except NormUnavailable:
        return False
    return True


def version() -> str:
    lib = load()
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib.NormGetVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    return f"{major.value}.{minor.value}.{patch.value}"


def check(ok: bool, what: str) -> None:
    if not ok:
        raise NormError(f"NORM: {what} failed")


class Instance:
    """One NORM instance (its own protocol thread). Close it to free everything."""

    def __init__(self) -> None:
        self.lib = load()
        handle = self.lib.NormCreateInstance(False)
        if not handle:
            raise NormError("NORM: NormCreateInstance failed")
        self.handle = handle
        self.fd = self.lib.NormGetDescriptor(handle)

    def next_event(self, timeout: float | None) -> Event | None:
        """The next event, or None if none came within `timeout` seconds."""
        if timeout is not None:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
            if not ready:
                return None
        ev = _Event()
        if not self.lib.NormGetNextEvent(self.handle, ctypes.byref(ev), timeout is None):
            return None
        return Event(ev.type, ev.session, ev.sender, ev.object)

    def session(self, address: str, port: int, node_id: int) -> int:
        s = self.lib.NormCreateSession(self.handle, address.encode(), port, node_id)
        if not s:
            raise NormError(f"NORM: NormCreateSession({address}, {port}) failed")
        return s

    def close(self) -> None:
        if self.handle:
            self.lib.NormStopInstance(self.handle)
            self.lib.NormDestroyInstance(self.handle)
            self.handle = None

    def __enter__(self) -> Instance:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def object_info(lib: ctypes.CDLL, obj: int) -> bytes | None:
    if not lib.NormObjectHasInfo(obj):
        return None
    n = lib.NormObjectGetInfoLength(obj)
    buf = ctypes.create_string_buffer(max(1, n))
    got = lib.NormObjectGetInfo(obj, buf, n)
    return buf.raw[:got]


def node_address(lib: ctypes.CDLL, node: int | None) -> str | None:
    """The source address (IPv4 or IPv6, as text) of a remote NORM node, as the
    packets that made it known came from; None if libnorm does not know it."""
    if not node:
        return None
    buf = ctypes.create_string_buffer(16)
    size = ctypes.c_uint(len(buf))
    port = ctypes.c_uint16(0)
    if not lib.NormNodeGetAddress(node, buf, ctypes.byref(size), ctypes.byref(port)):
        return None
    raw = buf.raw[:size.value]
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    if len(raw) == 16:
        return socket.inet_ntop(socket.AF_INET6, raw)
    return None


def object_sender_address(lib: ctypes.CDLL, obj: int) -> str | None:
    """The source address of the NORM sender of a received object."""
    return node_address(lib, lib.NormObjectGetSender(obj))


def object_data(lib: ctypes.CDLL, obj: int) -> bytes:
    """A copy of a received data object's bytes."""
    size = lib.NormObjectGetSize(obj)
    ptr = lib.NormDataAccessData(obj)
    if size and not ptr:
        raise NormError("NORM: a completed data object has no data")
    return ctypes.string_at(ptr, size) if size else b""

