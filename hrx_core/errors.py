"""The HRX error hierarchy.

Every error HRX raises is an :class:`HRXError`. Validation errors are raised before
anything is submitted, so a rejected call changes nothing. Messages name the
argument, the value and the limit.
"""

from __future__ import annotations

from typing import Any


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


class MissingDependency(Unsupported, ImportError):
    """An optional Python package a feature needs is not installed; ``package`` names
    it and ``extra`` the ``hrx-core`` extra that installs it (an ImportError too)."""

    def __init__(self, feature: str, package: str, extra: str) -> None:
        super().__init__(f"{feature} needs the {package!r} package, which is not installed: pip install 'hrx-core[{extra}]'")
        self.name = self.package = package  # ImportError.name
        self.extra = extra


def require(module: str, feature: str, extra: str) -> Any:
    """Import ``module`` (an optional dependency) or raise :class:`MissingDependency`
    naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(feature, module.partition(".")[0], extra) from exc


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


def strict_init(cls: Any) -> Any:
    """Class decorator for attrs classes users construct: unknown fields, missing or
    extra arguments and TypeErrors of converters raise InvalidArgument naming the
    class (attrs itself raises TypeError)."""
    import functools

    import attrs

    init = cls.__init__
    names = [f.name for f in attrs.fields(cls) if f.init]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise InvalidArgument(f"{cls.__name__}: unknown fields {unknown}; known: {names}")
        if len(args) > len(names):
            raise InvalidArgument(f"{cls.__name__}: takes at most {len(names)} arguments, got {len(args)}")
        try:
            init(self, *args, **kwargs)
        except HRXError:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidArgument(f"{cls.__name__}: {exc}") from None

    cls.__init__ = __init__
    return cls


def show(value: Any, limit: int = 80) -> str:
    """A short, safe rendering of an argument for an error message (a hostile or
    huge ``repr`` never replaces the real error)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    "MissingDependency",
    "ArtifactError",
    "CompileError",
    "DeviceError",
    "PluginError",
]
