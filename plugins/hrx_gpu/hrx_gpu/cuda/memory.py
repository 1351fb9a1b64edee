"""Native buffers of the CUDA engine and the pinned slab that holds timeline counters.

* :class:`DeviceBuffer` -- ``cuMemAlloc``; not host-mappable.
* :class:`PinnedBuffer` -- ``cuMemHostAlloc(PORTABLE | DEVICEMAP)``: pinned host
  memory the GPU reads and writes through its device pointer (coherent, no cache
  control); ``host_view()`` is a writable numpy view of it.
* :class:`ExternalBuffer` -- memory owned by another library (a torch or cupy
  tensor, through ``__cuda_array_interface__``); retained, never freed here.

Every buffer exposes its CUDA address as ``dptr`` (an int) so that queues, graphs
and kernel arguments use it without a method call. With unified addressing the same
``cuMemcpyAsync`` moves bytes between any two of them.

``cuMemFree``/``cuMemFreeHost`` synchronize the whole device, so releasing memory
goes through :meth:`~hrx_gpu.cuda.device.CudaDevice.release_memory`, which defers it while
any queue of the device is busy.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
from hrx_core.engine import NativeBuffer

from ._driver import (
    CU_MEMHOSTALLOC_DEVICEMAP,
    CU_MEMHOSTALLOC_PORTABLE,
    CU_MEMHOSTREGISTER_DEVICEMAP,
    CU_MEMHOSTREGISTER_PORTABLE,
    EXIT,
)
from .errors import CUDA_ERROR_OUT_OF_MEMORY

#: Kinds of memory whose release the device may defer (see CudaDevice.release_memory).
DEVICE_MEMORY = "device"
PINNED_MEMORY = "pinned"

if TYPE_CHECKING:
    from .device import CudaDevice


class CudaBuffer(NativeBuffer):
    """Common part: size, device address, exactly-once release."""

    dptr: int
    nbytes: int
    #: Pinned host memory mapped for the device (copies between two such buffers run
    #: as a kernel, see hrx_gpu.cuda.mapped).
    host_mapped = False

    def __init__(self, device: CudaDevice, dptr: int, nbytes: int) -> None:
        self.device = device
        self.dptr = dptr
        self.nbytes = nbytes
        self._freed = False
        self._free_lock = threading.Lock()

    def pointer(self) -> int | None:
        return self.dptr

    def host_view(self) -> np.ndarray | None:
        return None

    def free(self) -> None:
        with self._free_lock:
            if self._freed:
                return
            self._freed = True
        self.device._forget_buffer(self)
        self._release()

    def _release(self) -> None:
        raise NotImplementedError

    @property
    def freed(self) -> bool:
        return self._freed

    def __del__(self) -> None:
        # A buffer dropped without free(): release it unless the interpreter is exiting
        # (the process frees everything then) or the device is already gone.
        try:
            if not self._freed and not EXIT.exiting:
                self.free()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        state = " freed" if self._freed else ""
        return f"<{type(self).__name__} {self.nbytes} bytes at 0x{self.dptr:x}{state}>"


class DeviceBuffer(CudaBuffer):
    """Device memory from ``cuMemAlloc``."""

    def _release(self) -> None:
        device = self.device
        if device.closed or EXIT.exiting:
            return  # released with the context
        device.release_memory(DEVICE_MEMORY, self.dptr, self.nbytes)


class PinnedBuffer(CudaBuffer):
    """Pinned, device-mapped host memory (``allocate(shared=True)``).

    The host pointer is an ``ffi.gc`` object and the numpy view holds it, so the
    memory outlives neither an explicit :meth:`free` (which releases it now) nor the
    last view of a buffer that was dropped without one.
    """

    host_mapped = True

    def __init__(self, device: CudaDevice, host: Any, dptr: int, nbytes: int) -> None:
        super().__init__(device, dptr, nbytes)
        ffi = device.driver.ffi
        self._host = ffi.gc(host, _host_freer(device, nbytes), size=max(nbytes, 1))
        self._view = np.frombuffer(ffi.buffer(self._host, max(nbytes, 1)), dtype=np.uint8)[:nbytes]

    def host_view(self) -> np.ndarray | None:
        return self._view

    @property
    def host_address(self) -> int:
        return int(self.device.driver.ffi.cast("uintptr_t", self._host))

    def _release(self) -> None:
        self.device.driver.ffi.release(self._host)

    def __del__(self) -> None:
        pass  # the gc'd host pointer frees the memory once no view remains


def _host_freer(device: CudaDevice, nbytes: int) -> Any:
    def free_host(pointer: Any) -> None:
        try:
            if device.closed or EXIT.exiting:
                return  # released with the context, or by the process exit
            device.release_memory(PINNED_MEMORY, pointer, nbytes)
        except Exception:  # noqa: BLE001 - runs from the garbage collector
            pass

    return free_host


class HostPinnedView(CudaBuffer):
    """Host memory of the caller the GPU reaches directly for one transfer: memory that
    is already pinned (``cuMemHostAlloc``'d or registered elsewhere), or pageable
    memory registered here (``cuMemHostRegister``) and unregistered on ``free()``."""

    host_mapped = True

    def __init__(self, device: CudaDevice, dptr: int, nbytes: int, owner: Any, host: int | None) -> None:
        super().__init__(device, dptr, nbytes)
        self.owner: Any = owner  # keeps the array alive while the copy may read it
        self._registered = host  # host address registered here, if any

    def _release(self) -> None:
        host, self._registered = self._registered, None
        self.owner = None
        if host is not None and not self.device.closed and not EXIT.exiting:
            lib, ffi = self.device.driver.lib, self.device.driver.ffi
            self.device._activate()
            lib.cuMemHostUnregister(ffi.cast("void *", host))


def wrap_pinned(device: CudaDevice, array: np.ndarray, register: bool) -> HostPinnedView | None:
    """A :class:`HostPinnedView` of ``array`` (contiguous uint8 host memory), or None
    when it is pageable and ``register`` is false (or the driver refuses to register)."""
    driver = device.driver
    ffi, lib = driver.ffi, driver.lib
    host = int(array.ctypes.data)
    n = array.nbytes
    dptr = ffi.new("CUdeviceptr *")
    device._activate()
    if lib.cuMemHostGetDevicePointer_v2(dptr, ffi.cast("void *", host), 0) == 0:
        return HostPinnedView(device, int(dptr[0]), n, array, None)  # already pinned
    if not register:
        return None
    flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP
    if lib.cuMemHostRegister_v2(ffi.cast("void *", host), n, flags) != 0:
        return None  # e.g. part of it is registered already: stage instead
    if lib.cuMemHostGetDevicePointer_v2(dptr, ffi.cast("void *", host), 0) != 0:
        lib.cuMemHostUnregister(ffi.cast("void *", host))
        return None
    return HostPinnedView(device, int(dptr[0]), n, array, host)


class ExternalBuffer(CudaBuffer):
    """Foreign device memory, retained but not owned."""

    def __init__(self, device: CudaDevice, dptr: int, nbytes: int, owner: Any) -> None:
        super().__init__(device, dptr, nbytes)
        self.owner: Any = owner

    def _release(self) -> None:
        self.owner = None


def allocate_device(device: CudaDevice, nbytes: int) -> DeviceBuffer:
    driver = device.driver
    out = driver.ffi.new("CUdeviceptr *")
    device._activate()
    code = driver.lib.cuMemAlloc_v2(out, max(nbytes, 1))
    if code == CUDA_ERROR_OUT_OF_MEMORY and device.reclaim(force=True):
        code = driver.lib.cuMemAlloc_v2(out, max(nbytes, 1))  # deferred frees made room
    driver.check(code, "cuMemAlloc", f"{nbytes} bytes")
    return DeviceBuffer(device, int(out[0]), nbytes)


def allocate_pinned(device: CudaDevice, nbytes: int) -> tuple[Any, int]:
    """``(host pointer cdata, device address)`` of new pinned, device-mapped memory."""
    driver = device.driver
    ffi, lib = driver.ffi, driver.lib
    host = ffi.new("void **")
    device._activate()
    flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
    code = lib.cuMemHostAlloc(host, max(nbytes, 1), flags)
    if code == CUDA_ERROR_OUT_OF_MEMORY and device.reclaim(force=True):
        code = lib.cuMemHostAlloc(host, max(nbytes, 1), flags)
    driver.check(code, "cuMemHostAlloc", f"{nbytes} bytes")
    pointer = host[0]
    dptr = ffi.new("CUdeviceptr *")
    code = lib.cuMemHostGetDevicePointer_v2(dptr, pointer, 0)
    if code:
        lib.cuMemFreeHost(pointer)
        driver.check(code, "cuMemHostGetDevicePointer")
    return pointer, int(dptr[0])


def allocate_shared(device: CudaDevice, nbytes: int) -> PinnedBuffer:
    host, dptr = allocate_pinned(device, nbytes)
    return PinnedBuffer(device, host, dptr, nbytes)


class CounterSlab:
    """Timeline counters: 64-bit slots in pinned, device-mapped host memory.

    One page holds 64 counters, each on its own 64-byte line. The host reads a
    counter with a plain load through ``host``; the GPU writes it through ``dptr``.
    A closed timeline's slot is recycled only after its last signalled value landed
    and every queue that signalled or waited on it is idle or closed, so that no
    encoded operation can touch the slot of the next timeline.
    """

    PAGE = 4096
    STRIDE = 64

    def __init__(self, device: CudaDevice) -> None:
        self.device = device
        # Reentrant: a timeline collected while this thread holds the lock retires here.
        self._lock = threading.RLock()
        self._pages: list[Any] = []
        self._free: list[tuple[Any, int]] = []
        self._retired: list[tuple[Any, int, int, list[Any]]] = []

    def acquire(self) -> tuple[Any, int]:
        """``(uint64_t* cdata, device address)`` of a zeroed counter."""
        with self._lock:
            if not self._free and self._retired:
                self._sweep()
            if not self._free:
                host, dptr = allocate_pinned(self.device, self.PAGE)
                self._pages.append(host)
                ffi = self.device.driver.ffi
                base = ffi.cast("char *", host)
                for offset in range(self.PAGE - self.STRIDE, -1, -self.STRIDE):
                    self._free.append((ffi.cast("uint64_t *", base + offset), dptr + offset))
            counter, dptr = self._free.pop()
        counter[0] = 0
        return counter, dptr

    def retire(self, counter: Any, dptr: int, last_value: int, queues: list[Any]) -> None:
        """Hand back a slot; it is reused once ``queues`` can no longer touch it."""
        with self._lock:
            self._retired.append((counter, dptr, last_value, queues))

    def _sweep(self) -> None:
        keep = []
        for counter, dptr, last_value, queues in self._retired:
            if counter[0] >= last_value and all(q.closed or q.query() == 0 for q in queues):
                self._free.append((counter, dptr))
            else:
                keep.append((counter, dptr, last_value, queues))
        self._retired = keep

    def close(self) -> None:
        with self._lock:
            pages, self._pages, self._free, self._retired = self._pages, [], [], []
        if EXIT.exiting:
            return
        lib = self.device.driver.lib
        for host in pages:
            lib.cuMemFreeHost(host)


__all__ = [
    "CudaBuffer",
    "DeviceBuffer",
    "PinnedBuffer",
    "ExternalBuffer",
    "CounterSlab",
    "allocate_device",
    "allocate_shared",
    "allocate_pinned",
]
