"""hrx-gpu tests that need no GPU: import, probe, hooks, declarations, packing."""

from __future__ import annotations

import pickle
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pluggy
import pytest
from hrx_core import hookspecs
from hrx_core.compiler import Compiler
from hrx_core.engine import Access, BufferArg, EngineStatus, NativeBuffer
from hrx_core.errors import CompileError, DeviceError, EngineNotFound, HRXError, InvalidArgument

PLUGIN_ROOT = Path(__file__).resolve().parents[1]


def test_import_loads_nothing_native() -> None:
    code = (
        "import sys, hrx_gpu, hrx_gpu.plugin, hrx_gpu.cuda.engine, hrx_gpu.cuda.device, hrx_gpu.cuda.graph;"
        "from hrx_gpu.cuda import _driver, _nvrtc;"
        "assert _driver._driver is None and _driver._FFI._ffi is None and _nvrtc._nvrtc is None;"
        "assert 'cffi' not in sys.modules or True;"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_probe_without_driver_reports_reason(no_driver: None) -> None:
    from hrx_gpu.cuda.engine import CudaEngine

    engine = CudaEngine()
    assert engine.name == "cuda" and engine.priority == 100
    status = engine.probe()
    assert isinstance(status, EngineStatus)
    assert status.available is False
    assert status.reason.startswith("/nonexistent/libcuda.so.1 not found")
    assert status.device_count == 0
    # A second probe answers from the cached failure, still without raising.
    assert engine.probe() == status


def test_open_device_without_driver(no_driver: None) -> None:
    from hrx_gpu.cuda.engine import CudaEngine

    with pytest.raises(EngineNotFound, match="not found"):
        CudaEngine().open_device(0)


def test_open_device_rejects_unknown_options() -> None:
    from hrx_gpu.cuda.engine import CudaEngine

    with pytest.raises(InvalidArgument, match="unknown colour"):
        CudaEngine().open_device(0, colour="blue")
    with pytest.raises(InvalidArgument, match="stream_memops"):
        CudaEngine().open_device(0, stream_memops="yes")
    with pytest.raises(InvalidArgument, match="max_transfer_bytes"):
        CudaEngine().open_device(0, max_transfer_bytes=0)
    with pytest.raises(InvalidArgument, match="compute_queues"):
        CudaEngine().open_device(0, compute_queues=True)


def test_prepare_without_driver(no_driver: None) -> None:
    from hrx_gpu.cuda.engine import CudaEngine

    lines = CudaEngine().prepare()
    assert len(lines) == 1 and lines[0].startswith("cuda: unavailable")


def test_driver_cdef_parses_with_exact_layouts() -> None:
    from hrx_gpu.cuda import _driver

    ffi = _driver.get_ffi()
    assert ffi.sizeof("CUdeviceptr") == 8
    assert ffi.sizeof("CUDA_MEMCPY3D") == 200
    assert ffi.offsetof("CUDA_MEMCPY3D", "srcMemoryType") == 32
    assert ffi.offsetof("CUDA_MEMCPY3D", "srcDevice") == 48
    assert ffi.offsetof("CUDA_MEMCPY3D", "dstXInBytes") == 88
    assert ffi.offsetof("CUDA_MEMCPY3D", "dstDevice") == 136
    assert ffi.offsetof("CUDA_MEMCPY3D", "WidthInBytes") == 176
    assert ffi.sizeof("CUDA_KERNEL_NODE_PARAMS") == 72
    assert ffi.offsetof("CUDA_KERNEL_NODE_PARAMS", "sharedMemBytes") == 32
    assert ffi.offsetof("CUDA_KERNEL_NODE_PARAMS", "kernelParams") == 40
    assert ffi.offsetof("CUDA_KERNEL_NODE_PARAMS", "ctx") == 64
    assert ffi.sizeof("CUDA_MEMSET_NODE_PARAMS") == 40
    assert ffi.offsetof("CUDA_MEMSET_NODE_PARAMS", "value") == 16
    assert ffi.offsetof("CUDA_MEMSET_NODE_PARAMS", "width") == 24


def test_nvrtc_cdef_parses() -> None:
    from hrx_gpu.cuda import _nvrtc

    ffi = _nvrtc.get_ffi()
    assert ffi.typeof("nvrtcProgram").kind == "pointer"


def test_nvrtc_missing_is_a_compile_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from hrx_gpu.cuda import _nvrtc, compilers

    monkeypatch.setattr(_nvrtc, "candidates", lambda: iter(["/nonexistent/libnvrtc.so.13"]))
    _nvrtc.reset_for_tests()
    try:
        with pytest.raises(CompileError, match="libnvrtc not found"):
            compilers.compile_cuda('extern "C" __global__ void k() {}', "k", ("--gpu-architecture=sm_90",))
    finally:
        _nvrtc.reset_for_tests()


def test_architecture_option_parsing() -> None:
    from hrx_gpu.cuda._nvrtc import architecture

    assert architecture(["--std=c++17"]) is None
    assert architecture(["--gpu-architecture=sm_90", "--std=c++17"]) == "sm_90"
    assert architecture(["-arch=compute_80"]) == "compute_80"
    assert architecture(["-arch", "sm_86"]) == "sm_86"
    assert architecture(["--gpu-architecture", "sm_75", "-arch=sm_90"]) == "sm_90"


def test_plugin_hooks_through_pluggy(no_driver: None) -> None:
    import hrx_gpu.plugin
    from hrx_gpu.amdgpu.engine import AmdgpuEngine
    from hrx_gpu.cuda.engine import CudaEngine

    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(hrx_gpu.plugin)
    engines = [e for group in pm.hook.hrx_engines() for e in group]
    assert [type(e) for e in engines] == [CudaEngine, AmdgpuEngine]
    compilers = {c.target: c for group in pm.hook.hrx_compilers() for c in group}
    assert set(compilers) == {"cuda", "ptx", "cubin", "gfx1151"}  # gfx1151: hrx_gpu.amdgpu.compiler
    assert all(isinstance(c, Compiler) and c.persistent for c in compilers.values())
    salt = compilers["cuda"].salt()
    assert "nvrtc=" in salt and "driver=none" in salt
    rows = [r for group in pm.hook.hrx_doctor() for r in group]
    assert rows and all(len(r) == 3 and all(isinstance(x, str) for x in r) for r in rows)
    assert rows[0][:2] == ("cuda", "unavailable") and "not found" in rows[0][2]


def test_passthrough_compilers() -> None:
    from hrx_gpu.cuda.compilers import compile_cubin, compile_ptx

    assert compile_ptx(".version 8.0\n", "k", ()) == (b".version 8.0\n", "")
    assert compile_ptx(b".version 8.0\n", "k", ()) == (b".version 8.0\n", "")
    with pytest.raises(CompileError):
        compile_ptx(3, "k", ())
    assert compile_cubin(b"\x7fELF....", "k", ()) == (b"\x7fELF....", "")
    with pytest.raises(CompileError):
        compile_cubin(".version 8.0", "k", ())
    with pytest.raises(CompileError):
        compile_cubin(b"not a cubin", "k", ())


def test_pyproject_declares_entry_point() -> None:
    data = tomllib.loads((PLUGIN_ROOT / "pyproject.toml").read_text())
    assert data["build-system"]["build-backend"] == "setuptools.build_meta"
    assert data["project"]["name"] == "hrx-gpu"
    assert data["project"]["requires-python"] == ">=3.11"
    deps = " ".join(data["project"]["dependencies"])
    assert "hrx-core" in deps and "cffi>=1.15" in deps and "numpy" in deps
    assert data["project"]["entry-points"]["hrx"] == {"cuda": "hrx_gpu.plugin"}
    assert (PLUGIN_ROOT / "hrx_gpu" / "py.typed").is_file()


def test_module_image_tagging() -> None:
    from hrx_gpu.cuda import image

    cubin = b"\x7fELF" + bytes(range(40))
    tagged = image.tag(cubin, "_Z7add_onePjj")
    assert image.untag(tagged) == (cubin, "_Z7add_onePjj")
    assert image.untag(cubin) == (cubin, None)
    assert image.loadable(cubin) == cubin
    assert image.loadable(".version 8.0") == b".version 8.0\0"
    assert image.loadable(b".version 8.0\0") == b".version 8.0\0"


class _FakeBuffer(NativeBuffer):
    nbytes = 1024

    def host_view(self) -> np.ndarray | None:
        return None

    def pointer(self) -> int | None:
        return 0x10000

    def free(self) -> None:
        pass


def test_pack_args_layout() -> None:
    from hrx_gpu.cuda import _driver
    from hrx_gpu.cuda.kernel import pack_args

    ffi = _driver.get_ffi()
    args = [BufferArg(_FakeBuffer(), 16, 64, Access.READ_WRITE), np.uint32(7), np.float32(1.5), np.int64(-3)]
    params, keep = pack_args(ffi, args)
    assert ffi.cast("unsigned long long *", params[0])[0] == 0x10010
    assert ffi.cast("unsigned int *", params[1])[0] == 7
    assert ffi.cast("float *", params[2])[0] == 1.5
    assert ffi.cast("long long *", params[3])[0] == -3
    # each scalar's storage is exactly its size (the graph rebind fast path compares it)
    assert [ffi.sizeof(k) for k in keep[1:4]] == [4, 4, 8]
    assert pack_args(ffi, [])[0] == ffi.NULL
    with pytest.raises(InvalidArgument, match=r"args\[0\]"):
        pack_args(ffi, [7])


def test_error_mapping() -> None:
    from hrx_gpu.cuda.errors import CudaError, CudaInvalidArgument, CudaOutOfMemory, make_error

    oom = make_error(2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "cuMemAlloc", "1024 bytes")
    assert isinstance(oom, CudaOutOfMemory) and isinstance(oom, DeviceError) and isinstance(oom, MemoryError)
    assert "out of memory" in str(oom) and "cuMemAlloc" in str(oom)
    assert oom.cuda_error == "CUDA_ERROR_OUT_OF_MEMORY" and oom.call == "cuMemAlloc" and oom.code == 2

    bad = make_error(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuLaunchKernel")
    assert isinstance(bad, CudaInvalidArgument) and isinstance(bad, InvalidArgument) and isinstance(bad, DeviceError)
    res = make_error(701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources", "cuLaunchKernel")
    assert isinstance(res, InvalidArgument)
    assert not isinstance(make_error(701, "X", "y", "cuMemcpyAsync"), InvalidArgument)

    trap = make_error(719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", "cuStreamQuery")
    assert type(trap) is CudaError and trap.sticky and "CUDA_ERROR_LAUNCH_FAILED" in str(trap)
    assert isinstance(trap, HRXError)
    # The core re-raises recorded failures as type(error)(*error.args); pickling works too.
    again = type(trap)(*trap.args)
    assert str(again) == str(trap)
    copy = pickle.loads(pickle.dumps(trap))
    assert copy.cuda_error == trap.cuda_error and copy.call == trap.call and copy.code == 719


def test_mapped_kernels_ptx_text() -> None:
    from hrx_gpu.cuda.mapped import ptx_for

    ptx = ptx_for(9, 0)
    assert ".target sm_75" in ptx and ".version 6.3" in ptx
    for entry in ("hrx_copy16", "hrx_copy1", "hrx_fill1"):
        assert f".visible .entry {entry}(" in ptx
    assert ptx.count("{") == ptx.count("}")
    assert ".target sm_61" in ptx_for(6, 1)


def test_deferred_release_waits_for_idle_queues() -> None:
    """cuMemFree synchronizes the device: releases wait until the queues are idle."""
    import threading
    from types import SimpleNamespace

    from hrx_gpu.cuda.device import DEFERRED_LIMIT, CudaDevice

    freed: list[tuple[str, int]] = []

    class Lib:
        def cuMemFree_v2(self, handle: int) -> int:
            freed.append(("device", handle))
            return 0

        def cuMemFreeHost(self, handle: int) -> int:
            freed.append(("pinned", handle))
            return 0

    queue = SimpleNamespace(closed=False, state=600)  # CUDA_ERROR_NOT_READY: busy
    queue.query = lambda: queue.state
    device = object.__new__(CudaDevice)
    device.__dict__.update(
        _lock=threading.Lock(),
        _deferred_lock=threading.RLock(),
        _deferred=[],
        _deferred_bytes=0,
        driver=SimpleNamespace(lib=Lib()),
        closed=True,  # keeps __del__ from touching the fake
        _live_queues=lambda: [queue],
        _activate=lambda: None,
    )
    device.release_memory("device", 1, 100)
    assert freed == [] and device.deferred_bytes == 100
    queue.state = 0  # idle
    device.release_memory("pinned", 2, 10)
    assert freed == [("device", 1), ("pinned", 2)] and device.deferred_bytes == 0
    queue.state = 600
    device.release_memory("device", 3, DEFERRED_LIMIT + 1)  # too much held back: release now
    assert freed[-1] == ("device", 3)
    device.release_memory("device", 4, 8)
    assert device.reclaim() == 0 and device.reclaim(force=True) == 1 and freed[-1] == ("device", 4)


def test_kernel_argument_limit_by_driver_and_architecture() -> None:
    """32764 bytes of kernel parameters need a CUDA 12.1 driver and Volta or newer;
    anything else takes 4096."""
    from hrx_gpu.cuda.device import max_kernel_arg_bytes

    assert max_kernel_arg_bytes(13000, 9) == max_kernel_arg_bytes(12010, 7) == 32764
    assert max_kernel_arg_bytes(12000, 9) == max_kernel_arg_bytes(12040, 6) == 4096


def test_a_recorded_failure_sets_the_c_flag_before_the_counter_moves() -> None:
    """CudaTimeline._fail: the compiled paths read c_failed after c_completed, so the
    flag must be set before the counter is advanced past the failed work."""
    import ctypes
    import threading

    from hrx_gpu.cuda.timeline import CudaTimeline

    counter = np.zeros(1, np.uint64)
    tl = CudaTimeline.__new__(CudaTimeline)
    flag = np.zeros(1, np.uint64)
    seen: list[tuple[int, int]] = []

    class Counter:
        def __getitem__(self, i: int) -> int:
            return int(counter[i])

        def __setitem__(self, i: int, v: int) -> None:
            seen.append((int(flag[0]), v))
            counter[i] = v

    import array

    tl._counter, tl._lock, tl._failure, tl.max_signaled = Counter(), threading.Lock(), None, 7
    tl._failed_word = array.array("Q", [0])
    tl.c_failed = tl._failed_word.buffer_info()[0]
    flag = np.frombuffer(tl._failed_word, np.uint64)
    counter[0] = 3
    tl._fail(DeviceError("sticky"))  # type: ignore[arg-type]
    assert seen == [(1, 7)] and ctypes.c_uint64.from_address(tl.c_failed).value == 1
    assert tl.has_errors() and tl._last_good == 3
