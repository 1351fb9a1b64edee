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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hrx_core.engine import BufferArg, GraphNode, NativeGraph, NativeQueue
from hrx_core.errors import InvalidArgument

from ._driver import CU_MEMORYTYPE_UNIFIED, CURRENT, EXIT
from .errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, CudaError
from .kernel import CudaExecutable, address_of, pack_args
from .mapped import BLOCK as MAPPED_BLOCK

if TYPE_CHECKING:
    from .device import CudaDevice
    from .queue import CudaQueue

KINDS = ("copy", "fill", "dispatch", "empty")

# How a node is encoded: which CUDA node type, hence which exec-update call.
KERNEL, MEMCPY, MEMSET, COPY_KERNEL, FILL_KERNEL, EMPTY = (
    "kernel",
    "memcpy",
    "memset",
    "copy-kernel",
    "fill-kernel",
    "empty",
)


class CudaGraph(NativeGraph):
    """An instantiated CUDA graph."""

    def __init__(self, device: CudaDevice, nodes: Sequence[GraphNode]) -> None:
        self.device = device
        self.nodes = list(nodes)
        for i, node in enumerate(self.nodes):
            _validate(i, node)
        self._graph: Any = None
        self._exec: Any = None
        self._handles: list[Any] = []
        #: The CUDA node type each node was built as.
        self.modes: list[str] = []
        self.closed = False
        # index -> (CUDA_KERNEL_NODE_PARAMS, storage, per-argument slots) for in-place rebinding
        self._packed: dict[int, tuple[Any, list[Any], list[Any]]] = {}
        #: How many times the graph was rebuilt because an in-place patch was impossible.
        self.rebuilds = 0
        self._build()

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
        try:
            for i, node in enumerate(self.nodes):
                unique = list(dict.fromkeys(node.deps))  # the driver rejects repeated edges
                deps = ffi.new("CUgraphNode[]", [handles[d] for d in unique]) if unique else ffi.NULL
                ndeps = len(unique)
                out = ffi.new("CUgraphNode *")
                context = f"node {i} ({node.kind})"
                mode = self._mode(node)
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
                    params, _keep = self._kernel_node_params(mode, node.params)
                    code = lib.cuGraphAddKernelNode_v2(out, graph[0], deps, ndeps, params)
                    driver.check(code, "cuGraphAddKernelNode", context)
                elif mode == MEMCPY:
                    params = self._memcpy_params(node.params)
                    code = lib.cuGraphAddMemcpyNode(out, graph[0], deps, ndeps, params, device.ctx)
                    driver.check(code, "cuGraphAddMemcpyNode", context)
                elif mode == EMPTY:
                    code = lib.cuGraphAddEmptyNode(out, graph[0], deps, ndeps)
                    driver.check(code, "cuGraphAddEmptyNode", context)
                handles.append(out[0])
                modes.append(mode)
            exec_ = ffi.new("CUgraphExec *")
            driver.check(lib.cuGraphInstantiateWithFlags(exec_, graph[0], 0), "cuGraphInstantiateWithFlags")
        except BaseException:
            lib.cuGraphDestroy(graph[0])
            raise
        self._graph = graph[0]
        self._exec = exec_[0]
        self._handles = handles
        self.modes = modes

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
            return False  # the slow path reports the error or rebuilds
        self.nodes[index] = node
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
        if self.closed:
            raise InvalidArgument("graph: closed")
        q: CudaQueue = queue  # type: ignore[assignment]
        q.launch_graph(self._exec)

    def update(self, index: int, node: GraphNode) -> None:
        if self.closed:
            raise InvalidArgument("graph: closed")
        if not isinstance(index, int) or not 0 <= index < len(self.nodes):
            raise InvalidArgument(f"index: expected 0 <= index < {len(self.nodes)}, got {index!r}")
        old = self.nodes[index]
        if node.kind == "dispatch" and old.kind == "dispatch" and self.modes[index] == KERNEL and self._patch_kernel(index, old, node):
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
        if mode != built:
            pass
        elif mode in (KERNEL, COPY_KERNEL, FILL_KERNEL):
            params, _keep = self._kernel_node_params(mode, node.params)
            code = lib.cuGraphExecKernelNodeSetParams_v2(self._exec, handle, params)
            call = "cuGraphExecKernelNodeSetParams"
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
            self.nodes[index] = node
            return
        if code > 0:
            error = driver.error(code, call, f"node {index}")
            if isinstance(error, CudaError) and error.sticky:
                raise error
        # Patch impossible or refused: rebuild with the new node.
        previous = self.nodes[index]
        self.nodes[index] = node
        old_graph, old_exec = self._graph, self._exec
        try:
            self._build()
        except BaseException:
            self.nodes[index] = previous
            raise
        self.rebuilds += 1
        # In-flight replays of the old executable finish; the driver frees it after.
        lib.cuGraphExecDestroy(old_exec)
        lib.cuGraphDestroy(old_graph)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
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
        return f"<CudaGraph {len(self.nodes)} nodes{' closed' if self.closed else ''}>"


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
