"""The HRX error hierarchy.

Every error HRX raises is an :class:`HRXError`. Validation errors are raised before
anything is submitted, so a rejected call changes nothing. Messages name the
argument, the value and the limit.
"""

from __future__ import annotations


class HRXError(Exception):
    """Root of every error raised by HRX."""


class InvalidArgument(HRXError, ValueError):
    """An argument has the wrong type, value or state."""


class OutOfBounds(InvalidArgument):
    """A range does not lie inside its buffer, or is empty."""


class Overlap(InvalidArgument):
    """Source and destination ranges of a copy overlap."""


class AccessConflict(HRXError):
    """Host access conflicts with pending device work on the same bytes."""


class BudgetExceeded(HRXError, MemoryError):
    """A memory budget refused a charge; nothing was allocated."""


class Timeout(HRXError, TimeoutError):
    """A wait ran past its timeout. The accepted work and its storage stay alive."""


class Quarantined(HRXError):
    """An owner is quarantined after a failed retirement and cannot be reused."""


class CallbackError(HRXError):
    """User code run by HRX (a session body, a progress callback) raised; the error is
    fenced: the runtime stays usable and ``__cause__`` holds the original exception."""


class QueueFull(HRXError):
    """A non-blocking submission found the runtime at ``max_submissions``."""


class Unsupported(HRXError, NotImplementedError):
    """The engine or plugin does not provide what was asked for."""


class EngineNotFound(Unsupported):
    """The requested engine is not installed or not available."""


class ArtifactError(HRXError):
    """A model file or artifact is malformed."""


class CompileError(HRXError):
    """A compiler rejected a source; ``log`` holds its diagnostics."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message if not log else f"{message}\n{log}")
        self.log = log


class DeviceError(HRXError):
    """A native operation failed on the device (driver error, failed kernel)."""


class PluginError(HRXError):
    """A plugin failed to load or returned something invalid."""


__all__ = [
    "HRXError",
    "InvalidArgument",
    "OutOfBounds",
    "Overlap",
    "AccessConflict",
    "BudgetExceeded",
    "Timeout",
    "Quarantined",
    "QueueFull",
    "CallbackError",
    "Unsupported",
    "EngineNotFound",
    "ArtifactError",
    "CompileError",
    "DeviceError",
    "PluginError",
]
