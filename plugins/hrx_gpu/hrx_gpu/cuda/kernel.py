"""Executables (CUDA modules) and kernel argument packing.

``cuLaunchKernel`` takes ``void **kernelParams``: one pointer per kernel parameter,
to a copy of its value. A :class:`~hrx_core.engine.BufferArg` becomes the 64-bit
address of its buffer plus offset; a numpy scalar becomes its bytes. The driver copies
the values at launch, so the packed array may be reused or dropped afterwards.

:class:`CudaPreparedDispatch` packs once. :meth:`CudaPreparedDispatch.bind` hands out a
launcher that is one call of the compiled hot path (:mod:`hrx_gpu.cuda.hot`: a launch
record holding every argument of ``cuLaunchKernel``) where it could be built, else
one cffi call with the function and geometry bound by ``functools.partial``; both
read the same packed argument cells, so ``set_arg`` reaches either.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hrx_core.engine import Artifact, BufferArg, Executable, KernelArg, NativeBuffer, PreparedDispatch
from hrx_core.errors import InvalidArgument, Unsupported

from ._driver import CURRENT, EXIT
from .errors import CUDA_ERROR_NOT_FOUND
from .hot import for_driver
from .image import loadable, untag

if TYPE_CHECKING:
    from .device import CudaDevice
    from .queue import CudaQueue

#: Artifact targets this engine loads.
TARGETS = ("cuda", "cubin", "ptx")


def address_of(buffer: NativeBuffer) -> int:
    """The CUDA address of a native buffer (CUDA buffers, or any with a pointer)."""
    try:
        return buffer.dptr  # type: ignore[attr-defined,no-any-return]
    except AttributeError:
        pointer = buffer.pointer()
        if pointer is None:
            raise InvalidArgument(f"buffer: {type(buffer).__name__} has no address the CUDA engine can use") from None
        return pointer


def pack_args(ffi: Any, args: Sequence[KernelArg]) -> tuple[Any, list[Any]]:
    """``(void ** kernelParams or NULL, storage to keep alive until the launch)``."""
    if not args:
        return ffi.NULL, []
    keep: list[Any] = []
    for i, arg in enumerate(args):
        if isinstance(arg, BufferArg):
            keep.append(ffi.new("unsigned long long *", address_of(arg.buffer) + arg.offset))
        elif isinstance(arg, np.generic):
            data = arg.tobytes()
            # exactly len(data) bytes: "char[]" from bytes adds a NUL, which made the
            # graph rebind fast path's size check fail for every kernel with scalars
            keep.append(ffi.new(f"char[{len(data)}]", data) if data else ffi.new("char[1]"))
        else:
            raise InvalidArgument(f"args[{i}]: expected a BufferArg or a numpy scalar, got {type(arg).__name__}")
    params = ffi.new("void *[]", keep)
    keep.append(params)
    return params, keep


class CudaExecutable(Executable):
    """A loaded CUDA module and the function named by the artifact's entry."""

    def __init__(self, device: CudaDevice, module: Any, function: Any, name: str, target: str) -> None:
        self.device = device
        self.module = module
        self.function = function
        self.name = name
        self.target = target
        self.closed = False
        #: the CUfunction as an int: what the compiled dispatch launches (0 once closed)
        self.fast_handle = int(device.driver.ffi.cast("uintptr_t", function))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.fast_handle = 0
        device = self.device
        device._forget_executable(self)
        if device.closed or EXIT.exiting:
            return
        try:
            device._activate()
            device.driver.lib.cuModuleUnload(self.module)
        except Exception:  # noqa: BLE001 - a dead context frees modules itself
            pass

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        return f"<CudaExecutable {self.name!r} ({self.target})>"


def load_executable(device: CudaDevice, artifact: Artifact) -> CudaExecutable:
    """``cuModuleLoadData`` + ``cuModuleGetFunction`` for a cuda/cubin/ptx artifact."""
    if artifact.target not in TARGETS:
        raise Unsupported(f"artifact.target: the CUDA engine loads {', '.join(TARGETS)}, got {artifact.target!r}")
    code = artifact.code
    if isinstance(code, str):
        code = code.encode()
    if not isinstance(code, (bytes, bytearray, memoryview)):
        raise InvalidArgument(
            f"artifact.code: expected bytes for target {artifact.target!r}, got {type(code).__name__}"
        )
    data, symbol = untag(bytes(code))
    symbol = symbol or artifact.entry
    if not symbol:
        raise InvalidArgument("artifact.entry: empty; name the kernel to load")
    driver = device.driver
    ffi, lib = driver.ffi, driver.lib
    image = ffi.from_buffer(loadable(data))
    module = ffi.new("CUmodule *")
    device._activate()
    driver.check(lib.cuModuleLoadData(module, image), "cuModuleLoadData", f"{artifact.target} for {artifact.entry!r}")
    function = ffi.new("CUfunction *")
    code_ = lib.cuModuleGetFunction(function, module[0], symbol.encode())
    if code_:
        lib.cuModuleUnload(module[0])
        hint = ""
        if code_ == CUDA_ERROR_NOT_FOUND:
            hint = f'kernel {symbol!r} not in the module (is it extern "C" or the mangled name?)'
        raise driver.error(code_, "cuModuleGetFunction", hint or repr(symbol))
    executable = CudaExecutable(device, module[0], function[0], artifact.entry or symbol, artifact.target)
    device._track_executable(executable)
    return executable


class CudaPreparedDispatch(PreparedDispatch):
    """A launch packed once: function, geometry and ``kernelParams`` are bound."""

    def __init__(
        self,
        device: CudaDevice,
        executable: CudaExecutable,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[KernelArg],
    ) -> None:
        super().__init__(executable, grid, block, args)
        driver = device.driver
        self._params, self._keep = pack_args(driver.ffi, args)
        self._null = driver.NULL
        self._call = functools.partial(driver.lib.cuLaunchKernel, executable.function, *grid, *block, 0)
        self._driver = driver
        self._function = executable.function
        self._record_views: dict[int, np.void] = {}  # record scalars: a view of each one's cell
        #: each argument cell's size in bytes (what set_scalar must write)
        self._sizes = tuple(driver.ffi.sizeof(cell) for cell in self._keep[: len(self.args)])

    def set_arg(self, index: int, arg: BufferArg) -> None:
        """Patch the packed address of buffer argument ``index`` in place (bound launchers see it).

        The cell written is the one ``kernelParams[index]`` points at, shared by the
        Python launcher and every compiled launch record, so all of them launch with
        the new address from their next call on."""
        cell = self._keep[index] if 0 <= index < len(self.args) and isinstance(self.args[index], BufferArg) else None
        if cell is None:
            raise InvalidArgument(f"index: argument {index!r} of {self.executable.name!r} is not a buffer argument")
        address = address_of(arg.buffer) + arg.offset
        super().set_arg(index, arg)
        cell[0] = address

    def set_scalar(self, index: int, value: Any) -> None:
        """Write scalar argument ``index``'s new bytes into its packed cell in place
        (bound launchers and launch records see it). ``cuLaunchKernel`` copies the
        parameters when it is called, so launches made before keep their values."""
        self._check_scalar_index(index)
        nbytes, size = value.nbytes, self._sizes[index]
        if nbytes != size:
            raise InvalidArgument(f"scalars: argument {index} of {self.executable.name!r} is {size} bytes, got {nbytes}")
        cell, ffi = self._keep[index], self._driver.ffi
        ffi.memmove(cell, value, nbytes)  # (numpy scalars and records expose their bytes: no copy)
        if isinstance(value, np.void):  # the caller may rewrite it: args shows the cell
            view = self._record_views.get(index)
            if view is None or view.dtype != value.dtype:
                view = self._record_views[index] = np.frombuffer(ffi.buffer(cell), value.dtype)[0]
            value = view
        self._replace_arg(index, value)

    def bind(self, queue: CudaQueue) -> Callable[[], None]:  # type: ignore[override]
        """A zero-argument launcher with every argument of cuLaunchKernel bound.

        With the compiled hot path the launcher makes one C call on a launch record
        (``hrx_launch``); without it one cffi call of ``cuLaunchKernel``. A failure
        raises the same typed error either way (a foreign context switch is retried
        once first)."""
        if not queue._dispatch_ok:
            raise Unsupported(f"{queue.name}: the {queue.family} family cannot dispatch kernels")
        ctx, device, current = queue._ctx, queue.device, CURRENT
        fail = queue._fail
        hot = for_driver(self._driver)
        if hot is not None:
            ffi = self._driver.ffi
            params = 0 if self._params == ffi.NULL else int(ffi.cast("uintptr_t", self._params))
            record = hot.launch_record(
                int(ffi.cast("uintptr_t", self._function)), self.grid, self.block, queue.stream_address, params
            )
            hot_launch = hot.launch
            keep = self._keep  # the record points into this storage

            def launch_compiled() -> None:
                if current.ctx is not ctx:
                    device._activate()
                code = hot_launch(record)
                if code:
                    fail(code, "cuLaunchKernel", hot_launch, record)

            launch_compiled.record = record  # type: ignore[attr-defined]
            launch_compiled.keep = keep  # type: ignore[attr-defined]
            return launch_compiled
        call, args = self._call, (queue.stream, self._params, self._null)

        def launch() -> None:
            if current.ctx is not ctx:
                device._activate()
            code = call(*args)
            if code:
                fail(code, "cuLaunchKernel", call, *args)

        return launch

    def launch(self, queue: CudaQueue) -> None:  # type: ignore[override]
        if not queue._dispatch_ok:
            raise Unsupported(f"{queue.name}: the {queue.family} family cannot dispatch kernels")
        if CURRENT.ctx is not queue._ctx:
            queue.device._activate()
        code = self._call(queue.stream, self._params, self._null)
        if code:
            queue._fail(code, "cuLaunchKernel", self._call, queue.stream, self._params, self._null)


__all__ = [
    "TARGETS",
    "CudaExecutable",
    "CudaPreparedDispatch",
    "address_of",
    "load_executable",
    "pack_args",
]
