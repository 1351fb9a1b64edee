"""TensorOps: decode-time linear projections and row gathers on one device.

Every argument is validated before anything is submitted (a rejected call changes
nothing); errors are hrx_core.errors types naming the argument.

gather_rows writes the indices (8 bytes a row) into host-visible memory of the
plan's slot and runs one gather kernel: one dispatch whatever the row count, where
per-row copy commands would cost one encoded command (and on CUDA one cuMemcpy
node) per row and be launch-bound beyond a few dozen rows.

Eager calls are built to cost the host little: each op keeps a plain dict from the
call's shapes to everything derived from them (plan key, geometry, output shapes),
so a repeated shape validates only what can change between calls (the tensors are
open, on this device, contiguous, of the right dtype); each slot's prepared launch
rebinds only the arguments that changed (see :class:`.plans.Launcher`); and the
index range check of gather_rows happens in the same pass that writes the indices
into the memory the kernel reads (compiled where a C compiler exists), before
anything is launched -- a bad index is the same typed OutOfBounds as ever and a
rejected call launches nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from ml_dtypes import bfloat16

from hrx_core.buffer import Buffer, View
from hrx_core.completion import Completion
from hrx_core.errors import InvalidArgument, OutOfBounds, Unsupported
from hrx_core.execution.graph import ComputeRegion, TrackedGraph
from hrx_core.execution.plan_cache import PlanCache
from hrx_core.graph import Graph
from hrx_core.kernel import Kernel
from hrx_core.stream import Stream

from . import kernels as _kernels
from . import native
from .plans import Launcher, OpFamily, Plan, Slot
from .tensor import DeviceTensor, SharedHold, as_dtype

BF16 = np.dtype(bfloat16)
F32 = np.dtype(np.float32)
_OUT_DTYPES = {BF16: 0, F32: 1}
#: The bulk-copy GEMV kernels (one per block size): recorded one after another.
_BULK_NAMES = frozenset(k.name for k in _kernels.BULK_BY_THREADS.values())
MAX_PROJECTIONS = 3
#: K must be a multiple of 8: weight rows are whole 16-byte vectors (the kernels read
#: rows in 16-byte loads and handle any number of them, tails included).
K_MULTIPLE = 8
#: Index buffers per gather slot, used in turn: the host writes the next call's
#: indices while earlier gathers still read theirs. Fewer for very long index lists
#: (at most INDEX_RING_BYTES a slot) and for narrow rows (the ring's indices take at
#: most the output's bytes, or 8 entries). The slot signals every half ring, so a longer ring
#: signals less often and lets the host run further ahead: measured on an H100
#: (bench/tools/gather_eager_ab.py, 4096 rows of 4096 BF16, 50 eager calls then a
#: synchronization) 8 entries ran at 0.959x torch index_select, 32 at 1.007x.
INDEX_RING = 32
INDEX_RING_BYTES = 4 << 20
#: Entries per op of the per-call spec dicts (cleared when full).
MAX_SPECS = 256


def _slices(out: Buffer, shapes: list[tuple[int, ...]], dt: np.dtype) -> list[tuple[View, tuple[int, ...]]]:
    """Consecutive views of ``out`` holding tensors of ``shapes`` (a slot's outputs)."""
    views, offset = [], 0
    for shape in shapes:
        nbytes = math.prod(shape) * dt.itemsize
        views.append((out.slice(offset, nbytes), shape))
        offset += nbytes
    return views


class IndexEntry:
    """One index buffer of a gather slot's ring: its view, the writer that fills and
    checks it, its prepared launch and the completion of that launch's last use."""

    __slots__ = ("done", "launcher", "view", "writer")

    def __init__(self, view: View, host: np.ndarray) -> None:
        self.view = view
        self.writer = native.IndexWriter(host)
        self.launcher = Launcher()
        self.done: Completion | None = None


class GatherSlot(Slot):
    """A gather's output and a ring of index buffers in one host-visible allocation.

    Each call takes the next ring entry, which has its own prepared launch. Before the
    host rewrites an entry it waits for the gather that last read it -- normally long
    finished: the slot emits a signal every half ring (a queue signal would otherwise
    come only every few dozen operations, and waiting for an unsignaled value means
    waiting for the whole queue).
    """

    __slots__ = ("entries", "pos")

    def __init__(self, out: Buffer, ibuf: Buffer, n: int, count: int) -> None:
        super().__init__([out, ibuf])
        host = ibuf.allocation.native.host_view()
        if host is None:  # allocate_shared promises host-visible memory
            raise Unsupported(f"{ibuf.device.name}: shared memory without a host view")
        step = n * 8
        self.entries = [IndexEntry(ibuf.slice(e * step, step), host[e * step : (e + 1) * step]) for e in range(count)]
        self.pos = 0

    def take(self) -> IndexEntry:
        """The next ring entry, once no queued gather reads it any more."""
        entry = self.entries[self.pos]
        self.pos = (self.pos + 1) % len(self.entries)
        done = entry.done
        if done is not None and not done.done_now():
            done.wait_quiet()  # the device is a ring behind: wait for it (failures are the consumer's)
        return entry

    def close(self) -> None:
        for entry in self.entries:
            entry.launcher.close()
        super().close()

    def gather(self, stream: Stream, kernel: Any, plan: Plan, table: View, idx: np.ndarray, rows: int) -> Completion | None:
        """Write ``idx`` into the next ring entry and launch the gather from ``table``;
        None (nothing launched) if an index is outside ``0 .. rows - 1``."""
        entry = self.take()
        if not entry.writer.write(idx, rows):
            return None
        done = self.launch_entry(entry, stream, kernel, plan, [table, entry.view, self.buffers[0]])
        if self.outputs is None:
            self.outputs = self.buffers[0].view()
        return done

    def launch_entry(self, entry: IndexEntry, stream: Stream, kernel: Any, plan: Plan, views: list[Any]) -> Completion:
        """Launch the gather through ``entry``'s prepared launch (after other queues'
        users of the slot); every half ring, emit a signal."""
        self.order_after_users(stream)
        done = self.done = entry.done = entry.launcher.launch(stream, kernel, plan.grid, plan.block, plan.scalars, views)
        half = max(1, len(self.entries) // 2)
        if self.pos % half == 0:
            stream.record_event()  # a signal: the entries of the last half ring can be judged done
        return done


class GatherParamSlot(Slot):
    """A gather's output, and the host record of indices its launches pass by value
    (a kernel of :data:`~.kernels.GATHER_PARAM`): each launch copies the record, so
    the next call rewrites it at once -- no ring, no wait."""

    __slots__ = ("record", "writer")

    def __init__(self, out: Buffer, cap: int) -> None:
        super().__init__([out])
        raw = np.zeros(cap * 4, np.uint8)
        self.record = raw.view(_kernels.gather_index_dtype(cap))[0]  # a view of raw
        self.writer = native.IndexWriter(raw, width=4)
        self.outputs = out.view()

    def gather(self, stream: Stream, kernel: Any, plan: Plan, table: View, idx: np.ndarray, rows: int) -> Completion | None:
        """Write ``idx`` into the record and launch the gather from ``table`` with it (the
        launch keeps its own copy); None (nothing launched) if an index is outside
        ``0 .. rows - 1``."""
        if not self.writer.write(idx, rows):
            return None
        self.order_after_users(stream)
        done = self.done = self.launcher.launch(stream, kernel, plan.grid, plan.block, plan.scalars,
                                                [table, self.outputs], (len(plan.scalars) - 1, self.record))
        return done


def _key_part(value: Any) -> Any:
    """An argument as part of a spec dict key: with its exact type (so 1 and 1.0 or a
    str subclass never share a spec); raises TypeError if unhashable."""
    hash(value)
    return (type(value), value)


def _check_aligned(name: str, t: DeviceTensor) -> None:
    """The GEMV reads x and weight rows in 16-byte vectors (bulk copies on Hopper)."""
    if t.view.start & 15:
        raise InvalidArgument(f"{name}: starts at byte {t.view.start} of its allocation; linear needs "
                              f"16-byte aligned tensors")


class TensorOps(OpFamily):
    """Tensor operations on ``device``: linear, linear_many, linear_fragment, gather_rows.

    ``plan_cache`` (a PlanCache, e.g. the runtime's) holds one plan per operation
    shape; ``stream`` orders the work (a new stream of the device by default).
    """

    family = "hrx_tensor"
    engines = _kernels.ENGINES
    kernel_names = (_kernels.LINEAR.name, _kernels.GATHER.name)
    own_kernels = staticmethod(_kernels.kernels_for)
    #: Let the plan choose the bulk-copy GEMV on Hopper where it pays
    #: (kernels.bulk_linear_pays: the memory's bandwidth per SM); tests compare both
    #: kernels by setting it False, or "always" (any Hopper), before creating a TensorOps.
    use_bulk_linear: bool | str = True
    #: Let the plan choose the warp GEMV's register budget on CUDA (kernels.gemv_budget:
    #: ``hrx_tensor_linear_b8`` where eight blocks an SM fill the grid better; tests
    #: compare both kernels by setting it False before creating a TensorOps).
    use_budget_linear = True
    #: Let gather_rows pass up to 4096 indices in the launch's parameters where the
    #: device takes that many argument bytes (kernels.GATHER_PARAM_CAPS); tests compare
    #: both paths by setting it False before creating a TensorOps.
    use_param_gather = True

    def __init__(self, device: Any, *, plan_cache: PlanCache | None = None, stream: Stream | None = None) -> None:
        super().__init__(device, plan_cache=plan_cache, stream=stream)
        self._linear = self._kernels[_kernels.LINEAR.name]
        self._gather = self._kernels[_kernels.GATHER.name]
        # Hopper's bulk-copy GEMV for long rows (the plan's choice, linear_bulk_launch):
        # only beside this distribution's own linear kernel, on compute capability 9.0+ where
        # the memory's bandwidth an SM makes it pay (kernels.bulk_linear_pays)
        self._linear_bulk: Kernel | None = None
        # and the warp GEMV at eight blocks an SM (the plan's choice, gemv_budget), also
        # only beside this distribution's own kernel, where the SM count is known
        self._linear_b8: Kernel | None = None
        self._sms = 0
        if self.engine == "cuda" and self._linear is _kernels.LINEAR:
            props = getattr(device.info, "properties", {})
            try:
                self._sms = max(0, int(props.get("multiprocessors", 0) or 0))
            except (TypeError, ValueError):  # not a count: neither choice is made
                self._sms = 0
            bulk = self.use_bulk_linear
            if bulk == "always":  # any Hopper: the bandwidth rule left out
                props = {**props, "memory_bandwidth": 0}
            if bulk and _kernels.bulk_linear_pays(props):
                self._linear_bulk = _kernels.LINEAR_BULK
            if self.use_budget_linear and self._sms:
                self._linear_b8 = _kernels.LINEAR_B8
        # per-call spec dicts: call shapes -> what the checks and the plan derive from them
        self._linear_specs: dict[Any, tuple[Any, ...]] = {}
        self._gather_specs: dict[Any, tuple[Any, ...]] = {}
        # gathers with their indices in the launch's parameters (kernels.GATHER_PARAM):
        # beside this distribution's own gather, each capacity the device's argument
        # limit takes, smallest first
        self._gather_params: list[tuple[int, Kernel]] = []
        if self.use_param_gather and self._gather is _kernels.GATHER:
            limit = device.info.limits.max_kernel_arg_bytes
            for cap, kernel in sorted(_kernels.GATHER_PARAM.items()):
                if kernel.argument_bytes <= limit:
                    self._gather_params.append((cap, kernel))

    # -- tensors ------------------------------------------------------------------

    def tensor(self, buffer: Buffer | View, shape: Sequence[int], dtype: Any,
               strides: Sequence[int] | None = None) -> DeviceTensor:
        """Wrap existing device memory (a Buffer or View) as a tensor (not owned)."""
        if not isinstance(buffer, (Buffer, View)):
            raise InvalidArgument(f"buffer: expected an hrx Buffer or View, got {type(buffer).__name__}")
        owner = buffer if isinstance(buffer, Buffer) else buffer.buffer
        if owner.device is not self.device:
            raise InvalidArgument(f"buffer: belongs to {owner.device.name}, not {self.device.name}")
        return DeviceTensor(buffer, shape, dtype, strides=strides, stream=self.stream)

    def upload(self, array: Any, dtype: Any = None) -> DeviceTensor:
        """A new device tensor holding a copy of ``array`` (owned: close() frees it)."""
        a = np.ascontiguousarray(array if dtype is None else np.asarray(array, dtype=as_dtype("dtype", dtype)))
        if a.nbytes == 0:
            raise InvalidArgument(f"array: empty (shape {a.shape})")
        buf = self.stream.allocate_from(a.reshape(-1).view(np.uint8))
        return DeviceTensor(buf, a.shape, a.dtype, stream=self.stream, hold=SharedHold(buf.close))

    # -- validation ---------------------------------------------------------------

    def _check_tensor(self, name: str, t: Any) -> DeviceTensor:
        if isinstance(t, (Buffer, View)):
            raise InvalidArgument(f"{name}: a {type(t).__name__} has no shape; wrap it with TensorOps.tensor(buffer, shape, dtype)")
        if not isinstance(t, DeviceTensor):
            raise InvalidArgument(f"{name}: expected a DeviceTensor, got {type(t).__name__}")
        if t.closed:
            raise InvalidArgument(f"{name}: tensor is closed")
        if t.view.buffer.closed:
            raise InvalidArgument(f"{name}: the tensor's buffer was closed")
        if t.device is not self.device:
            raise InvalidArgument(f"{name}: tensor lives on {t.device.name}, not {self.device.name}")
        if not t.contiguous:
            raise InvalidArgument(f"{name}: tensor is not contiguous (shape {list(t.shape)}, strides {list(t.strides)})")
        return t

    def _usable(self, t: Any) -> bool:
        """The per-call part of :meth:`_check_tensor` for a tensor whose shape and
        dtype a spec dict entry already vouches for: True if it would pass."""
        return (isinstance(t, DeviceTensor) and not t.closed and t.contiguous and not t.view.buffer.closed
                and t.view.buffer.device is self.device)

    def _check_x(self, x: Any) -> int:
        x = self._check_tensor("x", x)
        if x.dtype != BF16:
            raise InvalidArgument(f"x: dtype {x.dtype} is not bfloat16")
        if len(x.shape) != 2 or x.shape[0] != 1:
            raise InvalidArgument(f"x: shape {list(x.shape)} is not [1, K]")
        k = x.shape[1]
        if k == 0 or k % K_MULTIPLE:
            raise InvalidArgument(f"x: K = {k} is not a positive multiple of {K_MULTIPLE}")
        _check_aligned("x", x)
        return k

    def _check_w(self, name: str, w: Any, k: int) -> int:
        w = self._check_tensor(name, w)
        if w.dtype != BF16:
            raise InvalidArgument(f"{name}: dtype {w.dtype} is not bfloat16")
        if len(w.shape) != 2 or w.shape[0] == 0:
            raise InvalidArgument(f"{name}: shape {list(w.shape)} is not [N, K] with N > 0")
        if w.shape[1] != k:
            raise InvalidArgument(f"{name}: K = {w.shape[1]} does not match x's K = {k}")
        if w.shape[0] >= 2**31:
            raise InvalidArgument(f"{name}: N = {w.shape[0]} exceeds {2**31 - 1}")
        _check_aligned(name, w)
        return w.shape[0]

    @staticmethod
    def _check_out_dtype(out_dtype: Any) -> np.dtype:
        dt = as_dtype("out_dtype", out_dtype)
        if dt not in _OUT_DTYPES:
            raise InvalidArgument(f"out_dtype: {out_dtype!r} is neither 'bf16' nor 'f32'")
        return dt

    def _check_weights(self, ws: Any, k: int) -> list[int]:
        if isinstance(ws, DeviceTensor) or not isinstance(ws, Sequence):
            raise InvalidArgument("ws: expected a list of one to three weight tensors")
        if not 1 <= len(ws) <= MAX_PROJECTIONS:
            raise InvalidArgument(f"ws: {len(ws)} projections; linear_many takes 1 to {MAX_PROJECTIONS}")
        return [self._check_w(f"ws[{i}]", w, k) for i, w in enumerate(ws)]

    # -- linear -------------------------------------------------------------------

    def _linear_geometry(self, k: int, ns: Sequence[int],
                         out_dtype: np.dtype) -> tuple[Kernel, int, int, tuple[Any, ...]]:
        """(kernel, grid, block, scalars) of a linear: the plan's choice from the shape."""
        n3 = list(ns) + [0] * (MAX_PROJECTIONS - len(ns))
        kernel = self._linear
        bulk = _kernels.linear_bulk_launch(k, sum(ns), self._sms) if self._linear_bulk is not None else None
        if bulk is not None:
            grid, block, last = bulk  # last: chunk bytes
            kernel = _kernels.BULK_BY_THREADS[block]
        else:
            grid, block, last = _kernels.linear_launch(k, sum(ns))  # last: warps a row
            if self._linear_b8 is not None and \
                    _kernels.gemv_budget(grid, self._sms, _kernels.gemv_lane_share(k, last)) == 8:
                kernel = self._linear_b8
        scalars = (np.uint32(k), *(np.uint32(n) for n in n3), np.uint32(_OUT_DTYPES[out_dtype]), np.uint32(last))
        return kernel, grid, block, scalars

    def linear(self, x: DeviceTensor, w: DeviceTensor, out_dtype: Any = "bf16") -> DeviceTensor:
        """y = x @ w.T for BF16 x [1, K] and w [N, K]; FP32 accumulation; BF16 or F32 [1, N]."""
        try:
            spec = self._linear_specs.get((x.shape, w.shape, x.dtype, w.dtype, _key_part(out_dtype)))
        except (AttributeError, TypeError):
            spec = None
        if spec is None or not (self._usable(x) and self._usable(w)) or (x.view.start | w.view.start) & 15:
            k = self._check_x(x)
            n = self._check_w("w", w, k)
            dt = self._check_out_dtype(out_dtype)
            spec = self._linear_spec(k, (n,), dt)
            self._memo(self._linear_specs, (x.shape, w.shape, x.dtype, w.dtype, _key_part(out_dtype)), spec)
        return self._run_linear(spec, x, (w,))[0]

    def linear_many(self, x: DeviceTensor, ws: Sequence[DeviceTensor], out_dtype: Any = "bf16") -> list[DeviceTensor]:
        """Up to three projections of ``x`` (each its own N) in one dispatch."""
        try:
            if type(ws) is not list and type(ws) is not tuple:
                raise TypeError
            memo = (x.shape, x.dtype, _key_part(out_dtype), *((w.shape, w.dtype) for w in ws))
            spec = self._linear_specs.get(memo) if 1 <= len(ws) <= MAX_PROJECTIONS else None
        except (AttributeError, TypeError):
            memo, spec = None, None
        if spec is None or not (self._usable(x) and all(self._usable(w) and not w.view.start & 15 for w in ws)) \
                or x.view.start & 15:
            k = self._check_x(x)
            ns = self._check_weights(ws, k)
            dt = self._check_out_dtype(out_dtype)
            spec = self._linear_spec(k, tuple(ns), dt)
            if memo is not None:
                self._memo(self._linear_specs, memo, spec)
        return self._run_linear(spec, x, tuple(ws))

    @staticmethod
    def _memo(specs: dict[Any, Any], memo: Any, spec: Any) -> None:
        if len(specs) >= MAX_SPECS:
            specs.clear()
        specs[memo] = spec

    def _linear_spec(self, k: int, ns: tuple[int, ...], dt: np.dtype) -> tuple[Any, ...]:
        """(plan key, prepare, output shapes, dtype) of a linear over validated shapes."""
        key = ("linear", k, ns, dt.name)
        device = self.device

        def prepare() -> Plan:
            kernel, grid, block, scalars = self._linear_geometry(k, ns, dt)
            scalars = kernel.check_scalars(scalars)
            nbytes = sum(ns) * dt.itemsize
            return Plan(key, grid, block, scalars, lambda: Slot([device.allocate(nbytes)]), kernel)

        return key, prepare, [(1, n) for n in ns], dt

    def _run_linear(self, spec: tuple[Any, ...], x: DeviceTensor, ws: tuple[DeviceTensor, ...]) -> list[DeviceTensor]:
        key, prepare, shapes, dt = spec
        plan, slot = self._take(key, prepare)
        try:
            out = slot.buffers[0]
            # weights a plan does not use (N = 0, never read) are bound to the slot's own
            # output: it never changes, so a call rebinds only the inputs that did
            views = [x.view, ws[0].view, ws[1].view if len(ws) > 1 else out, ws[2].view if len(ws) > 2 else out, out]
            done = slot.launch(self.stream, plan.kernel, plan.grid, plan.block, plan.scalars, views)
            outputs = slot.outputs
            if outputs is None:
                outputs = slot.outputs = _slices(out, shapes, dt)
        except BaseException:
            plan.give(slot)
            raise
        hold = SharedHold(lambda: plan.give(slot), count=len(shapes))
        make, stream = DeviceTensor._output, self.stream
        return [make(view, shape, dt, done, stream, hold) for view, shape in outputs]

    def linear_fragment(self, graph: TrackedGraph, x: DeviceTensor, w: DeviceTensor, *,
                        out: DeviceTensor | None = None, out_dtype: Any = "bf16",
                        name: str = "linear") -> tuple[ComputeRegion, DeviceTensor]:
        """Record y = x @ w.T as a compute region of ``graph`` (read x, w; write out).

        Returns the region and the output tensor (``out``, or a new tensor owning its
        buffer). Nothing runs until the graph is submitted. To put several projections
        in one region (one native graph launch per replay), call :meth:`record_linear`
        inside ``graph.compute(name, record)`` instead.
        """
        if not isinstance(graph, TrackedGraph):
            raise InvalidArgument(f"graph: expected a TrackedGraph, got {type(graph).__name__}")
        lane_stream = graph.runtime.lane("compute").stream
        if lane_stream.device is not self.device:
            raise InvalidArgument(f"graph: its compute lane is not on {self.device.name}")
        launch, out, owned = self._linear_record_args(x, w, out, out_dtype, lane_stream)
        try:
            region = graph.compute(name, lambda g: self._record_dispatch(g, launch))
        except BaseException:
            if owned:
                out.close()
            raise
        return region, out

    def record_linear(self, g: Graph, x: DeviceTensor, w: DeviceTensor, *, out: DeviceTensor | None = None,
                      out_dtype: Any = "bf16") -> DeviceTensor:
        """Record y = x @ w.T into ``g``, an access graph being recorded (the argument a
        ``TrackedGraph.compute(name, record)`` callback receives, or ``stream.access_graph()``).

        Returns ``out`` or a new tensor owning its buffer. Every projection recorded
        into one region replays as one native graph launch.
        """
        if not isinstance(g, Graph):
            raise InvalidArgument(f"g: expected an hrx access graph being recorded, got {type(g).__name__}")
        launch, out, owned = self._linear_record_args(x, w, out, out_dtype, getattr(g, "stream", None) or self.stream)
        try:
            self._record_dispatch(g, launch)
        except BaseException:
            if owned:
                out.close()
            raise
        return out

    def _record_dispatch(self, g: Graph, launch: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
        """Record a linear's dispatch into ``g``. A bulk-copy GEMV (of either block size)
        is a persistent grid sized to fill the GPU: two of them running concurrently
        interleave their blocks and both finish late (measured on the H200, two
        12288x16384 projections in one graph: 219 us as branches against 186 us one
        after the other), so one recorded after another in the same graph waits for it
        (an explicit edge beside those the declared access gives)."""
        (kernel, *rest), kw = launch
        deps = None
        if self._linear_bulk is not None and kernel.name in _BULK_NAMES:
            for node in reversed(g.nodes):
                if node.kind == "dispatch" and node.params["executable"].name in _BULK_NAMES:
                    deps = [node]
                    break
        if deps is None:
            g.dispatch(kernel, *rest, **kw)
        else:
            g.dispatch(kernel, *rest, **kw, deps=deps)

    def _linear_record_args(self, x: DeviceTensor, w: DeviceTensor, out: DeviceTensor | None, out_dtype: Any,
                            stream: Stream) -> tuple[tuple[tuple[Any, ...], dict[str, Any]], DeviceTensor, bool]:
        """Validated dispatch arguments of a recorded linear, its output and whether it is new."""
        k = self._check_x(x)
        n = self._check_w("w", w, k)
        if out is None:
            dt = self._check_out_dtype(out_dtype)
        else:
            out = self._check_tensor("out", out)
            dt = self._check_out_dtype(out.dtype)
            if out_dtype is not None and as_dtype("out_dtype", out_dtype) != dt:
                raise InvalidArgument(f"out: dtype {out.dtype} does not match out_dtype {out_dtype!r}")
            if out.shape != (1, n):
                raise InvalidArgument(f"out: shape {list(out.shape)} is not [1, {n}]")
            if out.view.start % dt.itemsize:
                raise InvalidArgument(f"out: starts at byte {out.view.start} of its allocation, not a multiple "
                                      f"of its {dt.itemsize}-byte elements")
        kernel, grid, block, scalars = self._linear_geometry(k, [n], dt)
        owned = out is None
        if out is None:
            buf = self.device.allocate(n * dt.itemsize)
            out = DeviceTensor(buf, (1, n), dt, stream=stream, hold=SharedHold(buf.close))
        bindings = [x.view.read(), w.view.read(), w.view.read(), w.view.read(), out.view.write()]
        return ((kernel, grid, bindings), {"block": block, "scalars": scalars}), out, owned

    # -- gather -------------------------------------------------------------------

    def gather_rows(self, table: DeviceTensor, indices: Any) -> DeviceTensor:
        """Rows ``table[indices]`` (host-selected indices), copied bit-exactly on the device.

        Every index is checked against the table's rows (OutOfBounds; nothing is
        launched or allocated): on a warm call in the pass that writes it to the
        memory the kernel reads, else before anything is prepared."""
        if type(indices) is np.ndarray and indices.ndim == 1 and indices.dtype.kind in "iu" and 0 < indices.shape[0] < 2**31:
            idx = indices  # range-checked while it is written below
        else:
            idx = self._check_indices(indices, None)
        n = idx.shape[0]
        try:
            spec = self._gather_specs.get((table.shape, table.dtype, table.view.start & 15, n))
        except AttributeError:
            spec = None
        if spec is None or not self._usable(table):
            table = self._check_tensor("table", table)
            if len(table.shape) == 0 or table.shape[0] == 0:
                raise InvalidArgument(f"table: shape {list(table.shape)} has no rows")
            spec = self._gather_spec(table, n)
            self._memo(self._gather_specs, (table.shape, table.dtype, table.view.start & 15, n), spec)
        key, prepare, rows, shape = spec
        plan, slot = self._take_idle(key, prepare)
        if slot is None:
            # a call that may prepare or allocate checks the indices first (a refused
            # call changes nothing); a warm one checks them while writing them below
            idx = self._check_indices(idx, rows)
            plan, slot = self._take(key, prepare)
        assert isinstance(slot, (GatherSlot, GatherParamSlot))
        try:
            done = slot.gather(self.stream, plan.kernel or self._gather, plan, table.view, idx, rows)
            if done is None:
                raise self._out_of_range(idx, rows)
            view = slot.outputs
        except BaseException:
            plan.give(slot)
            raise
        hold = SharedHold(lambda: plan.give(slot))
        return DeviceTensor._output(view, shape, table.dtype, done, self.stream, hold)

    def _gather_spec(self, table: DeviceTensor, n: int) -> tuple[Any, ...]:
        """(plan key, prepare, table rows, output shape) of gathering ``n`` rows of ``table``."""
        row_bytes = math.prod(table.shape[1:]) * table.dtype.itemsize
        if row_bytes == 0:
            raise InvalidArgument(f"table: rows of shape {list(table.shape[1:])} are empty")
        width = next(w for w in (16, 8, 4, 2, 1) if row_bytes % w == 0 and table.view.start % w == 0)
        units = row_bytes // width
        device = self.device
        rows = table.shape[0]
        for cap, kernel in self._gather_params if rows <= 2**32 else ():
            if n <= cap:
                pkey = ("gather_i", row_bytes, width, n, cap)
                record = np.zeros((), _kernels.gather_index_dtype(cap))

                def prepare_param(kernel: Kernel = kernel, cap: int = cap, pkey: Any = pkey) -> Plan:
                    grid, block, shift = _kernels.gather_launch(units, n)
                    scalars = kernel.check_scalars((np.uint64(units), np.uint32(width), np.uint64(n), np.uint32(shift), record))
                    return Plan(pkey, grid, block, scalars, lambda: GatherParamSlot(device.allocate(n * row_bytes), cap),
                                kernel=kernel)

                return pkey, prepare_param, rows, (n, *table.shape[1:])
        key = ("gather", row_bytes, width, n)
        gather = self._gather

        def prepare() -> Plan:
            grid, block, shift = _kernels.gather_launch(units, n)
            scalars = gather.check_scalars((np.uint64(units), np.uint32(width), np.uint64(n), np.uint32(shift)))
            # the ring's index bytes stay within the output's (but never fewer than 8
            # entries) and INDEX_RING_BYTES
            ring = max(2, min(INDEX_RING, max(8, row_bytes // 8), INDEX_RING_BYTES // (n * 8)))
            # the indices go into host-visible memory the kernel reads directly: no
            # staging copy and no upload command per call
            return Plan(key, grid, block, scalars,
                        lambda: GatherSlot(device.allocate(n * row_bytes), device.allocate_shared(ring * n * 8), n, ring))

        return key, prepare, table.shape[0], (n, *table.shape[1:])

    @staticmethod
    def _out_of_range(idx: np.ndarray, rows: int) -> OutOfBounds:
        """The error naming the first bound an index array breaks (after a failed check)."""
        lo, hi = int(idx.min()), int(idx.max())
        bad = lo if lo < 0 else hi
        return OutOfBounds(f"indices: {bad} is outside 0..{rows - 1} (table rows)")

    @staticmethod
    def _check_indices(indices: Any, rows: int | None) -> np.ndarray:
        """``indices`` as a one-dimensional int64 array; range-checked against ``rows``
        unless None (gather_rows checks while writing them)."""
        try:
            idx = np.asarray(indices)
        except (TypeError, ValueError):
            raise InvalidArgument(f"indices: not an integer array ({type(indices).__name__})") from None
        if idx.dtype.kind not in "iu" or idx.dtype == np.bool_:
            if not (idx.dtype.kind == "f" and idx.size == 0):
                raise InvalidArgument(f"indices: dtype {idx.dtype} is not an integer type")
        if idx.ndim != 1:
            raise InvalidArgument(f"indices: expected one dimension, got shape {list(idx.shape)}")
        if idx.size == 0:
            raise InvalidArgument("indices: empty (gather at least one row)")
        if idx.size >= 2**31:
            raise InvalidArgument(f"indices: {idx.size} rows exceed {2**31 - 1}")
        if idx.dtype == np.uint64:
            # kept as is: the index writer keeps the bits (values >= 2**63 fail its check)
            if rows is not None and int(idx.max()) >= rows:
                raise TensorOps._out_of_range(idx, rows)
            return idx
        out = np.ascontiguousarray(idx, dtype=np.int64)
        if rows is not None and int(out.view(np.uint64).max()) >= rows:
            # one pass for both bounds: viewed as uint64, a negative index is huge
            raise TensorOps._out_of_range(idx, rows)
        return out
