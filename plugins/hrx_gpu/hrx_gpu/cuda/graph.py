"""Native CUDA graphs built with the explicit node API.

Each :class:`~hrx_core.engine.GraphNode` becomes one CUDA graph node:

* ``dispatch`` -- ``cuGraphAddKernelNode`` (v2 params; arguments packed as for a launch);
* ``copy`` -- ``cuGraphAddMemcpyNode``: a 1-D ``CUDA_MEMCPY3D`` of ``nbytes`` x 1 x 1
  between unified-addressed pointers, with the device's primary context; between two
  pinned host buffers a kernel node of :mod:`hrx_gpu.cuda.mapped` instead (a host-to-host
  memcpy is not a GPU operation);
* ``fill`` -- ``cuGraphAddMemsetNode``: element size 1/2/4, width ``nbytes / size``,
  height 1; on pinned host memory, if the driver refuses a memset node there, a fill
  kernel node of :mod:`hrx_gpu.cuda.mapped`;
* ``empty`` -- ``cuGraphAddEmptyNode``.

Dependencies are node indices. The graph is instantiated once
(``cuGraphInstantiateWithFlags``); :meth:`CudaGraph.update` patches a node of the
executable graph in place (``cuGraphExec*NodeSetParams``). If the new parameters need
another kind of CUDA node (a copy that now runs between two pinned buffers) or the
driver refuses the patch, the graph is rebuilt from the current node list and
re-instantiated; replays already encoded are unaffected either way.

Rebinding fast path (:meth:`CudaGraph.patch_args`): the ``CUDA_KERNEL_NODE_PARAMS`` of
every kernel node are packed at build time and kept, with one 8-byte cell per buffer
argument that ``kernelParams`` points at. A patch stages ``(cell, new address)`` and
flags its node; the next :meth:`CudaGraph.launch` writes the staged cells, calls
``cuGraphExecKernelNodeSetParams`` once per flagged node (in node order) and then
``cuGraphLaunch`` -- one call of the compiled hot path (:mod:`hrx_gpu.cuda.hot`) where
it was built, the same driver calls from Python otherwise. A node update the driver
refuses at that point is handled as :meth:`CudaGraph.update` handles it: a sticky
error is raised, anything else rebuilds the graph from the current nodes.
"""

from __future__ import annotations

import array
import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hrx_core.engine import BufferArg, GraphNode, NativeGraph, NativeQueue, Timeline
from hrx_core.errors import InvalidArgument

from ._driver import (
    CU_MEMORYTYPE_UNIFIED,
    CURRENT,
    EXIT,
    GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC,
    GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC,
)
from .errors import CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, CudaError
from .hot import STEP_LAUNCH, STEP_SIGNAL, for_driver, py_graph_replay
from .kernel import CudaExecutable, address_of, pack_args
from .mapped import BLOCK as MAPPED_BLOCK
from .queue import _cuda_timeline

if TYPE_CHECKING:
    from .device import CudaDevice
    from .queue import CudaQueue

KINDS = ("copy", "fill", "dispatch", "empty")
_Q_IS_64_BITS = array.array("Q").itemsize == 8

# How a node is encoded: which CUDA node type, hence which exec-update call.
KERNEL, MEMCPY, MEMSET, COPY_KERNEL, FILL_KERNEL, EMPTY = (
    "kernel",
    "memcpy",
    "memset",
    "copy-kernel",
    "fill-kernel",
    "empty",
)
#: node modes that are kernels (programmatic edges run between kernel nodes only)
_KERNEL_MODES = (KERNEL, COPY_KERNEL, FILL_KERNEL)


class PreparedPatches(array.array):  # type: ignore[type-arg]
    """:meth:`CudaGraph.prepare_patches`' result: the 64-bit words ``(cells epoch, count,
    then count (cell, value, node) triples)`` -- the bytes the compiled rebind hands to
    ``hrx_graph_stage`` -- with ``triples`` (those words alone, for the Python staging)
    and ``patches`` (the patches themselves, for the patch log)."""

    triples: array.array  # type: ignore[type-arg]
    patches: list[tuple[int, int, BufferArg]]


class CudaGraph(NativeGraph):
    """An instantiated CUDA graph.

    Not thread-safe on its own: like every native graph, the core calls one graph's
    :meth:`launch`, :meth:`update` and :meth:`patch_args` from one thread at a time."""

    #: Patches remembered before they are folded into :attr:`nodes` (bounds memory
    #: when a graph is rebound on every replay and its nodes are never read).
    LOG_LIMIT = 4096

    def __init__(self, device: CudaDevice, nodes: Sequence[GraphNode]) -> None:
        self.device = device
        self._nodes = list(nodes)
        for i, node in enumerate(self._nodes):
            _validate(i, node)
        self._graph: Any = None
        self._exec: Any = None
        self._handles: list[Any] = []
        #: The CUDA node type each node was built as.
        self.modes: list[str] = []
        self.closed = False
        # index -> (CUDA_KERNEL_NODE_PARAMS, storage, per-argument cells) of KERNEL nodes,
        # packed at build time: patches write the cells, then update the node
        self._packed: dict[int, tuple[Any, list[Any], list[Any]]] = {}
        #: How many times the graph was rebuilt because an in-place patch was impossible.
        self.rebuilds = 0
        # moved whenever argument cells are re-indexed (prepared patches go stale)
        self._cells_epoch = 0
        #: The compiled hot path, or None for the Python replay (decided once, here).
        self._hot = for_driver(device.driver)
        # the current hrx_graph_record for the core's compiled replay (NULL once closed)
        self._record_ref: Any = self._hot.ffi.new("hrx_graph_record *[1]") if self._hot is not None else None
        # patches accepted by patch_args but not folded into self._nodes yet
        self._log: list[Any] = []  # (node, argument, BufferArg) triples and PreparedPatches
        self._build()

    @property
    def nodes(self) -> list[GraphNode]:
        """The current node list (buffer arguments as last patched)."""
        self._materialize()
        return self._nodes

    @property
    def hot_path(self) -> bool:
        """Whether replays go through the compiled hot path."""
        return self._hot is not None

    # -- building ---------------------------------------------------------------------

    def _mode(self, node: GraphNode) -> str:
        if node.kind == "dispatch":
            return KERNEL
        if node.kind == "copy":
            return COPY_KERNEL if _host_to_host(node.params) and self.device.mapped.usable else MEMCPY
        if node.kind == "fill":
            on_host = getattr(node.params["dst"], "host_mapped", False)
            return FILL_KERNEL if on_host and self.device.memset_node_on_host is False else MEMSET
        return EMPTY

    def _build(self) -> None:
        device = self.device
        driver = device.driver
        ffi, lib = driver.ffi, driver.lib
        device._activate()
        graph = ffi.new("CUgraph *")
        driver.check(lib.cuGraphCreate(graph, 0), "cuGraphCreate")
        handles: list[Any] = []
        modes: list[str] = []
        packed: dict[int, tuple[Any, list[Any], list[Any]]] = {}
        try:
            programmatic = getattr(device, "programmatic_edges", False)
            for i, node in enumerate(self._nodes):
                unique = list(dict.fromkeys(node.deps))  # the driver rejects repeated edges
                context = f"node {i} ({node.kind})"
                mode = self._mode(node)
                early: list[int] = []
                if programmatic and mode == KERNEL and getattr(node.params["executable"], "programmatic", False):
                    # a kernel that waits for its predecessors itself: its kernel
                    # predecessors get programmatic edges (added below), others plain ones
                    early = [d for d in unique if modes[d] in _KERNEL_MODES]
                    unique = [d for d in unique if modes[d] not in _KERNEL_MODES]
                deps = ffi.new("CUgraphNode[]", [handles[d] for d in unique]) if unique else ffi.NULL
                ndeps = len(unique)
                out = ffi.new("CUgraphNode *")
                if mode == MEMSET:
                    params = self._memset_params(node.params)
                    code = lib.cuGraphAddMemsetNode(out, graph[0], deps, ndeps, params, device.ctx)
                    on_host = getattr(node.params["dst"], "host_mapped", False)
                    if on_host and code in (CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED):
                        device.memset_node_on_host = False
                        mode = FILL_KERNEL
                    else:
                        driver.check(code, "cuGraphAddMemsetNode", context)
                        if on_host:
                            device.memset_node_on_host = True
                if mode in (KERNEL, COPY_KERNEL, FILL_KERNEL):
                    params, keep = self._kernel_node_params(mode, node.params)
                    code = lib.cuGraphAddKernelNode_v2(out, graph[0], deps, ndeps, params)
                    driver.check(code, "cuGraphAddKernelNode", context)
                    if mode == KERNEL:
                        # pack_args keeps one storage object per argument first, in order
                        packed[i] = (params, keep, keep[: len(node.params.get("args", ()))])
                elif mode == MEMCPY:
                    params = self._memcpy_params(node.params)
                    code = lib.cuGraphAddMemcpyNode(out, graph[0], deps, ndeps, params, device.ctx)
                    driver.check(code, "cuGraphAddMemcpyNode", context)
                elif mode == EMPTY:
                    code = lib.cuGraphAddEmptyNode(out, graph[0], deps, ndeps)
                    driver.check(code, "cuGraphAddEmptyNode", context)
                handles.append(out[0])
                modes.append(mode)
                if early:
                    self._add_programmatic_edges(graph[0], [handles[d] for d in early], out[0], context)
            exec_ = ffi.new("CUgraphExec *")
            driver.check(lib.cuGraphInstantiateWithFlags(exec_, graph[0], 0), "cuGraphInstantiateWithFlags")
        except BaseException:
            lib.cuGraphDestroy(graph[0])
            raise
        self._graph = graph[0]
        self._exec = exec_[0]
        self._handles = handles
        self.modes = modes
        self._packed = packed
        self._index()

    def _add_programmatic_edges(self, graph: Any, sources: list[Any], node: Any, context: str) -> None:
        """Edges from kernel nodes ``sources`` to ``node`` that let ``node`` launch once
        their blocks have triggered (griddepcontrol.launch_dependents) or exited; the
        kernel of ``node`` waits for their completion itself."""
        driver = self.device.driver
        ffi, lib = driver.ffi, driver.lib
        n = len(sources)
        edges = ffi.new("CUgraphEdgeData[]", n)
        for e in range(n):
            edges[e].from_port = GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
            edges[e].type = GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        code = lib.cuGraphAddDependencies_v2(graph, ffi.new("CUgraphNode[]", sources), ffi.new("CUgraphNode[]", [node] * n),
                                             edges, n)
        driver.check(code, "cuGraphAddDependencies_v2", f"{context}: programmatic edges")

    def _rebuild(self) -> None:
        """Build and instantiate again from the current nodes; drop the old executable."""
        self._materialize()
        lib = self.device.driver.lib
        old_graph, old_exec = self._graph, self._exec
        self._build()
        self.rebuilds += 1
        # In-flight replays of the old executable finish; the driver frees it after.
        lib.cuGraphExecDestroy(old_exec)
        lib.cuGraphDestroy(old_graph)

    # -- rebinding tables ---------------------------------------------------------------

    def _index(self) -> None:
        """Per-node argument cells and update records for patch_args (after each build)."""
        count = len(self._nodes)
        self._cell_refs: list[list[Any] | None] = [None] * count
        self._cell_addrs: list[list[int] | None] = [None] * count
        self._node_params: list[tuple[Any, Any] | None] = [None] * count
        self._py_dirty: dict[int, None] = {}
        hot = self._hot
        if hot is not None:
            hffi = hot.ffi
            cells = sum(
                sum(isinstance(a, BufferArg) for a in self._nodes[i].params.get("args", ())) for i in self._packed
            )
            self._hot_nodes = hffi.new("hrx_node_update[]", max(count, 1))
            self._dirty = hffi.new("unsigned char[]", max(count, 1))  # written by hrx_graph_replay
            record = hffi.new("hrx_graph_record *")
            record.set_params = hot.set_params
            record.graph_launch = hot.graph_launch
            record.exec = int(self.device.driver.ffi.cast("uintptr_t", self._exec))
            record.dirty = self._dirty
            record.nodes = self._hot_nodes
            record.nnodes = count
            record.cells_epoch = self._cells_epoch
            self._record = record
            self._record_ref[0] = record
            self._result = hffi.new("hrx_replay_result *")
            self._hot_replay = hot.replay
            self._grow(max(16, 2 * cells))
        for i in range(count):
            self._index_node(i)

    def _grow(self, capacity: int) -> None:
        """(Re)allocate the staged-cell array (nothing may be staged)."""
        hffi = self._hot.ffi  # type: ignore[union-attr]
        if _Q_IS_64_BITS:
            # cell, value, node, cell, ...: an array.array takes item writes faster than a cdata
            self._flat: Any = array.array("Q", bytes(24 * capacity))
            self._cellbuf = hffi.from_buffer("hrx_cell_patch[]", self._flat)
        else:
            self._cellbuf = hffi.new("hrx_cell_patch[]", capacity)
            self._flat = hffi.cast("uint64_t *", self._cellbuf)
        self._cap = capacity
        self._record.staged = 0
        self._record.cells = self._cellbuf
        self._record.cap = capacity

    def _index_node(self, index: int) -> None:
        """Refresh the tables of node ``index`` from its packing (None: not patchable)."""
        self._cells_epoch += 1
        if self._hot is not None:
            self._record.cells_epoch = self._cells_epoch  # (what hrx_graph_stage compares)
        packed = self._packed.get(index) if self.modes[index] == KERNEL else None
        if packed is None:
            self._cell_refs[index] = self._cell_addrs[index] = self._node_params[index] = None
            if self._hot is not None:
                self._hot_nodes[index].node = 0
                self._hot_nodes[index].params = 0
            return
        ffi = self.device.driver.ffi
        params, _keep, cells = packed
        args = self._nodes[index].params.get("args", ())
        refs = [cell if isinstance(arg, BufferArg) else None for cell, arg in zip(cells, args)]
        self._cell_refs[index] = refs
        self._cell_addrs[index] = [0 if c is None else int(ffi.cast("uintptr_t", c)) for c in refs]
        handle = self._handles[index]
        self._node_params[index] = (handle, params)
        if self._hot is not None:
            self._hot_nodes[index].node = int(ffi.cast("uintptr_t", handle))
            self._hot_nodes[index].params = int(ffi.cast("uintptr_t", params))

    def _materialize(self) -> None:
        """Fold the patch log into ``self._nodes`` (GraphNodes with the current args)."""
        log = self._log
        if not log:
            return
        entries = list(log)
        log.clear()  # (the same list: the core's compiled rebind appends to it)
        changed: dict[int, list[Any]] = {}
        for entry in entries:
            for index, arg_index, arg in entry.patches if isinstance(entry, PreparedPatches) else (entry,):
                args = changed.get(index)
                if args is None:
                    args = changed[index] = list(self._nodes[index].params.get("args", ()))
                args[arg_index] = arg
        for index, args in changed.items():
            node = self._nodes[index]
            self._nodes[index] = GraphNode(node.kind, node.deps, {**node.params, "args": args})

    def _pending(self) -> bool:
        if self._hot is not None:
            return bool(self._record.staged or self._record.pending)
        return bool(self._py_dirty)

    def _settle(self) -> None:
        """Apply staged patches now (without a launch) and fold them into the nodes."""
        if self._pending():
            self._replay(None, launch=False)
        self._materialize()

    def _run(self, queue: CudaQueue | None, launch: bool) -> tuple[int, int, int]:
        """One replay step: staged cells, dirty nodes, then (if ``launch``) the launch."""
        if self._hot is not None:
            stream = queue.stream_address if queue is not None else 0
            record = self._record
            code = self._hot_replay(record, record.staged, stream, 1 if launch else 0, self._result)
            if code:
                return int(code), int(self._result.step), int(self._result.node)
            return 0, 0, -1
        lib = self.device.driver.lib
        return py_graph_replay(
            lib.cuGraphExecKernelNodeSetParams_v2,
            lib.cuGraphLaunch,
            self._exec,
            (),
            self._py_dirty,
            self._node_params,
            queue.stream if queue is not None else self.device.driver.NULL,
            launch,
        )

    def _replay(self, queue: CudaQueue | None, launch: bool) -> None:
        """Apply staged patches (and launch on ``queue``), turning failures into HRX errors."""
        device = self.device
        if CURRENT.ctx is not device.ctx:
            device._activate()
        code, step, node = self._run(queue, launch)
        if code:
            self._failed(queue, launch, code, step, node)

    def _failed(self, queue: CudaQueue | None, launch: bool, code: int, step: int, node: int) -> None:
        """A replay step failed: what the Python paths do with the same failure."""
        device = self.device
        driver = device.driver
        if code == CUDA_ERROR_INVALID_CONTEXT:
            # another library changed this thread's context: once more, from where it stopped
            driver.force_current(device.ctx)
            code, step, node = self._run(queue, launch)
            if not code:
                return
        if step == STEP_LAUNCH:
            name = queue.name if queue is not None else repr(self)
            raise driver.error(code, "cuGraphLaunch", name)
        error = driver.error(code, "cuGraphExecKernelNodeSetParams", f"node {node}")
        if isinstance(error, CudaError) and error.sticky:
            raise error
        # Refused: as update() does, rebuild from the current nodes (the patches included).
        self._rebuild()
        if launch and queue is not None:
            queue.launch_graph(self._exec)

    def _patch_kernel(self, index: int, old: GraphNode, node: GraphNode) -> bool:
        """Rebinding fast path: same kernel, geometry and argument layout. The packed
        CUDA_KERNEL_NODE_PARAMS of the node are kept and only the argument values are
        rewritten in place before cuGraphExecKernelNodeSetParams. False: take the slow path."""
        op, np_ = old.params, node.params
        if (
            tuple(node.deps) != tuple(old.deps)
            or op["executable"] is not np_["executable"]
            or tuple(op["grid"]) != tuple(np_["grid"])
            or tuple(op["block"]) != tuple(np_["block"])
        ):
            return False
        args = np_.get("args", ())
        cached = self._packed.get(index)
        ffi = self.device.driver.ffi
        if cached is None or len(cached[2]) != len(args):
            packed, keep = self._kernel_node_params(KERNEL, np_)
            # pack_args keeps one storage object per argument first, in order
            cached = (packed, keep, keep[: len(args)])
            self._packed[index] = cached
        else:
            for slot, arg in zip(cached[2], args):
                if isinstance(arg, BufferArg):
                    slot[0] = address_of(arg.buffer) + arg.offset
                else:
                    data = arg.tobytes()
                    if len(data) != ffi.sizeof(slot):
                        return False
                    ffi.memmove(slot, data, len(data))
        if CURRENT.ctx is not self.device.ctx:
            self.device._activate()
        code = self.device.driver.lib.cuGraphExecKernelNodeSetParams_v2(self._exec, self._handles[index], cached[0])
        if code:
            self._packed.pop(index, None)
            self._index_node(index)
            return False  # the slow path reports the error or rebuilds
        self._nodes[index] = node
        self._index_node(index)
        return True

    def _kernel_node_params(self, mode: str, params: Mapping[str, Any]) -> tuple[Any, list[Any]]:
        """CUDA_KERNEL_NODE_PARAMS of a dispatch, or of a pinned-memory copy/fill kernel."""
        ffi = self.device.driver.ffi
        if mode == KERNEL:
            executable = params["executable"]
            if not isinstance(executable, CudaExecutable):
                raise InvalidArgument(f"executable: expected a CUDA executable, got {type(executable).__name__}")
            function = executable.function
            grid = tuple(params["grid"])
            block = tuple(params["block"])
            kernel_params, keep = pack_args(ffi, params.get("args", ()))
        elif mode == COPY_KERNEL:
            dst = address_of(params["dst"]) + int(params.get("dst_offset", 0))
            src = address_of(params["src"]) + int(params.get("src_offset", 0))
            function, grid, kernel_params, keep = self.device.mapped.copy_args(dst, src, int(params["nbytes"]))
            block = (MAPPED_BLOCK, 1, 1)
        else:
            dst = address_of(params["dst"]) + int(params.get("offset", 0))
            pattern = _pattern(params)
            function, grid, kernel_params, keep = self.device.mapped.fill_args(dst, int(params["nbytes"]), pattern)
            block = (MAPPED_BLOCK, 1, 1)
        p = ffi.new("CUDA_KERNEL_NODE_PARAMS *")  # zeroed: no shared memory, extra, kern, ctx
        p.func = function
        p.gridDimX, p.gridDimY, p.gridDimZ = grid
        p.blockDimX, p.blockDimY, p.blockDimZ = block
        p.kernelParams = kernel_params
        keep.append(kernel_params)
        return p, keep

    def _memcpy_params(self, params: Mapping[str, Any]) -> Any:
        ffi = self.device.driver.ffi
        nbytes = int(params["nbytes"])
        p = ffi.new("CUDA_MEMCPY3D *")  # zeroed
        p.srcMemoryType = CU_MEMORYTYPE_UNIFIED
        p.srcDevice = address_of(params["src"]) + int(params.get("src_offset", 0))
        p.srcPitch = nbytes
        p.srcHeight = 1
        p.dstMemoryType = CU_MEMORYTYPE_UNIFIED
        p.dstDevice = address_of(params["dst"]) + int(params.get("dst_offset", 0))
        p.dstPitch = nbytes
        p.dstHeight = 1
        p.WidthInBytes = nbytes
        p.Height = 1
        p.Depth = 1
        return p

    def _memset_params(self, params: Mapping[str, Any]) -> Any:
        ffi = self.device.driver.ffi
        pattern = _pattern(params)
        size = len(pattern)
        nbytes = int(params["nbytes"])
        p = ffi.new("CUDA_MEMSET_NODE_PARAMS *")
        p.dst = address_of(params["dst"]) + int(params.get("offset", 0))
        p.pitch = nbytes
        p.value = int.from_bytes(pattern, "little")
        p.elementSize = size
        p.width = nbytes // size
        p.height = 1
        return p

    # -- NativeGraph ----------------------------------------------------------------------

    def launch(self, queue: NativeQueue) -> None:
        """One replay on ``queue``: staged patches first (see :meth:`patch_args`), then
        ``cuGraphLaunch`` -- a single call of the compiled hot path where it was built."""
        if self.closed:
            raise InvalidArgument("graph: closed")
        q: CudaQueue = queue  # type: ignore[assignment]
        if self._hot is not None:
            if CURRENT.ctx is not self.device.ctx:
                self.device._activate()
            record = self._record  # (the call takes the staged cells, whatever it returns)
            code = self._hot_replay(record, record.staged, q.stream_address, 1, self._result)
            if code:
                self._failed(q, True, int(code), int(self._result.step), int(self._result.node))
            return
        if self._py_dirty:
            self._replay(q, launch=True)
            return
        q.launch_graph(self._exec)

    def launch_signaled(self, queue: NativeQueue, timeline: Timeline, value: int) -> bool:
        """:meth:`launch`, then ``cuStreamWriteValue64`` of ``value`` to the timeline's
        counter: one call of the compiled hot path where it was built and the device
        has stream memory operations (else the two Python calls)."""
        q: CudaQueue = queue  # type: ignore[assignment]
        hot = self._hot
        if hot is None or self.closed or not hot.write_value or not self.device.stream_memops:
            self.launch(q)
            q.signal(timeline, value)
            return True
        tl = _cuda_timeline(timeline)
        if CURRENT.ctx is not self.device.ctx:
            self.device._activate()
        record = self._record  # (the call takes the staged cells, whatever it returns)
        result = self._result
        code = hot.replay_signal(record, record.staged, q.stream_address, hot.write_value, tl.dptr, value, result)
        if code:
            step = int(result.step)
            if step != STEP_SIGNAL:
                self._failed(q, True, int(code), step, int(result.node))  # raises, or launched after all
                q.signal(timeline, value)
                return True
            return False  # launched; the queue's own signal reports (or retries) the write
        tl.note_signal(q, value)
        return True

    def fast_launch(self, queue: NativeQueue) -> tuple[int, int, Any, Any] | None:
        """The compiled hot path's ``hrx_graph_fast`` for :mod:`hrx_core.fastpath`: one
        replay on ``queue`` exactly as :meth:`launch` makes it (staged cells written,
        changed nodes updated, ``cuGraphLaunch``), or nothing where :meth:`launch` has
        work first (the graph closed, another context current on the calling thread).
        None without the hot path."""
        hot = self._hot
        if hot is None or self.closed:
            return None
        q: CudaQueue = queue  # type: ignore[assignment]
        pack = hot.ffi.new("hrx_fast_replay *")
        pack.graph = self._record_ref
        pack.stream = q.stream_address
        pack.ctx_get = hot.ctx_get
        pack.ctx = int(self.device.driver.ffi.cast("uintptr_t", self.device.ctx))
        address = int(hot.ffi.cast("uintptr_t", pack))
        return hot.graph_fast, address, functools.partial(self._failed, q, True), (pack, self._record_ref)

    def patch_args(self, patches: Sequence[tuple[int, int, BufferArg]]) -> bool:
        """Point buffer arguments of kernel nodes at new ranges (the core validated them).

        ``patches`` holds ``(node index, argument index, BufferArg)``. Every patch must
        name a buffer argument of a node built as a CUDA kernel node with its packing
        kept; otherwise nothing changes and the answer is False (the core then calls
        :meth:`update` per node: pinned-memory copies and fills, empty nodes). Accepted
        patches are staged and take effect at the next :meth:`launch` (or :meth:`update`),
        which writes the argument cells and makes one ``cuGraphExecKernelNodeSetParams``
        per changed node before ``cuGraphLaunch``; replays already encoded keep their
        old arguments. A node update the driver refuses then is treated as
        :meth:`update` treats it (sticky: raised; otherwise the graph is rebuilt)."""
        if self.closed:
            raise InvalidArgument("graph: closed")
        if not isinstance(patches, (list, tuple)):
            patches = list(patches)
        if not patches:
            return True
        if self._hot is not None:
            words = self._cell_words(patches)
            if words is None:
                return False  # not a patchable node or argument: nothing staged
            n = self._record.staged
            if n + len(patches) > self._cap:
                if n or self._record.pending:
                    self._replay(None, launch=False)  # apply what is staged; n becomes 0
                n = 0
                if len(patches) > self._cap:
                    self._grow(2 * len(patches))
            flat = self._flat
            k = 3 * n
            for i, word in enumerate(words):
                flat[k + i] = word
            k += len(words)
            self._record.staged = k // 3
        else:
            refs = self._cell_refs
            staged: list[tuple[Any, int]] = []
            touched: list[int] = []
            try:
                for index, arg_index, arg in patches:
                    if index < 0 or arg_index < 0:
                        return False
                    cell = refs[index][arg_index]  # type: ignore[index]
                    if cell is None:
                        return False
                    staged.append((cell, address_of(arg.buffer) + arg.offset))
                    touched.append(index)
            except (IndexError, TypeError, AttributeError):
                return False
            for cell, value in staged:
                cell[0] = value
            dirty_ = self._py_dirty
            for index in touched:
                dirty_[index] = None
        log = self._log
        log.extend(patches)
        if len(log) > self.LOG_LIMIT:
            self._materialize()
        return True

    def prepare_patches(self, patches: Sequence[tuple[int, int, BufferArg]]) -> Any:
        """The patches as the compiled hot path stages them ((cell, value, node) words),
        with the cell tables' epoch they were resolved under; None without the hot path
        or where :meth:`patch_args` would refuse them."""
        if self._hot is None or self.closed or not _Q_IS_64_BITS or not patches:
            return None
        words = self._cell_words(patches)
        if words is None:
            return None
        try:
            prepared = PreparedPatches("Q", (self._cells_epoch, len(patches), *words))
            prepared.triples = array.array("Q", words)
        except OverflowError:
            return None
        prepared.patches = list(patches)
        return prepared

    def _cell_words(self, patches: Sequence[tuple[int, int, BufferArg]]) -> list[int] | None:
        """(cell address, new value, node) per patch, as the hot path stages them; None
        where a patch names no buffer argument cell of a kernel node."""
        addrs = self._cell_addrs
        words: list[int] = []
        try:
            for index, arg_index, arg in patches:
                if index < 0 or arg_index < 0:
                    return None
                cell = addrs[index][arg_index]  # type: ignore[index]
                if not cell:
                    return None  # a scalar argument
                try:
                    value = arg.buffer.dptr + arg.offset  # type: ignore[attr-defined]
                except AttributeError:
                    value = address_of(arg.buffer) + arg.offset
                words += (cell, value, index)
        except (IndexError, TypeError, AttributeError):
            return None
        return words

    def apply_patches(self, prepared: Any) -> bool:
        """Stage prepared patches: one copy of their words into the staged cells."""
        if not isinstance(prepared, PreparedPatches) or prepared[0] != self._cells_epoch or self.closed:
            return False
        count = prepared[1]
        record = self._record
        n = record.staged
        if n + count > self._cap:
            return False  # patch_args makes room
        self._flat[3 * n:3 * (n + count)] = prepared.triples
        record.staged = n + count
        log = self._log
        log.append(prepared)
        if len(log) > self.LOG_LIMIT:
            self._materialize()
        return True

    def fast_stage(self) -> tuple[int, int, list[Any], int, Any] | None:
        """The compiled hot path's ``hrx_graph_stage`` for :mod:`hrx_core.fastpath`:
        :meth:`apply_patches` of a :class:`PreparedPatches` in C (the core appends the
        prepared object to this graph's patch log). None without the hot path."""
        hot = self._hot
        if hot is None or self.closed or not _Q_IS_64_BITS:
            return None
        pack = hot.ffi.new("hrx_fast_replay *")
        pack.graph = self._record_ref
        address = int(hot.ffi.cast("uintptr_t", pack))
        return hot.graph_stage, address, self._log, self.LOG_LIMIT, (pack, self._record_ref)

    def update(self, index: int, node: GraphNode) -> None:
        if self.closed:
            raise InvalidArgument("graph: closed")
        if not isinstance(index, int) or not 0 <= index < len(self._nodes):
            raise InvalidArgument(f"index: expected 0 <= index < {len(self._nodes)}, got {index!r}")
        self._settle()  # staged patch_args first: they were accepted before this update
        old = self._nodes[index]
        # a kernel that starts or stops waiting for its predecessors itself needs other
        # edges into it: rebuild (never a programmatic edge into a kernel that does not wait)
        edges_change = (getattr(self.device, "programmatic_edges", False) and node.kind == "dispatch"
                        and old.kind == "dispatch"
                        and getattr(node.params["executable"], "programmatic", False) != getattr(old.params["executable"], "programmatic", False))
        if node.kind == "dispatch" and old.kind == "dispatch" and self.modes[index] == KERNEL and not edges_change \
                and self._patch_kernel(index, old, node):
            return
        if node.kind != old.kind:
            raise InvalidArgument(f"node {index}: kind {node.kind!r} differs from the built {old.kind!r}")
        if tuple(node.deps) != tuple(old.deps):
            raise InvalidArgument(f"node {index}: deps {node.deps!r} differ from the built {old.deps!r}")
        _validate(index, node)
        device = self.device
        driver = device.driver
        lib = driver.lib
        handle = self._handles[index]
        mode = self._mode(node)
        built = self.modes[index]
        if mode == MEMSET and built == FILL_KERNEL:
            mode = FILL_KERNEL  # this driver refused a memset node on host memory
        device._activate()
        code, call = -1, ""  # -1: another CUDA node type is needed, rebuild
        packed: tuple[Any, list[Any], list[Any]] | None = None
        if mode != built or edges_change:
            pass
        elif mode in (KERNEL, COPY_KERNEL, FILL_KERNEL):
            params, keep = self._kernel_node_params(mode, node.params)
            code = lib.cuGraphExecKernelNodeSetParams_v2(self._exec, handle, params)
            call = "cuGraphExecKernelNodeSetParams"
            if mode == KERNEL:
                packed = (params, keep, keep[: len(node.params.get("args", ()))])
        elif mode == MEMCPY:
            params = self._memcpy_params(node.params)
            code = lib.cuGraphExecMemcpyNodeSetParams(self._exec, handle, params, device.ctx)
            call = "cuGraphExecMemcpyNodeSetParams"
        elif mode == MEMSET:
            params = self._memset_params(node.params)
            code = lib.cuGraphExecMemsetNodeSetParams(self._exec, handle, params, device.ctx)
            call = "cuGraphExecMemsetNodeSetParams"
        else:
            code = 0
        if code == 0:
            self._nodes[index] = node
            if packed is not None:
                # later patches must start from what the node now holds (another kernel,
                # geometry or layout), not from the packing it was built with
                self._packed[index] = packed
                self._index_node(index)
            return
        if code > 0:
            error = driver.error(code, call, f"node {index}")
            if isinstance(error, CudaError) and error.sticky:
                raise error
        # Patch impossible or refused: rebuild with the new node.
        previous = self._nodes[index]
        self._nodes[index] = node
        try:
            self._rebuild()
        except BaseException:
            self._nodes[index] = previous
            raise

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._record_ref is not None:
            self._record_ref[0] = self._hot.ffi.NULL  # type: ignore[union-attr]
        self._log.clear()
        device = self.device
        device._forget_graph(self)
        if device.closed or EXIT.exiting or self._exec is None:
            return
        try:
            device._activate()
        except Exception:  # noqa: BLE001
            pass
        lib = device.driver.lib
        lib.cuGraphExecDestroy(self._exec)
        lib.cuGraphDestroy(self._graph)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        return f"<CudaGraph {len(self._nodes)} nodes{' closed' if self.closed else ''}>"


def _pattern(params: Mapping[str, Any]) -> bytes:
    pattern = bytes(params["pattern"])
    if len(pattern) not in (1, 2, 4):
        raise InvalidArgument(f"pattern: expected 1, 2 or 4 bytes, got {len(pattern)}")
    return pattern


def _host_to_host(params: Mapping[str, Any]) -> bool:
    return bool(getattr(params["src"], "host_mapped", False) and getattr(params["dst"], "host_mapped", False))


def _validate(index: int, node: GraphNode) -> None:
    if node.kind not in KINDS:
        raise InvalidArgument(f"nodes[{index}].kind: expected one of {', '.join(KINDS)}, got {node.kind!r}")
    for dep in node.deps:
        if not isinstance(dep, int) or not 0 <= dep < index:
            raise InvalidArgument(f"nodes[{index}].deps: {dep!r} is not the index of an earlier node")


__all__ = ["CudaGraph"]
