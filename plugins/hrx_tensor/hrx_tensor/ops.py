"""TensorOps: decode-time linear projections and row gathers on one device.

Every argument is validated before anything is submitted (a rejected call changes
nothing); errors are hrx_core.errors types naming the argument.

gather_rows uploads the indices (8 bytes a row, into a buffer of the plan's slot)
and runs one gather kernel: one dispatch whatever the row count, where per-row
copy commands would cost one encoded command (and on CUDA one cuMemcpy node) per
row and be launch-bound beyond a few dozen rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from ml_dtypes import bfloat16

from hrx_core.buffer import Buffer, View
from hrx_core.completion import Completion
from hrx_core.errors import InvalidArgument, OutOfBounds
from hrx_core.execution.graph import ComputeRegion, TrackedGraph
from hrx_core.execution.plan_cache import PlanCache
from hrx_core.graph import Graph
from hrx_core.stream import Stream

from . import kernels as _kernels
from .plans import OpFamily, Plan, Slot
from .tensor import DeviceTensor, SharedHold, as_dtype

BF16 = np.dtype(bfloat16)
F32 = np.dtype(np.float32)
_OUT_DTYPES = {BF16: 0, F32: 1}
MAX_PROJECTIONS = 3
K_MULTIPLE = 128


def _slices(out: Buffer, shapes: list[tuple[int, ...]], dt: np.dtype) -> list[tuple[View, tuple[int, ...]]]:
    """Consecutive views of ``out`` holding tensors of ``shapes`` (a slot's outputs)."""
    views, offset = [], 0
    for shape in shapes:
        nbytes = math.prod(shape) * dt.itemsize
        views.append((out.slice(offset, nbytes), shape))
        offset += nbytes
    return views


class TensorOps(OpFamily):
    """Tensor operations on ``device``: linear, linear_many, linear_fragment, gather_rows.

    ``plan_cache`` (a PlanCache, e.g. the runtime's) holds one plan per operation
    shape; ``stream`` orders the work (a new stream of the device by default).
    """

    family = "hrx_tensor"
    engines = _kernels.ENGINES
    kernel_names = (_kernels.LINEAR.name, _kernels.GATHER.name)
    own_kernels = staticmethod(_kernels.kernels_for)

    def __init__(self, device: Any, *, plan_cache: PlanCache | None = None, stream: Stream | None = None) -> None:
        super().__init__(device, plan_cache=plan_cache, stream=stream)
        self._linear = self._kernels[_kernels.LINEAR.name]
        self._gather = self._kernels[_kernels.GATHER.name]

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
        if t.device is not self.device:
            raise InvalidArgument(f"{name}: tensor lives on {t.device.name}, not {self.device.name}")
        if not t.contiguous:
            raise InvalidArgument(f"{name}: tensor is not contiguous (shape {list(t.shape)}, strides {list(t.strides)})")
        return t

    def _check_x(self, x: Any) -> int:
        x = self._check_tensor("x", x)
        if x.dtype != BF16:
            raise InvalidArgument(f"x: dtype {x.dtype} is not bfloat16")
        if len(x.shape) != 2 or x.shape[0] != 1:
            raise InvalidArgument(f"x: shape {list(x.shape)} is not [1, K]")
        k = x.shape[1]
        if k == 0 or k % K_MULTIPLE:
            raise InvalidArgument(f"x: K = {k} is not a positive multiple of {K_MULTIPLE}")
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

    def _linear_geometry(self, k: int, ns: Sequence[int], out_dtype: np.dtype) -> tuple[int, int, tuple[Any, ...]]:
        total = sum(ns)
        n3 = list(ns) + [0] * (MAX_PROJECTIONS - len(ns))
        scalars = (np.uint32(k), *(np.uint32(n) for n in n3), np.uint32(_OUT_DTYPES[out_dtype]))
        warps = _kernels.LINEAR_WARPS
        return -(-total // warps), warps * 32, scalars

    def linear(self, x: DeviceTensor, w: DeviceTensor, out_dtype: Any = "bf16") -> DeviceTensor:
        """y = x @ w.T for BF16 x [1, K] and w [N, K]; FP32 accumulation; BF16 or F32 [1, N]."""
        k = self._check_x(x)
        n = self._check_w("w", w, k)
        dt = self._check_out_dtype(out_dtype)
        return self._run_linear(x, [w], [n], k, dt)[0]

    def linear_many(self, x: DeviceTensor, ws: Sequence[DeviceTensor], out_dtype: Any = "bf16") -> list[DeviceTensor]:
        """Up to three projections of ``x`` (each its own N) in one dispatch."""
        k = self._check_x(x)
        ns = self._check_weights(ws, k)
        dt = self._check_out_dtype(out_dtype)
        return self._run_linear(x, list(ws), ns, k, dt)

    def _run_linear(self, x: DeviceTensor, ws: list[DeviceTensor], ns: list[int], k: int, dt: np.dtype) -> list[DeviceTensor]:
        key = ("linear", k, tuple(ns), dt.name)
        device = self.device

        def prepare() -> Plan:
            grid, block, scalars = self._linear_geometry(k, ns, dt)
            nbytes = sum(ns) * dt.itemsize
            return Plan(key, grid, block, scalars, lambda: Slot([device.allocate(nbytes)]))

        lease, plan, slot = self._take(key, prepare)
        try:
            out = slot.buffers[0]
            w0 = ws[0].view
            views = [x.view, w0, ws[1].view if len(ws) > 1 else w0, ws[2].view if len(ws) > 2 else w0, out]
            done = self._launch(slot, self._linear, plan, views)
            outputs = slot.outputs
            if outputs is None:
                outputs = slot.outputs = _slices(out, [(1, n) for n in ns], dt)
        except BaseException:
            self._give_back(lease, plan, slot)
            raise
        hold = SharedHold(lambda: self._give_back(lease, plan, slot), count=len(ns))
        make, stream = DeviceTensor._output, self.stream
        return [make(view, shape, dt, done, stream, hold) for view, shape in outputs]

    def _launch(self, slot: Slot, kernel: Any, plan: Plan, views: list[Any]) -> Completion:
        """Launch the slot's prepared dispatch, rebinding only the inputs that changed."""
        return slot.launch(self.stream, kernel, plan.grid, plan.block, plan.scalars, views)

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
            region = graph.compute(name, lambda g: g.dispatch(*launch[0], **launch[1]))
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
            g.dispatch(*launch[0], **launch[1])
        except BaseException:
            if owned:
                out.close()
            raise
        return out

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
        grid, block, scalars = self._linear_geometry(k, [n], dt)
        owned = out is None
        if out is None:
            buf = self.device.allocate(n * dt.itemsize)
            out = DeviceTensor(buf, (1, n), dt, stream=stream, hold=SharedHold(buf.close))
        bindings = [x.view.read(), w.view.read(), w.view.read(), w.view.read(), out.view.write()]
        return ((self._linear, grid, bindings), {"block": block, "scalars": scalars}), out, owned

    # -- gather -------------------------------------------------------------------

    def gather_rows(self, table: DeviceTensor, indices: Any) -> DeviceTensor:
        """Rows ``table[indices]`` (host-selected indices), copied bit-exactly on the device."""
        table = self._check_tensor("table", table)
        if len(table.shape) == 0 or table.shape[0] == 0:
            raise InvalidArgument(f"table: shape {list(table.shape)} has no rows")
        idx = self._check_indices(indices, table.shape[0])
        n = idx.size
        row_bytes = math.prod(table.shape[1:]) * table.dtype.itemsize
        if row_bytes == 0:
            raise InvalidArgument(f"table: rows of shape {list(table.shape[1:])} are empty")
        width = next(w for w in (16, 8, 4, 2, 1) if row_bytes % w == 0 and table.view.start % w == 0)
        units = row_bytes // width
        key = ("gather", row_bytes, width, n)
        device = self.device

        def prepare() -> Plan:
            block = min(_kernels.GATHER_THREADS, max(32, -(-units // 32) * 32))
            grid = (n, 1, 1) if n < 2**31 else None
            scalars = (np.uint64(units), np.uint32(width), np.uint64(n))
            # the indices go into host-visible memory the kernel reads directly: no
            # staging copy and no upload command per call
            return Plan(key, grid, block, scalars,
                        lambda: Slot([device.allocate(n * row_bytes), device.allocate_shared(n * 8)]))

        lease, plan, slot = self._take(key, prepare)
        try:
            out, ibuf = slot.buffers
            # The host writes the indices the kernel reads directly: the slot's previous
            # gather may still be queued (its output released, but a consumer queued
            # before the release still needs the rows it gathers), so wait for it first.
            slot.wait_for_device(ibuf)
            ibuf.allocation.native.host_view()[: idx.nbytes] = idx.view(np.uint8)
            done = self._launch(slot, self._gather, plan, [table.view, ibuf, out])
        except BaseException:
            self._give_back(lease, plan, slot)
            raise
        hold = SharedHold(lambda: self._give_back(lease, plan, slot))
        # the key fixes the row bytes, not the row shape: build the shape per call
        return DeviceTensor._output(out.view(), (n, *table.shape[1:]), table.dtype, done, self.stream, hold)

    @staticmethod
    def _check_indices(indices: Any, rows: int) -> np.ndarray:
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
        out = np.ascontiguousarray(idx, dtype=np.int64)
        # one pass for both bounds: viewed as uint64, a negative index is huge. Only
        # uint64 input can hold values the int64 conversion would wrap.
        if idx.dtype == np.uint64 and int(idx.max()) >= 2**63:
            in_range = False
        else:
            in_range = int(out.view(np.uint64).max()) < rows
        if not in_range:
            lo, hi = int(idx.min()), int(idx.max())
            bad = lo if lo < 0 else hi
            raise OutOfBounds(f"indices: {bad} is outside 0..{rows - 1} (table rows)")
        return out
