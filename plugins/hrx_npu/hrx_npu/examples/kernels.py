"""GPU-side kernels of the examples, with host (numpy) and CUDA sources, so the GPU
branch runs on the best GPU-ish engine present (cuda, else the host engine)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import hrx_core as hrx

GOLDEN = 2654435761  # Knuth's multiplicative hash constant

TRANSFORM_CUDA = r"""
extern "C" __global__ void int_transform(const unsigned int* x, unsigned int* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { unsigned int v = x[i]; y[i] = (v * 2654435761u) ^ (v >> 13); }
}
"""

_CHUNK = 1 << 20


def int_transform_reference(x: np.ndarray) -> np.ndarray:
    """y = (x * 2654435761) ^ (x >> 13) over uint32, wrapping."""
    x = np.asarray(x, dtype=np.uint32)
    return (x * np.uint32(GOLDEN)) ^ (x >> np.uint32(13))


def _transform_host(x: np.ndarray, y: np.ndarray, n: np.uint32) -> None:
    xs, ys = x.view(np.uint32)[:n], y.view(np.uint32)[:n]
    tmp = np.empty(min(int(n), _CHUNK), np.uint32)
    k, s = np.uint32(GOLDEN), np.uint32(13)
    for i in range(0, int(n), _CHUNK):
        xc, yc = xs[i : i + _CHUNK], ys[i : i + _CHUNK]
        t = tmp[: len(xc)]
        np.multiply(xc, k, out=yc)
        np.right_shift(xc, s, out=t)
        np.bitwise_xor(yc, t, out=yc)


INT_TRANSFORM = hrx.Kernel("int_transform", buffers=("read", "write"), scalars=(np.uint32,), host=_transform_host, cuda=TRANSFORM_CUDA)

TO_BF16_CUDA = r"""
extern "C" __global__ void to_bf16(const float* x, unsigned short* a, float scale, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned int u = __float_as_uint(__fmul_rn(x[i], scale));
        u += 0x7fffu + ((u >> 16) & 1u);            /* round to nearest even (finite inputs) */
        a[i] = (unsigned short)(u >> 16);
    }
}
"""


def to_bf16_reference(x: np.ndarray, scale: float | np.float32) -> np.ndarray:
    return (np.asarray(x, np.float32) * np.float32(scale)).astype(ml_dtypes.bfloat16)


def _to_bf16_host(x: np.ndarray, a: np.ndarray, scale: np.float32, n: np.uint32) -> None:
    a.view(ml_dtypes.bfloat16)[:n] = to_bf16_reference(x.view(np.float32)[:n], scale)


TO_BF16 = hrx.Kernel("to_bf16", buffers=("read", "write"), scalars=(np.float32, np.uint32), host=_to_bf16_host, cuda=TO_BF16_CUDA)

EPILOGUE_CUDA = r"""
extern "C" __global__ void epilogue(const float* c, float* y, float alpha, float beta, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = __fadd_rn(__fmul_rn(c[i], alpha), beta); y[i] = v > 0.0f ? v : 0.0f; }
}
"""


def epilogue_reference(c: np.ndarray, alpha: float | np.float32, beta: float | np.float32) -> np.ndarray:
    v = np.asarray(c, np.float32) * np.float32(alpha) + np.float32(beta)
    return np.where(v > 0, v, np.float32(0)).astype(np.float32)


def _epilogue_host(c: np.ndarray, y: np.ndarray, alpha: np.float32, beta: np.float32, n: np.uint32) -> None:
    y.view(np.float32)[:n] = epilogue_reference(c.view(np.float32)[:n], alpha, beta)


EPILOGUE = hrx.Kernel("epilogue", buffers=("read", "write"), scalars=(np.float32, np.float32, np.uint32), host=_epilogue_host, cuda=EPILOGUE_CUDA)

BLOCK = 256


def grid_for(n: int) -> int:
    return -(-n // BLOCK)
