"""libamdf statuses as HRX errors.

An ``amdf_status_t`` is a 64-bit value: the domain in the high 32 bits, a
domain-specific code in the low 32 (zero is success in every domain). Every failed
call becomes an :class:`AmdfError` that is also the matching HRX error class, so
callers catch ``hrx_core.errors.Timeout`` or ``InvalidArgument`` without knowing the
provider, and the message names the call and the status code.
"""

from __future__ import annotations

from hrx_core.errors import (
    DeviceError,
    HRXError,
    InvalidArgument,
    OutOfBounds,
    Timeout,
    Unsupported,
)

from .constants import StatusCode, StatusDomain


class AmdfError(HRXError):
    """A libamdf call failed. ``status`` is the raw 64-bit status, ``call`` the API
    entry (``"memory_create"``), ``code_name`` the code's name (``"BUSY"``) or, for
    native domains, ``"ERRNO 12"``."""

    def __init__(self, call: str, status: int | None = None, detail: str = "") -> None:
        if status is None:
            # one message: an HRX layer re-raising a copy of this error with more context
            self.call, self.status, self.domain, self.code, self.code_name = "", 0, 0, 0, ""
            super().__init__(call)
            return
        self.call = call
        self.status = int(status)
        self.domain = int(status) >> 32
        self.code = int(status) & 0xFFFFFFFF
        self.code_name = status_name(status)
        message = f"{call}: {self.code_name}"
        if detail:
            message += f" ({detail})"
        super().__init__(message)


class AmdfInvalidArgument(AmdfError, InvalidArgument):
    """INVALID_ARGUMENT."""


class AmdfOutOfRange(AmdfError, OutOfBounds):
    """OUT_OF_RANGE."""


class AmdfUnsupported(AmdfError, Unsupported):
    """UNSUPPORTED, NOT_FOUND or VERSION_MISMATCH: the provider cannot do this here."""


class AmdfBusy(AmdfError):
    """BUSY: a resource is owned by another operation (a full kernel queue, live
    children at destruction). Nothing was changed; the call may be retried."""


class AmdfTimeout(AmdfError, Timeout):
    """DEADLINE_EXCEEDED: a wait ran out; the work was not cancelled."""


class AmdfResourceExhausted(AmdfError, DeviceError, MemoryError):
    """RESOURCE_EXHAUSTED: memory or another finite native resource ran out."""


class AmdfDeviceLost(AmdfError, DeviceError):
    """DEVICE_LOST: the device can no longer execute or retire work."""


class AmdfDeviceError(AmdfError, DeviceError):
    """Any other failure: PERMISSION_DENIED, BUFFER_TOO_SMALL, FAILED_PRECONDITION,
    INTERNAL, and every native-domain status (errno, firmware, ...)."""


_BY_CODE: dict[int, type[AmdfError]] = {
    StatusCode.INVALID_ARGUMENT: AmdfInvalidArgument,
    StatusCode.OUT_OF_RANGE: AmdfOutOfRange,
    StatusCode.UNSUPPORTED: AmdfUnsupported,
    StatusCode.NOT_FOUND: AmdfUnsupported,
    StatusCode.VERSION_MISMATCH: AmdfUnsupported,
    StatusCode.BUSY: AmdfBusy,
    StatusCode.DEADLINE_EXCEEDED: AmdfTimeout,
    StatusCode.RESOURCE_EXHAUSTED: AmdfResourceExhausted,
    StatusCode.DEVICE_LOST: AmdfDeviceLost,
}


def make_status(code: int, domain: int = StatusDomain.API) -> int:
    """Encode a status (``amdf_make_status``): zero is success in every domain."""
    return 0 if code == 0 else (int(domain) << 32) | (int(code) & 0xFFFFFFFF)


def status_name(status: int) -> str:
    """``"BUSY"`` for API statuses, ``"ERRNO 12"`` / ``"FIRMWARE 0x3"`` for native ones."""
    status = int(status)
    domain, code = status >> 32, status & 0xFFFFFFFF
    if domain == StatusDomain.API:
        try:
            return StatusCode(code).name
        except ValueError:
            return f"API code {code}"
    try:
        name = StatusDomain(domain).name
    except ValueError:
        name = f"domain {domain}"
    return f"{name} {code}" if domain == StatusDomain.ERRNO else f"{name} {code:#x}"


def error_for(call: str, status: int, detail: str = "") -> AmdfError:
    """The HRX error for a failed call (never for ``status == 0``)."""
    status = int(status)
    domain, code = status >> 32, status & 0xFFFFFFFF
    cls = _BY_CODE.get(code, AmdfDeviceError) if domain == StatusDomain.API else AmdfDeviceError
    return cls(call, status, detail)


def check(call: str, status: int, detail: str = "") -> None:
    """Raise the HRX error for ``status`` unless it is success."""
    if status:
        raise error_for(call, status, detail)


__all__ = [
    "AmdfError",
    "AmdfInvalidArgument",
    "AmdfOutOfRange",
    "AmdfUnsupported",
    "AmdfBusy",
    "AmdfTimeout",
    "AmdfResourceExhausted",
    "AmdfDeviceLost",
    "AmdfDeviceError",
    "make_status",
    "status_name",
    "error_for",
    "check",
]
