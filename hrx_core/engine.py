"""The seam between hrx_core (policy) and engines (mechanism).

An engine is thin. Per device it allocates and frees native buffers, maps them for
the host where it can, encodes copies, fills and dispatches on native queues, waits
for and signals timeline values, loads executables and (optionally) builds native
graphs. Everything else -- argument validation, splitting of large transfers to
``Limits.max_transfer_bytes``, staging, hazard tracking, retention, graph
bookkeeping, budgets, pools -- lives above this module and exists once.

Contract for implementers (see docs/engines.md for a worked example):

* The core never calls a queue from two threads at once; it holds a lock per queue.
* Every encode call has already been validated: ranges are in bounds, nonempty,
  at most ``Limits.max_transfer_bytes`` long, and copy ranges do not overlap.
* Encoded work may start before :meth:`NativeQueue.submit`; ``submit`` only
  guarantees that everything encoded so far will eventually run.
* Work on one queue runs in encode order (FIFO). A signal of value ``v`` becomes
  visible to :meth:`Timeline.completed` only after all work encoded before it has
  finished.
* Failures inside queued work must not crash the process. The engine records them on
  the timeline (:meth:`Timeline.error`) at the next signalled value, and the value
  still advances so that nothing hangs.
* Encoding never blocks on earlier queued work (a CUDA copy between pageable host
  pointers would: the core stages such transfers through shared memory).
* :meth:`NativeBuffer.free` may hand memory back to the driver later (for instance
  once the device's queues are idle); the core only promises to call it once.
"""

from __future__ import annotations

import abc
import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import attrs
import numpy as np


class Access(enum.IntFlag):
    """Declared access of a binding."""

    READ = 1
    WRITE = 2
    READ_WRITE = 3

    @property
    def writes(self) -> bool:
        return bool(int(self) & 2)  # int arithmetic: enum's own __and__ is slow on hot paths

    @property
    def label(self) -> str:
        """``read``, ``write`` or ``read_write`` (for messages and reprs)."""
        return (self.name or str(int(self))).lower()


class CacheOp(enum.Enum):
    """Host cache maintenance around direct host access to ordinary buffers."""

    #: Before host reads: discard host-cached lines so device writes become visible.
    INVALIDATE = "invalidate"
    #: After host writes: write host-cached lines back so the device sees them.
    FLUSH = "flush"


@attrs.frozen
class QueueFamily:
    """A family of native queues: what it can encode and how many hardware queues."""

    name: str  # "compute", "copy" or "npu"
    count: int
    operations: frozenset[str] = frozenset({"copy", "fill", "dispatch"})

    def supports(self, operation: str) -> bool:
        return operation in self.operations


@attrs.frozen
class Limits:
    """Transfer and layout limits of one device."""

    #: Largest single native copy or fill; larger logical ranges are split by the core.
    max_transfer_bytes: int
    #: Alignment of native allocations (and of buffer bases handed to kernels).
    alignment: int = 256
    #: Fill pattern sizes the engine encodes natively (bytes).
    fill_pattern_sizes: tuple[int, ...] = (1, 2, 4)
    #: Largest grid per dimension.
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    #: Largest block (threads per group) per dimension, and in total.
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_threads_per_block: int = 1024
    #: Largest single allocation.
    max_allocation_bytes: int = 2**62
    #: Most bytes of arguments one launch passes (buffers 8 bytes each, scalars and
    #: records by value, each aligned to its size): 4096 is what every CUDA device
    #: takes; a kernel over its device's limit is refused when it is loaded.
    max_kernel_arg_bytes: int = 4096


@attrs.frozen
class DeviceInfo:
    """Identity and capabilities of one engine device."""

    engine: str
    index: int
    name: str
    kind: str  # "gpu", "npu" or "host"
    queue_families: tuple[QueueFamily, ...]
    limits: Limits
    #: Executable targets this device runs, most preferred first ("host", "cuda", "ptx").
    targets: tuple[str, ...]
    memory_bytes: int = 0
    #: ``allocate(shared=True)`` gives coherent host-visible memory.
    coherent_shared_memory: bool = True
    #: Ordinary (non-shared) buffers can be mapped for the host (with cache control).
    host_mappable: bool = False
    #: The engine implements :meth:`EngineDevice.build_graph`.
    native_graphs: bool = False
    #: DLPack device type of native buffers (1 = CPU, 2 = CUDA, 3 = CUDA host).
    dlpack_device_type: int = 1
    #: :meth:`EngineDevice.import_buffer` reaches host-visible allocations of other
    #: engines (shared memory, host-mappable buffers): the memory placement layer
    #: (hrx_core.placement) answers allocation profiles with it before allocating.
    imports_host_memory: bool = False
    #: Devices with the same nonempty memory domain import each other's allocations,
    #: host-visible or not (engines on one libamdf instance: a dma-buf export/import).
    memory_domain: str = ""
    #: A failure of work on a queue fails everything the queue runs after it (CUDA's
    #: sticky errors: the context is lost), so later work never completes normally.
    #: The runtime then signals resubmissions lazily, as streams signal their work
    #: (``RuntimeOptions(signals="auto")``): consecutive submissions may share one
    #: timeline value, and none can be reported failed by another's failure that it
    #: would not have failed by itself.
    sticky_failures: bool = False
    #: Ordinary buffers are plain host memory that the device's queues use coherently,
    #: with no cache maintenance (the host engine): :meth:`Stream.upload` then copies
    #: into an idle queue's destination on the calling thread, one copy instead of a
    #: staging copy and a queued one. Needs ``host_mappable``.
    host_memory: bool = False
    #: Free-form facts shown by ``hrx doctor`` (compute capability, driver, ...).
    properties: Mapping[str, Any] = attrs.field(factory=dict)

    def family(self, name: str) -> QueueFamily | None:
        for family in self.queue_families:
            if family.name == name:
                return family
        return None


@attrs.frozen
class EngineStatus:
    """Whether an engine can run here, and why not."""

    available: bool
    reason: str = ""
    device_count: int = 0
    #: Whether :func:`hrx_core.device` may pick this engine by priority. An engine on
    #: simulated hardware (a test fixture) says False: it is used only when named
    #: (``HRX_ENGINE`` or ``device(name)``), never as the default device.
    default: bool = True


@attrs.frozen
class HostReference:
    """A kernel's host implementation and its parameter list.

    Handed to engines on simulated hardware (``EngineDevice.wants_host_reference``),
    which run it in place of the compiled code they cannot execute: ``function(*buffers,
    *scalars[, grid=, block=])`` like the host engine's kernels."""

    function: Callable[..., Any]
    buffers: tuple[Access, ...]
    scalars: tuple[np.dtype[Any], ...]


@attrs.frozen
class Artifact:
    """Compiled code for one target, as returned by :func:`hrx_core.compile`."""

    target: str
    entry: str
    #: Engine-loadable payload: a callable for "host", PTX/cubin bytes for CUDA.
    code: Any
    key: str
    log: str = ""
    #: The kernel's host implementation, attached for devices that want it.
    reference: HostReference | None = None


class BufferArg(NamedTuple):
    """A validated buffer range handed to a dispatch (a tuple: cheap to build per call)."""

    buffer: NativeBuffer
    offset: int
    length: int
    access: Access


#: A dispatch argument: a buffer range or a numpy scalar of a fixed dtype.
KernelArg = BufferArg | np.generic


@attrs.frozen
class GraphNode:
    """One node of a native graph description.

    ``kind`` is "copy" (params: src, src_offset, dst, dst_offset, nbytes), "fill"
    (dst, offset, nbytes, pattern), "dispatch" (executable, grid, block, args) or
    "empty". ``deps`` are indices of earlier nodes.
    """

    kind: str
    deps: tuple[int, ...]
    params: Mapping[str, Any]


class NativeBuffer(abc.ABC):
    """A native allocation. The core frees it exactly once."""

    nbytes: int

    @abc.abstractmethod
    def host_view(self) -> np.ndarray | None:
        """A writable uint8 view of the whole buffer, or None if not host-mappable."""

    def cache_control(self, op: CacheOp, offset: int, length: int) -> None:  # noqa: B027
        """Host cache maintenance for a host-mapped ordinary buffer (default: none)."""

    def pointer(self) -> int | None:
        """The device address native clients use (CUDA pointer, host address), if any."""
        view = self.host_view()
        return None if view is None else int(view.ctypes.data)

    @abc.abstractmethod
    def free(self) -> None:
        """Release the native allocation."""


def patched_args(nodes: Sequence[GraphNode], patches: Sequence[tuple[int, int, BufferArg]]) -> dict[int, list[Any]] | None:
    """For :meth:`NativeGraph.patch_args` implementations: per node index, its arguments
    with ``patches`` applied (later patches of one argument win); None where a patch
    names anything but a buffer argument of a dispatch node -- refused, nothing changes."""
    changed: dict[int, list[Any]] = {}
    for index, arg_index, arg in patches:
        if not 0 <= index < len(nodes) or arg_index < 0 or not isinstance(arg, BufferArg):
            return None
        args = changed.get(index)
        if args is None:
            node = nodes[index]
            if node.kind != "dispatch":
                return None
            args = changed[index] = list(node.params["args"])
        if arg_index >= len(args) or not isinstance(args[arg_index], BufferArg):
            return None
        args[arg_index] = arg
    return changed


class Timeline(abc.ABC):
    """A monotonic 64-bit counter signalled by queues."""

    # ``c_completed`` and ``c_failed`` are slots (0 from __new__ on): the compiled paths
    # read them at their offsets; subclasses keep a __dict__ for everything else.
    __slots__ = ("c_completed", "c_failed", "__dict__", "__weakref__")

    #: ``c_completed``: where the compiled paths (:mod:`hrx_core.fastpath`) may read the
    #: counter without a call -- the address of a uint64 in host memory equal to
    #: :meth:`completed` (it may lag the method, never lead it), valid while this
    #: attribute names it (an engine that moves or frees the memory sets the attribute
    #: first). 0: call the method. ``c_failed``: likewise for :meth:`has_errors`, the
    #: address of a uint64 that becomes nonzero before :meth:`error` may report a failure
    #: (and before ``c_completed`` shows the failed value). 0: call the method.
    c_completed: int
    c_failed: int

    def __new__(cls, *args: Any, **kwargs: Any) -> Timeline:
        self = super().__new__(cls)
        self.c_completed = 0
        self.c_failed = 0
        return self

    @abc.abstractmethod
    def completed(self) -> int:
        """The highest value reached. Must be cheap: a memory read, not a driver call."""

    @abc.abstractmethod
    def wait(self, value: int, timeout: float | None) -> bool:
        """Block until ``completed() >= value``; False if ``timeout`` seconds passed.

        Raises :class:`~hrx_core.errors.DeviceError` if the device failed in a way
        that means the value will never be reached (a sticky CUDA error), so that a
        wait never hangs on a dead device.
        """

    def poll(self) -> int:
        """Like :meth:`completed`, but may ask the driver whether the device failed,
        recording the failure (so ``error`` reports it). Used by ``refresh()``."""
        return self.completed()

    def error(self, value: int) -> BaseException | None:
        """The failure recorded for work signalled at ``value``, if any."""
        return None

    def has_errors(self) -> bool:
        """Cheap: whether :meth:`error` may report a failure for any value (False lets
        the runtime settle a batch of submissions without asking per value). The
        default, True, is always correct."""
        return True

    def close(self) -> None:  # noqa: B027
        """Release native resources."""


class Executable(abc.ABC):
    """Loaded native code for one device.

    ``unloaded`` is set when the code's owner released it (an NPU program closed):
    the core then refuses every launch of it, recorded graphs included. Setting it
    moves :data:`hrx_core.buffer.EPOCH`, so every launch record checks again.
    ``private_bytes`` is the private workspace (scratch) the code needs beside its
    image; memory budgets charge both when code loads inside them. ``programmatic``
    is set for a kernel declared ``programmatic=True`` (it waits for its predecessors
    itself): an engine may launch it early inside a native graph."""

    name: str
    target: str
    unloaded: bool = False
    private_bytes: int = 0
    programmatic: bool = False
    #: the handle an engine's :meth:`NativeQueue.fast_dispatch` entry launches (a
    #: ``CUfunction`` address); 0: launches go through :meth:`NativeQueue.dispatch`
    fast_handle: int = 0

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "unloaded" and value:
            # launch records, and the compiled replay that trusts them, see it
            from .buffer import EPOCH

            EPOCH.bump()

    def close(self) -> None:  # noqa: B027
        """Unload."""


class NativeGraph(abc.ABC):
    """An instantiated native graph (optional capability)."""

    @abc.abstractmethod
    def launch(self, queue: NativeQueue) -> None:
        """Encode one replay of the whole graph on ``queue``."""

    @abc.abstractmethod
    def update(self, index: int, node: GraphNode) -> None:
        """Patch node ``index`` with new parameters (same kind and topology)."""

    def patch_args(self, patches: Sequence[tuple[int, int, BufferArg]]) -> bool:
        """Rebinding fast path: rewrite buffer arguments of dispatch nodes in place.

        ``patches`` holds ``(node index, argument index, new BufferArg)`` triples,
        grouped by node; the core validated every argument (device, access, size,
        overlap) and only buffer arguments change -- kernel, geometry, scalars and
        topology stay as built. An engine writes the changed argument cells and makes
        one native update per changed node. Return False (having changed nothing) where
        the engine cannot patch in place: the core then calls :meth:`update` per node.
        Replays already encoded keep their old arguments either way.
        """
        return False

    def prepare_patches(self, patches: Sequence[tuple[int, int, BufferArg]]) -> Any:
        """Optional: ``patches`` (as :meth:`patch_args` takes them) resolved once into an
        object :meth:`apply_patches` stages faster -- the core keeps one per rebind
        record. None (the default): not offered, the core calls :meth:`patch_args`."""
        return None

    def apply_patches(self, prepared: Any) -> bool:
        """Stage what :meth:`prepare_patches` returned, as :meth:`patch_args` would stage
        its patches. False, having changed nothing, where it went stale (the graph was
        rebuilt or a node repacked since) or does not fit: the core then calls
        :meth:`patch_args` with the patches themselves."""
        return False

    def launch_signaled(self, queue: NativeQueue, timeline: Timeline, value: int) -> bool:
        """:meth:`launch` on ``queue``, then a signal of ``timeline`` to ``value`` on it:
        one runtime resubmission. An engine may do both in one native call.

        Returns True once both are encoded. Raises (having encoded nothing) where the
        launch fails. Returns False where the launch went through but the signal was not
        encoded: the core then emits it through :meth:`NativeQueue.signal`, which
        reports that failure itself. The default makes the two calls."""
        self.launch(queue)
        queue.signal(timeline, value)
        return True

    def fast_launch(self, queue: NativeQueue) -> tuple[int, int, Callable[[int, int, int], None], Any] | None:
        """Optional: a C entry point for :meth:`launch` on ``queue``, called by the
        core's compiled replay (:mod:`hrx_core.fastpath`) under the queue's lock.

        Returns ``(entry, argument, on_failure, keep)``: ``entry`` the address of a C
        function ``int entry(void *argument, long long info[2])`` that makes one replay
        on ``queue`` and returns 0; or -1 having done nothing (whatever the Python
        :meth:`launch` would handle first -- staged patches, a closed graph, another
        context current -- the core then calls :meth:`launch`); or a native failure
        code with ``info`` = (step, node), which the core hands to ``on_failure(code,
        step, node)`` (it raises, or returns once the replay went through after all).
        ``keep`` keeps ``argument`` alive. None (the default): the core calls
        :meth:`launch` from its compiled replay."""
        return None

    def fast_stage(self) -> tuple[int, int, list[Any], int, Any] | None:
        """Optional: a C entry point for :meth:`apply_patches`, called by the core's
        compiled rebinding replay under the queue's lock.

        Returns ``(entry, argument, log, limit, keep)``: ``entry`` the address of a C
        function ``int entry(void *argument, const void *bytes, size_t nbytes)`` that
        stages a prepared object -- one :meth:`prepare_patches` made that exports a
        buffer; ``bytes`` is what it exports -- as :meth:`apply_patches` would, and
        returns 1; or 0 having staged nothing (stale, no room: the core then calls
        :meth:`apply_patches`). After each 1 the core appends the prepared object to
        ``log``, the engine's own record of staged patches (the same list object for
        the graph's life); from ``limit`` entries on, the core calls
        :meth:`apply_patches` instead, which folds the log. ``keep`` keeps ``argument``
        alive. None (the default): the core calls :meth:`apply_patches`."""
        return None

    def close(self) -> None:  # noqa: B027
        """Destroy."""


class PreparedDispatch:
    """A launch whose executable, geometry and arguments were bound once.

    Engines override :meth:`EngineDevice.prepare_dispatch` to pack arguments ahead
    of time; this default keeps them and encodes a plain dispatch.
    """

    def __init__(
        self,
        executable: Executable,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[KernelArg],
    ) -> None:
        self.executable = executable
        self.grid = grid
        self.block = block
        self.args = tuple(args)

    def launch(self, queue: NativeQueue) -> None:
        queue.dispatch(self.executable, self.grid, self.block, self.args)

    def bind(self, queue: NativeQueue) -> Callable[[], None]:
        """A zero-argument launcher on ``queue`` (engines bind every native argument)."""
        return functools.partial(self.launch, queue)

    def set_arg(self, index: int, arg: BufferArg) -> None:
        """Point buffer argument ``index`` at another validated range for later launches.

        Launchers returned by :meth:`bind` see the change (engines patch their packed
        arguments in place). The core validated ``arg`` against the kernel already.
        """
        self._replace_arg(index, arg)

    def _replace_arg(self, index: int, value: Any) -> None:
        """``args`` with argument ``index`` replaced (a new tuple: earlier readers keep theirs)."""
        args = list(self.args)
        args[index] = value
        self.args = tuple(args)

    def _check_scalar_index(self, index: int) -> None:
        """InvalidArgument unless argument ``index`` is a scalar."""
        if not 0 <= index < len(self.args) or isinstance(self.args[index], BufferArg):
            from .errors import InvalidArgument

            raise InvalidArgument(f"argument {index} of {getattr(self.executable, 'name', '?')!r} is not a scalar argument")

    def set_scalar(self, index: int, value: Any) -> None:
        """Give argument ``index`` (a scalar: buffers come first) another value for
        later launches; launches made before keep the value they were made with.

        Launchers returned by :meth:`bind` see the change. The core converted
        ``value`` to the kernel's declared dtype already; a record (``numpy.void``) may
        be a view of the caller's memory, which it may rewrite after the next launch:
        engines copy it (this default keeps a copy, which launches then read)."""
        self._check_scalar_index(index)
        if isinstance(value, np.void):
            value = np.frombuffer(value.tobytes(), value.dtype)[0]
        self._replace_arg(index, value)


class NativeTimestamp(abc.ABC):
    """A point in a queue's execution whose time the engine measures (a CUDA event
    created with timing, a host clock read by the queue's worker)."""

    @abc.abstractmethod
    def elapsed_ms(self, end: NativeTimestamp) -> float:
        """Milliseconds from this timestamp to ``end`` (same device; both reached:
        the core checks both events completed first)."""

    def close(self) -> None:  # noqa: B027
        """Release native resources (called when the event is collected)."""


class NativeQueue(abc.ABC):
    """One hardware queue (a CUDA stream, a PM4/SDMA ring, a host worker thread)."""

    family: str
    #: False when encoded work is already eligible to run (CUDA streams): the core
    #: then skips calling :meth:`submit` on hot paths.
    needs_submit: bool = True

    @abc.abstractmethod
    def copy(self, src: NativeBuffer, src_offset: int, dst: NativeBuffer, dst_offset: int, nbytes: int) -> None:
        """Encode a copy of ``nbytes`` (at most the transfer limit)."""

    @abc.abstractmethod
    def fill(self, dst: NativeBuffer, offset: int, nbytes: int, pattern: bytes) -> None:
        """Encode a fill; ``nbytes`` is a multiple of ``len(pattern)``."""

    @abc.abstractmethod
    def dispatch(
        self,
        executable: Executable,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[KernelArg],
    ) -> None:
        """Encode a kernel launch."""

    @abc.abstractmethod
    def wait(self, timeline: Timeline, value: int) -> None:
        """Encode a wait: later work on this queue starts after ``timeline >= value``."""

    @abc.abstractmethod
    def signal(self, timeline: Timeline, value: int) -> None:
        """Encode a signal: ``timeline`` reaches ``value`` after all earlier work."""

    @abc.abstractmethod
    def submit(self) -> None:
        """Make everything encoded so far eligible to run."""

    def native_handle(self) -> int | None:
        """The native queue handle for native clients (a ``CUstream`` address), if any."""
        return None

    def fast_dispatch(self) -> tuple[int, int, Callable[[int], None], Any, str] | None:
        """Optional: a C entry point for :meth:`dispatch`, called by the core's compiled
        eager dispatch (:mod:`hrx_core.fastpath`) under the queue's lock.

        Returns ``(entry, argument, on_failure, keep, address_attr)``: ``entry`` the
        address of a C function ``int entry(void *argument, uintptr_t function, const
        unsigned int dims[6], void **params)`` that launches ``function`` (an
        executable's :attr:`Executable.fast_handle`) over the grid ``dims[0:3]`` of
        blocks ``dims[3:6]`` and returns 0; or -1 having done nothing (the core then
        calls :meth:`dispatch`); or a native failure code, nothing launched, which the
        core hands to ``on_failure(code)`` (it raises). ``params`` holds one pointer per
        argument to its bytes (NULL when there are none): a buffer argument as a 64-bit
        device address -- the native buffer's integer attribute ``address_attr`` plus
        the byte offset -- and a scalar as its numpy bytes. ``keep`` keeps ``argument``
        alive. None (the default): the compiled dispatch calls :meth:`dispatch`."""
        return None

    def timestamp(self) -> NativeTimestamp:
        """Encode a timestamp taken when the queue reaches this point (after all earlier
        work): for ``stream.record_event(timing=True)``. Optional."""
        from .errors import Unsupported

        raise Unsupported(f"{type(self).__name__}: this engine's queues cannot time events")

    def close(self) -> None:  # noqa: B027
        """Drain and destroy."""


class EngineDevice(abc.ABC):
    """One device of an engine."""

    info: DeviceInfo
    #: True on simulated hardware that runs kernels through their host implementation:
    #: artifacts for other targets then carry ``Artifact.reference``.
    wants_host_reference: bool = False

    @abc.abstractmethod
    def allocate(self, nbytes: int, *, shared: bool = False) -> NativeBuffer:
        """Allocate ``nbytes``; ``shared`` asks for coherent host-visible memory."""

    @abc.abstractmethod
    def create_queue(self, family: str, index: int) -> NativeQueue:
        """Create native queue ``index`` of ``family`` (called lazily by the core)."""

    @abc.abstractmethod
    def create_timeline(self) -> Timeline:
        """Create a timeline starting at 0."""

    @abc.abstractmethod
    def load_executable(self, artifact: Artifact) -> Executable:
        """Load compiled code for this device."""

    def compile_options(self, target: str) -> tuple[str, ...]:
        """Options the device adds when the core compiles for ``target`` (e.g. arch)."""
        return ()

    def prepare_dispatch(
        self,
        executable: Executable,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[KernelArg],
    ) -> PreparedDispatch:
        """Bind a launch once so that repeated launches cost as little as possible."""
        return PreparedDispatch(executable, grid, block, args)

    def build_graph(self, nodes: Sequence[GraphNode]) -> NativeGraph:
        """Build and instantiate a native graph (only if ``info.native_graphs``)."""
        from .errors import Unsupported

        raise Unsupported(f"engine {self.info.engine!r} has no native graphs")

    def wrap_host(self, array: np.ndarray) -> NativeBuffer | None:
        """A transient buffer over ordinary (pageable) host memory that this device's
        queues read and write directly, or None when transfers must be staged (a
        discrete GPU's DMA engines cannot reach pageable memory). The core keeps
        ``array`` alive and unchanged until the work using it completes."""
        return None

    def wrap_pinned(self, array: np.ndarray, *, register: bool = False) -> NativeBuffer | None:
        """A transient buffer over host memory this device's queues read directly
        without staging: memory that is already pinned (page-locked and mapped for the
        device), or -- with ``register`` -- pageable memory the engine pins for the
        transfer. None when neither applies (the core stages the copy then). The core
        waits for the copy before calling ``free()``, which ends a registration."""
        return None

    def wrap_external(self, obj: Any) -> tuple[NativeBuffer, int] | None:
        """Wrap foreign memory (a torch/cupy tensor) as a buffer; None if unknown."""
        return None

    def import_buffer(self, other: NativeBuffer) -> NativeBuffer | None:
        """A buffer of this device over another engine's allocation -- the import side
        of an export/import of the backing (a dma-buf on hardware, the same pages for
        host memory) -- or None if this device cannot reach it. The core keeps the
        exporting allocation alive while the import lives; ``free`` ends the import."""
        return None

    def close(self) -> None:  # noqa: B027
        """Release the device."""


class Engine(abc.ABC):
    """A backend: discovered through the ``hrx_engines`` hook."""

    #: Unique name, the value of HRX_ENGINE that selects it ("host", "cuda").
    name: str
    #: Higher wins when :func:`hrx_core.device` picks the best engine.
    priority: int = 0
    #: Whether :func:`hrx_core.device` may pick this engine by priority: an explicit
    #: opt-in saying its devices run what users run on a default device (the stock
    #: plugins' kernels, ``hrx pipeline``, models). Without it the engine is used only
    #: when named (``device(name)``, ``HRX_ENGINE``), whatever its priority.
    default_capable: bool = False
    #: Set to replace a built-in engine of the same name (``host``); any other name
    #: clash between plugins is a PluginError.
    replaces_builtin: bool = False

    @abc.abstractmethod
    def probe(self) -> EngineStatus:
        """Cheap check whether the engine can run here (never raises)."""

    @abc.abstractmethod
    def open_device(self, index: int, **options: Any) -> EngineDevice:
        """Open device ``index``; unknown options raise InvalidArgument."""

    def prepare(self) -> list[str]:
        """Start each device and warm caches; return lines for ``hrx prepare``."""
        return []


__all__ = [
    "Access",
    "CacheOp",
    "QueueFamily",
    "Limits",
    "DeviceInfo",
    "EngineStatus",
    "Artifact",
    "HostReference",
    "BufferArg",
    "KernelArg",
    "GraphNode",
    "NativeBuffer",
    "Timeline",
    "Executable",
    "NativeGraph",
    "NativeQueue",
    "NativeTimestamp",
    "PreparedDispatch",
    "EngineDevice",
    "Engine",
]
