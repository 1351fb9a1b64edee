"""The CUDA sources of the image kernels, compiled for the CPU: the host engine's
fast path.

Each kernel's CUDA C++ is compiled once with the system C++ compiler under a small
prelude that maps the CUDA spellings to plain C++ (``__fmul_rn(a, b)`` is ``a * b``
and so on; ``-ffp-contract=off`` keeps every product and sum separately rounded) and
replaces the grid-stride loop by a contiguous share of the outputs per worker
thread. On x86-64 and AArch64 float arithmetic is IEEE single precision with round to
nearest even, as on the GPU, so the host engine runs the very source the GPU runs --
and the tests check it byte for byte against the numpy kernels in :mod:`.host`,
which remain the fallback where no compiler exists (or ``HRX_IMAGE_NATIVE=0``).

The library is built by :mod:`hrx_core.native` (the one way HRX builds host code) and
cached under the HRX cache directory, keyed by the sources, flags and compiler; ctypes
releases the GIL during each call.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from hrx_core import native as native_build

PRELUDE = r"""
#include <math.h>
#include <stdint.h>
struct hrx_dim3 { unsigned int x, y, z; };
static const hrx_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
struct uint2 { unsigned int x, y; };  // CUDA's vector types, without alignment promises:
struct uint4 { unsigned int x, y, z, w; };  // the loads compile to unaligned moves
static thread_local unsigned long long hrx_worker = 0, hrx_workers = 1;
static thread_local unsigned int hrx_lanes = 1;
// ``lanes`` > 1 runs the warp-lane loops of kernels that have them (patchify) with that
// many lanes one after another: the tests emulate the GPU's 32 lanes with it
extern "C" void hrx_image_set_worker(unsigned long long worker, unsigned long long workers, unsigned int lanes) {
    hrx_worker = worker;
    hrx_workers = workers;
    hrx_lanes = lanes ? lanes : 1;
}
// worker w of n takes rows [rows*w/n, rows*(w+1)/n) of all images, whole rows each
#define HRX_FOR_EACH_PIXEL(b, y, x, nb, ny, nx) \
    for (unsigned long long hrx_r = (nb) * (ny) * hrx_worker / hrx_workers, \
             hrx_rend = (nb) * (ny) * (hrx_worker + 1) / hrx_workers; hrx_r < hrx_rend; ++hrx_r) \
        for (unsigned long long b = hrx_r / (ny), y = hrx_r % (ny), x = 0; x < (nx); ++x)
// the same share of (plane, row) pairs for kernels that loop over planes, then rows
#define HRX_PATCH_LO(np, ny) ((np) * (ny) * hrx_worker / hrx_workers)
#define HRX_PATCH_HI(np, ny) ((np) * (ny) * (hrx_worker + 1) / hrx_workers)
#define HRX_PATCH_PLANES(plane, np, ny) \
    for (unsigned long long plane = HRX_PATCH_LO(np, ny) / (ny); plane * (ny) < HRX_PATCH_HI(np, ny); ++plane)
#define HRX_PATCH_ROWS(y, plane, np, ny) \
    for (unsigned long long y = HRX_PATCH_LO(np, ny) > (plane) * (ny) ? HRX_PATCH_LO(np, ny) - (plane) * (ny) : 0; \
         y < (ny) && (plane) * (ny) + y < HRX_PATCH_HI(np, ny); ++y)
#define HRX_LANE_FIRST 0u
#define HRX_LANE_END hrx_lanes
#define HRX_LANES hrx_lanes
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static thread_local
#define __restrict__ __restrict
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline void __syncthreads() {}
"""

FLAGS = ("-O3", "-ffp-contract=off", "-fno-fast-math", "-w", "-std=c++14")


def _cpu_flags() -> tuple[str, ...]:
    """SSE4.1 where the CPU has it: floorf/rintf become one instruction (same results)."""
    try:
        with open("/proc/cpuinfo") as f:
            return ("-msse4.1",) if " sse4_1 " in f.read() else ()
    except OSError:
        return ()
#: Outputs below this many bytes of buffers run on one thread.
PARALLEL_BYTES = 1 << 16

_CTYPES = {np.dtype(np.uint32): ctypes.c_uint32, np.dtype(np.int32): ctypes.c_int32,
           np.dtype(np.uint64): ctypes.c_uint64, np.dtype(np.float32): ctypes.c_float}

_lock = threading.Lock()
_libs: dict[tuple[str, ...], Any] = {}
_failed: dict[tuple[str, ...], str] = {}
log = logging.getLogger("hrx.kernels")
_pool: ThreadPoolExecutor | None = None


def compiler() -> str | None:
    """The C++ compiler :mod:`hrx_core.native` runs (``CXX``, else ``c++``/``g++``/``clang++``)."""
    return native_build.compiler_path("c++")


def source(sources: Sequence[str]) -> str:
    """One translation unit: the prelude, then each CUDA source in its own namespace."""
    return PRELUDE + "".join(f"namespace hrx_k{i} {{\n{s}\n}}\n" for i, s in enumerate(sources))


def build(sources: Sequence[str], folder: Path) -> ctypes.CDLL:
    """Compile ``sources`` into a shared library in ``folder`` (cached by content and
    compiler) with :func:`hrx_core.native.build_shared`."""
    if compiler() is None:
        raise OSError("no C++ compiler (CXX, c++, g++ or clang++) found")
    text = source(sources)
    flags = (*FLAGS, *_cpu_flags())
    key = native_build.cache_key(text, language="c++", flags=flags)[:16]
    lib = Path(folder) / f"hrx_image_{key}.so"
    if not lib.exists():
        native_build.build_shared(text, lib, language="c++", flags=flags)
    return ctypes.CDLL(str(lib))


def library(sources: Sequence[str]) -> Any:
    """The compiled library for ``sources`` (None where it cannot be built)."""
    key = tuple(sources)
    lib = _libs.get(key)
    if lib is not None or key in _failed:
        return lib
    with _lock:
        if key not in _libs and key not in _failed:
            if os.environ.get("HRX_IMAGE_NATIVE", "1") == "0":
                _failed[key] = "disabled by HRX_IMAGE_NATIVE=0"
            else:
                try:
                    _libs[key] = build(sources, native_build.cache_root())
                except Exception as exc:  # noqa: BLE001 - no compiler: the numpy kernels serve
                    _failed[key] = f"{type(exc).__name__}: {exc}"
            if key in _failed:  # said once per set of sources
                disabled = _failed[key].startswith("disabled")
                log.log(logging.INFO if disabled else logging.WARNING,
                        "hrx_image: the host engine's compiled image kernels (%s) are unavailable (%s); "
                        "the numpy kernels run instead (same results, slower)",
                        ", ".join(entries(sources)) or "none", " ".join(_failed[key].split())[:500])
    return _libs.get(key)


def entries(sources: Sequence[str]) -> list[str]:
    """The kernel names (``extern "C" __global__`` functions) defined in ``sources``."""
    return [m for s in sources for m in re.findall(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)', s)]


def status(sources: Sequence[str]) -> tuple[str, str]:
    """``("compiled", library path)`` or ``("numpy fallback", reason)`` (builds on first call)."""
    lib = library(sources)
    return ("compiled", str(lib._name)) if lib is not None else ("numpy fallback", _failed[tuple(sources)])


def why_unavailable(sources: Sequence[str]) -> str | None:
    library(sources)
    return _failed.get(tuple(sources))


def run(lib: Any, entry: str, buffers: Sequence[np.ndarray], scalars: Sequence[Any], threads: int | None = None,
        lanes: int = 1) -> None:
    """Call ``entry`` over numpy buffers and numpy-typed scalars, split across threads
    (``lanes``: emulated warp lanes of kernels that loop over lanes, for tests)."""
    global _pool
    fn = getattr(lib, entry)
    fn.restype = None
    args: list[object] = [ctypes.c_void_p(b.ctypes.data) for b in buffers]
    args += [_CTYPES[np.asarray(s).dtype](s.item() if hasattr(s, "item") else s) for s in scalars]
    if threads is None:
        threads = (os.cpu_count() or 1) if sum(b.nbytes for b in buffers) >= PARALLEL_BYTES else 1
    set_worker = lib.hrx_image_set_worker
    set_worker.restype = None

    def part(w: int) -> None:
        set_worker(ctypes.c_ulonglong(w), ctypes.c_ulonglong(threads), ctypes.c_uint(lanes))
        fn(*args)

    if threads <= 1:
        part(0)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="hrx-image")
    futures = [_pool.submit(part, w) for w in range(1, threads)]
    part(0)
    for f in futures:
        f.result()
