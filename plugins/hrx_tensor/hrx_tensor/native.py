"""A native BF16 GEMV for the host engine, compiled once through cffi.

numpy has no BF16 arithmetic, so the pure-numpy path widens the weights to F32 in
passes (4 bytes of traffic per weight and more). This C kernel reads each BF16 weight
once (2 bytes), widens it in registers and accumulates in F32; rows are split across
threads (cffi releases the GIL during the call). It is compiled on first use with the
system C compiler into the HRX cache directory, keyed by the source, the flags and
the Python ABI; if no compiler is available, :func:`gemv` returns None and callers use
the numpy path. ``HRX_TENSOR_NATIVE=0`` disables it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import sysconfig
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

C_SOURCE = r"""
#include <stdint.h>
#include <string.h>

static inline float hrx_bf16(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* y[n] = sum_k bf16(w[n, k]) * x[k] for rows [n0, n1); k is a multiple of 16.
   Four rows at a time share each load of x; 16 independent F32 partial sums per row
   let the compiler vectorize without reassociating (no -ffast-math). */
void hrx_gemv_bf16(const uint16_t *w, const float *x, float *y, int64_t n0, int64_t n1, int64_t k) {
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        const uint16_t *r0 = w + n * k, *r1 = r0 + k, *r2 = r1 + k, *r3 = r2 + k;
        float a0[16] = {0}, a1[16] = {0}, a2[16] = {0}, a3[16] = {0};
        for (int64_t i = 0; i < k; i += 16) {
            for (int j = 0; j < 16; ++j) {
                float xv = x[i + j];
                a0[j] += hrx_bf16(r0[i + j]) * xv;
                a1[j] += hrx_bf16(r1[i + j]) * xv;
                a2[j] += hrx_bf16(r2[i + j]) * xv;
                a3[j] += hrx_bf16(r3[i + j]) * xv;
            }
        }
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        for (int j = 0; j < 16; ++j) {
            s0 += a0[j]; s1 += a1[j]; s2 += a2[j]; s3 += a3[j];
        }
        y[n] = s0; y[n + 1] = s1; y[n + 2] = s2; y[n + 3] = s3;
    }
    for (; n < n1; ++n) {
        const uint16_t *row = w + n * k;
        float acc[16] = {0};
        for (int64_t i = 0; i < k; i += 16) {
            for (int j = 0; j < 16; ++j) {
                acc[j] += hrx_bf16(row[i + j]) * x[i + j];
            }
        }
        float s = 0.0f;
        for (int j = 0; j < 16; ++j) {
            s += acc[j];
        }
        y[n] = s;
    }
}
"""

CDEF = "void hrx_gemv_bf16(const uint16_t *w, const float *x, float *y, int64_t n0, int64_t n1, int64_t k);"

_lock = threading.Lock()
_module: Any = None
_failed: str | None = None
_pool: ThreadPoolExecutor | None = None


def _flags() -> list[str]:
    flags = ["-O3"]
    try:
        with open("/proc/cpuinfo") as f:
            cpu = f.read()
        if " avx2 " in cpu and " fma " in cpu:
            flags += ["-mavx2", "-mfma"]
    except OSError:
        pass
    return flags


def _build() -> Any:
    import cffi

    from hrx_core.compiler import cache_dir

    flags = _flags()
    key = hashlib.sha256("\0".join([C_SOURCE, CDEF, *flags, sysconfig.get_config_var("EXT_SUFFIX") or "", sys.version]).encode()).hexdigest()[:16]
    name = f"_hrx_tensor_native_{key}"
    folder = cache_dir() / "host-native"
    folder.mkdir(parents=True, exist_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = folder / f"{name}{suffix}"
    if not path.exists():
        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        ffi.set_source(name, C_SOURCE, extra_compile_args=flags)
        built = ffi.compile(tmpdir=str(folder))
        if os.path.abspath(built) != str(path):
            os.replace(built, path)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def available() -> bool:
    """True if the native kernel is (or can be) built here."""
    return _load() is not None


def why_unavailable() -> str | None:
    _load()
    return _failed


def _load() -> Any:
    global _module, _failed
    if _module is not None or _failed is not None:
        return _module
    with _lock:
        if _module is None and _failed is None:
            if os.environ.get("HRX_TENSOR_NATIVE", "1") == "0":
                _failed = "disabled by HRX_TENSOR_NATIVE=0"
            else:
                try:
                    _module = _build()
                except Exception as exc:  # no compiler, no cffi: the numpy path serves
                    _failed = f"{type(exc).__name__}: {exc}"
    return _module


def gemv(w: np.ndarray, x: np.ndarray, y: np.ndarray, n: int, k: int) -> bool:
    """y[:n] = bf16 weights w (n*k uint16) times x (k float32); False if unavailable."""
    global _pool
    module = _load()
    if module is None:
        return False
    ffi, lib = module.ffi, module.lib
    wp = ffi.cast("const uint16_t *", w.ctypes.data)
    xp = ffi.cast("const float *", x.ctypes.data)
    yp = ffi.cast("float *", y.ctypes.data)
    threads = max(1, min(os.cpu_count() or 1, n // 64))
    if threads == 1:
        lib.hrx_gemv_bf16(wp, xp, yp, 0, n, k)
        return True
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="hrx-gemv")
    step = -(-n // threads)
    futures = [_pool.submit(lib.hrx_gemv_bf16, wp, xp, yp, s, min(n, s + step), k) for s in range(step, n, step)]
    lib.hrx_gemv_bf16(wp, xp, yp, 0, min(n, step), k)
    for f in futures:
        f.result()
    return True
