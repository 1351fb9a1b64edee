"""The cuda engine's compiled hot path (hrx_gpu.cuda.hot) against its Python twin.

Without a GPU: a C test double of the driver (fake_cuda.c, built into tmp) records
every cuLaunchKernel / cuGraphExecKernelNodeSetParams / cuGraphLaunch with its
arguments and the values the kernelParams cells hold at that moment, and fails a call
on request. Its function pointers reach the compiled extension exactly as libcuda's
would; the Python paths call it through the engine's ABI-mode declarations. Every
test runs both ways and compares the recorded calls.

With a GPU (mark ``gpu``): prepared launches, dispatches and graph replays with
rebinding on the device, with and without the hot path, compared byte for byte.
"""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hrx_core import hotpath
from hrx_core.engine import Access, Artifact, BufferArg, GraphNode, NativeBuffer
from hrx_core.errors import HRXError, InvalidArgument

HERE = Path(__file__).resolve().parent
LAUNCH, SET_PARAMS, GRAPH_LAUNCH, ADD_KERNEL_NODE, ADD_OTHER_NODE, INSTANTIATE, ADD_EDGE, WRITE_VALUE = 1, 2, 3, 4, 5, 6, 7, 8
MODES = ("compiled", "python")

FAKE_CDEF = """
typedef struct {
    int kind;
    int code;
    uintptr_t function;
    uintptr_t exec;
    uintptr_t node;
    uintptr_t stream;
    uintptr_t params;
    uintptr_t extra;
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared;
    int nvalues;
    uint64_t values[16];
    int ndeps;
    uintptr_t deps[8];
    int edge_type;
    int from_port;
} fake_call;
void fake_reset(void);
void fake_widths(int n, const int *w);
void fake_fail(int kind, int code, int after, int times);
int fake_count(void);
int fake_get(int i, fake_call *out);
"""


# -- the test double --------------------------------------------------------------------


class Fake:
    """Control side of the test double, plus a Driver over it."""

    def __init__(self, path: Path) -> None:
        import cffi
        from hrx_gpu.cuda._driver import Driver, get_ffi

        self.ffi = cffi.FFI()
        self.ffi.cdef(FAKE_CDEF)
        self.lib = self.ffi.dlopen(str(path))
        dffi = get_ffi()
        self.driver = Driver(dffi, dffi.dlopen(str(path)), str(path))

    def reset(self, widths: tuple[int, ...] = (8,)) -> None:
        self.lib.fake_reset()
        self.lib.fake_widths(len(widths), self.ffi.new("int[]", list(widths)))

    def fail(self, kind: int, code: int, *, after: int = 0, times: int = 1) -> None:
        self.lib.fake_fail(kind, code, after, times)

    def calls(self, *kinds: int) -> list[dict[str, Any]]:
        out = []
        c = self.ffi.new("fake_call *")
        for i in range(self.lib.fake_count()):
            self.lib.fake_get(i, c)
            if kinds and c.kind not in kinds:
                continue
            out.append(
                {
                    "kind": c.kind,
                    "code": c.code,
                    "function": c.function,
                    "exec": c.exec,
                    "node": c.node,
                    "stream": c.stream,
                    "params": c.params,
                    "extra": c.extra,
                    "grid": tuple(c.grid),
                    "block": tuple(c.block),
                    "shared": c.shared,
                    "values": tuple(c.values[0 : c.nvalues]),
                    "deps": tuple(c.deps[0 : min(c.ndeps, 8)]),
                    "edge": (c.edge_type, c.from_port),
                }
            )
        return out


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) or shutil.which("cc")


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Fake:
    cc = _compiler()
    if cc is None:
        pytest.skip("no C compiler to build the driver test double")
    out = tmp_path_factory.mktemp("fake_cuda") / "libfakecuda.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", str(HERE / "fake_cuda.c"), "-o", str(out)], check=True, timeout=120)
    return Fake(out)


@pytest.fixture(scope="module")
def hot_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hot_cache")


def use_mode(monkeypatch: pytest.MonkeyPatch, mode: str) -> bool:
    """Select the compiled hot path or the Python paths for what is built or bound
    next; False where the compiled one was asked for and cannot be built here."""
    if mode == "python":
        monkeypatch.setenv("HRX_HOT_PATH", "0")
        return True
    monkeypatch.delenv("HRX_HOT_PATH", raising=False)
    return bool(hotpath.load("cuda_hot", *_hot_text()).compiled)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, hot_cache: Path) -> str:
    """Run a test with the compiled hot path, then with the Python paths."""
    monkeypatch.setenv("HRX_CACHE_DIR", str(hot_cache))
    if not use_mode(monkeypatch, request.param):
        pytest.skip(f"hot path not compiled here: {hotpath.load('cuda_hot', *_hot_text()).reason}")
    return str(request.param)


def _hot_text() -> tuple[str, str]:
    from hrx_gpu.cuda import hot

    return hot.CDEF, hot.SOURCE


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch, hot_cache: Path) -> Any:
    """The compiled extension (skips where it cannot be built)."""
    from hrx_gpu.cuda import hot

    monkeypatch.setenv("HRX_CACHE_DIR", str(hot_cache))
    monkeypatch.delenv("HRX_HOT_PATH", raising=False)
    mod = hot.module()
    if not mod.compiled:
        pytest.skip(f"hot path not compiled here: {mod.reason}")
    return mod


class FakeBuffer(NativeBuffer):
    def __init__(self, dptr: int, nbytes: int = 4096) -> None:
        self.dptr = dptr
        self.nbytes = nbytes

    def host_view(self) -> np.ndarray | None:
        return None

    def free(self) -> None:
        pass


class FakeDevice:
    """What CudaGraph, CudaQueue and CudaPreparedDispatch use of a CudaDevice."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.ctx = driver.ffi.cast("CUcontext", 0xC0C0)
        self.index = 0
        self.closed = False
        self.stream_memops = True
        self.memset_node_on_host = None
        self.mapped = type("Mapped", (), {"usable": False})()

    def _activate(self) -> None:
        self.driver.make_current(self.ctx)

    def _forget_graph(self, graph: Any) -> None:
        pass

    def _forget_queue(self, queue: Any) -> None:
        pass

    def _forget_executable(self, executable: Any) -> None:
        pass


@pytest.fixture
def world(fake: Fake) -> Any:
    from hrx_gpu.cuda.kernel import CudaExecutable
    from hrx_gpu.cuda.queue import CudaQueue

    fake.reset()
    device = FakeDevice(fake.driver)
    queue = CudaQueue(device, "compute", 0)  # type: ignore[arg-type]
    ffi = fake.driver.ffi
    exe = CudaExecutable(device, ffi.cast("CUmodule", 0x3000), ffi.cast("CUfunction", 0xF00D), "k", "cuda")  # type: ignore[arg-type]
    other = CudaExecutable(device, ffi.cast("CUmodule", 0x3001), ffi.cast("CUfunction", 0xBEEF), "k2", "cuda")  # type: ignore[arg-type]
    yield type("World", (), {"device": device, "queue": queue, "exe": exe, "other": other, "fake": fake})
    device.closed = True


def barg(dptr: int, offset: int = 0) -> BufferArg:
    return BufferArg(FakeBuffer(dptr), offset, 256, Access.READ_WRITE)


def kernel_node(exe: Any, dptr: int, scalar: int, deps: tuple[int, ...] = ()) -> GraphNode:
    return GraphNode("dispatch", deps, {"executable": exe, "grid": (2, 3, 4), "block": (32, 2, 1), "args": [barg(dptr), np.uint32(scalar)]})


# -- the compiled entry points themselves ------------------------------------------------------


def test_launch_record_reaches_the_driver_like_the_python_call(fake: Fake, compiled: Any) -> None:
    from hrx_gpu.cuda.hot import CudaHot
    from hrx_gpu.cuda.kernel import pack_args

    fake.reset(widths=(8, 4, 8))
    dffi, dlib = fake.driver.ffi, fake.driver.lib
    args = [barg(0x7000, 16), np.uint32(0xDEAD), barg(0x9000)]
    params, keep = pack_args(dffi, args)
    hot = CudaHot(compiled, fake.driver)
    stream = 0x5555
    record = hot.launch_record(
        0xF00D, (7, 8, 9), (64, 2, 3), stream, int(dffi.cast("uintptr_t", params)), shared_bytes=48, extra=0
    )
    assert hot.launch(record) == 0
    assert dlib.cuLaunchKernel(
        dffi.cast("CUfunction", 0xF00D), 7, 8, 9, 64, 2, 3, 48, dffi.cast("CUstream", stream), params, dffi.NULL
    ) == 0
    compiled_call, python_call = fake.calls()
    assert compiled_call == python_call
    assert compiled_call["function"] == 0xF00D and compiled_call["stream"] == stream
    assert compiled_call["grid"] == (7, 8, 9) and compiled_call["block"] == (64, 2, 3) and compiled_call["shared"] == 48
    assert compiled_call["params"] == int(dffi.cast("uintptr_t", params)) and compiled_call["extra"] == 0
    assert compiled_call["values"] == (0x7010, 0xDEAD, 0x9000)
    # the record reads the cells at each launch: a rewritten cell reaches the next one
    keep[0][0] = 0xABC000
    assert hot.launch(record) == 0
    assert fake.calls()[-1]["values"] == (0xABC000, 0xDEAD, 0x9000)
    fake.fail(LAUNCH, 701)
    assert hot.launch(record) == 701
    assert fake.calls()[-1]["code"] == 701
    assert hot.launch(record) == 0


def _graph_record(hot: Any, exec_: int, nodes: list[tuple[int, int]]) -> tuple[Any, Any, Any, Any]:
    ffi = hot.ffi
    updates = ffi.new("hrx_node_update[]", len(nodes))
    for i, (node, params) in enumerate(nodes):
        updates[i].node, updates[i].params = node, params
    dirty = ffi.new("unsigned char[]", len(nodes))
    cells = ffi.new("hrx_cell_patch[]", 8)
    record = ffi.new("hrx_graph_record *")
    record.set_params, record.graph_launch, record.exec = hot.set_params, hot.graph_launch, exec_
    record.cells, record.dirty, record.nodes, record.nnodes = cells, dirty, updates, len(nodes)
    return record, cells, dirty, updates


def _node_params(dffi: Any, function: int, cells: list[Any]) -> Any:
    kp = dffi.new("void *[]", cells)
    p = dffi.new("CUDA_KERNEL_NODE_PARAMS *")
    p.func = dffi.cast("CUfunction", function)
    p.gridDimX = p.gridDimY = p.gridDimZ = 1
    p.blockDimX, p.blockDimY, p.blockDimZ = 32, 1, 1
    p.kernelParams = kp
    return p, kp


def test_graph_replay_patches_cells_updates_dirty_nodes_then_launches(fake: Fake, compiled: Any) -> None:
    from hrx_gpu.cuda.hot import STEP_LAUNCH, STEP_NONE, STEP_SET_PARAMS, CudaHot, py_graph_replay

    fake.reset(widths=(8,))
    dffi, dlib = fake.driver.ffi, fake.driver.lib
    hot = CudaHot(compiled, fake.driver)
    cells = [dffi.new("unsigned long long *", 0x1000 * (i + 1)) for i in range(3)]
    packed = [_node_params(dffi, 0xF00D + i, [cells[i]]) for i in range(3)]
    handles = [0xA0, 0xA1, 0xA2]
    addr = lambda x: int(dffi.cast("uintptr_t", x))
    exec_, stream = 0xE0, 0x5A
    record, staged, dirty, _updates = _graph_record(hot, exec_, [(h, addr(p)) for h, (p, _) in zip(handles, packed)])
    result = hot.ffi.new("hrx_replay_result *")
    # compiled: patch cells of nodes 2 and 0 (which flags both), launch
    staged[0].cell, staged[0].value, staged[0].node = addr(cells[2]), 0x2222, 2
    staged[1].cell, staged[1].value, staged[1].node = addr(cells[0]), 0x0000_1111, 0
    assert hot.replay(record, 2, stream, 1, result) == 0
    assert (result.code, result.step, result.node) == (0, STEP_NONE, -1)
    assert record.pending == 0 and list(dirty) == [0, 0, 0]
    assert [cells[i][0] for i in range(3)] == [0x1111, 0x2000, 0x2222]
    compiled_calls = fake.calls()
    # Python twin: same request, same calls
    fake.reset(widths=(8,))
    for i, value in enumerate((0x1000, 0x2000, 0x3000)):
        cells[i][0] = value
    py_dirty = {2: None, 0: None}
    nodes = [(dffi.cast("CUgraphNode", h), p) for h, (p, _) in zip(handles, packed)]
    code = py_graph_replay(
        dlib.cuGraphExecKernelNodeSetParams_v2,
        dlib.cuGraphLaunch,
        dffi.cast("CUgraphExec", exec_),
        [(cells[2], 0x2222), (cells[0], 0x1111)],
        py_dirty,
        nodes,
        dffi.cast("CUstream", stream),
        True,
    )
    assert code == (0, STEP_NONE, -1) and py_dirty == {}
    assert fake.calls() == compiled_calls
    assert [(c["kind"], c["node"], c["function"], c["values"]) for c in compiled_calls] == [
        (SET_PARAMS, 0xA0, 0xF00D, (0x1111,)),
        (SET_PARAMS, 0xA2, 0xF00F, (0x2222,)),
        (GRAPH_LAUNCH, 0, 0, ()),
    ]
    assert all(c["exec"] == exec_ for c in compiled_calls) and compiled_calls[-1]["stream"] == stream
    # nothing staged: one launch; launch=0: no launch
    fake.reset()
    assert hot.replay(record, 0, stream, 1, result) == 0 and hot.replay(record, 0, stream, 0, result) == 0
    assert [c["kind"] for c in fake.calls()] == [GRAPH_LAUNCH]
    # failures: the second node update fails; the first stays done, a retry resumes
    for twin in (False, True):
        fake.reset()
        fake.fail(SET_PARAMS, 400, after=1)
        if twin:
            py_dirty = {0: None, 1: None, 2: None}
            code = py_graph_replay(dlib.cuGraphExecKernelNodeSetParams_v2, dlib.cuGraphLaunch, dffi.cast("CUgraphExec", exec_), (), py_dirty, nodes, dffi.cast("CUstream", stream), True)
            assert code == (400, STEP_SET_PARAMS, 1) and sorted(py_dirty) == [1, 2]
            assert py_graph_replay(dlib.cuGraphExecKernelNodeSetParams_v2, dlib.cuGraphLaunch, dffi.cast("CUgraphExec", exec_), (), py_dirty, nodes, dffi.cast("CUstream", stream), True) == (0, STEP_NONE, -1)
        else:
            dirty[0] = dirty[1] = dirty[2] = 1
            record.pending = 1
            assert hot.replay(record, 0, stream, 1, result) == 400
            assert (result.code, result.step, result.node) == (400, STEP_SET_PARAMS, 1)
            assert list(dirty) == [0, 1, 1] and record.pending == 1
            assert hot.replay(record, 0, stream, 1, result) == 0 and list(dirty) == [0, 0, 0]
        assert [(c["kind"], c["node"], c["code"]) for c in fake.calls()] == [
            (SET_PARAMS, 0xA0, 0),
            (SET_PARAMS, 0xA1, 400),
            (SET_PARAMS, 0xA1, 0),
            (SET_PARAMS, 0xA2, 0),
            (GRAPH_LAUNCH, 0, 0),
        ]
    fake.reset()
    fake.fail(GRAPH_LAUNCH, 999)
    assert hot.replay(record, 0, stream, 1, result) == 999
    assert (result.code, result.step, result.node) == (999, STEP_LAUNCH, -1)


# -- prepared launches through the engine ----------------------------------------------------------


def test_prepared_launch_same_calls_both_ways(world: Any, mode: str) -> None:
    from hrx_gpu.cuda.kernel import CudaPreparedDispatch

    fake = world.fake
    fake.reset(widths=(8, 4))
    prepared = CudaPreparedDispatch(world.device, world.exe, (3, 2, 1), (128, 1, 1), [barg(0x4000, 8), np.uint32(9)])  # type: ignore[arg-type]
    launch = prepared.bind(world.queue)
    assert hasattr(launch, "record") == (mode == "compiled")
    launch()
    prepared.set_arg(0, barg(0x8000, 0x40))
    launch()
    prepared.launch(world.queue)  # the unbound path sees the same cell
    calls = fake.calls()
    assert [c["values"] for c in calls] == [(0x4008, 9), (0x8040, 9), (0x8040, 9)]
    for c in calls:
        assert (c["kind"], c["function"], c["grid"], c["block"], c["shared"], c["extra"]) == (
            LAUNCH, 0xF00D, (3, 2, 1), (128, 1, 1), 0, 0
        )
        assert c["stream"] == world.queue.stream_address and c["params"] == calls[0]["params"]
    with pytest.raises(InvalidArgument, match="not a buffer argument"):
        prepared.set_arg(1, barg(0x1))
    assert prepared.args[1] == np.uint32(9)


def test_prepared_launch_set_scalar_same_calls_both_ways(world: Any, mode: str) -> None:
    """set_scalar rewrites the scalar's packed cell in place: the compiled record and
    the Python launcher launch the new value, from the same parameter array."""
    from hrx_gpu.cuda.kernel import CudaPreparedDispatch

    fake = world.fake
    fake.reset(widths=(8, 4))
    prepared = CudaPreparedDispatch(world.device, world.exe, (1, 1, 1), (32, 1, 1), [barg(0x4000), np.uint32(9)])  # type: ignore[arg-type]
    launch = prepared.bind(world.queue)
    launch()
    prepared.set_scalar(1, np.uint32(0xABCD))
    launch()
    prepared.launch(world.queue)
    calls = fake.calls()
    assert [c["values"] for c in calls] == [(0x4000, 9), (0x4000, 0xABCD), (0x4000, 0xABCD)]
    assert calls[0]["params"] == calls[1]["params"] == calls[2]["params"]
    with pytest.raises(InvalidArgument, match="not a scalar argument"):
        prepared.set_scalar(0, np.uint32(1))
    with pytest.raises(InvalidArgument, match="4 bytes, got 8"):
        prepared.set_scalar(1, np.uint64(1))
    assert prepared.args[1] == np.uint32(0xABCD)


def test_prepared_launch_record_scalar_is_copied_into_its_cell(world: Any, mode: str) -> None:
    """A record scalar's bytes go into its cell when set: the caller rewriting its own
    record afterwards changes nothing launched, and args show the cell."""
    from hrx_gpu.cuda.kernel import CudaPreparedDispatch

    pair = np.dtype([("v", np.uint32, (2,))])
    mine = np.zeros((), pair)
    mine["v"] = [1, 2]
    fake = world.fake
    fake.reset(widths=(8, 8))
    prepared = CudaPreparedDispatch(world.device, world.exe, (1, 1, 1), (32, 1, 1), [barg(0x4000), mine[()]])  # type: ignore[arg-type]
    launch = prepared.bind(world.queue)
    launch()
    mine["v"] = [3, 4]
    prepared.set_scalar(1, mine[()])
    mine["v"] = [5, 6]  # after set_scalar: not launched
    launch()
    assert [c["values"] for c in fake.calls()] == [(0x4000, 2 << 32 | 1), (0x4000, 4 << 32 | 3)]
    assert prepared.args[1]["v"].tolist() == [3, 4]


@pytest.mark.parametrize("code,error", [(1, "CudaInvalidArgument"), (700, "CudaError")])
def test_prepared_launch_failure_is_the_same_typed_error(world: Any, mode: str, code: int, error: str) -> None:
    from hrx_gpu.cuda.kernel import CudaPreparedDispatch

    fake = world.fake
    fake.reset()
    launch = CudaPreparedDispatch(world.device, world.exe, (1, 1, 1), (1, 1, 1), [barg(0x4000)]).bind(world.queue)  # type: ignore[arg-type]
    fake.fail(LAUNCH, code)
    with pytest.raises(HRXError) as info:
        launch()
    assert type(info.value).__name__ == error and info.value.call == "cuLaunchKernel" and info.value.code == code
    assert world.queue.name in str(info.value)
    launch()  # the failure was one call's
    assert [c["code"] for c in fake.calls()] == [code, 0]


def test_prepared_launch_retries_after_a_foreign_context_switch(world: Any, mode: str) -> None:
    from hrx_gpu.cuda.kernel import CudaPreparedDispatch

    fake = world.fake
    fake.reset()
    launch = CudaPreparedDispatch(world.device, world.exe, (1, 1, 1), (1, 1, 1), [barg(0x4000)]).bind(world.queue)  # type: ignore[arg-type]
    fake.fail(LAUNCH, 201)  # CUDA_ERROR_INVALID_CONTEXT once
    launch()
    assert [c["code"] for c in fake.calls()] == [201, 0]


# -- graphs through the engine -------------------------------------------------------------------


def _graph(world: Any, count: int = 4) -> Any:
    from hrx_gpu.cuda.graph import CudaGraph

    nodes = [kernel_node(world.exe, 0x10000 * (i + 1), i, (i - 1,) if i else ()) for i in range(count)]
    nodes.append(GraphNode("empty", (count - 1,), {}))
    return CudaGraph(world.device, nodes)  # type: ignore[arg-type]


def _start(world: Any, count: int = 4) -> tuple[Fake, Any]:
    """A fresh graph of ``count`` kernel nodes (+ an empty node) and a cleared call log."""
    graph = _graph(world, count)
    world.fake.reset(widths=(8, 4))
    return world.fake, graph


def _replay_log(fake: Fake) -> list[tuple[Any, ...]]:
    return [(c["kind"], c["node"], c["function"], c["grid"], c["block"], c["values"], c["code"]) for c in fake.calls()]


def test_graph_patch_args_stages_until_launch(world: Any, mode: str) -> None:
    fake = world.fake
    fake.reset(widths=(8, 4))
    graph = _graph(world)
    assert graph.hot_path == (mode == "compiled")
    handles = [int(fake.driver.ffi.cast("uintptr_t", h)) for h in graph._handles]
    built = [c["values"] for c in fake.calls(ADD_KERNEL_NODE)]
    assert built == [(0x10000, 0), (0x20000, 1), (0x30000, 2), (0x40000, 3)]
    fake.reset(widths=(8, 4))
    graph.launch(world.queue)
    assert [c["kind"] for c in fake.calls()] == [GRAPH_LAUNCH]
    fake.reset(widths=(8, 4))
    assert graph.patch_args([(2, 0, barg(0x77000, 0x10)), (0, 0, barg(0x55000))]) is True
    assert fake.calls() == []  # nothing reaches the driver before the launch
    graph.launch(world.queue)
    log = fake.calls()
    assert [(c["kind"], c["node"], c["values"]) for c in log] == [
        (SET_PARAMS, handles[0], (0x55000, 0)),
        (SET_PARAMS, handles[2], (0x77010, 2)),
        (GRAPH_LAUNCH, 0, ()),
    ]
    assert all(c["exec"] == int(fake.driver.ffi.cast("uintptr_t", graph._exec)) for c in log)
    assert log[0]["function"] == 0xF00D and log[0]["grid"] == (2, 3, 4) and log[0]["block"] == (32, 2, 1)
    assert log[-1]["stream"] == world.queue.stream_address
    # a plain replay after it updates nothing
    fake.reset(widths=(8, 4))
    graph.launch(world.queue)
    assert [c["kind"] for c in fake.calls()] == [GRAPH_LAUNCH]
    # the node list reflects the patches
    args = [n.params["args"] for n in graph.nodes[:4]]
    assert [(a[0].buffer.dptr + a[0].offset, int(a[1])) for a in args] == [(0x55000, 0), (0x20000, 1), (0x77010, 2), (0x40000, 3)]
    # two patches of one node before a launch: one update, the last value wins
    fake.reset(widths=(8, 4))
    assert graph.patch_args([(1, 0, barg(0x1000))]) and graph.patch_args([(1, 0, barg(0x2000))])
    graph.launch(world.queue)
    assert [(c["kind"], c["values"]) for c in fake.calls()] == [(SET_PARAMS, (0x2000, 1)), (GRAPH_LAUNCH, ())]
    assert graph.rebuilds == 0
    graph.close()


def test_graph_patch_args_refuses_without_changing_anything(world: Any, mode: str) -> None:
    fake, graph = _start(world)
    bad = [
        [(0, 1, barg(0x1000))],  # a scalar argument
        [(4, 0, barg(0x1000))],  # the empty node
        [(9, 0, barg(0x1000))],  # no such node
        [(0, 5, barg(0x1000))],  # no such argument
        [(-1, 0, barg(0x1000))],
        [(0, -1, barg(0x1000))],
        [(0, 0, np.uint32(3))],  # not a BufferArg
        [(1, 0, barg(0x1000)), (4, 0, barg(0x1000))],  # one good, one bad: neither
    ]
    for patches in bad:
        assert graph.patch_args(patches) is False, patches
    assert graph.patch_args([]) is True
    graph.launch(world.queue)
    assert [c["kind"] for c in fake.calls()] == [GRAPH_LAUNCH]
    assert [n.params["args"][0].buffer.dptr for n in graph.nodes[:4]] == [0x10000, 0x20000, 0x30000, 0x40000]
    graph.close()
    with pytest.raises(InvalidArgument, match="closed"):
        graph.patch_args([(0, 0, barg(0x1000))])


def _stage_entry(graph: Any) -> Any:
    """fast_stage's C entry as the core calls it: stage(prepared, nbytes=None) -> 1 or 0."""
    entry, argument, log, limit, keep = graph.fast_stage()
    assert log is graph._log and limit == graph.LOG_LIMIT and keep is not None
    hffi = graph._hot.ffi
    fn = hffi.cast("int (*)(void *, const void *, size_t)", entry)

    def stage(prepared: Any, nbytes: int | None = None) -> int:
        assert keep is not None  # (keeps the entry's argument alive while it is called)
        data = bytes(prepared)
        return int(fn(hffi.cast("void *", argument), data, len(data) if nbytes is None else nbytes))

    return stage


@pytest.mark.parametrize("via", ["apply_patches", "hrx_graph_stage"])
def test_graph_prepared_patches_stage_like_patch_args(world: Any, mode: str, via: str) -> None:
    """prepare_patches resolves patches once (the core keeps one per rebind record);
    apply_patches -- or fast_stage's C entry, which the core's compiled rebind calls
    with the prepared object's bytes, logging it after -- stages them with the driver
    calls patch_args would give. Prepared patches go stale when a node is repacked or
    the graph rebuilt (False / 0, nothing changed), do not stage past the staging
    capacity, and are not offered without the compiled hot path or for what patch_args
    refuses."""
    fake, graph = _start(world)
    handles = [int(fake.driver.ffi.cast("uintptr_t", h)) for h in graph._handles]
    patches = [(2, 0, barg(0x77000, 0x10)), (0, 0, barg(0x55000))]
    prepared = graph.prepare_patches(patches)
    if mode == "python":
        assert prepared is None and graph.fast_stage() is None
        graph.close()
        return
    assert list(prepared[:2]) == [graph._cells_epoch, 2] and len(prepared) == 2 + 6
    if via == "hrx_graph_stage":
        entry = _stage_entry(graph)

        def apply(p: Any) -> bool:
            if entry(p) != 1:
                return False
            graph._log.append(p)  # (the core's part)
            return True

        graph.apply_patches = apply  # what the rest of the test calls
    assert graph.prepare_patches([(0, 1, barg(0x1000))]) is None  # a scalar argument
    assert graph.prepare_patches([(9, 0, barg(0x1000))]) is None
    assert fake.calls() == []
    assert graph.apply_patches(prepared) is True
    assert fake.calls() == []  # staged until the launch
    graph.launch(world.queue)
    assert [(c["kind"], c["node"], c["values"]) for c in fake.calls()] == [
        (SET_PARAMS, handles[0], (0x55000, 0)),
        (SET_PARAMS, handles[2], (0x77010, 2)),
        (GRAPH_LAUNCH, 0, ()),
    ]
    args = [n.params["args"] for n in graph.nodes[:4]]
    assert [a[0].buffer.dptr + a[0].offset for a in args] == [0x55000, 0x20000, 0x77010, 0x40000]
    # staged past capacity: refused whole (patch_args makes room)
    big = graph.prepare_patches([(1, 0, barg(0x1000))] * (graph._cap + 1))
    assert big is not None and graph.apply_patches(big) is False and graph._record.staged == 0
    # repacked node: stale
    graph.update(1, kernel_node(world.other, 0x70000, 42, (0,)))
    fake.reset(widths=(8, 4))
    assert graph.apply_patches(prepared) is False
    graph.launch(world.queue)
    assert [c["kind"] for c in fake.calls()] == [GRAPH_LAUNCH]
    fresh = graph.prepare_patches([(1, 0, barg(0x71000))])
    assert graph.apply_patches(fresh) is True
    graph.launch(world.queue)
    assert [(c["function"], c["values"]) for c in fake.calls(SET_PARAMS)] == [(0xBEEF, (0x71000, 42))]
    graph.close()
    assert graph.apply_patches(fresh) is False


def test_graph_stage_entry_refuses_malformed_words(world: Any, mode: str) -> None:
    """hrx_graph_stage takes only whole words: the epoch, a count and that many triples."""
    if mode == "python":
        return
    fake, graph = _start(world)
    stage = _stage_entry(graph)
    prepared = graph.prepare_patches([(2, 0, barg(0x77000, 0x10)), (0, 0, barg(0x55000))])
    for nbytes in (0, 8, 17, len(bytes(prepared)) - 8, len(bytes(prepared)) + 8):
        assert stage(prepared, nbytes) == 0 and graph._record.staged == 0
    assert stage(prepared) == 1 and graph._record.staged == 2
    graph.close()


def test_graph_calls_identical_both_ways(fake: Fake, monkeypatch: pytest.MonkeyPatch, hot_cache: Path) -> None:
    """One scenario -- patches, a flush by update(), refusals, rebinding -- twice."""
    from hrx_gpu.cuda.kernel import CudaExecutable
    from hrx_gpu.cuda.queue import CudaQueue

    monkeypatch.setenv("HRX_CACHE_DIR", str(hot_cache))
    logs = {}
    for mode in MODES:
        if not use_mode(monkeypatch, mode):
            pytest.skip("hot path not compiled here")
        device = FakeDevice(fake.driver)
        queue = CudaQueue(device, "compute", 0)  # type: ignore[arg-type]
        ffi = fake.driver.ffi
        exe = CudaExecutable(device, ffi.cast("CUmodule", 1), ffi.cast("CUfunction", 0xF00D), "k", "cuda")  # type: ignore[arg-type]
        world = type("W", (), {"device": device, "queue": queue, "exe": exe})
        fake.reset(widths=(8, 4))
        graph = _graph(world, 6)
        base = fake.lib.fake_count()
        graph.launch(queue)
        for step in range(5):
            graph.patch_args([(i, 0, barg(0x100000 * (step + 1) + i * 0x100)) for i in range(0, 6, 2)])
            graph.launch(queue)
        graph.patch_args([(3, 0, barg(0xAAA000))])
        graph.update(5, kernel_node(exe, 0xBBB000, 77, (4,)))  # flushes node 3 first
        graph.launch(queue)
        graph.patch_args([(5, 0, barg(0xCCC000))])
        graph.launch(queue)
        handles = {int(ffi.cast("uintptr_t", h)): i for i, h in enumerate(graph._handles)}
        logs[mode] = [
            (k, handles.get(n, n), f, g, b, v, code) for (k, n, f, g, b, v, code) in _replay_log(fake)[base:]
        ]
        assert [int(n.params["args"][1]) for n in graph.nodes[:6]] == [0, 1, 2, 3, 4, 77]
        graph.close()
        device.closed = True
    assert logs["compiled"] == logs["python"]
    kinds = [entry[0] for entry in logs["python"]]
    assert kinds.count(GRAPH_LAUNCH) == 8 and kinds.count(SET_PARAMS) == 5 * 3 + 2 + 1


def _programmatic_graph(world: Any, usable: bool) -> tuple[Any, list[int]]:
    """kernel 0 -> empty 1 -> [0, 1] -> programmatic kernel 2 -> kernel 3 -> programmatic kernel 4."""
    from hrx_gpu.cuda.graph import CudaGraph
    from hrx_gpu.cuda.kernel import CudaExecutable

    ffi = world.fake.driver.ffi
    waits = CudaExecutable(world.device, ffi.cast("CUmodule", 0x3002), ffi.cast("CUfunction", 0xCAFE), "w", "cuda")
    waits.programmatic = True
    world.device.programmatic_edges = usable
    world.fake.reset(widths=(8, 4))
    nodes = [kernel_node(world.exe, 0x10000, 0), GraphNode("empty", (0,), {}), kernel_node(waits, 0x20000, 2, (0, 1)),
             kernel_node(world.exe, 0x30000, 3, (2,)), kernel_node(waits, 0x40000, 4, (3,))]
    graph = CudaGraph(world.device, nodes)  # type: ignore[arg-type]
    graph.launch(world.queue)
    return graph, [int(ffi.cast("uintptr_t", h)) for h in graph._handles]


def test_programmatic_kernels_get_programmatic_edges_from_kernels(world: Any) -> None:
    """A kernel declared programmatic (it waits for its predecessors itself) is joined to
    its kernel predecessors by programmatic edges out of their programmatic port, and to
    other nodes by plain dependencies; a kernel that does not wait gets plain ones."""
    graph, h = _programmatic_graph(world, True)
    added = {c["node"]: c["deps"] for c in world.fake.calls(ADD_KERNEL_NODE)}
    edges = [(c["exec"], c["node"], c["edge"]) for c in world.fake.calls(ADD_EDGE)]
    assert added[h[2]] == (h[1],)  # the empty node: plain
    assert added[h[3]] == (h[2],)  # a kernel that does not wait: plain
    assert added[h[4]] == ()
    assert edges == [(h[0], h[2], (1, 1)), (h[3], h[4], (1, 1))]
    graph.close()


def test_programmatic_edges_off_gives_plain_dependencies(world: Any) -> None:
    """Without programmatic edges (compute capability < 9.0, an older driver,
    HRX_CUDA_PDL=0) every dependency is plain."""
    graph, h = _programmatic_graph(world, False)
    added = {c["node"]: c["deps"] for c in world.fake.calls(ADD_KERNEL_NODE)}
    assert world.fake.calls(ADD_EDGE) == []
    assert added[h[2]] == (h[0], h[1]) and added[h[4]] == (h[3],)
    graph.close()


def test_update_that_changes_whether_a_kernel_waits_rebuilds_its_edges(world: Any) -> None:
    """Updating a programmatic kernel node to a kernel that does not wait never keeps
    a programmatic edge into it: the graph is rebuilt with plain dependencies."""
    graph, h = _programmatic_graph(world, True)
    world.fake.reset(widths=(8, 4))
    graph.update(4, kernel_node(world.exe, 0x50000, 5, (3,)))
    new = [int(world.fake.driver.ffi.cast("uintptr_t", x)) for x in graph._handles]
    added = {c["node"]: c["deps"] for c in world.fake.calls(ADD_KERNEL_NODE)}
    assert added[new[4]] == (new[3],)  # rebuilt: plain
    assert [(c["exec"], c["node"]) for c in world.fake.calls(ADD_EDGE)] == [(new[0], new[2])]
    graph.close()


def test_graph_update_flushes_staged_patches_first(world: Any, mode: str) -> None:
    fake = world.fake
    graph = _graph(world)
    handles = [int(fake.driver.ffi.cast("uintptr_t", h)) for h in graph._handles]
    fake.reset(widths=(8, 4))
    graph.patch_args([(1, 0, barg(0x61000))])
    graph.update(1, kernel_node(world.exe, 0x62000, 5, (0,)))  # the same node, later value
    graph.launch(world.queue)
    assert [(c["kind"], c["node"], c["values"]) for c in fake.calls()] == [
        (SET_PARAMS, handles[1], (0x61000, 1)),  # the staged patch, applied first
        (SET_PARAMS, handles[1], (0x62000, 5)),  # then the update (_patch_kernel)
        (GRAPH_LAUNCH, 0, ()),
    ]
    graph.close()


def test_graph_patch_after_update_to_another_kernel_uses_the_new_packing(world: Any, mode: str) -> None:
    """update() to another kernel repacks the node; later patches start from that."""
    fake, graph = _start(world)
    graph.update(2, kernel_node(world.other, 0x70000, 42, (1,)))
    graph.patch_args([(2, 0, barg(0x71000))])
    graph.launch(world.queue)
    sets = fake.calls(SET_PARAMS)
    assert [(c["function"], c["values"]) for c in sets] == [(0xBEEF, (0x70000, 42)), (0xBEEF, (0x71000, 42))]
    # and a rebind through update() with the same kernel patches the same cells
    fake.reset(widths=(8, 4))
    graph.update(2, kernel_node(world.other, 0x72000, 43, (1,)))
    graph.launch(world.queue)
    assert [(c["function"], c["values"]) for c in fake.calls(SET_PARAMS)] == [(0xBEEF, (0x72000, 43))]
    assert graph.rebuilds == 0
    graph.close()


def test_graph_refused_update_at_launch_rebuilds(world: Any, mode: str) -> None:
    fake, graph = _start(world)
    graph.patch_args([(0, 0, barg(0x91000)), (3, 0, barg(0x93000))])
    fake.fail(SET_PARAMS, 1, after=1)  # the driver refuses the second node's update
    graph.launch(world.queue)
    assert graph.rebuilds == 1
    kinds = [c["kind"] for c in fake.calls()]
    assert kinds == [SET_PARAMS, SET_PARAMS] + [ADD_KERNEL_NODE] * 4 + [ADD_OTHER_NODE, INSTANTIATE, GRAPH_LAUNCH]
    rebuilt = [c["values"] for c in fake.calls(ADD_KERNEL_NODE)]
    assert rebuilt == [(0x91000, 0), (0x20000, 1), (0x30000, 2), (0x93000, 3)]
    new_exec = int(fake.driver.ffi.cast("uintptr_t", graph._exec))
    assert fake.calls(GRAPH_LAUNCH)[0]["exec"] == new_exec
    # the rebuilt graph patches as before
    fake.reset(widths=(8, 4))
    graph.patch_args([(1, 0, barg(0x92000))])
    graph.launch(world.queue)
    assert [(c["kind"], c["exec"], c["values"]) for c in fake.calls()] == [
        (SET_PARAMS, new_exec, (0x92000, 1)),
        (GRAPH_LAUNCH, new_exec, ()),
    ]
    graph.close()


def test_graph_sticky_failure_and_launch_failure_are_typed(world: Any, mode: str) -> None:
    from hrx_gpu.cuda.errors import CudaError

    fake, graph = _start(world)
    graph.patch_args([(2, 0, barg(0x91000))])
    fake.fail(SET_PARAMS, 700)  # CUDA_ERROR_ILLEGAL_ADDRESS: sticky
    with pytest.raises(CudaError) as info:
        graph.launch(world.queue)
    assert info.value.sticky and info.value.call == "cuGraphExecKernelNodeSetParams" and "node 2" in str(info.value)
    assert graph.rebuilds == 0 and GRAPH_LAUNCH not in [c["kind"] for c in fake.calls()]
    # the patch is still pending: the next launch applies it
    fake.reset(widths=(8, 4))
    graph.launch(world.queue)
    assert [(c["kind"], c["values"]) for c in fake.calls()] == [(SET_PARAMS, (0x91000, 2)), (GRAPH_LAUNCH, ())]
    fake.reset()
    fake.fail(GRAPH_LAUNCH, 999)
    with pytest.raises(CudaError) as info:
        graph.launch(world.queue)
    assert info.value.call == "cuGraphLaunch" and info.value.code == 999 and world.queue.name in str(info.value)
    fake.reset()
    fake.fail(GRAPH_LAUNCH, 201)  # a foreign context switch: retried once
    graph.launch(world.queue)
    assert [(c["kind"], c["code"]) for c in fake.calls()] == [(GRAPH_LAUNCH, 201), (GRAPH_LAUNCH, 0)]
    fake.reset(widths=(8, 4))
    graph.patch_args([(0, 0, barg(0x94000))])
    fake.fail(SET_PARAMS, 201)
    graph.launch(world.queue)
    assert [(c["kind"], c["code"]) for c in fake.calls()] == [(SET_PARAMS, 201), (SET_PARAMS, 0), (GRAPH_LAUNCH, 0)]
    graph.close()


def _fast_call(graph: Any, queue: Any) -> Any:
    """The graph's hrx_graph_fast entry, called as the core's compiled replay calls it:
    returns (code, info) per call."""
    entry = graph.fast_launch(queue)
    assert entry is not None
    address, argument, on_failure, keep = entry
    ffi = graph._hot.ffi
    fn = ffi.cast("int (*)(void *, long long *)", address)
    arg = ffi.cast("void *", argument)

    def call() -> tuple[int, tuple[int, int]]:
        info = ffi.new("long long[2]", [0, -1])
        return int(fn(arg, info)), (int(info[0]), int(info[1]))

    call.on_failure = on_failure  # type: ignore[attr-defined]
    call.keep = keep  # type: ignore[attr-defined]
    return call


def test_graph_fast_entry_replays_or_does_nothing(world: Any, compiled: Any) -> None:
    """hrx_graph_fast: the calls launch() makes (staged cells, dirty node updates, the
    launch), and nothing (-1) where launch() has something to do first."""
    from hrx_gpu.cuda.hot import STEP_LAUNCH, STEP_SET_PARAMS

    fake, graph = _start(world)
    assert graph.hot_path
    lib, ffi = fake.driver.lib, fake.driver.ffi
    fast = _fast_call(graph, world.queue)
    exec_ = int(ffi.cast("uintptr_t", graph._exec))
    lib.cuCtxSetCurrent(ffi.cast("CUcontext", 0xBAD))  # another context: nothing
    assert fast() == (-1, (0, -1)) and fake.calls() == []
    lib.cuCtxSetCurrent(world.device.ctx)
    assert fast() == (0, (0, -1))
    assert [(c["kind"], c["exec"], c["stream"]) for c in fake.calls()] == [(GRAPH_LAUNCH, exec_, world.queue.stream_address)]
    # staged patches: the fast call writes them, updates their node, launches
    fake.reset(widths=(8, 4))
    assert graph.patch_args([(1, 0, barg(0x71000))]) and graph._record.staged == 1
    assert fast() == (0, (0, -1)) and graph._record.staged == 0
    assert [(c["kind"], c["values"]) for c in fake.calls()] == [(SET_PARAMS, (0x71000, 1)), (GRAPH_LAUNCH, ())]
    fake.reset(widths=(8, 4))
    assert fast() == (0, (0, -1)) and [c["kind"] for c in fake.calls()] == [GRAPH_LAUNCH]
    # staged, then launch() from Python: the same calls
    assert graph.patch_args([(1, 0, barg(0x74000))])
    fake.reset(widths=(8, 4))
    graph.launch(world.queue)
    assert [(c["kind"], c["values"]) for c in fake.calls()] == [(SET_PARAMS, (0x74000, 1)), (GRAPH_LAUNCH, ())]
    # a node update left dirty by a sticky failure is retried by the fast call
    fake.reset(widths=(8, 4))
    graph.patch_args([(2, 0, barg(0x72000))])
    fake.fail(SET_PARAMS, 700)
    with pytest.raises(HRXError):
        graph.launch(world.queue)
    fake.reset(widths=(8, 4))
    assert fast() == (0, (0, -1))
    assert [(c["kind"], c["values"]) for c in fake.calls()] == [(SET_PARAMS, (0x72000, 2)), (GRAPH_LAUNCH, ())]
    # failures: the code with the step and node; the handler raises as launch() would
    fake.reset(widths=(8, 4))
    fake.fail(GRAPH_LAUNCH, 999)
    code, info = fast()
    assert (code, info) == (999, (STEP_LAUNCH, -1))
    with pytest.raises(HRXError, match="cuGraphLaunch"):
        fast.on_failure(code, *info)
    fake.reset(widths=(8, 4))
    graph.patch_args([(0, 0, barg(0x73000))])
    graph.launch(world.queue)  # applied
    graph._record.pending = 1
    graph._dirty[3] = 1
    fake.reset(widths=(8, 4))
    fake.fail(SET_PARAMS, 1)  # refused (not sticky): the handler rebuilds and launches
    code, info = fast()
    assert (code, info) == (1, (STEP_SET_PARAMS, 3))
    fast.on_failure(code, *info)
    assert graph.rebuilds == 1 and fake.calls()[-1]["kind"] == GRAPH_LAUNCH
    # the rebuilt graph's record is the one the entry replays
    fake.reset(widths=(8, 4))
    assert fast() == (0, (0, -1))
    assert fake.calls()[0]["exec"] == int(ffi.cast("uintptr_t", graph._exec)) != exec_
    graph.close()
    fake.reset(widths=(8, 4))
    assert fast() == (-1, (0, -1)) and fake.calls() == []
    assert graph.fast_launch(world.queue) is None


def test_graph_fast_entry_needs_the_hot_path(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HRX_HOT_PATH", "0")
    _fake, graph = _start(world)
    assert not graph.hot_path and graph.fast_launch(world.queue) is None
    graph.close()


def test_dispatch_entry_launches_like_the_python_dispatch(world: Any, compiled: Any) -> None:
    """hrx_dispatch_fast, called as the core's compiled dispatch calls it (argument
    cells it packed, the executable's fast_handle): the cuLaunchKernel the Python
    dispatch makes; nothing (-1) with another context current or when the driver
    answers CUDA_ERROR_INVALID_CONTEXT; a failure's code, which the handler raises."""
    fake, queue, exe = world.fake, world.queue, world.exe
    lib, dffi = fake.driver.lib, fake.driver.ffi
    entry = queue.fast_dispatch()
    assert entry is not None
    address, argument, on_failure, keep, address_attr = entry
    assert address_attr == "dptr" and keep is not None
    assert exe.fast_handle == int(dffi.cast("uintptr_t", exe.function)) == 0xF00D
    ffi = compiled.ffi
    fn = ffi.cast("int (*)(void *, uintptr_t, const unsigned int *, void **)", address)
    arg = ffi.cast("void *", argument)
    cells = ffi.new("uint64_t[3]", [0x7010, 0xDEAD, 0x9000])
    params = ffi.new("void *[3]", [cells + 0, cells + 1, cells + 2])
    dims = ffi.new("unsigned int[6]", [7, 8, 9, 64, 2, 3])

    def call(p: Any = params) -> int:
        return int(fn(arg, exe.fast_handle, dims, p))

    fake.reset(widths=(8, 4, 8))
    lib.cuCtxSetCurrent(dffi.cast("CUcontext", 0xBAD))  # another context: nothing
    assert call() == -1 and fake.calls() == []
    lib.cuCtxSetCurrent(world.device.ctx)
    assert call() == 0
    queue.dispatch(exe, (7, 8, 9), (64, 2, 3), [barg(0x7000, 16), np.uint32(0xDEAD), barg(0x9000)])
    compiled_call, python_call = fake.calls()
    for c in (compiled_call, python_call):
        c.pop("params")  # (the cells live in different places)
    assert compiled_call == python_call
    assert compiled_call["values"] == (0x7010, 0xDEAD, 0x9000) and compiled_call["stream"] == queue.stream_address
    # no arguments: kernelParams NULL, as pack_args gives
    fake.reset()
    assert call(ffi.NULL) == 0
    assert fake.calls()[0]["params"] == 0 and fake.calls()[0]["values"] == ()
    # failures
    fake.reset(widths=(8, 4, 8))
    fake.fail(LAUNCH, 201)  # CUDA_ERROR_INVALID_CONTEXT: the Python dispatch retries it
    assert call() == -1
    fake.fail(LAUNCH, 700)
    code = call()
    assert code == 700
    with pytest.raises(HRXError, match="cuLaunchKernel"):
        on_failure(code)
    # closed: the executable launches from Python only; a copy queue has no entry
    other = world.other
    other.close()
    assert other.fast_handle == 0
    from hrx_gpu.cuda.queue import CudaQueue

    copy = CudaQueue(world.device, "copy", 0)
    assert copy.fast_dispatch() is None


SCALAR_TYPES = (np.int8, np.uint16, np.int32, np.uint64, np.float32, np.float64, np.int64, np.uint8)


def _core_dispatcher(world: Any) -> Any:
    """The core's compiled dispatch (hrx_core.fastpath.Dispatcher) of a host-engine
    stream, launching through this fake-driver queue's hrx_dispatch_fast: what the cuda
    engine gives it, with each host buffer's ``nbytes`` standing in for its device
    address (the cell is that plus the byte offset)."""
    from hrx_core import fastpath
    from hrx_core.buffer import Buffer
    from hrx_core.engine import BufferArg
    from hrx_core.kernel import Kernel

    import hrx_core as hrx

    mod = fastpath.module()
    if not mod.compiled:
        pytest.skip(f"hrx_core.fastpath not built here: {mod.reason}")
    dev = hrx.device("host")
    s = dev.stream()
    kernel = Kernel("packed", buffers=("read", "write", "read_write"), scalars=SCALAR_TYPES, host=lambda *a: None)
    bufs = [dev.allocate(n) for n in (1024, 2048, 4096)]
    s.dispatch(kernel, 1, bufs, scalars=(0,) * len(SCALAR_TYPES))  # loads the kernel, makes the queue
    exe = kernel.executable(dev)
    object.__setattr__(exe, "fast_handle", 0xF00D)
    entry, argument, on_failure, keep, _attr = world.queue.fast_dispatch()
    limits = dev.info.limits
    d = mod.lib.Dispatcher(s.slot, dev, dev.stats, Kernel, Buffer, BufferArg, s.slot._native.dispatch, on_failure,
                           entry, argument, keep, "nbytes", limits.max_grid, limits.max_block, limits.max_threads_per_block)
    assert d.compiled_entry
    world.fake.driver.lib.cuCtxSetCurrent(world.device.ctx)
    return type("Core", (), {"dev": dev, "s": s, "kernel": kernel, "bufs": bufs, "d": d, "keep": keep})


def test_core_dispatch_packs_like_check_scalars(world: Any, compiled: Any) -> None:
    """The core's compiled dispatch packs buffer addresses and scalars into the cells
    hrx_dispatch_fast hands cuLaunchKernel: the bytes Kernel.check_scalars makes, for
    exact ints at the ends of each range, floats, numpy scalars; values it cannot
    convert exactly go to check_scalars, which raises what the Python path raises."""
    core = _core_dispatcher(world)
    fake, s, k, bufs, d = world.fake, core.s, core.kernel, core.bufs, core.d
    widths = (8, 8, 8, 1, 2, 4, 8, 4, 8, 8, 1)
    cases = [
        (-128, 65535, -(2**31), 2**64 - 1, 1.5, -2.25, -(2**63), 255),
        (127, 0, 2**31 - 1, 0, float("nan"), float("inf"), 2**63 - 1, 0),
        (np.int8(-5), np.uint16(7), np.int32(-9), np.uint64(2**63), np.float32(3.4e38), np.float64(1e300), np.int64(-1), np.uint8(9)),
        (1, 2, 3, 4, 1e-50, 5, 6, 7),  # float32 underflows to 0; an int for float64: check_scalars converts
        (1, 2, 3, 4, -3.4028234663852886e38, 1e308, 6, 7),
    ]
    checked = []
    real_check = k.check_scalars
    k.check_scalars = lambda values: checked.append(values) or real_check(values)  # type: ignore[method-assign]
    for i, scalars in enumerate(cases):
        fake.reset(widths=widths)
        hits = d.hits
        c = d(s, k, (2, 3), bufs, (32, 2), scalars)
        assert c is not None and d.hits == hits + 1
        # converted in C, each end of each range included, but for the int given to float64
        assert checked == ([scalars] if i == 3 else []), scalars
        checked.clear()
        (call,) = fake.calls()
        assert call["function"] == 0xF00D and call["grid"] == (2, 3, 1) and call["block"] == (32, 2, 1)
        assert call["values"][:3] == (1024, 2048, 4096)
        expected = real_check(scalars)
        for w, got, want in zip(widths[3:], call["values"][3:], expected):
            assert got.to_bytes(8, "little")[:w] == want.tobytes(), (scalars, want)
    # out of range, bools, float32 overflow, wrong counts: check_scalars raises, nothing launched
    for bad, match in (
        ((128, 0, 0, 0, 0.0, 0.0, 0, 0), "outside the range"),
        ((0, -1, 0, 0, 0.0, 0.0, 0, 0), "outside the range"),
        ((0, 0, 0, -1, 0.0, 0.0, 0, 0), "outside the range"),
        ((0, 0, 0, 2**64, 0.0, 0.0, 0, 0), "outside the range"),
        ((True, 0, 0, 0, 0.0, 0.0, 0, 0), "not a valid"),
        ((0, 0, 0, 0, 1e300, 0.0, 0, 0), "not a valid"),
        ((0, 0, 0, 0, 0.0, 0.0, 0), "takes 8 scalars"),
        ((0, 0, 0, 0, None, 0.0, 0, 0), "not a valid"),
    ):
        fake.reset(widths=widths)
        with pytest.raises(InvalidArgument, match=match):
            d(s, k, 1, bufs, 32, bad)
        assert fake.calls() == []
    # a view: nothing done (the Python path packs its offset)
    fake.reset(widths=widths)
    misses = d.misses
    assert d(s, k, 1, [bufs[0].slice(64, 64), bufs[1], bufs[2]], 32, cases[0]) is None
    assert d.misses == misses + 1 and fake.calls() == []
    # a failed launch: the engine's error, nothing committed
    value = s.slot.pending_value
    fake.reset(widths=widths)
    fake.fail(LAUNCH, 700)
    with pytest.raises(HRXError, match="cuLaunchKernel"):
        d(s, k, 1, bufs, 32, cases[0])
    assert s.slot.pending_value == value and [c["code"] for c in fake.calls()] == [700]
    # another context current: nothing done
    fake.reset(widths=widths)
    fake.driver.lib.cuCtxSetCurrent(fake.driver.ffi.cast("CUcontext", 0xBAD))
    assert d(s, k, 1, bufs, 32, cases[0]) is None and fake.calls() == []
    fake.driver.lib.cuCtxSetCurrent(world.device.ctx)
    s.synchronize(60)


def test_dispatch_entry_needs_the_hot_path(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HRX_HOT_PATH", "0")
    assert world.queue.fast_dispatch() is None


def _timeline(world: Any) -> Any:
    """A CUDA timeline whose counter lives at a fake device address (nothing reads it)."""
    from hrx_gpu.cuda.timeline import CudaTimeline

    class Counters:
        def acquire(self) -> tuple[list[int], int]:
            return [0], 0xC0DE0

    world.device._counters = Counters()
    return CudaTimeline(world.device)


def test_graph_launch_signaled_is_the_replay_then_the_signal(world: Any, mode: str) -> None:
    """One runtime resubmission: staged patches, the launch, then the timeline write on
    the same stream -- one compiled call, or the same driver calls from Python."""
    fake, graph = _start(world)
    tl = _timeline(world)
    graph.patch_args([(1, 0, barg(0x66000))])
    assert graph.launch_signaled(world.queue, tl, 7) is True
    calls = fake.calls()
    assert [(c["kind"], c["values"]) for c in calls] == [(SET_PARAMS, (0x66000, 1)), (GRAPH_LAUNCH, ()), (WRITE_VALUE, (7,))]
    stream = int(fake.driver.ffi.cast("uintptr_t", world.queue.stream))
    assert calls[1]["stream"] == calls[2]["stream"] == stream and calls[2]["node"] == 0xC0DE0
    assert tl.max_signaled == 7 and world.queue in tl._signalers.values()
    fake.reset()
    assert graph.launch_signaled(world.queue, tl, 8) is True
    assert [(c["kind"], c["values"]) for c in fake.calls()] == [(GRAPH_LAUNCH, ()), (WRITE_VALUE, (8,))]
    graph.close()


def test_graph_launch_signaled_failures(world: Any, mode: str) -> None:
    from hrx_gpu.cuda.errors import CudaError

    fake, graph = _start(world)
    tl = _timeline(world)
    fake.fail(GRAPH_LAUNCH, 999)
    with pytest.raises(CudaError) as info:
        graph.launch_signaled(world.queue, tl, 3)
    assert info.value.call == "cuGraphLaunch"
    assert [c["kind"] for c in fake.calls()] == [GRAPH_LAUNCH] and tl.max_signaled == 0  # no signal after a failed launch
    fake.reset()
    fake.fail(GRAPH_LAUNCH, 201)  # a foreign context switch: the launch is retried, then signalled
    assert graph.launch_signaled(world.queue, tl, 3) is True
    assert [(c["kind"], c["code"]) for c in fake.calls()] == [(GRAPH_LAUNCH, 201), (GRAPH_LAUNCH, 0), (WRITE_VALUE, 0)]
    assert tl.max_signaled == 3
    fake.reset()
    fake.fail(WRITE_VALUE, 999)
    if mode == "compiled":
        # launched: the signal is left to the queue, whose own call reports or retries it
        assert graph.launch_signaled(world.queue, tl, 4) is False
        assert tl.max_signaled == 3
        world.queue.signal(tl, 4)
        assert [(c["kind"], c["code"]) for c in fake.calls()] == [(GRAPH_LAUNCH, 0), (WRITE_VALUE, 999), (WRITE_VALUE, 0)]
    else:
        with pytest.raises(CudaError) as info:
            graph.launch_signaled(world.queue, tl, 4)
        assert info.value.call == "cuStreamWriteValue64"
        assert [(c["kind"], c["code"]) for c in fake.calls()] == [(GRAPH_LAUNCH, 0), (WRITE_VALUE, 999)]
    graph.close()
    with pytest.raises(InvalidArgument, match="closed"):
        graph.launch_signaled(world.queue, tl, 5)


def test_graph_many_patches_without_launch(world: Any, mode: str) -> None:
    """Staging overflows its array (applied early) and the patch log folds into nodes."""
    from hrx_gpu.cuda.graph import CudaGraph

    fake = world.fake
    graph = _graph(world, 3)
    fake.reset(widths=(8, 4))
    for i in range(CudaGraph.LOG_LIMIT + 50):
        assert graph.patch_args([(i % 3, 0, barg(0x1000 * (i + 1)))])
    graph.launch(world.queue)
    last = {(i % 3): 0x1000 * (i + 1) for i in range(CudaGraph.LOG_LIMIT + 50)}
    sets = fake.calls(SET_PARAMS)
    final = {}
    for c in sets:
        final[c["node"]] = c["values"][0]
    handles = [int(fake.driver.ffi.cast("uintptr_t", h)) for h in graph._handles]
    assert [final[handles[i]] for i in range(3)] == [last[0], last[1], last[2]]
    assert fake.calls()[-1]["kind"] == GRAPH_LAUNCH
    assert len(graph._log) <= CudaGraph.LOG_LIMIT
    assert [n.params["args"][0].buffer.dptr for n in graph.nodes[:3]] == [last[0], last[1], last[2]]
    # a patch list longer than the staging array
    fake.reset(widths=(8, 4))
    big = [(i % 3, 0, barg(0x5000 + i)) for i in range(200)]
    assert graph.patch_args(big)
    graph.launch(world.queue)
    assert sorted(c["values"][0] for c in fake.calls(SET_PARAMS))[-3:] == [0x5000 + 197, 0x5000 + 198, 0x5000 + 199]
    graph.close()


def test_graph_patches_from_threads_in_turn(world: Any, mode: str) -> None:
    """Launches and patches from several threads (serialized, as the core does)."""
    fake = world.fake
    graph = _graph(world)
    lock = threading.Lock()
    fake.reset(widths=(8, 4))

    def work(k: int) -> None:
        for j in range(50):
            with lock:
                graph.patch_args([(k, 0, barg(0x100000 * (k + 1) + j))])
                graph.launch(world.queue)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    kinds = [c["kind"] for c in fake.calls()]
    assert kinds.count(GRAPH_LAUNCH) == 200 and kinds.count(SET_PARAMS) == 200
    graph.close()


def test_doctor_row_reports_the_hot_path(monkeypatch: pytest.MonkeyPatch, hot_cache: Path) -> None:
    import hrx_gpu.plugin

    monkeypatch.setenv("HRX_CACHE_DIR", str(hot_cache))
    monkeypatch.setenv("HRX_HOT_PATH", "0")
    rows = [r for r in hrx_gpu.plugin.hrx_doctor() if r[1] == "hot path"]
    assert rows == [("cuda", "hot path", "fallback (Python): disabled by HRX_HOT_PATH=0")]
    monkeypatch.delenv("HRX_HOT_PATH")
    (row,) = [r for r in hrx_gpu.plugin.hrx_doctor() if r[1] == "hot path"]
    status = hotpath.load("cuda_hot", *_hot_text()).status
    assert row[2].startswith("compiled" if status["compiled"] else "fallback (Python): ")


# -- on a GPU -------------------------------------------------------------------------------------

ADD_VALUE = r"""
extern "C" __global__ void add_value(unsigned int* x, unsigned int n, unsigned int v) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 3u + v;
}
"""

N = 4096
M = N + 16  # buffers hold 16 more elements: a launch at a 64-byte offset stays inside


def _gpu_kernel(device: Any) -> Any:
    from hrx_gpu.cuda.compilers import compile_cuda

    code, log = compile_cuda(ADD_VALUE, "add_value", device.compile_options("cuda"))
    return device.load_executable(Artifact(target="cuda", entry="add_value", code=code, key="hot-add-value", log=log))


def _gpu_modes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Both ways where the hot path builds here; only the Python one (said) where not."""
    monkeypatch.delenv("HRX_HOT_PATH", raising=False)
    status = hotpath.load("cuda_hot", *_hot_text())
    if not status.compiled:
        print(f"hot path not compiled on this machine ({status.reason}): Python paths only")
        return ["python"]
    return list(MODES)


def _same_both_ways(results: dict[str, Any]) -> Any:
    """The Python paths' results, after checking the compiled ones equal them."""
    if "compiled" in results:
        assert results["compiled"] == results["python"]
    return results["python"]


def _initial() -> list[np.ndarray]:
    return [np.arange(M, dtype=np.uint32) * np.uint32(k + 1) for k in range(4)]


def _f(a: np.ndarray, v: int) -> np.ndarray:
    return a * np.uint32(3) + np.uint32(v)


def _gpu_run(device: Any, body: Any) -> list[bytes]:
    """Run ``body(queue, bufs, sync)`` on four fresh shared buffers; their final bytes."""
    queue = device.create_queue("compute", 0)
    timeline = device.create_timeline()
    value = [0]

    def sync() -> None:
        value[0] += 1
        queue.signal(timeline, value[0])
        assert timeline.wait(value[0], 60) and timeline.error(value[0]) is None

    bufs = []
    for x in _initial():
        buf = device.allocate(M * 4, shared=True)
        buf.host_view()[:] = x.view(np.uint8)
        bufs.append(buf)
    try:
        body(queue, bufs, sync)
        sync()
        return [bytes(b.host_view()) for b in bufs]
    finally:
        queue.close()
        timeline.close()
        for b in bufs:
            b.free()


def _garg(buf: Any, offset: int = 0) -> BufferArg:
    return BufferArg(buf, offset, buf.nbytes - offset, Access.READ_WRITE)


@pytest.mark.gpu
def test_gpu_prepared_launch_and_dispatch_hot_vs_python(cuda_device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _gpu_kernel(cuda_device)
    grid, block = ((N + 255) // 256, 1, 1), (256, 1, 1)
    results = {}
    for mode in _gpu_modes(monkeypatch):
        use_mode(monkeypatch, mode)

        def body(queue: Any, bufs: list[Any], sync: Any, mode: str = mode) -> None:
            prepared = cuda_device.prepare_dispatch(exe, grid, block, [_garg(bufs[0]), np.uint32(N), np.uint32(7)])
            launch = prepared.bind(queue)
            assert hasattr(launch, "record") == (mode == "compiled")
            for _ in range(3):
                launch()
            prepared.set_arg(0, _garg(bufs[1], 64))  # 16 elements in
            launch()
            prepared.launch(queue)  # the unbound path reads the same cell
            sync()
            prepared.set_arg(0, _garg(bufs[2]))
            launch()
            queue.dispatch(exe, grid, block, [_garg(bufs[3]), np.uint32(N), np.uint32(11)])

        results[mode] = _gpu_run(cuda_device, body)
    got = _same_both_ways(results)
    x = _initial()
    for _ in range(3):
        x[0][:N] = _f(x[0][:N], 7)
    for _ in range(2):
        x[1][16:] = _f(x[1][16:], 7)
    x[2][:N] = _f(x[2][:N], 7)
    x[3][:N] = _f(x[3][:N], 11)
    for k in range(4):
        assert np.array_equal(np.frombuffer(got[k], np.uint32), x[k]), k
    exe.close()


@pytest.mark.gpu
def test_gpu_graph_replay_with_rebinding_hot_vs_python(cuda_device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _gpu_kernel(cuda_device)
    grid, block = ((N + 255) // 256, 1, 1), (256, 1, 1)
    results = {}

    def node(buf: Any, v: int, deps: tuple[int, ...]) -> GraphNode:
        return GraphNode("dispatch", deps, {"executable": exe, "grid": grid, "block": block, "args": [_garg(buf), np.uint32(N), np.uint32(v)]})

    for mode in _gpu_modes(monkeypatch):
        use_mode(monkeypatch, mode)

        def body(queue: Any, bufs: list[Any], sync: Any, mode: str = mode) -> None:
            graph = cuda_device.build_graph([node(bufs[0], 1, ()), node(bufs[1], 2, (0,)), node(bufs[0], 3, (1,)), GraphNode("empty", (2,), {})])
            assert graph.hot_path == (mode == "compiled")
            graph.launch(queue)
            graph.launch(queue)
            assert graph.patch_args([(0, 0, _garg(bufs[2])), (2, 0, _garg(bufs[2]))])
            graph.launch(queue)
            assert graph.patch_args([(1, 0, _garg(bufs[3]))])
            graph.launch(queue)
            assert not graph.patch_args([(3, 0, _garg(bufs[3]))])  # the empty node
            graph.update(1, node(bufs[1], 5, (0,)))  # the slow path still works
            graph.launch(queue)
            sync()
            assert graph.rebuilds == 0
            graph.close()

        results[mode] = _gpu_run(cuda_device, body)
    got = _same_both_ways(results)
    x = _initial()
    n = slice(0, N)
    for _ in range(2):  # two plain replays: 0 (+1), 1 (+2), 0 (+3)
        x[0][n] = _f(_f(x[0][n], 1), 3)
        x[1][n] = _f(x[1][n], 2)
    x[2][n] = _f(_f(x[2][n], 1), 3)  # nodes 0 and 2 rebound to buffer 2
    x[1][n] = _f(x[1][n], 2)
    x[2][n] = _f(_f(x[2][n], 1), 3)  # node 1 rebound to buffer 3
    x[3][n] = _f(x[3][n], 2)
    x[2][n] = _f(_f(x[2][n], 1), 3)  # node 1 updated: buffer 1, +5
    x[1][n] = _f(x[1][n], 5)
    for k in range(4):
        assert np.array_equal(np.frombuffer(got[k], np.uint32), x[k]), k
    exe.close()


@pytest.mark.gpu
def test_gpu_core_graph_rebinding_hot_vs_python(cuda_status: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through hrx_core: a recorded graph replayed with rebound inputs, both ways."""
    import hrx_core as hrx

    kernel = hrx.Kernel("add_value", buffers=("read_write",), scalars=(np.uint32, np.uint32), cuda=ADD_VALUE)
    results = {}
    for mode in _gpu_modes(monkeypatch):
        use_mode(monkeypatch, mode)
        dev = hrx.device("cuda")
        s = dev.stream()
        bufs = [dev.allocate(N * 4) for _ in range(4)]
        for k, b in enumerate(bufs):
            s.upload_blocking(b, np.arange(N, dtype=np.uint32) * (k + 1))
        g = s.graph()
        g.input("a", bufs[0])
        g.input("b", bufs[1])
        prev: list[Any] = []
        for i in range(6):
            target = bufs[0] if i % 2 == 0 else bufs[1]
            prev = [g.dispatch(kernel, N // 256, [target], block=256, scalars=(N, i + 1), deps=prev)]
        g.launch().wait()
        for k in range(6):
            g.launch(inputs={"a": bufs[(k + 2) % 4], "b": bufs[(k + 3) % 4]}).wait()
        g.launch(inputs={"a": bufs[0], "b": bufs[1]})
        s.synchronize()
        results[mode] = [s.download(b).tobytes() for b in bufs]
        g.close()
        for b in bufs:
            b.close()
    got = _same_both_ways(results)
    # each replay: input a gets +1, +3, +5 (nodes 0, 2, 4), input b +2, +4, +6
    x = [np.arange(N, dtype=np.uint32) * np.uint32(k + 1) for k in range(4)]
    bound = [(0, 1)] + [((k + 2) % 4, (k + 3) % 4) for k in range(6)] + [(0, 1)]
    for a, b in bound:
        x[a] = _f(_f(_f(x[a], 1), 3), 5)
        x[b] = _f(_f(_f(x[b], 2), 4), 6)
    for k in range(4):
        assert np.array_equal(np.frombuffer(got[k], np.uint32), x[k]), k
