"""One CUDA device: the primary context, queues, timelines, buffers, modules, graphs.

The device retains the GPU's primary context (``cuDevicePrimaryCtxRetain``), the
same context the CUDA runtime, PyTorch and CuPy use, so their memory can be wrapped
and shared without copies. Each thread that calls into the engine gets the context
made current once (cached per thread, see :mod:`hrx_gpu.cuda._driver`).

Faults and recovery
-------------------
A kernel that traps or touches an illegal address raises a *sticky* error: from then
on every driver call in the context fails with it (``CUDA_ERROR_LAUNCH_FAILED``,
``CUDA_ERROR_ILLEGAL_ADDRESS``...). The engine never hangs on it: timeline waits poll
the streams and raise :class:`~hrx_gpu.cuda.errors.CudaError`, and :attr:`CudaDevice.failure`
holds the first failure seen. All memory, modules, streams and graphs of the context
are lost, for every library sharing it. :meth:`CudaDevice.reset` closes everything
this device opened and calls ``cuDevicePrimaryCtxReset``. Whether a device opened
afterwards works depends on the driver: on an H200 with driver 580 (CUDA 13.0) the
reset succeeds but retaining the primary context again still fails with
``CUDA_ERROR_LAUNCH_FAILED`` (raised as a typed error, not a crash), so the sticky
error outlives the context there. The recovery CUDA documents -- and the one to use --
is a new process.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
from hrx_core.engine import (
    Artifact,
    DeviceInfo,
    EngineDevice,
    Executable,
    GraphNode,
    KernelArg,
    Limits,
    NativeBuffer,
    NativeGraph,
    NativeQueue,
    PreparedDispatch,
    QueueFamily,
    Timeline,
)
from hrx_core.errors import HRXError, InvalidArgument, Unsupported

from . import _driver
from ._driver import (
    ATTR_ASYNC_ENGINE_COUNT,
    ATTR_GLOBAL_MEMORY_BUS_WIDTH,
    ATTR_L2_CACHE_SIZE,
    ATTR_MAX_BLOCK_DIM_X,
    ATTR_MAX_BLOCK_DIM_Y,
    ATTR_MAX_BLOCK_DIM_Z,
    ATTR_MAX_GRID_DIM_X,
    ATTR_MAX_GRID_DIM_Y,
    ATTR_MAX_GRID_DIM_Z,
    ATTR_MAX_THREADS_PER_BLOCK,
    ATTR_MEMORY_CLOCK_RATE,
    ATTR_MULTIPROCESSOR_COUNT,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    CU_STREAM_LEGACY,
    CU_STREAM_PER_THREAD,
    CURRENT,
    EXIT,
    Driver,
)
from .errors import CUDA_ERROR_NOT_READY, CudaError
from .graph import CudaGraph
from .mapped import MappedKernels
from .kernel import TARGETS, CudaExecutable, CudaPreparedDispatch, load_executable
from .memory import (
    DEVICE_MEMORY,
    CounterSlab,
    CudaBuffer,
    ExternalBuffer,
    allocate_device,
    allocate_shared,
    wrap_pinned,
)
from .queue import CudaQueue
from .timeline import CudaTimeline

#: Largest single copy or fill the core hands to a queue (it splits larger ones).
MAX_TRANSFER_BYTES = 1 << 32
#: Hardware queues a compute family exposes (CUDA streams are cheap; 8 is plenty).
COMPUTE_QUEUES = 8
#: Freed bytes the device may hold back while its queues are busy (see release_memory).
DEFERRED_LIMIT = 1 << 30


def driver_release() -> str:
    """The kernel driver's version string (e.g. ``580.159.04``), or ``""``."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return ""
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    return ""


def programmatic_edges_usable(driver: Driver, compute_capability: str) -> bool:
    """Whether graphs on this device use programmatic edges (see CudaDevice): asked
    for with HRX_CUDA_PDL=1, and possible here."""
    if os.environ.get("HRX_CUDA_PDL", "0") != "1":
        return False
    if int(compute_capability.split(".")[0]) < 9:
        return False
    try:
        driver.lib.cuGraphAddDependencies_v2  # noqa: B018 - a driver before CUDA 12.3 lacks it
    except AttributeError:
        return False
    return True


def cuda_version_string(version: int) -> str:
    return f"{version // 1000}.{(version % 1000) // 10}"


def peak_memory_bandwidth(driver: Driver, dev: int) -> int:
    """The device memory's peak bandwidth in bytes a second, from the driver's peak
    memory clock and bus width (double data rate: two transfers a clock), or 0 where the
    driver does not report them (a plan that asks for it then keeps its default)."""
    try:
        clock_khz = driver.attribute(dev, ATTR_MEMORY_CLOCK_RATE)
        bus_bits = driver.attribute(dev, ATTR_GLOBAL_MEMORY_BUS_WIDTH)
    except HRXError:
        return 0
    if clock_khz <= 0 or bus_bits <= 0:
        return 0
    return 2 * clock_khz * 1000 * bus_bits // 8


#: Kernel parameter bytes a launch may pass: 4096 on every device, 32764 on Volta
#: (compute capability 7.0) and newer with a CUDA 12.1 or newer driver.
KERNEL_ARG_BYTES_SMALL, KERNEL_ARG_BYTES_LARGE = 4096, 32764


def max_kernel_arg_bytes(driver_version: int, major: int) -> int:
    """The kernel parameter limit of a device of compute capability ``major``.x under a
    driver of ``driver_version`` (cuDriverGetVersion's number, 12010 for 12.1)."""
    return KERNEL_ARG_BYTES_LARGE if driver_version >= 12010 and major >= 7 else KERNEL_ARG_BYTES_SMALL


def describe(driver: Driver, index: int) -> DeviceInfo:
    """DeviceInfo of device ``index`` (no context needed)."""
    dev = driver.device(index)
    attr = driver.attribute
    major, minor = driver.compute_capability(dev)
    copy_engines = attr(dev, ATTR_ASYNC_ENGINE_COUNT)
    memory = driver.total_memory(dev)
    limits = Limits(
        max_transfer_bytes=MAX_TRANSFER_BYTES,
        alignment=256,
        fill_pattern_sizes=(1, 2, 4),
        max_grid=(attr(dev, ATTR_MAX_GRID_DIM_X), attr(dev, ATTR_MAX_GRID_DIM_Y), attr(dev, ATTR_MAX_GRID_DIM_Z)),
        max_block=(attr(dev, ATTR_MAX_BLOCK_DIM_X), attr(dev, ATTR_MAX_BLOCK_DIM_Y), attr(dev, ATTR_MAX_BLOCK_DIM_Z)),
        max_threads_per_block=attr(dev, ATTR_MAX_THREADS_PER_BLOCK),
        max_allocation_bytes=memory,
        max_kernel_arg_bytes=max_kernel_arg_bytes(driver.version, major),
    )
    release = driver_release()
    properties = {
        "compute_capability": f"{major}.{minor}",
        "arch": f"sm_{major}{minor}",
        "multiprocessors": attr(dev, ATTR_MULTIPROCESSOR_COUNT),
        "copy_engines": copy_engines,
        "driver_version": cuda_version_string(driver.version) + (f" ({release})" if release else ""),
        "l2_bytes": attr(dev, ATTR_L2_CACHE_SIZE),
        "memory_bandwidth": peak_memory_bandwidth(driver, dev),
        "pci_bus_id": driver.pci_bus_id(dev),
    }
    return DeviceInfo(
        engine="cuda",
        index=index,
        name=driver.device_name(dev),
        kind="gpu",
        queue_families=(
            QueueFamily("compute", COMPUTE_QUEUES),
            QueueFamily("copy", max(1, copy_engines), frozenset({"copy", "fill"})),
        ),
        limits=limits,
        targets=TARGETS,
        memory_bytes=memory,
        coherent_shared_memory=True,
        host_mappable=False,
        native_graphs=True,
        dlpack_device_type=2,
        sticky_failures=True,  # a trapped kernel or an illegal address loses the context
        properties=properties,
    )


def _positive(name: str, value: Any, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise InvalidArgument(f"{name}: expected an int in 1..{limit}, got {value!r}")
    return value


def _with_options(
    info: DeviceInfo, max_transfer_bytes: int | None, compute_queues: int | None, copy_queues: int | None
) -> DeviceInfo:
    """``info`` with the test/tuning options applied (smaller transfers, queue counts)."""
    if max_transfer_bytes is not None:
        limit = _positive("max_transfer_bytes", max_transfer_bytes, MAX_TRANSFER_BYTES)
        info = attrs.evolve(info, limits=attrs.evolve(info.limits, max_transfer_bytes=limit))
    families = []
    for family in info.queue_families:
        count = compute_queues if family.name == "compute" else copy_queues
        if count is not None:
            family = attrs.evolve(family, count=_positive(f"{family.name}_queues", count, 64))
        families.append(family)
    return attrs.evolve(info, queue_families=tuple(families))


class CudaDevice(EngineDevice):
    """A GPU through the CUDA driver API."""

    OPTIONS = frozenset({"stream_memops", "max_transfer_bytes", "compute_queues", "copy_queues"})

    def __init__(
        self,
        driver: Driver,
        index: int,
        *,
        stream_memops: bool | None = None,
        max_transfer_bytes: int | None = None,
        compute_queues: int | None = None,
        copy_queues: int | None = None,
    ) -> None:
        self.driver = driver
        self.index = index
        self.dev = driver.device(index)
        self.info = _with_options(describe(driver, index), max_transfer_bytes, compute_queues, copy_queues)
        self.closed = False
        #: The first sticky failure seen in this device's context, if any.
        self.failure: CudaError | None = None
        if stream_memops is None:
            stream_memops = driver.wait_value64 is not None and driver.write_value64 is not None
        elif stream_memops and (driver.wait_value64 is None or driver.write_value64 is None):
            raise Unsupported("stream_memops: this driver has no cuStreamWaitValue64/cuStreamWriteValue64")
        #: Signals and waits use stream memory operations (else host functions + events).
        self.stream_memops = bool(stream_memops)
        #: graphs launch kernels declared programmatic before their kernel predecessors
        #: finish (programmatic dependent launch: compute capability 9.0+, a driver with
        #: cuGraphAddDependencies_v2). Opt-in, HRX_CUDA_PDL=1: on the H200 it made
        #: GPT-2 small's decode graph 3-4% slower (docs/performance.md)
        self.programmatic_edges = programmatic_edges_usable(driver, self.info.properties["compute_capability"])
        ctx = driver.ffi.new("CUcontext *")
        driver.check(driver.lib.cuDevicePrimaryCtxRetain(ctx, self.dev), "cuDevicePrimaryCtxRetain", f"device {index}")
        self.ctx = ctx[0]
        self._lock = threading.Lock()
        self._queues: weakref.WeakSet[CudaQueue] = weakref.WeakSet()
        self._timelines: weakref.WeakSet[CudaTimeline] = weakref.WeakSet()
        self._buffers: weakref.WeakSet[CudaBuffer] = weakref.WeakSet()
        self._executables: weakref.WeakSet[CudaExecutable] = weakref.WeakSet()
        self._graphs: weakref.WeakSet[CudaGraph] = weakref.WeakSet()
        self._counters = CounterSlab(self)
        # Releases deferred while queues were busy: (kind, handle), and their bytes.
        # Reentrant: the garbage collector may release memory on a thread inside it.
        self._deferred_lock = threading.RLock()
        self._deferred: list[tuple[str, Any]] = []
        self._deferred_bytes = 0
        #: Kernels for copies between pinned buffers and graph fills of pinned memory.
        self.mapped = MappedKernels(self)
        self.mapped.preload()
        #: Whether the driver takes memset graph nodes on pinned host memory (None: untried).
        self.memset_node_on_host: bool | None = None

    # -- context ----------------------------------------------------------------------

    def _activate(self) -> None:
        """Make the primary context current on this thread (cached)."""
        if CURRENT.ctx is not self.ctx:
            if self.closed:
                raise InvalidArgument(f"cuda:{self.index}: device is closed")
            self.driver.make_current(self.ctx)

    def _record_failure(self, code: int, call: str, where: str) -> CudaError:
        error = self.driver.error(code, call, where)
        assert isinstance(error, CudaError)
        with self._lock:
            if self.failure is None:
                self.failure = error
            return self.failure

    # -- EngineDevice -------------------------------------------------------------------

    def allocate(self, nbytes: int, *, shared: bool = False) -> NativeBuffer:
        if not isinstance(nbytes, int) or nbytes < 0:
            raise InvalidArgument(f"nbytes: expected an int >= 0, got {nbytes!r}")
        if self._deferred:
            self.reclaim()
        buffer: CudaBuffer = allocate_shared(self, nbytes) if shared else allocate_device(self, nbytes)
        self._buffers.add(buffer)
        return buffer

    def create_queue(self, family: str, index: int) -> NativeQueue:
        fam = self.info.family(family)
        if fam is None:
            names = ", ".join(f.name for f in self.info.queue_families)
            raise InvalidArgument(f"family: expected one of {names}, got {family!r}")
        if not isinstance(index, int) or not 0 <= index < fam.count:
            raise InvalidArgument(f"index: {family} has {fam.count} queues, got {index!r}")
        queue = CudaQueue(self, family, index)
        self._queues.add(queue)
        return queue

    def create_timeline(self) -> Timeline:
        timeline = CudaTimeline(self)
        self._timelines.add(timeline)
        return timeline

    def load_executable(self, artifact: Artifact) -> Executable:
        return load_executable(self, artifact)

    def compile_options(self, target: str) -> tuple[str, ...]:
        if target == "cuda":
            return (f"--gpu-architecture={self.info.properties['arch']}", "--std=c++17")
        return ()

    def prepare_dispatch(
        self,
        executable: Executable,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[KernelArg],
    ) -> PreparedDispatch:
        if not isinstance(executable, CudaExecutable):
            raise InvalidArgument(f"executable: expected a CUDA executable, got {type(executable).__name__}")
        return CudaPreparedDispatch(self, executable, grid, block, args)

    def build_graph(self, nodes: Sequence[GraphNode]) -> NativeGraph:
        graph = CudaGraph(self, nodes)
        self._graphs.add(graph)
        return graph

    def wrap_pinned(self, array: Any, *, register: bool = False) -> NativeBuffer | None:
        """Host memory the GPU's copy engines read directly: already pinned, or (with
        ``register``) registered for the transfer -- uploads then skip staging."""
        buffer = wrap_pinned(self, array, register)
        if buffer is not None:
            self._buffers.add(buffer)
        return buffer

    def wrap_external(self, obj: Any) -> tuple[NativeBuffer, int] | None:
        try:
            iface = obj.__cuda_array_interface__
        except Exception:  # noqa: BLE001 - AttributeError, or torch's error for CPU tensors
            return None
        if not isinstance(iface, dict):
            return None
        import numpy as np

        try:
            shape = tuple(int(s) for s in iface["shape"])
            itemsize = np.dtype(iface["typestr"]).itemsize
            pointer = int(iface["data"][0])
        except Exception as exc:  # noqa: BLE001
            raise InvalidArgument(f"obj: malformed __cuda_array_interface__: {exc}") from exc
        count = 1
        for s in shape:
            count *= s
        strides = iface.get("strides")
        if strides is not None and count > 1:
            expected, step = [], itemsize
            for s in reversed(shape):
                expected.append(step)
                step *= s
            if tuple(int(x) for x in strides) != tuple(reversed(expected)):
                raise InvalidArgument(f"obj: only C-contiguous memory can be wrapped, got strides {tuple(strides)}")
        nbytes = count * itemsize
        driver = self.driver
        self._activate()
        if pointer:
            ordinal = driver.ffi.new("int *")
            code = driver.lib.cuPointerGetAttribute(ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer)
            if code == 0 and int(ordinal[0]) != self.index:
                raise InvalidArgument(f"obj: memory lives on cuda:{int(ordinal[0])}, not cuda:{self.index}")
        # The producer may still be writing on its stream (v3 interface): our streams do
        # not synchronize with it, so wait for it here.
        stream = iface.get("stream")
        if stream is not None and stream != 0:
            handle = driver.ffi.cast("CUstream", {1: CU_STREAM_LEGACY, 2: CU_STREAM_PER_THREAD}.get(stream, stream))
            driver.check(driver.lib.cuStreamSynchronize(handle), "cuStreamSynchronize", "wrapped memory's stream")
        buffer = ExternalBuffer(self, pointer, nbytes, obj)
        self._buffers.add(buffer)
        return buffer, nbytes

    # -- bookkeeping ----------------------------------------------------------------------

    def _live_queues(self) -> list[CudaQueue]:
        return [q for q in list(self._queues) if not q.closed]

    def _forget_queue(self, queue: CudaQueue) -> None:
        self._queues.discard(queue)

    def _forget_timeline(self, timeline: CudaTimeline) -> None:
        self._timelines.discard(timeline)

    def _forget_buffer(self, buffer: CudaBuffer) -> None:
        self._buffers.discard(buffer)

    def _track_executable(self, executable: CudaExecutable) -> None:
        self._executables.add(executable)

    def _forget_executable(self, executable: CudaExecutable) -> None:
        self._executables.discard(executable)

    def _forget_graph(self, graph: CudaGraph) -> None:
        self._graphs.discard(graph)

    # -- deferred release -----------------------------------------------------------------

    def release_memory(self, kind: str, handle: Any, nbytes: int) -> None:
        """Free device (``cuMemFree``) or pinned (``cuMemFreeHost``) memory.

        Both calls synchronize the whole device: freeing while a queue runs a long
        kernel would stall the calling thread until it ends (and behind a wait on a
        value that this thread signals later, forever). So the release is deferred
        while any queue of this device is busy, and happens at the next release or
        allocation that finds them idle, when more than DEFERRED_LIMIT bytes wait,
        when an allocation runs out of memory, or at close.
        """
        with self._deferred_lock:
            self._deferred.append((kind, handle))
            self._deferred_bytes += nbytes
            force = self._deferred_bytes > DEFERRED_LIMIT
        self.reclaim(force=force)

    def reclaim(self, *, force: bool = False) -> int:
        """Release deferred memory now if the queues are idle (or ``force``); return
        how many allocations were released."""
        if not self._deferred:
            return 0
        if not force and any(q.query() == CUDA_ERROR_NOT_READY for q in self._live_queues()):
            return 0
        with self._deferred_lock:
            items, self._deferred, self._deferred_bytes = self._deferred, [], 0
        if not items or EXIT.exiting:
            return 0
        lib = self.driver.lib
        self._activate()
        for kind, handle in items:
            if kind == DEVICE_MEMORY:
                lib.cuMemFree_v2(handle)
            else:
                lib.cuMemFreeHost(handle)
        return len(items)

    @property
    def deferred_bytes(self) -> int:
        """Bytes released by the core but not yet returned to the driver."""
        return self._deferred_bytes

    def memory_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of device memory."""
        ffi = self.driver.ffi
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        self._activate()
        self.driver.check(self.driver.lib.cuMemGetInfo_v2(free, total), "cuMemGetInfo")
        return int(free[0]), int(total[0])

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Close every queue, graph, module and timeline; free live buffers; release
        the primary context. Safe to call twice and at interpreter exit."""
        with self._lock:
            if self.closed:
                return
        if not EXIT.exiting:
            groups: tuple[Iterable[CudaGraph | CudaExecutable | CudaQueue | CudaTimeline | CudaBuffer], ...] = (
                self._graphs, self._executables, self._queues, self._timelines, self._buffers
            )
            for group in groups:
                for item in list(group):
                    try:
                        item.free() if isinstance(item, CudaBuffer) else item.close()
                    except Exception:  # noqa: BLE001 - a dead context must not stop the release
                        pass
            try:
                self.mapped.close()
                self.reclaim(force=True)
                self._counters.close()
            except Exception:  # noqa: BLE001
                pass
        with self._lock:
            self.closed = True
        if EXIT.exiting:
            return
        self.driver.lib.cuDevicePrimaryCtxRelease_v2(self.dev)
        if CURRENT.ctx is self.ctx:
            CURRENT.ctx = None

    def reset(self) -> None:
        """Close this device and reset the GPU's primary context.

        The in-process attempt at recovering from a sticky error: every allocation,
        module and stream of the context is destroyed -- also those of other
        libraries sharing it. Open a new device afterwards; if the driver keeps the
        error (see the module docstring), that raises a CudaError and only a new
        process recovers.
        """
        self.close()
        code = self.driver.lib.cuDevicePrimaryCtxReset_v2(self.dev)
        _driver.CURRENT.ctx = None
        self.driver.check(code, "cuDevicePrimaryCtxReset", f"device {self.index}")

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        return f"<CudaDevice cuda:{self.index} {self.info.name}{' closed' if self.closed else ''}>"


__all__ = ["CudaDevice", "describe", "MAX_TRANSFER_BYTES", "driver_release"]
