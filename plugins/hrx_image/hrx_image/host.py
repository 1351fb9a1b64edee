"""Host (numpy) implementations of the image kernels.

Every floating-point step is a separate float32 numpy ufunc (no fused multiply-add,
no implicit float64), in the same order as the CUDA kernel in :mod:`.kernels`, which
spells each step with ``__fmul_rn``/``__fadd_rn``/``__fsub_rn``/``__fdiv_rn``; uint8
results are rounded with ``np.rint`` (ties to even, as ``rintf``) and then clamped.
Each callable receives the kernel's buffers as uint8 arrays, then its scalars.
These serve the host engine where the CUDA sources cannot be compiled for the CPU
(:mod:`.native`); the tests hold both byte for byte equal.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
from ml_dtypes import bfloat16

from .tables import unpack_resize

F32 = np.float32
#: The kernels' scalar parameters: the host engine passes numpy scalars of the declared
#: types, which each mirror rebinds to Python ints (``n = int(n)``) before sizing and
#: indexing with them; plain ints work as well.
U32: TypeAlias = np.uint32 | int
I32: TypeAlias = np.int32 | int
_ZERO, _ONE, _255 = np.float32(0), np.float32(1), np.float32(255)


def _to_u8(acc: np.ndarray, out: np.ndarray) -> None:
    """Round to nearest even, clamp to 0..255 (NaN to 0), store as uint8."""
    np.rint(acc, out=acc)
    np.fmax(acc, _ZERO, out=acc)
    np.fmin(acc, _255, out=acc)
    out[...] = acc.astype(np.uint8)


def normalize(src: np.ndarray, table: np.ndarray, dst: np.ndarray, n: U32, h: U32, w: U32, c: U32, cout: U32,
              order: U32, patch: U32, hp: U32, wp: U32, esize: U32) -> None:
    n, h, w, c, cout, patch, hp, wp = (int(v) for v in (n, h, w, c, cout, patch, hp, wp))
    dt = np.dtype(np.float32) if int(esize) == 4 else np.dtype(bfloat16)
    img = src[: n * h * w * c].reshape(n, h, w, c)
    tab = table[: cout * 256 * dt.itemsize].view(dt).reshape(cout, 256)
    out = dst[: n * cout * hp * wp * dt.itemsize].view(dt)
    chans = [(int(order) >> (8 * k)) & 0xFF for k in range(cout)]
    if patch == 0:
        planes = out.reshape(n, cout, h, w)
        for b in range(n):
            for k, ch in enumerate(chans):
                np.take(tab[k], img[b, :, :, ch], out=planes[b, k])
        return
    full = np.zeros((n, cout, hp, wp), dtype=dt)
    for k, ch in enumerate(chans):
        full[:, k, :h, :w] = np.take(tab[k], img[..., ch])
    out[:] = _patches(full, patch).reshape(-1)


def _patches(full: np.ndarray, p: int) -> np.ndarray:
    """[N, C, H, W] -> [N, (H/p)*(W/p), C*p*p], patches row-major, (c, py, px) inside."""
    n, c, h, w = full.shape
    return full.reshape(n, c, h // p, p, w // p, p).transpose(0, 2, 4, 1, 3, 5).reshape(n, (h // p) * (w // p), c * p * p)


def patchify(src: np.ndarray, dst: np.ndarray, n: U32, c: U32, h: U32, w: U32, p: U32, hp: U32, wp: U32, esize: U32,
             vw: U32) -> None:
    # ``vw`` (the CUDA kernel's vector width) does not change the result
    n, c, h, w, p, hp, wp, es = (int(v) for v in (n, c, h, w, p, hp, wp, esize))
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32}[es]
    img = src[: n * c * h * w * es].view(dt).reshape(n, c, h, w)
    if (hp, wp) != (h, w):
        full = np.zeros((n, c, hp, wp), dtype=dt)
        full[:, :, :h, :w] = img
        img = full
    dst[: n * c * hp * wp * es].view(dt)[:] = _patches(img, p).reshape(-1)


def resize(src: np.ndarray, table: np.ndarray, dst: np.ndarray, n: U32, h: U32, w: U32, c: U32, ho: U32, wo: U32,
           kx: U32, ky: U32, is_f32: U32, nearest: U32) -> None:
    n, h, w, c, ho, wo, kx, ky = (int(v) for v in (n, h, w, c, ho, wo, kx, ky))
    dt = np.dtype(np.float32) if is_f32 else np.dtype(np.uint8)
    img = src[: n * h * w * c * dt.itemsize].view(dt).reshape(n, h, w, c)
    out = dst[: n * ho * wo * c * dt.itemsize].view(dt).reshape(n, ho, wo, c)
    xi, xw, yi, yw = unpack_resize(table, wo, kx, ho, ky)
    if nearest:
        np.take(np.take(img, yi[:, 0], axis=1), xi[:, 0], axis=2, out=out)
        return
    # Separable evaluation of the kernel's per-pixel sum
    #   acc = 0 + wy[0]*row(yi[0]) + wy[1]*row(yi[1]) + ...,  row(r) = 0 + wx[0]*src[r, xi[0]] + ...
    # each row() depends only on (source row, output column), so computing it once per
    # needed source row gives the same float32 operations in the same order.
    rows, pos = np.unique(yi, return_inverse=True)
    pos = pos.reshape(yi.shape)
    sub = np.take(img, rows, axis=1)
    tmp = np.zeros((n, rows.size, wo, c), dtype=np.float32)
    for i in range(kx):
        tmp += np.take(sub, xi[:, i], axis=2) * xw[:, i][:, None]
    acc = np.zeros((n, ho, wo, c), dtype=np.float32)
    for j in range(ky):
        acc += np.take(tmp, pos[:, j], axis=1) * yw[:, j][:, None, None]
    if is_f32:
        out[...] = acc
    else:
        _to_u8(acc, out)


def affine(src: np.ndarray, mat: np.ndarray, dst: np.ndarray, n: U32, h: U32, w: U32, c: U32, ho: U32, wo: U32,
           per_image: U32, in_f32: U32, out_f32: U32) -> None:
    n, h, w, c, ho, wo = (int(v) for v in (n, h, w, c, ho, wo))
    idt = np.dtype(np.float32) if in_f32 else np.dtype(np.uint8)
    odt = np.dtype(np.float32) if out_f32 else np.dtype(np.uint8)
    img = src[: n * h * w * c * idt.itemsize].view(idt).reshape(n, h, w, c)
    out = dst[: n * ho * wo * c * odt.itemsize].view(odt).reshape(n, ho, wo, c)
    mats = mat[: (n if per_image else 1) * 24].view(np.float32).reshape(-1, 6)
    # Two zero pixels before and three after each axis: every clamped tap lands inside.
    padded = np.zeros((n, h + 5, w + 5, c), dtype=idt)
    padded[:, 2 : h + 2, 2 : w + 2] = img
    xs = np.arange(wo, dtype=np.float32)[None, :]
    ys = np.arange(ho, dtype=np.float32)[:, None]
    lo, hx, hy = np.float32(-2), np.float32(w) + _ONE, np.float32(h) + _ONE
    groups = [(b, b + 1, mats[b]) for b in range(n)] if per_image else [(0, n, mats[0])]
    for b0, b1, m in groups:
        sx = (m[0] * xs + m[1] * ys) + m[2]
        sy = (m[3] * xs + m[4] * ys) + m[5]
        sx = np.fmin(np.fmax(sx, lo), hx)
        sy = np.fmin(np.fmax(sy, lo), hy)
        x0f, y0f = np.floor(sx), np.floor(sy)
        fx, fy = sx - x0f, sy - y0f
        gx, gy = _ONE - fx, _ONE - fy
        x0 = x0f.astype(np.int64) + 2
        y0 = y0f.astype(np.int64) + 2
        part = padded[b0:b1]
        v00, v01 = part[:, y0, x0], part[:, y0, x0 + 1]
        v10, v11 = part[:, y0 + 1, x0], part[:, y0 + 1, x0 + 1]
        gx, fx, gy, fy = gx[..., None], fx[..., None], gy[..., None], fy[..., None]
        r0 = gx * v00 + fx * v01
        r1 = gx * v10 + fx * v11
        acc = gy * r0 + fy * r1
        if out_f32:
            out[b0:b1] = acc
        else:
            _to_u8(acc, out[b0:b1])


def composite(base: np.ndarray, layer: np.ndarray, dst: np.ndarray, n: U32, h: U32, w: U32, c: U32, lh: U32,
              lw: U32, ox: I32, oy: I32, premultiplied: U32) -> None:
    n, h, w, c, lh, lw, ox, oy = (int(v) for v in (n, h, w, c, lh, lw, ox, oy))
    img = base[: n * h * w * c].reshape(n, h, w, c)
    out = dst[: n * h * w * c].reshape(n, h, w, c)
    out[...] = img
    y0, y1 = max(oy, 0), min(oy + lh, h)
    x0, x1 = max(ox, 0), min(ox + lw, w)
    if y0 >= y1 or x0 >= x1:
        return
    lay = layer[: lh * lw * 4].reshape(lh, lw, 4)[y0 - oy : y1 - oy, x0 - ox : x1 - ox].astype(np.float32)
    d = img[:, y0:y1, x0:x1].astype(np.float32)
    s, sa = lay[None, ..., :3], lay[None, ..., 3:4]
    region = out[:, y0:y1, x0:x1]
    if premultiplied:
        ia = _ONE - sa / _255
        rgb = s + d[..., :3] * ia
        if c == 4:
            alpha = sa + d[..., 3:4] * ia
    else:
        a = sa / _255
        ia = _ONE - a
        if c == 3:
            rgb = s * a + d * ia
        else:
            da = d[..., 3:4] / _255
            t = da * ia
            oa = a + t
            safe = np.where(oa > _ZERO, oa, _ONE)
            rgb = np.where(oa > _ZERO, (s * a + d[..., :3] * t) / safe, _ZERO)
            alpha = oa * _255
    _to_u8(rgb, region[..., :3])
    if c == 4:
        _to_u8(np.ascontiguousarray(alpha), region[..., 3:4])
