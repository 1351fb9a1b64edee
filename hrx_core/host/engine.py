"""The host engine and its device."""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..engine import (
    Artifact,
    CacheOp,
    DeviceInfo,
    Engine,
    EngineDevice,
    EngineStatus,
    Executable,
    GraphNode,
    NativeGraph,
    Limits,
    NativeBuffer,
    NativeQueue,
    QueueFamily,
    Timeline,
)
from ..errors import DeviceError, InvalidArgument, show
from .queue import HostExecutable, HostQueue
from .timeline import HostTimeline

ALIGNMENT = 256
#: Argument bytes a host launch passes: a host callable takes any, but the host engine
#: declares the cuda engine's limit (CUDA 12.1+) so that plans sized for it run here too.
MAX_KERNEL_ARG_BYTES = 32764
#: Host allocations start half a page past a page boundary. glibc's large memcpy
#: runs at a third of its speed when (dst - src) mod 4096 is in (0, ~500) -- 4K
#: aliasing of loads with earlier stores (measured on the CI machine). numpy's large
#: arrays start 16 bytes past a page, so a half-page offset keeps uploads from and
#: downloads into numpy arrays, and whole-buffer copies, on the fast path.
PAGE = 4096
DEFAULT_MAX_TRANSFER = 4 << 30  # the reference hardware's SDMA limit
#: Most queues of a family (each host queue is a thread).
MAX_QUEUES = 64


class HostFaults:
    """Fault injection for tests: make the N-th next submission fail."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._submit_countdown: int | None = None
        self.injected = 0

    def fail_submit(self, after: int = 0) -> None:
        """The submission after ``after`` more successful ones raises DeviceError."""
        with self._lock:
            self._submit_countdown = after

    def clear(self) -> None:
        with self._lock:
            self._submit_countdown = None

    def on_submit(self, queue: str) -> None:
        with self._lock:
            if self._submit_countdown is None:
                return
            if self._submit_countdown > 0:
                self._submit_countdown -= 1
                return
            self._submit_countdown = None
            self.injected += 1
        raise DeviceError(f"{queue}: injected submission failure")


class HostBuffer(NativeBuffer):
    __slots__ = ("nbytes", "_raw", "_view", "shared")

    def __init__(self, nbytes: int, shared: bool) -> None:
        self.nbytes = nbytes
        self.shared = shared
        raw = np.empty(nbytes + 2 * PAGE, dtype=np.uint8)
        start = -raw.ctypes.data % PAGE + PAGE // 2
        self._raw: np.ndarray | None = raw
        self._view: np.ndarray | None = raw[start : start + nbytes]

    @classmethod
    def over(cls, array: np.ndarray) -> HostBuffer:
        """A buffer over existing contiguous host memory (not copied, not freed)."""
        buf = cls.__new__(cls)
        buf.nbytes = array.nbytes
        buf.shared = True
        buf._raw = array
        buf._view = array.reshape(-1).view(np.uint8)
        return buf

    def host_view(self) -> np.ndarray | None:
        if self._view is None:
            raise DeviceError("host buffer used after free")
        return self._view

    def cache_control(self, op: CacheOp, offset: int, length: int) -> None:
        pass  # host memory is coherent; the core still enforces the protocol

    def free(self) -> None:
        self._raw = None
        self._view = None


class HostImport(HostBuffer):
    """The host engine's import of another engine's host-visible allocation: the same
    pages, reached through that allocation's host view. Cache maintenance goes to the
    source, whose mapping owns the host cache state of the backing."""

    __slots__ = ("source",)

    def __init__(self, view: np.ndarray, source: NativeBuffer) -> None:
        self.nbytes = view.nbytes
        self.shared = True
        self._raw = view
        self._view = view.reshape(-1).view(np.uint8)
        self.source = source

    def cache_control(self, op: CacheOp, offset: int, length: int) -> None:
        self.source.cache_control(op, offset, length)

    def free(self) -> None:
        super().free()
        self.source = None  # type: ignore[assignment]


class HostDevice(EngineDevice):
    def __init__(
        self,
        index: int,
        *,
        max_transfer_bytes: int = DEFAULT_MAX_TRANSFER,
        compute_queues: int = 8,
        copy_queues: int = 2,
        jitter_us: int = 0,
        direct_host_access: bool = True,
    ) -> None:
        for name, value, limit in (("max_transfer_bytes", max_transfer_bytes, 2**62), ("compute_queues", compute_queues, MAX_QUEUES),
                                   ("copy_queues", copy_queues, MAX_QUEUES)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
                raise InvalidArgument(f"{name}: expected an int in 1..{limit}, got {show(value)}")
        if isinstance(jitter_us, bool) or not isinstance(jitter_us, int) or not 0 <= jitter_us <= 1_000_000:
            raise InvalidArgument(f"jitter_us: expected an int in 0..1000000, got {show(jitter_us)}")
        if not isinstance(direct_host_access, bool):
            raise InvalidArgument(f"direct_host_access: expected a bool, got {show(direct_host_access)}")
        self.faults = HostFaults()
        #: Test aid: each command first sleeps a random 0..jitter_us microseconds, which
        #: shuffles the interleaving of queues and graph branches so races surface.
        self.jitter_us = jitter_us
        #: False makes upload, upload_blocking and download stage like a discrete GPU (for tests).
        self.direct_host_access = bool(direct_host_access)
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            memory = 0
        self.info = DeviceInfo(
            engine="host",
            index=index,
            name=f"host CPU ({os.cpu_count()} threads)",
            kind="host",
            queue_families=(
                QueueFamily("compute", compute_queues),
                QueueFamily("copy", copy_queues, frozenset({"copy", "fill"})),
            ),
            limits=Limits(max_transfer_bytes=max_transfer_bytes, alignment=ALIGNMENT, max_kernel_arg_bytes=MAX_KERNEL_ARG_BYTES),
            targets=("host",),
            memory_bytes=memory,
            coherent_shared_memory=True,
            host_mappable=True,
            native_graphs=True,
            dlpack_device_type=1,
            imports_host_memory=True,
            host_memory=self.direct_host_access,
            properties={"threads": os.cpu_count() or 1, "reference": "semantics reference, not an accelerator"},
        )

    def allocate(self, nbytes: int, *, shared: bool = False) -> NativeBuffer:
        return HostBuffer(nbytes, shared)

    def create_queue(self, family: str, index: int) -> NativeQueue:
        return HostQueue(self, family, index)

    def create_timeline(self) -> Timeline:
        return HostTimeline()

    def load_executable(self, artifact: Artifact) -> Executable:
        if artifact.target != "host" or not callable(artifact.code):
            raise InvalidArgument(f"host engine loads 'host' callables, got target {artifact.target!r}")
        fn = artifact.code
        params: Mapping[str, inspect.Parameter]
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}  # builtins: no introspection, no grid
        return HostExecutable(artifact.entry or getattr(fn, "__name__", "kernel"), fn, "grid" in params, "block" in params)

    def build_graph(self, nodes: Sequence[GraphNode]) -> NativeGraph:
        from .graph import HostGraph

        return HostGraph(nodes, self.jitter_us)

    def wrap_host(self, array: np.ndarray) -> NativeBuffer | None:
        # host queues read any host memory, unless a test asks for staging
        return HostBuffer.over(array) if self.direct_host_access else None

    def wrap_external(self, obj: Any) -> tuple[NativeBuffer, int] | None:
        if isinstance(obj, np.ndarray) and obj.flags.c_contiguous and obj.flags.writeable:
            return HostBuffer.over(obj), obj.nbytes
        return None

    def import_buffer(self, other: NativeBuffer) -> NativeBuffer | None:
        # The CPU reaches every host-visible allocation of another engine (an NPU's
        # system memory, another engine's shared memory) through its host view.
        view = other.host_view()
        return None if view is None else HostImport(view, other)


class HostEngine(Engine):
    name = "host"
    priority = 0
    default_capable = True

    def probe(self) -> EngineStatus:
        return EngineStatus(True, "built in", 1)

    def open_device(self, index: int, **options: Any) -> EngineDevice:
        if index != 0:
            raise InvalidArgument(f"index: the host engine has one device, asked for {index}")
        known = {"max_transfer_bytes", "compute_queues", "copy_queues", "jitter_us", "direct_host_access"}
        unknown = set(options) - known
        if unknown:
            raise InvalidArgument(f"options: unknown host engine options {sorted(unknown)}; known: {sorted(known)}")
        return HostDevice(index, **options)

    def prepare(self) -> list[str]:
        dev = self.open_device(0)
        q = dev.create_queue("compute", 0)
        t = dev.create_timeline()
        q.signal(t, 1)
        q.submit()
        ok = t.wait(1, 5.0)
        q.close()
        return [f"host: worker queue started and signalled ({'ok' if ok else 'TIMEOUT'})"]
