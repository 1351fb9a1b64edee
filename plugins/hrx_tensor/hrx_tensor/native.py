"""Native helpers compiled once through cffi: the host engine's BF16 GEMV, and the
index copy of gather_rows (every engine).

numpy has no BF16 arithmetic, so the pure-numpy path widens the weights to F32 in
passes (4 bytes of traffic per weight and more). This C kernel reads each BF16 weight
once (2 bytes), widens it in registers and accumulates in F32; rows are split across
threads (cffi releases the GIL during the call). It is a cffi extension built on first
use by :func:`hrx_core.hotpath.load` (the system C compiler, through
:mod:`hrx_core.native`) into the HRX cache directory, keyed by the source, the flags and
the Python ABI; if no compiler is available, :func:`gemv` returns False and callers use
the numpy path. ``HRX_TENSOR_NATIVE=0`` (or ``HRX_HOT_PATH=0``) disables it.
"""

from __future__ import annotations

import logging
import os
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

/* y[n] = sum_k bf16(w[n, k]) * x[k] for rows [n0, n1); any k (a tail of k % 16
   columns is summed last). Four rows at a time share each load of x; 16 independent
   F32 partial sums per row let the compiler vectorize without reassociating (no
   -ffast-math). */
void hrx_gemv_bf16(const uint16_t *w, const float *x, float *y, int64_t n0, int64_t n1, int64_t k) {
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        const uint16_t *r0 = w + n * k, *r1 = r0 + k, *r2 = r1 + k, *r3 = r2 + k;
        float a0[16] = {0}, a1[16] = {0}, a2[16] = {0}, a3[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            for (int j = 0; j < 16; ++j) {
                float xv = x[i + j];
                a0[j] += hrx_bf16(r0[i + j]) * xv;
                a1[j] += hrx_bf16(r1[i + j]) * xv;
                a2[j] += hrx_bf16(r2[i + j]) * xv;
                a3[j] += hrx_bf16(r3[i + j]) * xv;
            }
        }
        for (int j = 0; i + j < k; ++j) {  /* the tail: one more partial sum each */
            float xv = x[i + j];
            a0[j] += hrx_bf16(r0[i + j]) * xv;
            a1[j] += hrx_bf16(r1[i + j]) * xv;
            a2[j] += hrx_bf16(r2[i + j]) * xv;
            a3[j] += hrx_bf16(r3[i + j]) * xv;
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
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            for (int j = 0; j < 16; ++j) {
                acc[j] += hrx_bf16(row[i + j]) * x[i + j];
            }
        }
        for (int j = 0; i + j < k; ++j) {
            acc[j] += hrx_bf16(row[i + j]) * x[i + j];
        }
        float s = 0.0f;
        for (int j = 0; j < 16; ++j) {
            s += acc[j];
        }
        y[n] = s;
    }
}
"""

CDEF = """
void hrx_gemv_bf16(const uint16_t *w, const float *x, float *y, int64_t n0, int64_t n1, int64_t k);
"""

INDEX_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* copy(src, dst, rows[, dst_width]): copy the indices of ``src`` (a C-contiguous one-dimensional
   int64 or int32 buffer) into ``dst`` (writable bytes, 8 a index: int64; or 4 with
   dst_width 4: uint32, for tables of at most 2**32 rows) and check
   every one against ``rows`` in the same pass (viewed as unsigned, a negative index
   is out of range too): True if all are in range, False if not (``dst`` then holds
   garbage), None if ``src`` is not such a buffer (the caller copies it). The GIL is
   kept: a call of a microsecond that released it could wait a whole switch interval
   (5 ms) to get it back from another Python thread. */
static PyObject *copy_indices(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "copy(src, dst, rows[, dst_width])");
        return NULL;
    }
    unsigned long long rows = PyLong_AsUnsignedLongLong(args[2]);
    if (rows == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    long out_width = nargs == 4 ? PyLong_AsLong(args[3]) : 8;
    if (out_width == -1 && PyErr_Occurred())
        return NULL;
    if (out_width != 8 && !(out_width == 4 && rows <= 4294967296ull)) {
        PyErr_SetString(PyExc_ValueError, "dst_width: 8, or 4 for at most 2**32 rows");
        return NULL;
    }
    Py_buffer src, dst;
    if (PyObject_GetBuffer(args[0], &src, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const char *f = src.format != NULL ? src.format : "B";
    if (*f == '@' || *f == '=')
        f++;
    int width = 0;
    if (src.ndim == 1 && f[0] != 0 && f[1] == 0) {
        if (src.itemsize == 8 && (f[0] == 'q' || f[0] == 'l'))
            width = 8;
        else if (src.itemsize == 4 && (f[0] == 'i' || (f[0] == 'l' && sizeof(long) == 4)))
            width = 4;
    }
    if (width == 0) {
        PyBuffer_Release(&src);
        Py_RETURN_NONE;
    }
    if (PyObject_GetBuffer(args[1], &dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    Py_ssize_t n = src.len / width;
    if (dst.len < n * out_width) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_Format(PyExc_ValueError, "dst: %zd bytes hold fewer than %zd indices", dst.len, n);
        return NULL;
    }
    int64_t *d = (int64_t *)dst.buf;
    int bad = 0;
    if (out_width == 4) {
        /* (a value >= rows is out of range; what its low 32 bits wrote is never launched) */
        uint32_t *d4 = (uint32_t *)dst.buf;
        if (width == 8) {
            const int64_t *s = (const int64_t *)src.buf;
            for (Py_ssize_t i = 0; i < n; ++i) {
                int64_t v = s[i];
                d4[i] = (uint32_t)v;
                bad |= (uint64_t)v >= rows;
            }
        } else {
            const int32_t *s = (const int32_t *)src.buf;
            for (Py_ssize_t i = 0; i < n; ++i) {
                int64_t v = s[i];
                d4[i] = (uint32_t)v;
                bad |= (uint64_t)v >= rows;
            }
        }
    } else if (width == 8) {
        const int64_t *s = (const int64_t *)src.buf;
        for (Py_ssize_t i = 0; i < n; ++i) {
            int64_t v = s[i];
            d[i] = v;
            bad |= (uint64_t)v >= rows;
        }
    } else {
        const int32_t *s = (const int32_t *)src.buf;
        for (Py_ssize_t i = 0; i < n; ++i) {
            int64_t v = s[i];
            d[i] = v;
            bad |= (uint64_t)v >= rows;
        }
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return PyBool_FromLong(!bad);
}

static PyMethodDef methods[] = {
    {"copy", (PyCFunction)(void (*)(void))copy_indices, METH_FASTCALL, "copy(src, dst, rows[, dst_width]) -> True, False or None"},
    {NULL}
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, NULL, "gather_rows' index copy.", -1, methods};

static PyObject *hrx_module_create(const char *name)
{
    module_def.m_name = name;
    return PyModule_Create(&module_def);
}
"""

#: What the compiled modules serve: the BF16 GEMV of linear / linear_many, gather_rows' index copy.
KERNELS = ("hrx_gemv_bf16", "copy_indices")
log = logging.getLogger("hrx.kernels")
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
    """The compiled module (``ffi``, ``lib``, ``path``) through :func:`hrx_core.hotpath.load`
    (which builds with :mod:`hrx_core.native`); raises RuntimeError with the reason where
    it cannot be had."""
    from hrx_core import hotpath

    module = hotpath.load("hrx_tensor_native", CDEF, C_SOURCE, flags=_flags())
    if not module.compiled:
        raise RuntimeError(module.reason)
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
            if _failed is not None:  # said once: the state is kept for the process
                log.log(logging.INFO if _failed.startswith("disabled") else logging.WARNING,
                        "hrx_tensor: the host engine's compiled kernels (%s) are unavailable (%s); numpy runs "
                        "them instead (same results, slower: BF16 linear layers widen every weight to F32)",
                        ", ".join(KERNELS), " ".join(_failed.split())[:500])
    return _module


def status() -> tuple[str, str]:
    """``("compiled", path)`` or ``("numpy fallback", reason)`` (builds on first call)."""
    module = _load()
    return ("compiled", str(module.path)) if module is not None else ("numpy fallback", str(_failed))


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


class IndexWriter:
    """Copies gather indices into host-visible int64 memory (or, with ``width=4``, a
    uint32 record for tables of at most 2**32 rows) and range-checks them in the same
    pass: the compiled copy where it builds (one C call through the buffer protocol,
    keeping the GIL), else numpy passes (a range check, then a copy)."""

    __slots__ = ("_bytes", "_copy", "_dst", "_width")

    def __init__(self, dst: np.ndarray, width: int = 8) -> None:
        """``dst``: the uint8 host view of the index memory (``width`` bytes per index)."""
        if width not in (4, 8):
            raise ValueError(f"width: 4 or 8, got {width!r}")
        self._bytes = dst
        self._width = width
        self._dst = dst.view(np.int64 if width == 8 else np.uint32)
        self._copy = _index_functions()

    def write(self, idx: np.ndarray, rows: int) -> bool:
        """Write the one-dimensional integer array ``idx``; False if an index is
        outside ``0 .. rows - 1`` (the memory then holds garbage: launch nothing)."""
        copy = self._copy
        if copy is not None:
            ok = copy(idx, self._bytes, rows) if self._width == 8 else copy(idx, self._bytes, rows, 4)
            if ok is not None:
                return bool(ok)
        n = idx.shape[0]
        dst = self._dst[:n]
        if self._width == 4:
            if n and (int(idx.min()) < 0 or int(idx.max()) >= rows):
                return False
            np.copyto(dst, idx, casting="unsafe")
            return True
        np.copyto(dst, idx, casting="unsafe")  # keeps the bits of uint64 >= 2**63: out of range below
        return int(dst.view(np.uint64).max()) < rows


_index_funcs: Any = None


def _index_functions() -> Any:
    """The compiled index copy (``copy(src, dst, rows)``, see INDEX_SOURCE), built with
    the GEMV's module (the same switches and fallback); None where it does not build."""
    global _index_funcs
    if _index_funcs is None:
        if _load() is None:
            return None
        from hrx_core import hotpath

        module = hotpath.load_extension("hrx_tensor_index", INDEX_SOURCE, flags=["-O3"])
        if not module.compiled:
            return None
        _index_funcs = module.lib.copy
    return _index_funcs
