"""ModelSession: load a model -- kernels, weights, working buffers -- and run it eagerly.

A session owns a kernel batch (kernel ids count from 0 in each session), a buffer
arena (weights, adopted buffers, working tensors) and a graph cache (tracked graphs
recorded once per key and submitted again and again). Work runs on the context's
runtime, so dependencies come from each binding's declared access; region names are
prefixed with the session's name. Readbacks and writes reuse their staging.

``in_context(budget)`` charges what loads inside it -- weights, adopted buffers,
working tensors, the device side of native code -- to ``budget``. ``freeze()``
turns the weights and kernels into a :class:`~hrx_core.model.ModelDefinition`
shared by every inference slot prepared from it.

    session = ModelSession(dev, "mlp")
    with session.in_context(budget):
        add = session.load_kernel(ADD)                 # id 0 in this session
        w = session.weight("w", np.ones(256, np.float32))
    definition = session.freeze(budget=budget)         # weights are not charged twice
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import transfer
from ..budget import MemoryBudget
from ..buffer import Buffer, View, check_int
from ..errors import InvalidArgument, show
from ..execution.graph import DownloadRegion, TrackedGraph, UploadRegion
from ..execution.plan_cache import PlanCache
from ..timeouts import check_timeout
from ..kernel import Kernel
from .context import ModelContext
from .graphs import ScopedGraph, check_no_writes, graph_spans, tensor_span
from .kernels import KernelBatch
from .memory import HeldMemory, allocate_tracked, whole_allocation
from .tensor import DeviceTensor, SharedHold, as_dtype, as_shape, check_tensor

if TYPE_CHECKING:
    from ..device import Device
    from ..execution.runtime import Submission
    from .definition import ModelDefinition

_CONTEXT_BUDGET: Any = object()


def check_name(what: str, name: Any) -> str:
    if not isinstance(name, str) or not name or "/" in name:
        raise InvalidArgument(f"{what}: expected a nonempty str without '/', got {show(name)}")
    return name


class ModelSession:
    """Kernels, weights and working buffers of one model; eager runs; ``freeze()``.

    ``ModelSession(context_or_device, name)``: with a Device, the session makes its
    own :class:`ModelContext` (a private runtime). Use a session from one thread at a
    time; slots prepared from its definitions are independent of it.
    """

    def __init__(self, context: ModelContext | Device, name: str = "model", *, graph_cache_size: int = 64) -> None:
        from ..device import Device as DeviceType

        if isinstance(context, DeviceType):
            context = ModelContext(context)
        if not isinstance(context, ModelContext):
            raise InvalidArgument(f"context: expected a ModelContext or Device, got {type(context).__name__}")
        context._check_open()
        self.context = context
        self.runtime = context.runtime
        self.device = context.device
        self.name = check_name("name", name)
        self.kernels = KernelBatch(self.device)
        self._weights: dict[str, DeviceTensor] = {}
        self._tensors: dict[str, DeviceTensor] = {}
        self._held: dict[int, HeldMemory] = {}  # id(allocation) -> the arena's handle
        self._graphs: PlanCache = PlanCache(max_plans=check_int("graph_cache_size", graph_cache_size, minimum=1))
        self._budgets: list[MemoryBudget | None] = []
        # charges for loaded code (executable images, private workspace), shared with
        # the definitions frozen from this session
        self._code: list[SharedHold] = []
        self._lock = threading.RLock()
        self._frozen_spans: list[Any] = []
        self.frozen = False
        self.closed = False

    def __repr__(self) -> str:
        return f"<hrx.model.ModelSession {self.name!r}: {len(self._weights)} weights, {len(self.kernels)} kernels>"

    # -- budgets ------------------------------------------------------------------------

    @property
    def budget(self) -> MemoryBudget | None:
        """The budget loads are charged to now: the innermost ``in_context`` budget,
        else the context's."""
        return self._budgets[-1] if self._budgets else self.context.budget

    @contextlib.contextmanager
    def in_context(self, budget: MemoryBudget | None) -> Iterator[ModelSession]:
        """Charge what loads inside the block (native code, weights, adopted and working
        buffers) to ``budget``; ``None`` loads unbudgeted."""
        if budget is not None and not isinstance(budget, MemoryBudget):
            raise InvalidArgument(f"budget: expected a MemoryBudget or None, got {type(budget).__name__}")
        self._budgets.append(budget)
        try:
            yield self
        finally:
            self._budgets.pop()

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"session {self.name!r} is closed")

    # -- kernels ------------------------------------------------------------------------

    def load_kernel(self, kernel: Kernel) -> int:
        """Compile and load ``kernel`` now (shared through the context); return its
        session-scoped id."""
        self._check_open()
        if not isinstance(kernel, Kernel):
            raise InvalidArgument(f"kernel: expected an hrx Kernel, got {type(kernel).__name__}")
        with self._lock:
            shared = self.context.kernel(kernel)
            if kernel.name in self.kernels and self.kernels.get(kernel.name) is shared:
                return self.kernels.add(shared)  # loaded (and charged) already
            budget = self.budget
            nbytes = shared.code_bytes(self.device)  # compiles and loads: the size is known now
            hold = None
            if budget is not None and nbytes:
                charge = budget.charge(nbytes, f"code of kernel {kernel.name!r}")
                hold = SharedHold(charge.release)
            try:
                kid = self.kernels.add(shared)
            except BaseException:
                if hold is not None:
                    hold.release()
                raise
            if hold is not None:
                self._code.append(hold)
            return kid

    def kernel(self, key: int | str) -> Kernel:
        """The loaded kernel with session id or name ``key``."""
        return self.kernels.get(key)

    # -- the buffer arena -------------------------------------------------------------------

    @property
    def weights(self) -> Mapping[str, DeviceTensor]:
        """Weights by name (read-only mapping)."""
        return MappingProxyType(self._weights)

    @property
    def tensors(self) -> Mapping[str, DeviceTensor]:
        """Working tensors by name (read-only mapping)."""
        return MappingProxyType(self._tensors)

    def _new_name(self, name: str) -> str:
        check_name("name", name)
        if name in self._weights or name in self._tensors:
            raise InvalidArgument(f"name: {name!r} is already in session {self.name!r}")
        return name

    def _hold(self, source: Buffer | View, what: str) -> tuple[HeldMemory, int]:
        """The arena handle over ``source``'s allocation (adopting it, charged to the
        current budget unless that budget already counts it) and the view's offset."""
        view = source.view() if isinstance(source, Buffer) else source
        alloc = view.buffer.allocation
        held = self._held.get(id(alloc))
        if held is None:
            held = HeldMemory(whole_allocation(view), what)
            try:
                held.charge(self.budget)
            except BaseException:
                held.release()
                raise
            self._held[id(alloc)] = held
        else:
            held.charge(self.budget)
        return held, view.start

    def weight(self, name: str, data: Any, *, dtype: Any = None, shape: Any = None) -> DeviceTensor:
        """Upload ``data`` as the immutable weight ``name`` (charged to :attr:`budget`)."""
        self._check_open()
        with self._lock:
            self._check_loadable()
            self._new_name(name)
            try:
                array = np.asarray(data) if dtype is None else np.asarray(data, dtype=as_dtype("dtype", dtype))
            except (TypeError, ValueError, OverflowError, RecursionError) as exc:
                raise InvalidArgument(f"data: weight {name!r} is not an array of numbers ({exc})") from None
            if array.dtype.hasobject or array.dtype.kind not in "biufcV":
                raise InvalidArgument(f"data: weight {name!r} has dtype {array.dtype}, not numbers")
            array = np.ascontiguousarray(array)
            if array.nbytes == 0:
                raise InvalidArgument(f"data: weight {name!r} is empty (shape {array.shape})")
            target = array.shape if shape is None else as_shape("shape", shape)
            if int(np.prod(target)) != array.size:
                raise InvalidArgument(f"shape: {target} does not hold the {array.size} elements of {name!r}")
            loader = self.device.stream().with_memory_budget(self.budget)
            try:
                buf = loader.allocate_from(array.reshape(-1).view(np.uint8))
            finally:
                loader.close()  # waits for the upload and frees any staging
            self.runtime._track(buf)
            self._held[id(buf._alloc)] = HeldMemory(buf, f"weight {name!r}")
            tensor = DeviceTensor(buf, target, array.dtype)
            self._weights[name] = tensor
            return tensor

    def adopt(self, name: str, source: Buffer | View | DeviceTensor, shape: Any = None, dtype: Any = None) -> DeviceTensor:
        """Make existing device memory (a Buffer, View or DeviceTensor -- a file-backed
        load, another definition's weight) the weight ``name``. It is charged now to
        :attr:`budget`, unless that budget already counts its allocation."""
        self._check_open()
        with self._lock:
            self._check_loadable()
            self._new_name(name)
            if isinstance(source, DeviceTensor):
                if source.closed:
                    raise InvalidArgument("source: tensor is closed")
                if not source.contiguous:
                    raise InvalidArgument("source: tensor is not contiguous")
                view = source.view
                shape = source.shape if shape is None else shape
                dtype = source.dtype if dtype is None else dtype
            elif isinstance(source, (Buffer, View)):
                view = source.view() if isinstance(source, Buffer) else source
                if dtype is None:
                    dtype = np.uint8
                if shape is None:
                    shape = (view.length // as_dtype("dtype", dtype).itemsize,)
            else:
                raise InvalidArgument(f"source: expected a Buffer, View or DeviceTensor, got {type(source).__name__}")
            if view.buffer.closed:
                raise InvalidArgument("source: buffer is closed")
            if view.buffer.device is not self.device:
                raise InvalidArgument(f"source: belongs to {view.buffer.device.name}, not {self.device.name}")
            # validate the tensor shape before anything is charged
            DeviceTensor(view, shape, dtype)
            held, start = self._hold(view, f"weight {name!r}")
            tensor = DeviceTensor(held.buffer.slice(start, view.length), shape, dtype)
            self._weights[name] = tensor
            return tensor

    def tensor(self, name: str, shape: Any, dtype: Any) -> DeviceTensor:
        """A new working tensor ``name`` (mutable, contents undefined; charged to
        :attr:`budget`). Working tensors are not part of a frozen definition."""
        self._check_open()
        with self._lock:
            self._new_name(name)
            shape = as_shape("shape", shape)
            dt = as_dtype("dtype", dtype)
            nbytes = int(np.prod(shape)) * dt.itemsize
            if nbytes == 0:
                raise InvalidArgument(f"shape: tensor {name!r} of shape {shape} is empty")
            buf = allocate_tracked(self.runtime, nbytes, self.budget)
            held = HeldMemory(buf, f"tensor {name!r}")
            self._held[id(buf._alloc)] = held
            tensor = DeviceTensor(buf, shape, dt)
            self._tensors[name] = tensor
            return tensor

    def _check_loadable(self) -> None:
        if self.frozen:
            raise InvalidArgument(f"session {self.name!r} is frozen: its weights are immutable")

    # -- the graph cache --------------------------------------------------------------------

    def graph(self, key: Hashable, record: Callable[[TrackedGraph], Any]) -> TrackedGraph:
        """The tracked graph cached for ``key``, recording it with ``record(graph)`` on
        a miss. Its regions are named ``"<session>/<region>"``."""
        self._check_open()
        with self._graphs.lease(key, lambda: self._record(key, record)) as lease:
            return lease.plan

    def _record(self, key: Hashable, record: Callable[[TrackedGraph], Any]) -> TrackedGraph:
        if not callable(record):
            raise InvalidArgument(f"record: expected a callable, got {type(record).__name__}")
        graph = ScopedGraph(self.runtime, self.name, str(key))
        try:
            record(graph)
            if not graph.regions:
                raise InvalidArgument(f"record: graph {key!r} records no regions")
        except BaseException:
            graph.close()
            raise
        return graph

    def run(self, key: Hashable, record: Callable[[TrackedGraph], Any] | None = None, *,
            block: bool = True, timeout: float | None = None) -> Submission:
        """Submit the graph cached for ``key`` (recorded by ``record`` on a miss);
        returns the runtime :class:`~hrx_core.execution.Submission`."""
        self._check_open()

        def missing() -> TrackedGraph:
            if record is None:
                raise InvalidArgument(f"key: no graph {key!r} is cached; pass record=")
            return self._record(key, record)

        with self._graphs.lease(key, missing) as lease:
            graph = lease.plan
            if self.frozen:
                check_no_writes(graph_spans(graph), self._frozen_spans, f"graph {key!r}")
            return self.runtime.submit(graph, block=block, timeout=timeout)

    def write(self, tensor: DeviceTensor, data: Any) -> Submission:
        """Upload ``data`` into ``tensor`` (a working tensor or, before freezing, a
        weight) through staging reused for this tensor."""
        view = self._own_view("tensor", tensor)
        src = transfer.host_bytes("data", data)
        if src.nbytes != view.length:
            raise InvalidArgument(f"data: has {src.nbytes} bytes, the tensor {tensor.nbytes}")
        if self.frozen:
            check_no_writes([tensor_span(tensor, True)], self._frozen_spans, "write")
        key = ("write", id(view.buffer._alloc), view.start, view.length)
        created = []

        def record() -> TrackedGraph:
            created.append(True)  # recording copies ``src`` into the new staging
            return self._record(key, lambda g: g.upload(view, src, name="write"))

        with self._graphs.lease(key, record) as lease:
            graph = lease.plan
            if not created:
                upload = graph.regions[0]
                assert isinstance(upload, UploadRegion)
                upload.write(src)  # waits for the previous write from this staging
            return self.runtime.submit(graph)

    def read(self, tensor: DeviceTensor, *, timeout: float | None = None) -> np.ndarray:
        """Download ``tensor`` (after the work ordered before it) into a new array,
        through staging reused for this tensor."""
        view = self._own_view("tensor", tensor)
        timeout = check_timeout("timeout", timeout)
        key = ("read", id(view.buffer._alloc), view.start, view.length)
        submission = self.run(key, lambda g: g.download(view, name="read"))
        submission.wait(timeout)
        region = submission.graph.regions[0]
        assert isinstance(region, DownloadRegion)
        raw = region.read(np.uint8)
        return raw.view(tensor.dtype).reshape(tensor.shape)

    def _own_view(self, name: str, tensor: Any) -> View:
        self._check_open()
        return check_tensor(name, tensor, self.device).view

    # -- freezing -----------------------------------------------------------------------------

    def freeze(self, *, budget: MemoryBudget | None = _CONTEXT_BUDGET) -> ModelDefinition:
        """A :class:`ModelDefinition` sharing this session's weights and kernels.

        ``budget`` (default: the context's) is charged for weights it does not count
        yet; weights it already counts -- loaded or adopted inside
        ``in_context(budget)``, or frozen into it before -- are not charged again.
        The session's weights become immutable; freezing again shares them again.
        """
        from .definition import ModelDefinition

        self._check_open()
        if budget is _CONTEXT_BUDGET:
            budget = self.context.budget
        if budget is not None and not isinstance(budget, MemoryBudget):
            raise InvalidArgument(f"budget: expected a MemoryBudget or None, got {type(budget).__name__}")
        with self._lock:
            if not self._weights:
                raise InvalidArgument(f"session {self.name!r} has no weights to freeze (load or adopt some)")
            weight_allocs = {id(t.view.buffer._alloc) for t in self._weights.values()}
            held = [h for key, h in self._held.items() if key in weight_allocs]
            taken: list[tuple[HeldMemory, int]] = []
            try:
                for h in held:
                    taken.append((h, h.charge(budget)))
            except BaseException:
                for h, charged in taken:
                    if charged:
                        h.drop_last_charge()
                raise
            self.frozen = True
            self._frozen_spans = [tensor_span(t, False) for t in self._weights.values()]
            definition = ModelDefinition(self, dict(self._weights), held, budget)
            definition._code = [h.retain() for h in self._code]
            return definition

    # -- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the session's graphs and arena. Definitions keep the weights they share."""
        if self.closed:
            return
        self.closed = True
        self._graphs.clear()
        for tensor in [*self._weights.values(), *self._tensors.values()]:
            tensor.close()
        self._weights.clear()
        self._tensors.clear()
        held, self._held = list(self._held.values()), {}
        for h in held:
            h.release()
        code, self._code = self._code, []
        for c in code:
            c.release()

    def __enter__(self) -> ModelSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
