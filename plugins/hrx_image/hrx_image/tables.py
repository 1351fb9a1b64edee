"""Per-plan constant tables: resize taps and weights, normalization lookup tables.

Tables are computed once on the host when a plan is prepared and uploaded into a
plan-owned buffer; the host and cuda kernels read the same bytes, so every index
and weight is identical on both engines by construction and only the kernels'
own arithmetic has to be mirrored.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ml_dtypes import bfloat16

F32 = np.dtype(np.float32)
BF16 = np.dtype(bfloat16)

#: Common mean/std presets, in the 0..1 scale of the input divided by ``max_value``.
PRESETS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "clip": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    "siglip": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "inception": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "unit": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
}


def normalize_table(mean: Sequence[float], std: Sequence[float], max_value: float, dtype: np.dtype) -> np.ndarray:
    """[C, 256] table of ``(v / max_value - mean[c]) / std[c]`` for v in 0..255.

    Computed in float64 and rounded once to float32 (correctly rounded); BF16
    tables are that float32 value rounded to nearest even.
    """
    v = np.arange(256, dtype=np.float64)[None, :]
    m = np.asarray(mean, dtype=np.float64)[:, None]
    s = np.asarray(std, dtype=np.float64)[:, None]
    table = ((v / float(max_value) - m) / s).astype(np.float32)
    return np.ascontiguousarray(table.astype(dtype))


def bilinear_axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Two taps per output index: half-pixel centres, clamped at the edges (torch's
    ``align_corners=False`` convention), computed in float32 as torch does."""
    scale = np.float32(n_in) / np.float32(n_out)
    d = np.arange(n_out, dtype=np.float32)
    src = (d + np.float32(0.5)) * scale - np.float32(0.5)
    src = np.maximum(src, np.float32(0))
    i0 = np.minimum(src.astype(np.int32), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    l1 = src - i0.astype(np.float32)
    l0 = np.float32(1) - l1
    return np.stack([i0, i1], axis=1).astype(np.int32), np.stack([l0, l1], axis=1).astype(np.float32)


def antialias_axis(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Triangle-filter taps for downscaling (PIL's ``ImagingResample`` and torch's
    ``antialias=True`` convention): support = in/out, weights normalized per output,
    computed in float64 and rounded to float32. Short windows are padded with
    zero-weight taps repeating the last index."""
    scale = n_in / n_out
    support = scale
    starts, weights = [], []
    for d in range(n_out):
        center = (d + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        x = (np.arange(lo, hi, dtype=np.float64) - center + 0.5) / scale
        w = np.maximum(0.0, 1.0 - np.abs(x))
        total = w.sum()
        starts.append(lo)
        weights.append(w / total if total > 0 else w)
    k = max(len(w) for w in weights)
    idx = np.empty((n_out, k), dtype=np.int32)
    wts = np.zeros((n_out, k), dtype=np.float32)
    for d, (lo, w) in enumerate(zip(starts, weights)):
        n = len(w)
        idx[d, :n] = np.arange(lo, lo + n)
        idx[d, n:] = lo + n - 1
        wts[d, :n] = w
    return idx, wts


def nearest_axis(n_in: int, n_out: int) -> np.ndarray:
    """Nearest source index of each output: ``floor((d + 0.5) * in / out)`` in exact
    integer arithmetic (PIL's NEAREST, torch's ``nearest-exact``)."""
    d = np.arange(n_out, dtype=np.int64)
    return np.minimum(((2 * d + 1) * n_in) // (2 * n_out), n_in - 1).astype(np.int32)[:, None]


def resize_axis(n_in: int, n_out: int, mode: str, antialias: bool) -> tuple[np.ndarray, np.ndarray]:
    """(indices [n_out, K] int32, weights [n_out, K] float32) for one axis."""
    if mode == "nearest":
        return nearest_axis(n_in, n_out), np.ones((n_out, 1), dtype=np.float32)
    if antialias and n_in > n_out:
        return antialias_axis(n_in, n_out)
    return bilinear_axis(n_in, n_out)


def pack_resize(xi: np.ndarray, xw: np.ndarray, yi: np.ndarray, yw: np.ndarray) -> np.ndarray:
    """The resize table buffer: x indices, x weights, y indices, y weights (4 bytes each)."""
    parts = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in (xi, xw, yi, yw)]
    return np.concatenate(parts)


def unpack_resize(buf: np.ndarray, wo: int, kx: int, ho: int, ky: int) -> tuple[np.ndarray, ...]:
    """Inverse of :func:`pack_resize` over the kernel's uint8 view of the table."""
    nx, ny = wo * kx * 4, ho * ky * 4
    xi = buf[:nx].view(np.int32).reshape(wo, kx)
    xw = buf[nx : 2 * nx].view(np.float32).reshape(wo, kx)
    yi = buf[2 * nx : 2 * nx + ny].view(np.int32).reshape(ho, ky)
    yw = buf[2 * nx + ny : 2 * nx + 2 * ny].view(np.float32).reshape(ho, ky)
    return xi, xw, yi, yw
