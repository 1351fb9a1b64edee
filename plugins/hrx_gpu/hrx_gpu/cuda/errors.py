"""Typed errors for CUDA driver failures.

Every non-zero ``CUresult`` becomes a :class:`CudaError` (a
:class:`~hrx_core.errors.DeviceError`) whose message names the driver call and the
CUDA error name; ``.cuda_error`` holds the name, ``.call`` the call and ``.code`` the
number. Out of memory is a :class:`CudaOutOfMemory` (also a ``MemoryError``); an
invalid value or launch configuration is a :class:`CudaInvalidArgument` (also an
:class:`~hrx_core.errors.InvalidArgument`).

Sticky errors (a trapped kernel, an illegal address) leave the CUDA context unusable:
every later driver call in it fails with the same error. ``.sticky`` says so.
"""

from __future__ import annotations

from hrx_core.errors import DeviceError, InvalidArgument

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_DEINITIALIZED = 4
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701
CUDA_ERROR_NOT_SUPPORTED = 801

#: Errors after which the context is corrupted (documented as "the process must be
#: terminated and relaunched" -- or, for the primary context, reset).
STICKY_ERRORS = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719})

#: Errors that mean the launch configuration or an argument was rejected.
_INVALID_ARGUMENT = frozenset({CUDA_ERROR_INVALID_VALUE})
_INVALID_LAUNCH = frozenset({CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES})


class CudaError(DeviceError):
    """A CUDA driver call failed."""

    def __init__(self, message: str, *, cuda_error: str = "", call: str = "", code: int = -1) -> None:
        super().__init__(message)
        self.cuda_error = cuda_error
        self.call = call
        self.code = code

    @property
    def sticky(self) -> bool:
        """The context is unusable after this error (see the module docstring)."""
        return self.code in STICKY_ERRORS

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild, (type(self), self.args[0] if self.args else "", self.cuda_error, self.call, self.code))


class CudaOutOfMemory(CudaError, MemoryError):
    """The device (or pinned host memory) is out of memory."""


class CudaInvalidArgument(CudaError, InvalidArgument):
    """The driver rejected a value or a launch configuration."""


class DriverUnavailable(DeviceError):
    """libcuda could not be loaded or initialized here."""


def _rebuild(cls: type[CudaError], message: str, cuda_error: str, call: str, code: int) -> CudaError:
    return cls(message, cuda_error=cuda_error, call=call, code=code)


def make_error(code: int, name: str, description: str, call: str, context: str = "") -> CudaError:
    """The typed error for ``code`` returned by ``call``."""
    where = f" ({context})" if context else ""
    if code == CUDA_ERROR_OUT_OF_MEMORY:
        message = f"{call} failed{where}: out of memory ({name}: {description})"
        return CudaOutOfMemory(message, cuda_error=name, call=call, code=code)
    message = f"{call} failed{where}: {name} ({code}): {description}"
    launch = call.startswith(("cuLaunch", "cuGraphAddKernelNode", "cuGraphExecKernelNode"))
    if code in (_INVALID_LAUNCH if launch else _INVALID_ARGUMENT):
        return CudaInvalidArgument(message, cuda_error=name, call=call, code=code)
    if code in STICKY_ERRORS:
        message += "; the CUDA context is now unusable (see hrx_gpu.cuda.device: reset() or a new process)"
    return CudaError(message, cuda_error=name, call=call, code=code)


__all__ = [
    "CudaError",
    "CudaOutOfMemory",
    "CudaInvalidArgument",
    "DriverUnavailable",
    "STICKY_ERRORS",
    "make_error",
]
