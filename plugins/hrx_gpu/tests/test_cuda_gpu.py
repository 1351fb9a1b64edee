"""GPU tests of the cuda engine through the seam (skipped where the engine is unavailable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hrx_core.engine import Access, Artifact, BufferArg, GraphNode
from hrx_core.errors import CompileError, DeviceError, HRXError, InvalidArgument, Unsupported

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda_status")]

ADD_ONE = r"""
extern "C" __global__ void add_one(unsigned int* x, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1u;
}
"""

ADD_VALUE_CPP = r"""
__global__ void add_value(unsigned int* x, unsigned int n, unsigned int v) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}
"""

TRAP = r"""
extern "C" __global__ void boom(unsigned int* x) {
    if (threadIdx.x == 0) asm volatile("trap;");
    x[threadIdx.x] = 1u;
}
"""


class Runner:
    """A queue and its timeline; ``sync()`` signals the next value and waits for it."""

    def __init__(self, device, family: str = "compute", index: int = 0) -> None:  # type: ignore[no-untyped-def]
        self.queue = device.create_queue(family, index)
        self.timeline = device.create_timeline()
        self.value = 0

    def sync(self, timeout: float = 30.0) -> None:
        self.value += 1
        self.queue.signal(self.timeline, self.value)
        self.queue.submit()
        assert self.timeline.wait(self.value, timeout)
        assert self.timeline.completed() >= self.value
        assert self.timeline.error(self.value) is None

    def close(self) -> None:
        self.queue.close()
        self.timeline.close()


@pytest.fixture
def runner(cuda_device):  # type: ignore[no-untyped-def]
    r = Runner(cuda_device)
    yield r
    r.close()


def compile_kernel(device, source: str, entry: str, options: tuple[str, ...] = ()) -> Artifact:  # type: ignore[no-untyped-def]
    from hrx_gpu.cuda.compilers import compile_cuda

    code, log = compile_cuda(source, entry, tuple(options) + device.compile_options("cuda"))
    return Artifact(target="cuda", entry=entry, code=code, key=f"test-{entry}", log=log)


def u32_buffer(device, values: np.ndarray):  # type: ignore[no-untyped-def]
    buf = device.allocate(values.nbytes, shared=True)
    buf.host_view()[:] = values.view(np.uint8)
    return buf


def arg(buf, offset: int = 0, length: int | None = None) -> BufferArg:  # type: ignore[no-untyped-def]
    return BufferArg(buf, offset, buf.nbytes - offset if length is None else length, Access.READ_WRITE)


# -- identity -------------------------------------------------------------------------------


def test_probe_and_info(cuda_engine, cuda_status, cuda_device) -> None:  # type: ignore[no-untyped-def]
    assert cuda_status.available and cuda_status.device_count >= 1
    info = cuda_device.info
    assert info.engine == "cuda" and info.kind == "gpu" and info.index == 0
    assert info.memory_bytes > 1 << 30
    compute, copy = info.queue_families
    assert (compute.name, compute.count) == ("compute", 8)
    assert copy.name == "copy" and copy.count >= 1 and copy.operations == frozenset({"copy", "fill"})
    assert info.limits.max_transfer_bytes == 1 << 32 and info.limits.alignment == 256
    assert info.limits.max_block[0] >= 1024 and info.limits.max_grid[0] >= 65535
    assert info.targets == ("cuda", "cubin", "ptx")
    assert info.native_graphs and info.coherent_shared_memory and not info.host_mappable
    assert info.dlpack_device_type == 2
    props = info.properties
    for key in ("compute_capability", "multiprocessors", "copy_engines", "driver_version", "l2_bytes", "pci_bus_id",
                "memory_bandwidth"):
        assert key in props, key
    # peak bytes a second from the memory clock and bus width, 0 where not reported
    assert props["memory_bandwidth"] == 0 or 1e11 < props["memory_bandwidth"] < 1e14
    major, minor = props["compute_capability"].split(".")
    assert cuda_device.compile_options("cuda") == (f"--gpu-architecture=sm_{major}{minor}", "--std=c++17")
    assert cuda_device.compile_options("ptx") == ()
    print("device:", info.name, dict(props), "stream_memops:", cuda_device.stream_memops)
    assert cuda_device.mapped.usable, cuda_device.mapped.error


def test_device_options(cuda_engine) -> None:  # type: ignore[no-untyped-def]
    device = cuda_engine.open_device(0, max_transfer_bytes=4096, compute_queues=2, copy_queues=1)
    try:
        assert device.info.limits.max_transfer_bytes == 4096
        assert [(f.name, f.count) for f in device.info.queue_families] == [("compute", 2), ("copy", 1)]
        with pytest.raises(InvalidArgument):
            device.create_queue("compute", 2)
    finally:
        device.close()
    with pytest.raises(InvalidArgument):
        cuda_engine.open_device(0, max_transfer_bytes=(1 << 32) + 1)
    with pytest.raises(InvalidArgument):
        cuda_engine.open_device(99)


def test_doctor_rows_on_gpu() -> None:
    from hrx_gpu.cuda.doctor import rows

    table = rows()
    items = [r[1] for r in table]
    assert "driver" in items and "device 0" in items and "nvrtc" in items, table
    print(table)


# -- memory -------------------------------------------------------------------------------


def test_allocate_and_free(cuda_device) -> None:  # type: ignore[no-untyped-def]
    plain = cuda_device.allocate(1 << 20)
    assert plain.host_view() is None and plain.nbytes == 1 << 20
    assert plain.pointer() and plain.pointer() % 256 == 0
    shared = cuda_device.allocate(4096, shared=True)
    view = shared.host_view()
    assert view is not None and view.dtype == np.uint8 and view.shape == (4096,) and view.flags.writeable
    assert shared.pointer() and shared.pointer() % 256 == 0
    view[:] = 7
    plain.free()
    plain.free()  # exactly once, even if asked twice
    shared.free()
    shared.free()


def test_out_of_memory_is_typed(cuda_device) -> None:  # type: ignore[no-untyped-def]
    from hrx_gpu.cuda.errors import CudaOutOfMemory

    with pytest.raises(CudaOutOfMemory) as info:
        cuda_device.allocate(1 << 50)
    assert isinstance(info.value, DeviceError)
    assert "out of memory" in str(info.value) and info.value.call == "cuMemAlloc"
    assert info.value.cuda_error == "CUDA_ERROR_OUT_OF_MEMORY"


def test_copy_h2d_d2d_d2h(cuda_device, runner) -> None:  # type: ignore[no-untyped-def]
    n = (1 << 20) + 123
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, n, dtype=np.uint8)
    src = cuda_device.allocate(n, shared=True)
    src.host_view()[:] = data
    d1 = cuda_device.allocate(n)
    d2 = cuda_device.allocate(n + 512)
    dst = cuda_device.allocate(n, shared=True)
    dst.host_view()[:] = 0
    q = runner.queue
    q.copy(src, 0, d1, 0, n)  # H2D
    q.copy(d1, 0, d2, 512, n)  # D2D at an offset
    q.copy(d2, 512, dst, 0, n)  # D2H
    runner.sync()
    assert np.array_equal(dst.host_view(), data)
    # host to host through pinned memory, partial range
    q.copy(src, 100, dst, 7, 1000)
    dst.host_view()[:7] = 0
    runner.sync()
    assert np.array_equal(dst.host_view()[7:1007], data[100:1100])
    for b in (src, d1, d2, dst):
        b.free()


@pytest.mark.parametrize("size", [1, 2, 4])
@pytest.mark.parametrize("shared", [False, True])
def test_fill_patterns(cuda_device, runner, size: int, shared: bool) -> None:  # type: ignore[no-untyped-def]
    nbytes = 4096
    buf = cuda_device.allocate(nbytes, shared=shared)
    out = cuda_device.allocate(nbytes, shared=True)
    pattern = bytes([0xA1, 0xB2, 0xC3, 0xD4][:size])
    q = runner.queue
    q.fill(buf, 0, nbytes, b"\0" * size)
    offset, length = size * 3, size * 101
    q.fill(buf, offset, length, pattern)
    q.copy(buf, 0, out, 0, nbytes)
    runner.sync()
    expected = np.zeros(nbytes, np.uint8)
    expected[offset : offset + length] = np.frombuffer(pattern * (length // size), np.uint8)
    assert np.array_equal(out.host_view(), expected)
    buf.free()
    out.free()


def test_copy_queue_family(cuda_device) -> None:  # type: ignore[no-untyped-def]
    r = Runner(cuda_device, "copy", 0)
    try:
        src = u32_buffer(cuda_device, np.arange(256, dtype=np.uint32))
        dst = cuda_device.allocate(1024, shared=True)
        r.queue.fill(dst, 0, 1024, b"\xff\xff\xff\xff")
        r.queue.copy(src, 0, dst, 0, 512)
        r.sync()
        got = dst.host_view().view(np.uint32)
        assert np.array_equal(got[:128], np.arange(128)) and np.all(got[128:] == 0xFFFFFFFF)
        exe = cuda_device.load_executable(compile_kernel(cuda_device, ADD_ONE, "add_one"))
        with pytest.raises(Unsupported):
            r.queue.dispatch(exe, (1, 1, 1), (32, 1, 1), [arg(dst), np.uint32(32)])
        with pytest.raises(InvalidArgument):
            cuda_device.create_queue("copy", 99)
        with pytest.raises(InvalidArgument):
            cuda_device.create_queue("npu", 0)
    finally:
        r.close()


# -- timelines ------------------------------------------------------------------------------


def _cross_stream(device, wait_before_signal: bool = True) -> None:  # type: ignore[no-untyped-def]
    a = Runner(device, "compute", 1)
    b = Runner(device, "copy", 0)
    try:
        gate = device.create_timeline()
        done = device.create_timeline()
        assert gate.completed() == 0 and done.completed() == 0
        assert gate.wait(1, 0.01) is False  # timeout, nothing signalled
        src = device.allocate(4096, shared=True)
        dst = device.allocate(4096, shared=True)
        src.host_view()[:] = 0
        dst.host_view()[:] = 0
        if wait_before_signal:
            a.queue.wait(gate, 1)  # a: wait for b's fill, then copy
            a.queue.copy(src, 0, dst, 0, 4096)
            a.queue.signal(done, 1)
            time.sleep(0.05)
            assert done.completed() == 0, "queue a ran past its wait"
            b.queue.fill(src, 0, 4096, b"\x5a")
            b.queue.signal(gate, 1)
        else:
            # Without stream memory operations a wait is encoded against the event of
            # an already encoded signal (see hrx_gpu.cuda.queue).
            b.queue.fill(src, 0, 4096, b"\x5a")
            b.queue.signal(gate, 1)
            a.queue.wait(gate, 1)
            a.queue.copy(src, 0, dst, 0, 4096)
            a.queue.signal(done, 1)
        assert done.wait(1, 30)
        assert gate.completed() == 1 and done.completed() == 1
        assert np.all(dst.host_view() == 0x5A)
        # a wait on a value already reached encodes nothing and does not block
        a.queue.wait(gate, 1)
        a.sync()
        src.free()
        dst.free()
        gate.close()
        done.close()
    finally:
        a.close()
        b.close()


def test_timeline_cross_stream(cuda_device) -> None:  # type: ignore[no-untyped-def]
    _cross_stream(cuda_device)


def test_timeline_c_words_follow_the_counter_and_move_to_its_snapshot_at_close(cuda_device) -> None:  # type: ignore[no-untyped-def]
    """c_completed is the pinned counter the stream writes; at close the timeline's
    counter becomes a host snapshot (the pinned slot is recycled) and c_completed (and
    the spin's address) name the snapshot, never the recycled slot."""
    import ctypes

    r = Runner(cuda_device)
    try:
        tl = r.timeline
        pinned = tl.c_completed
        assert pinned and ctypes.c_uint64.from_address(tl.c_failed).value == 0
        r.sync()
        r.sync()
        assert ctypes.c_uint64.from_address(pinned).value == tl.completed() == 2
        tl.close()
        assert tl.c_completed != pinned and tl._address == tl.c_completed
        assert ctypes.c_uint64.from_address(tl.c_completed).value == tl.completed() == 2
        r.timeline = cuda_device.create_timeline()  # (Runner.close closes its own)
    finally:
        r.close()


def test_timeline_waits_from_other_threads(cuda_device) -> None:  # type: ignore[no-untyped-def]
    r = Runner(cuda_device, "compute", 2)
    results: list[object] = []
    try:
        waiter = threading.Thread(target=lambda: results.append(r.timeline.wait(5, 30)))
        waiter.start()
        time.sleep(0.02)

        def encode() -> None:  # a fresh thread: its context is made current on first use
            buf = cuda_device.allocate(1 << 16, shared=True)
            for v in range(1, 6):
                r.queue.fill(buf, 0, 1 << 16, bytes([v]))
                r.queue.signal(r.timeline, v)
            results.append(buf)

        t = threading.Thread(target=encode)
        t.start()
        t.join(30)
        waiter.join(30)
        assert results[0] is True or results[1] is True
        buf = next(x for x in results if not isinstance(x, bool))
        assert np.all(buf.host_view() == 5)  # type: ignore[union-attr]
        assert r.timeline.completed() == 5
        buf.free()  # type: ignore[union-attr]
    finally:
        r.close()


def test_fallback_without_stream_memops(cuda_engine) -> None:  # type: ignore[no-untyped-def]
    device = cuda_engine.open_device(0, stream_memops=False)
    try:
        assert device.stream_memops is False
        _cross_stream(device, wait_before_signal=False)
    finally:
        device.close()


# -- kernels ----------------------------------------------------------------------------------


def test_nvrtc_add_one_and_prepared_dispatch(cuda_device, runner) -> None:  # type: ignore[no-untyped-def]
    n = 10_000
    art = compile_kernel(cuda_device, ADD_ONE, "add_one")
    assert art.code[:4] == b"\x7fELF"  # CUBIN for the device's sm_XX
    exe = cuda_device.load_executable(art)
    assert exe.name == "add_one" and exe.target == "cuda"
    buf = u32_buffer(cuda_device, np.arange(n, dtype=np.uint32))
    grid, block = ((n + 255) // 256, 1, 1), (256, 1, 1)
    runner.queue.dispatch(exe, grid, block, [arg(buf), np.uint32(n)])
    runner.sync()
    assert np.array_equal(buf.host_view().view(np.uint32), np.arange(n) + 1)
    prepared = cuda_device.prepare_dispatch(exe, grid, block, [arg(buf), np.uint32(n)])
    for _ in range(10):
        prepared.launch(runner.queue)
    runner.sync()
    assert np.array_equal(buf.host_view().view(np.uint32), np.arange(n) + 11)
    # device memory and a buffer offset
    dev = cuda_device.allocate(n * 4)
    runner.queue.copy(buf, 0, dev, 0, n * 4)
    runner.queue.dispatch(exe, grid, block, [arg(dev, 400), np.uint32(n - 100)])
    runner.queue.copy(dev, 0, buf, 0, n * 4)
    runner.sync()
    expected = np.arange(n) + 11
    expected[100:] += 1
    assert np.array_equal(buf.host_view().view(np.uint32), expected)
    exe.close()
    exe.close()
    buf.free()
    dev.free()


def test_mangled_entry_and_compile_cache(cuda_device, runner, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from hrx_core.compiler import CompileCache
    from hrx_gpu.cuda.compilers import compilers

    monkeypatch.setenv("HRX_CACHE_DIR", str(tmp_path))
    table = {c.target: c for c in compilers()}
    cache = CompileCache()
    options = cuda_device.compile_options("cuda")
    art = cache.compile(table, ADD_VALUE_CPP, target="cuda", entry="add_value", options=options)
    assert art.code.startswith(b"HRXCUMOD")  # tagged with the mangled name
    again = CompileCache().compile(table, ADD_VALUE_CPP, target="cuda", entry="add_value", options=options)
    assert again.code == art.code  # from the disk cache
    exe = cuda_device.load_executable(art)
    buf = u32_buffer(cuda_device, np.zeros(64, np.uint32))
    runner.queue.dispatch(exe, (1, 1, 1), (64, 1, 1), [arg(buf), np.uint32(64), np.uint32(5)])
    runner.sync()
    assert np.all(buf.host_view().view(np.uint32) == 5)
    buf.free()


def test_ptx_target(cuda_device, runner) -> None:  # type: ignore[no-untyped-def]
    from hrx_gpu.cuda.compilers import compile_cuda, compile_ptx

    arch = cuda_device.info.properties["arch"].replace("sm_", "compute_")
    ptx, _ = compile_cuda(ADD_ONE, "add_one", (f"--gpu-architecture={arch}",))
    assert b".entry add_one" in ptx
    code, _ = compile_ptx(ptx.rstrip(b"\0").decode(), "add_one", ())
    exe = cuda_device.load_executable(Artifact(target="ptx", entry="add_one", code=code, key="ptx"))
    buf = u32_buffer(cuda_device, np.zeros(32, np.uint32))
    runner.queue.dispatch(exe, (1, 1, 1), (32, 1, 1), [arg(buf), np.uint32(32)])
    runner.sync()
    assert np.all(buf.host_view().view(np.uint32) == 1)
    buf.free()


def test_compile_error_carries_log(cuda_device) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CompileError) as info:
        compile_kernel(cuda_device, 'extern "C" __global__ void broken(int* x) { x[0] = undefined_name; }', "broken")
    assert "undefined_name" in info.value.log and "error" in info.value.log
    with pytest.raises(CompileError):
        compile_kernel(cuda_device, ADD_ONE, "no_such_kernel")


def test_missing_symbol_and_bad_target(cuda_device) -> None:  # type: ignore[no-untyped-def]
    art = compile_kernel(cuda_device, ADD_ONE, "add_one")
    with pytest.raises(DeviceError, match="other"):
        cuda_device.load_executable(Artifact(target="cubin", entry="other", code=art.code, key="x"))
    with pytest.raises(Unsupported):
        cuda_device.load_executable(Artifact(target="host", entry="add_one", code=art.code, key="x"))


def test_invalid_launch_config_is_typed(cuda_device, runner) -> None:  # type: ignore[no-untyped-def]
    from hrx_gpu.cuda.errors import CudaError

    exe = cuda_device.load_executable(compile_kernel(cuda_device, ADD_ONE, "add_one"))
    buf = u32_buffer(cuda_device, np.zeros(32, np.uint32))
    with pytest.raises(InvalidArgument) as info:
        runner.queue.dispatch(exe, (1, 1, 1), (4096, 1, 1), [arg(buf), np.uint32(32)])
    assert isinstance(info.value, HRXError) and isinstance(info.value, CudaError)
    assert info.value.call == "cuLaunchKernel" and info.value.cuda_error.startswith("CUDA_ERROR_")
    prepared = cuda_device.prepare_dispatch(exe, (1, 1, 1), (2048, 1, 1), [arg(buf), np.uint32(32)])
    with pytest.raises(InvalidArgument):
        prepared.launch(runner.queue)
    # not sticky: the device still works
    runner.queue.dispatch(exe, (1, 1, 1), (32, 1, 1), [arg(buf), np.uint32(32)])
    runner.sync()
    assert np.all(buf.host_view().view(np.uint32) == 1)
    buf.free()


TRAP_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    from hrx_core.engine import Access, Artifact, BufferArg
    from hrx_core.errors import DeviceError
    from hrx_gpu.cuda.engine import CudaEngine
    from hrx_gpu.cuda.compilers import compile_cuda

    result = {}
    engine = CudaEngine()
    dev = engine.open_device(0)
    code, _ = compile_cuda(sys.argv[1], "boom", dev.compile_options("cuda"))
    exe = dev.load_executable(Artifact(target="cuda", entry="boom", code=code, key="boom"))
    q = dev.create_queue("compute", 0)
    other = dev.create_queue("compute", 1)
    tl = dev.create_timeline()
    tl2 = dev.create_timeline()
    buf = dev.allocate(4096)
    q.dispatch(exe, (1, 1, 1), (32, 1, 1), [BufferArg(buf, 0, 4096, Access.WRITE)])
    q.signal(tl, 1)
    other.wait(tl, 1)
    other.signal(tl2, 1)
    t0 = time.monotonic()
    try:
        tl.wait(1, 60)
        result["wait"] = "returned"
    except DeviceError as exc:
        result["wait"] = "DeviceError"
        result["cuda_error"] = getattr(exc, "cuda_error", "")
        result["message"] = str(exc)[:300]
    result["seconds"] = round(time.monotonic() - t0, 3)
    result["error_recorded"] = repr(tl.error(1))[:200]
    result["completed_advanced"] = tl.completed() >= 1
    try:
        tl2.wait(1, 60)
        result["second_wait"] = "returned"
    except DeviceError as exc:
        result["second_wait"] = "DeviceError"
    result["device_failure"] = dev.failure is not None
    try:
        dev.reset()
        dev2 = engine.open_device(0)
        q2 = dev2.create_queue("compute", 0)
        t3 = dev2.create_timeline()
        b = dev2.allocate(64, shared=True)
        q2.fill(b, 0, 64, b"\\x07")
        q2.signal(t3, 1)
        result["recovered"] = bool(t3.wait(1, 30) and np.all(b.host_view() == 7))
        dev2.close()
    except Exception as exc:
        result["recovered"] = f"{type(exc).__name__}: {exc}"[:300]
    dev.close()
    dev.close()
    print("RESULT " + json.dumps(result))
    """
)


def test_trap_raises_device_error_not_hang(cuda_status) -> None:  # type: ignore[no-untyped-def]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, "-c", TRAP_SCRIPT, TRAP], capture_output=True, text=True, timeout=180, env=env, check=False
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, f"rc={out.returncode}\n{out.stdout}\n{out.stderr}"
    result = json.loads(lines[-1][len("RESULT ") :])
    print(result)
    assert result["wait"] == "DeviceError", result
    assert result["cuda_error"].startswith("CUDA_ERROR_"), result
    assert result["seconds"] < 30
    assert result["error_recorded"] != "None"
    assert result["completed_advanced"] is True
    assert result["second_wait"] == "DeviceError"
    assert result["device_failure"] is True
    # reset() then reopening either works or raises a typed error (never a crash).
    assert result["recovered"] is True or "CUDA_ERROR_" in result["recovered"], result


# -- graphs -------------------------------------------------------------------------------------


def test_native_graph_build_launch_update(cuda_device, runner) -> None:  # type: ignore[no-untyped-def]
    n = 4096
    exe = cuda_device.load_executable(compile_kernel(cuda_device, ADD_ONE, "add_one"))
    a = cuda_device.allocate(n * 4)
    b = cuda_device.allocate(n * 4, shared=True)
    c = cuda_device.allocate(n * 4, shared=True)
    b.host_view()[:] = 0
    c.host_view()[:] = 0
    grid, block = ((n + 255) // 256, 1, 1), (256, 1, 1)
    nodes = [
        GraphNode("fill", (), {"dst": a, "offset": 0, "nbytes": n * 4, "pattern": np.uint32(7).tobytes()}),
        GraphNode("copy", (0,), {"src": a, "src_offset": 0, "dst": b, "dst_offset": 0, "nbytes": n * 4}),
        GraphNode("dispatch", (1,), {"executable": exe, "grid": grid, "block": block, "args": [arg(b), np.uint32(n)]}),
        GraphNode("empty", (2,), {}),
    ]
    graph = cuda_device.build_graph(nodes)
    graph.launch(runner.queue)
    runner.sync()
    assert np.all(b.host_view().view(np.uint32) == 8)
    graph.launch(runner.queue)  # replay
    runner.sync()
    assert np.all(b.host_view().view(np.uint32) == 8)
    # patch the fill pattern
    graph.update(0, GraphNode("fill", (), {"dst": a, "offset": 0, "nbytes": n * 4, "pattern": np.uint32(41).tobytes()}))
    graph.launch(runner.queue)
    runner.sync()
    assert np.all(b.host_view().view(np.uint32) == 42)
    # retarget the copy and the kernel to c
    graph.update(1, GraphNode("copy", (0,), {"src": a, "src_offset": 0, "dst": c, "dst_offset": 0, "nbytes": n * 4}))
    graph.update(
        2,
        GraphNode("dispatch", (1,), {"executable": exe, "grid": grid, "block": block, "args": [arg(c), np.uint32(n)]}),
    )
    b.host_view()[:] = 0
    graph.launch(runner.queue)
    runner.sync()
    assert np.all(c.host_view().view(np.uint32) == 42) and np.all(b.host_view() == 0)
    print("graph rebuilds:", graph.rebuilds)
    with pytest.raises(InvalidArgument):
        graph.update(3, GraphNode("fill", (2,), {"dst": a, "offset": 0, "nbytes": 4, "pattern": b"\0"}))
    with pytest.raises(InvalidArgument):
        cuda_device.build_graph([GraphNode("copy", (1,), {})])
    graph.close()
    graph.close()
    for x in (a, b, c):
        x.free()


def test_native_graph_fill_and_copy_on_shared_memory(cuda_device, runner) -> None:  # type: ignore[no-untyped-def]
    s = cuda_device.allocate(1024, shared=True)
    t = cuda_device.allocate(1024, shared=True)
    s.host_view()[:] = 0
    t.host_view()[:] = 0
    nodes = [
        GraphNode("fill", (), {"dst": s, "offset": 256, "nbytes": 512, "pattern": b"\x11\x22"}),
        GraphNode("copy", (0,), {"src": s, "src_offset": 0, "dst": t, "dst_offset": 0, "nbytes": 1024}),
    ]
    graph = cuda_device.build_graph(nodes)
    graph.launch(runner.queue)
    runner.sync()
    expected = np.zeros(1024, np.uint8)
    expected[256:768] = np.frombuffer(b"\x11\x22" * 256, np.uint8)
    assert np.array_equal(t.host_view(), expected)
    print("graph modes:", graph.modes, "memset node on host:", cuda_device.memset_node_on_host)
    assert graph.modes[1] == "copy-kernel"
    graph.close()
    s.free()
    t.free()


# -- foreign memory -----------------------------------------------------------------------------


def test_wrap_external_torch(cuda_device, runner) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    tensor = torch.arange(1024, dtype=torch.int32, device="cuda") * 3
    wrapped = cuda_device.wrap_external(tensor)
    assert wrapped is not None
    buf, nbytes = wrapped
    assert nbytes == 4096 and buf.nbytes == 4096 and buf.pointer() == tensor.data_ptr()
    out = cuda_device.allocate(4096, shared=True)
    runner.queue.copy(buf, 0, out, 0, 4096)
    exe = cuda_device.load_executable(compile_kernel(cuda_device, ADD_ONE, "add_one"))
    runner.queue.dispatch(exe, (4, 1, 1), (256, 1, 1), [arg(buf), np.uint32(1024)])
    runner.sync()
    assert np.array_equal(out.host_view().view(np.int32), np.arange(1024) * 3)
    assert torch.equal(tensor.cpu(), torch.arange(1024, dtype=torch.int32) * 3 + 1)
    buf.free()  # not freed: torch owns it
    assert int(tensor[5]) == 16
    assert cuda_device.wrap_external(torch.zeros(4)) is None  # CPU tensor
    assert cuda_device.wrap_external(object()) is None
    with pytest.raises(InvalidArgument, match="contiguous"):
        cuda_device.wrap_external(torch.zeros((8, 8), device="cuda")[:, ::2])
    out.free()


def test_wrap_external_cupy(cuda_device, runner) -> None:  # type: ignore[no-untyped-def]
    cp = pytest.importorskip("cupy")
    array = cp.arange(2048, dtype=cp.uint32)
    wrapped = cuda_device.wrap_external(array)
    assert wrapped is not None
    buf, nbytes = wrapped
    assert nbytes == 8192 and buf.pointer() == array.data.ptr
    out = cuda_device.allocate(8192, shared=True)
    runner.queue.fill(buf, 0, 4096, b"\x01\x00\x00\x00")
    runner.queue.copy(buf, 0, out, 0, 8192)
    runner.sync()
    expected = np.arange(2048, dtype=np.uint32)
    expected[:1024] = 1
    assert np.array_equal(out.host_view().view(np.uint32), expected)
    assert np.array_equal(cp.asnumpy(array), expected)
    buf.free()
    out.free()


# -- lifetime -----------------------------------------------------------------------------------


def test_close_is_idempotent(cuda_engine) -> None:  # type: ignore[no-untyped-def]
    device = cuda_engine.open_device(0)
    queue = device.create_queue("compute", 0)
    timeline = device.create_timeline()
    buf = device.allocate(1024)
    shared = device.allocate(1024, shared=True)
    view = shared.host_view()
    queue.fill(buf, 0, 1024, b"\x01")
    queue.signal(timeline, 1)
    queue.close()
    queue.close()
    assert timeline.completed() == 1  # close drained the stream
    timeline.close()
    timeline.close()
    device.close()  # frees the live buffers
    device.close()
    assert buf.freed and shared.freed
    buf.free()
    del view


def test_prepare_lines(cuda_engine, cuda_status) -> None:  # type: ignore[no-untyped-def]
    lines = cuda_engine.prepare()
    assert any("ready" in line for line in lines), lines
    assert any("NVRTC" in line for line in lines), lines
    print(lines)


def test_launch_overhead_report(cuda_status) -> None:  # type: ignore[no-untyped-def]
    """Prints raw cffi cuLaunchKernel vs prepared launch vs dispatch (no threshold)."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "launch_overhead.py"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert out.returncode == 0, out.stderr
    print(out.stdout)
