"""Native queues: one non-blocking CUDA stream each.

Encoding is one driver call per operation:

* copy -- ``cuMemcpyAsync`` (unified addressing: device and pinned host alike); between
  two pinned host buffers a small copy kernel (``cuMemcpyAsync`` would block the
  caller, see :mod:`hrx_gpu.cuda.mapped`);
* fill -- ``cuMemsetD8/D16/D32Async`` for 1-, 2- and 4-byte patterns;
* dispatch -- ``cuLaunchKernel`` with the arguments packed by :mod:`hrx_gpu.cuda.kernel`;
* signal -- ``cuStreamWriteValue64`` on the timeline counter's device address;
* wait -- ``cuStreamWaitValue64`` with ``CU_STREAM_WAIT_VALUE_GEQ``.

Stream memory operations are used without looking at
``CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1`` (it reads 0 on an H200 where the
v2 operations work). Where the driver lacks them (or the device was opened with
``stream_memops=False``) a signal becomes a host function that stores the value
plus an event, and a wait becomes ``cuStreamWaitEvent`` on the event of the first
signal at or above the value -- or, if that signal is not encoded yet, a host wait.

Streams run work as soon as it is encoded, so :meth:`CudaQueue.submit` does nothing.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hrx_core.engine import Executable, KernelArg, NativeBuffer, NativeQueue, Timeline
from hrx_core.errors import InvalidArgument, Unsupported

from ._driver import CU_EVENT_DISABLE_TIMING, CU_STREAM_NON_BLOCKING, CU_STREAM_WAIT_VALUE_GEQ, CURRENT, EXIT
from .errors import CUDA_ERROR_NOT_SUPPORTED
from .mapped import BLOCK as MAPPED_BLOCK
from .hot import for_driver
from .kernel import CudaExecutable, address_of, pack_args
from .timeline import CudaTimeline
from .timing import CudaTimestamp

if TYPE_CHECKING:
    from .device import CudaDevice


class CudaQueue(NativeQueue):
    """A CUDA stream created with ``CU_STREAM_NON_BLOCKING``."""

    def __init__(self, device: CudaDevice, family: str, index: int) -> None:
        self.device = device
        self.family = family
        self.index = index
        self.name = f"cuda:{device.index}/{family}[{index}]"
        self._dispatch_ok = family == "compute"
        driver = device.driver
        self._driver = driver
        self._lib = driver.lib
        out = driver.ffi.new("CUstream *")
        device._activate()
        driver.check(self._lib.cuStreamCreate(out, CU_STREAM_NON_BLOCKING), "cuStreamCreate", self.name)
        self.stream = out[0]
        #: The stream's address as an int (what compiled hot-path calls take).
        self.stream_address = int(driver.ffi.cast("uintptr_t", self.stream))
        self._ctx = device.ctx
        self._signaled_timelines: weakref.WeakSet[CudaTimeline] = weakref.WeakSet()
        self._host_fn_keep: dict[int, Any] = {}
        self._host_fn_lock = threading.Lock()
        self.closed = False

    # -- helpers ------------------------------------------------------------------------

    def _fail(self, code: int, call: str, fn: Any, *args: Any) -> None:
        """Slow path of every encode: retry after a foreign context switch, else raise."""
        code = self._driver.retry_on_foreign_context(code, self._ctx, fn, *args)
        if code:
            raise self._driver.error(code, call, self.name)

    def query(self) -> int:
        """``cuStreamQuery`` result (0 idle, CUDA_ERROR_NOT_READY busy, else a failure)."""
        if self.closed:
            return 0
        if CURRENT.ctx is not self._ctx:
            self.device._activate()
        return int(self._lib.cuStreamQuery(self.stream))

    # -- encoding -----------------------------------------------------------------------

    def timestamp(self) -> CudaTimestamp:
        return CudaTimestamp(self.device, self.stream, self.name)

    def copy(self, src: NativeBuffer, src_offset: int, dst: NativeBuffer, dst_offset: int, nbytes: int) -> None:
        if CURRENT.ctx is not self._ctx:
            self.device._activate()
        dst_address = address_of(dst) + dst_offset
        src_address = address_of(src) + src_offset
        if getattr(src, "host_mapped", False) and getattr(dst, "host_mapped", False) and self.device.mapped.usable:
            # cuMemcpyAsync between host pointers blocks the caller until the stream
            # reaches it (a deadlock behind a pending wait): let the GPU copy instead.
            function, grid, params, _keep = self.device.mapped.copy_args(dst_address, src_address, nbytes)
            fn = self._lib.cuLaunchKernel
            launch = (function, *grid, MAPPED_BLOCK, 1, 1, 0, self.stream, params, self._driver.NULL)
            code = fn(*launch)
            if code:
                self._fail(code, "cuLaunchKernel", fn, *launch)
            return
        fn = self._lib.cuMemcpyAsync
        args = (dst_address, src_address, nbytes, self.stream)
        code = fn(*args)
        if code:
            self._fail(code, "cuMemcpyAsync", fn, *args)

    def fill(self, dst: NativeBuffer, offset: int, nbytes: int, pattern: bytes) -> None:
        size = len(pattern)
        lib = self._lib
        if size == 1:
            fn = lib.cuMemsetD8Async
            call = "cuMemsetD8Async"
        elif size == 2:
            fn = lib.cuMemsetD16Async
            call = "cuMemsetD16Async"
        elif size == 4:
            fn = lib.cuMemsetD32Async
            call = "cuMemsetD32Async"
        else:
            raise InvalidArgument(f"pattern: expected 1, 2 or 4 bytes, got {size}")
        if CURRENT.ctx is not self._ctx:
            self.device._activate()
        args = (address_of(dst) + offset, int.from_bytes(pattern, "little"), nbytes // size, self.stream)
        code = fn(*args)
        if code:
            self._fail(code, call, fn, *args)

    def dispatch(
        self,
        executable: Executable,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[KernelArg],
    ) -> None:
        if not self._dispatch_ok:
            raise Unsupported(f"{self.name}: the {self.family} family cannot dispatch kernels")
        if not isinstance(executable, CudaExecutable):
            raise InvalidArgument(f"executable: expected a CUDA executable, got {type(executable).__name__}")
        params, _keep = pack_args(self._driver.ffi, args)
        if CURRENT.ctx is not self._ctx:
            self.device._activate()
        fn = self._lib.cuLaunchKernel
        call_args = (executable.function, *grid, *block, 0, self.stream, params, self._driver.NULL)
        code = fn(*call_args)
        if code:
            self._fail(code, "cuLaunchKernel", fn, *call_args)

    def fast_dispatch(self) -> tuple[int, int, Any, Any, str] | None:
        """The compiled hot path's ``hrx_dispatch_fast`` for :mod:`hrx_core.fastpath`:
        one ``cuLaunchKernel`` on this stream with the core's argument cells (device
        addresses from ``CudaBuffer.dptr``), or nothing where another context is
        current on the calling thread. None without the hot path or on a copy queue."""
        hot = for_driver(self._driver)
        if hot is None or not self._dispatch_ok or self.closed:
            return None
        pack = hot.ffi.new("hrx_fast_dispatch *")
        pack.launch = hot.launch_kernel
        pack.stream = self.stream_address
        pack.ctx_get = hot.ctx_get
        pack.ctx = int(self._driver.ffi.cast("uintptr_t", self._ctx))
        address = int(hot.ffi.cast("uintptr_t", pack))
        return hot.dispatch_fast, address, self._dispatch_failed, pack, "dptr"

    def _dispatch_failed(self, code: int) -> None:
        """A compiled dispatch's failed ``cuLaunchKernel`` (this context was current)."""
        raise self._driver.error(code, "cuLaunchKernel", self.name)

    def launch_graph(self, graph_exec: Any) -> None:
        """``cuGraphLaunch`` of an instantiated graph (the Python path; :class:`CudaGraph`
        replays through the compiled hot path where it was built)."""
        if CURRENT.ctx is not self._ctx:
            self.device._activate()
        fn = self._lib.cuGraphLaunch
        code = fn(graph_exec, self.stream)
        if code:
            self._fail(code, "cuGraphLaunch", fn, graph_exec, self.stream)

    def wait(self, timeline: Timeline, value: int) -> None:
        tl = _cuda_timeline(timeline)
        if tl.completed() >= value and tl.error(value) is None:
            return  # already reached: nothing to encode
        if id(self) not in tl.waiters:
            tl.waiters[id(self)] = self
        if CURRENT.ctx is not self._ctx:
            self.device._activate()
        if self.device.stream_memops:
            fn = self._driver.wait_value64
            args = (self.stream, tl.dptr, value, CU_STREAM_WAIT_VALUE_GEQ)
            code = fn(*args)
            if code == CUDA_ERROR_NOT_SUPPORTED:
                self.device.stream_memops = False
            elif code:
                self._fail(code, "cuStreamWaitValue64", fn, *args)
                return
            else:
                return
        self._wait_event(tl, value)

    def signal(self, timeline: Timeline, value: int) -> None:
        tl = _cuda_timeline(timeline)
        if CURRENT.ctx is not self._ctx:
            self.device._activate()
        if self.device.stream_memops:
            fn = self._driver.write_value64
            args = (self.stream, tl.dptr, value, 0)
            code = fn(*args)
            if code == CUDA_ERROR_NOT_SUPPORTED:
                self.device.stream_memops = False
                self._signal_host(tl, value)
            elif code:
                self._fail(code, "cuStreamWriteValue64", fn, *args)
        else:
            self._signal_host(tl, value)
        tl.note_signal(self, value)

    def native_handle(self) -> int | None:
        """The ``CUstream`` address (for torch.cuda.ExternalStream, cupy.cuda.ExternalStream)."""
        return int(self._driver.ffi.cast("uintptr_t", self.stream))

    #: A CUDA stream starts work as it is encoded: the core skips submit() on hot paths.
    needs_submit = False

    def submit(self) -> None:
        """Nothing to do: a CUDA stream starts work as it is encoded."""

    # -- fallback without stream memory operations ----------------------------------------

    def _signal_host(self, tl: CudaTimeline, value: int) -> None:
        driver = self._driver
        ffi, lib = driver.ffi, driver.lib
        counter = tl._counter
        keep = self._host_fn_keep
        lock = self._host_fn_lock

        def store(_user_data: Any) -> None:
            # Runs on a driver thread after all earlier work of the stream; no CUDA calls.
            if counter[0] < value:
                counter[0] = value
            with lock:
                keep.pop(key, None)

        callback = ffi.callback("void(void *)", store)
        key = id(callback)
        with lock:
            keep[key] = callback
        code = lib.cuLaunchHostFunc(self.stream, callback, ffi.NULL)
        if code:
            with lock:
                keep.pop(key, None)
            self._fail(code, "cuLaunchHostFunc", lib.cuLaunchHostFunc, self.stream, callback, ffi.NULL)
        event = ffi.new("CUevent *")
        driver.check(lib.cuEventCreate(event, CU_EVENT_DISABLE_TIMING), "cuEventCreate", self.name)
        code = lib.cuEventRecord(event[0], self.stream)
        if code:
            lib.cuEventDestroy_v2(event[0])
            driver.check(code, "cuEventRecord", self.name)
        completed = tl.completed()
        stale = [e for v, e in tl.events if v <= completed]
        tl.events = [(v, e) for v, e in tl.events if v > completed]
        tl.events.append((value, event[0]))
        for e in stale:
            lib.cuEventDestroy_v2(e)  # deferred by the driver if a stream still waits on it

    def _wait_event(self, tl: CudaTimeline, value: int) -> None:
        event = next((e for v, e in tl.events if v >= value), None)
        if event is None:
            # The signal is not encoded yet: without stream memory operations the only
            # safe encoding is to wait on the host (documented limitation).
            tl.wait(value, None)
            return
        code = self._lib.cuStreamWaitEvent(self.stream, event, 0)
        if code:
            self._fail(code, "cuStreamWaitEvent", self._lib.cuStreamWaitEvent, self.stream, event, 0)

    # -- lifetime -----------------------------------------------------------------------

    def synchronize(self) -> None:
        """Block until the stream is idle (raises the stream's failure)."""
        if CURRENT.ctx is not self._ctx:
            self.device._activate()
        self._driver.check(self._lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize", self.name)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for tl in list(self._signaled_timelines):
            tl.forget_queue(self)
        device = self.device
        device._forget_queue(self)
        if device.closed or EXIT.exiting:
            return
        try:
            device._activate()
        except Exception:  # noqa: BLE001 - a dead context still lets us drop the handle
            pass
        # Drain: errors here are the context's sticky failure, already reported elsewhere.
        self._lib.cuStreamSynchronize(self.stream)
        self._lib.cuStreamDestroy_v2(self.stream)
        self._host_fn_keep.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        return f"<CudaQueue {self.name}{' closed' if self.closed else ''}>"


def _cuda_timeline(timeline: Timeline) -> CudaTimeline:
    if not isinstance(timeline, CudaTimeline):
        raise InvalidArgument(f"timeline: expected a CUDA timeline, got {type(timeline).__name__}")
    return timeline


__all__ = ["CudaQueue"]
