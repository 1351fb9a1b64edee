"""Independent float64 references for the image operations (dense weight matrices
and per-pixel formulas, written without the package's tables or kernels)."""

from __future__ import annotations

import math

import numpy as np


def _round_u8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] weights: half-pixel centres, edge clamp."""
    m = np.zeros((n_out, n_in))
    for d in range(n_out):
        src = max((d + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = min(int(math.floor(src)), n_in - 1)
        i1 = min(i0 + 1, n_in - 1)
        t = src - i0
        m[d, i0] += 1 - t
        m[d, i1] += t
    return m


def triangle_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] antialiasing weights (triangle of half-width in/out, normalized)."""
    scale = n_in / n_out
    m = np.zeros((n_out, n_in))
    for d in range(n_out):
        center = (d + 0.5) * scale
        for i in range(n_in):
            m[d, i] = max(0.0, 1.0 - abs((i + 0.5 - center) / scale))
        m[d] /= m[d].sum()
    return m


def resize(img: np.ndarray, ho: int, wo: int, mode: str = "bilinear", antialias: bool = False) -> np.ndarray:
    """float64 result of resizing an [N, H, W, C] image."""
    n, h, w, c = img.shape
    x = img.astype(np.float64)
    if mode == "nearest":
        yi = [min(int(math.floor((d + 0.5) * h / ho)), h - 1) for d in range(ho)]
        xi = [min(int(math.floor((d + 0.5) * w / wo)), w - 1) for d in range(wo)]
        return x[:, yi][:, :, xi]
    my = triangle_matrix(h, ho) if antialias and h > ho else bilinear_matrix(h, ho)
    mx = triangle_matrix(w, wo) if antialias and w > wo else bilinear_matrix(w, wo)
    return np.einsum("yh,nhwc,xw->nyxc", my, x, mx, optimize=True)


def affine(img: np.ndarray, mats: np.ndarray, ho: int, wo: int) -> np.ndarray:
    """float64 bilinear sampling of [N, H, W, C] through inverse matrices [N or 1, 2, 3], zero outside."""
    n, h, w, c = img.shape
    out = np.zeros((n, ho, wo, c))
    x = img.astype(np.float64)
    ys, xs = np.mgrid[0:ho, 0:wo].astype(np.float64)
    for b in range(n):
        m = mats[b if len(mats) > 1 else 0].astype(np.float64)
        sx = m[0, 0] * xs + m[0, 1] * ys + m[0, 2]
        sy = m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
        x0, y0 = np.floor(sx), np.floor(sy)
        fx, fy = (sx - x0)[..., None], (sy - y0)[..., None]
        acc = np.zeros((ho, wo, c))
        for dy, wy in ((0, 1 - fy), (1, fy)):
            for dx, wx in ((0, 1 - fx), (1, fx)):
                yy, xx = (y0 + dy).astype(np.int64), (x0 + dx).astype(np.int64)
                ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
                v = np.where(ok[..., None], x[b, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)], 0.0)
                acc += wy * wx * v
        out[b] = acc
    return out


def normalize(img: np.ndarray, mean, std, channels, max_value: float = 255.0) -> np.ndarray:
    """float64 [N, C', H, W]."""
    x = img.astype(np.float64)[..., list(channels)] / max_value
    y = (x - np.asarray(mean, dtype=np.float64)) / np.asarray(std, dtype=np.float64)
    return y.transpose(0, 3, 1, 2)


def patchify(x: np.ndarray, p: int) -> np.ndarray:
    """[N, C, H, W] -> [N, P, C*p*p] with explicit loops, zero padding bottom/right."""
    n, c, h, w = x.shape
    gh, gw = -(-h // p), -(-w // p)
    out = np.zeros((n, gh * gw, c * p * p), dtype=x.dtype)
    for b in range(n):
        for i in range(gh):
            for j in range(gw):
                patch = np.zeros((c, p, p), dtype=x.dtype)
                tile = x[b, :, i * p : (i + 1) * p, j * p : (j + 1) * p]
                patch[:, : tile.shape[1], : tile.shape[2]] = tile
                out[b, i * gw + j] = patch.reshape(-1)
    return out


def composite(img: np.ndarray, layer: np.ndarray, ox: int, oy: int, premultiplied: bool) -> np.ndarray:
    """float64 alpha-over of an RGBA layer onto [N, H, W, C]; untouched pixels exact."""
    out = img.astype(np.float64).copy()
    n, h, w, c = img.shape
    lh, lw = layer.shape[:2]
    for y in range(max(oy, 0), min(oy + lh, h)):
        for x in range(max(ox, 0), min(ox + lw, w)):
            s = layer[y - oy, x - ox].astype(np.float64)
            a = s[3] / 255
            for b in range(n):
                d = img[b, y, x].astype(np.float64)
                if premultiplied:
                    out[b, y, x, :3] = s[:3] + d[:3] * (1 - a)
                    if c == 4:
                        out[b, y, x, 3] = s[3] + d[3] * (1 - a)
                elif c == 3:
                    out[b, y, x] = s[:3] * a + d * (1 - a)
                else:
                    da = d[3] / 255
                    oa = a + da * (1 - a)
                    out[b, y, x, :3] = (s[:3] * a + d[:3] * da * (1 - a)) / oa if oa > 0 else 0
                    out[b, y, x, 3] = oa * 255
    return out


def within_one(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest |got - ref| over uint8 results against the float64 reference (rounded)."""
    return float(np.abs(got.astype(np.float64) - _round_u8(ref).astype(np.float64)).max())
