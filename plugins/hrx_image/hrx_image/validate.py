"""Argument checks of ImageOps: every one raises before anything is submitted and
names the argument, the value and the limit."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hrx_tensor import DeviceTensor
from ml_dtypes import bfloat16

from hrx_core.errors import InvalidArgument, Unsupported, show

from .tables import PRESETS

U8 = np.dtype(np.uint8)
F32 = np.dtype(np.float32)
BF16 = np.dtype(bfloat16)
#: Largest image extent (height, width, output size): float32 holds every pixel
#: coordinate exactly below 2**24.
MAX_EXTENT = 1 << 24
#: Largest batch, channel product and element count the kernels' uint32 scalars take.
MAX_U32 = (1 << 32) - 1
#: Largest patch size.
MAX_PATCH = 1 << 12
#: Largest magnitude of an affine matrix entry.
MAX_MATRIX = float(1 << 24)
#: |det| of the 2x2 part below which an inverse matrix counts as singular.
MIN_DET = 1e-9
DTYPE_NAMES = {"u8": U8, "uint8": U8, "f32": F32, "float32": F32, "bf16": BF16, "bfloat16": BF16}


def dtype_of(name: str, value: Any, allowed: Sequence[np.dtype]) -> np.dtype:
    if isinstance(value, str) and value in DTYPE_NAMES:
        dt = DTYPE_NAMES[value]
    else:
        try:
            dt = np.dtype(value)
        except TypeError:
            raise InvalidArgument(f"{name}: {value!r} is not a dtype") from None
    if dt not in allowed:
        raise InvalidArgument(f"{name}: dtype {dt} is not one of {', '.join(str(a) for a in allowed)}")
    return dt


def tensor(device: Any, name: str, t: Any) -> DeviceTensor:
    if not isinstance(t, DeviceTensor):
        raise InvalidArgument(f"{name}: expected a DeviceTensor (ImageOps.upload or ImageOps.tensor), got {type(t).__name__}")
    if t.closed:
        raise InvalidArgument(f"{name}: tensor is closed")
    if t.view.buffer.closed:
        raise InvalidArgument(f"{name}: the tensor's buffer was closed")
    if t.device is not device:
        raise InvalidArgument(f"{name}: tensor lives on {t.device.name}, not {device.name}")
    if t.offset % t.dtype.itemsize:
        raise InvalidArgument(f"{name}: byte offset {t.offset} is not a multiple of the {t.dtype.itemsize}-byte {t.dtype}")
    if 0 in t.shape:
        raise InvalidArgument(f"{name}: zero-size image (shape {list(t.shape)})")
    if not t.contiguous:
        raise InvalidArgument(f"{name}: tensor is not contiguous (shape {list(t.shape)}, strides {list(t.strides)})")
    return t


def _extent(name: str, shape: tuple[int, ...], what: str) -> None:
    if any(s == 0 for s in shape):
        raise InvalidArgument(f"{name}: zero-size {what} (shape {list(shape)})")
    if math.prod(shape) > MAX_U32 * 4:
        raise InvalidArgument(f"{name}: {math.prod(shape)} elements exceed {MAX_U32 * 4}")


def hwc(device: Any, name: str, t: Any, dtypes: Sequence[np.dtype], channels: Sequence[int]) -> tuple[DeviceTensor, int, int, int, int]:
    """An [H, W, C] or [N, H, W, C] image: (tensor, n, h, w, c)."""
    t = tensor(device, name, t)
    if len(t.shape) not in (3, 4):
        raise InvalidArgument(f"{name}: shape {list(t.shape)} is neither [H, W, C] nor [N, H, W, C]")
    if t.dtype not in dtypes:
        raise InvalidArgument(f"{name}: dtype {t.dtype} is not one of {', '.join(str(d) for d in dtypes)}")
    n, h, w, c = (1, *t.shape) if len(t.shape) == 3 else t.shape
    if c not in channels:
        raise InvalidArgument(f"{name}: {c} channels (shape {list(t.shape)}); expected one of {tuple(channels)}")
    _extent(name, t.shape, "image")
    if h >= MAX_EXTENT or w >= MAX_EXTENT:
        raise InvalidArgument(f"{name}: {h}x{w} exceeds the largest extent {MAX_EXTENT - 1}")
    if n * h * w > MAX_U32:
        raise InvalidArgument(f"{name}: {n * h * w} pixels exceed {MAX_U32}")
    return t, n, h, w, c


def chw(device: Any, name: str, t: Any) -> tuple[DeviceTensor, int, int, int, int]:
    """A [C, H, W] or [N, C, H, W] tensor of 1-, 2- or 4-byte elements: (tensor, n, c, h, w)."""
    t = tensor(device, name, t)
    if len(t.shape) not in (3, 4):
        raise InvalidArgument(f"{name}: shape {list(t.shape)} is neither [C, H, W] nor [N, C, H, W]")
    if t.dtype.itemsize not in (1, 2, 4):
        raise InvalidArgument(f"{name}: dtype {t.dtype} has {t.dtype.itemsize}-byte elements; 1, 2 or 4 supported")
    _extent(name, t.shape, "image")
    n, c, h, w = (1, *t.shape) if len(t.shape) == 3 else t.shape
    if h >= MAX_EXTENT or w >= MAX_EXTENT or n * c > MAX_U32:
        raise InvalidArgument(f"{name}: shape {list(t.shape)} exceeds the limits (H, W < {MAX_EXTENT}, N*C <= {MAX_U32})")
    return t, n, c, h, w


def size(name: str, value: Any) -> tuple[int, int]:
    """An output size: int (square) or (height, width), each 1 .. MAX_EXTENT - 1."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        pair: Sequence[Any] = (value, value)
    elif isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        pair = value
    else:
        raise InvalidArgument(f"{name}: expected an int or (height, width), got {show(value)}")
    out = []
    for i, v in enumerate(pair):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InvalidArgument(f"{name}[{i}]: expected an int, got {show(v)}")
        if not 1 <= int(v) < MAX_EXTENT:
            raise InvalidArgument(f"{name}[{i}]: {int(v)} is outside 1..{MAX_EXTENT - 1}")
        out.append(int(v))
    return out[0], out[1]


def patch(name: str, value: Any, h: int, w: int, pad: Any) -> tuple[int, int, int]:
    """(p, padded H, padded W); without ``pad`` p must divide H and W."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name}: expected an int, got {show(value)}")
    p = int(value)
    if not 1 <= p <= MAX_PATCH:
        raise InvalidArgument(f"{name}: {p} is outside 1..{MAX_PATCH}")
    if pad is not None and (not isinstance(pad, str) or pad != "zero"):
        raise InvalidArgument(f"pad: {pad!r} is neither None nor 'zero'")
    if pad is None and (h % p or w % p):
        raise InvalidArgument(f"{name}: {p} does not divide the image {h}x{w} (pass pad='zero' to pad bottom/right)")
    return p, -(-h // p) * p, -(-w // p) * p


def mean_std(mean: Any, std: Any, cout: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Validated (mean, std) per output channel; memoised for hashable arguments."""
    try:
        key = (mean if isinstance(mean, str) else tuple(mean), None if std is None else tuple(std), cout)
        hash(key)
    except TypeError:
        return _mean_std(mean, std, cout)
    return _mean_std_cached(*key)


@functools.lru_cache(maxsize=256)
def _mean_std_cached(mean: Any, std: Any, cout: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    return _mean_std(mean, std, cout)


def _mean_std(mean: Any, std: Any, cout: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if isinstance(mean, str):
        if mean not in PRESETS:
            raise InvalidArgument(f"mean: unknown preset {mean!r}; presets: {', '.join(PRESETS)}")
        if std is not None:
            raise InvalidArgument(f"std: give no std with the preset {mean!r}")
        m, s = PRESETS[mean]
        if cout != 3:
            raise InvalidArgument(f"mean: preset {mean!r} has 3 channels, the output has {cout}")
        return m, s
    out = []
    for name, v in (("mean", mean), ("std", std)):
        try:
            a = np.asarray(v, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise InvalidArgument(f"{name}: expected numbers, got {show(v)}") from None
        if a.size == 1:
            a = np.repeat(a, cout)
        if a.size != cout:
            raise InvalidArgument(f"{name}: {a.size} values for {cout} output channels")
        if not np.all(np.isfinite(a)):
            raise InvalidArgument(f"{name}: {a.tolist()} has a non-finite value")
        out.append(tuple(float(x) for x in a))
    if any(s == 0 for s in out[1]):
        raise InvalidArgument(f"std: {list(out[1])} has a zero")
    return out[0], out[1]


def channels(value: Any, c: int) -> tuple[int, ...]:
    """Output channel k reads input channel value[k] (default: the first min(C, 3))."""
    if value is None:
        return tuple(range(min(c, 3)))
    if isinstance(value, str) or not isinstance(value, Sequence) or not 1 <= len(value) <= 4:
        raise InvalidArgument(f"channels: expected 1 to 4 input channel indices, got {show(value)}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < c:
            raise InvalidArgument(f"channels[{i}]: {v!r} is not an input channel 0..{c - 1}")
        out.append(int(v))
    return tuple(out)


def matrix(value: Any, n: int) -> np.ndarray:
    """A finite, invertible inverse 2x3 matrix, or one per image: float32 [1 or N, 6]."""
    try:
        m = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidArgument(f"matrix: expected a 2x3 array of numbers, got {type(value).__name__}") from None
    key = (m.shape, n, m.tobytes())
    known = _MATRICES.get(key)
    if known is not None:
        return known
    if m.shape == (2, 3):
        m = m[None]
    elif not (m.ndim == 3 and m.shape[1:] == (2, 3) and m.shape[0] == n):
        raise InvalidArgument(f"matrix: shape {list(m.shape)} is neither [2, 3] nor [{n}, 2, 3]")
    if not np.all(np.isfinite(m)):
        raise InvalidArgument("matrix: has a non-finite entry")
    big = float(np.abs(m).max())
    if big > MAX_MATRIX:
        raise InvalidArgument(f"matrix: entry of magnitude {big:g} exceeds {MAX_MATRIX:g}")
    m32 = m.astype(np.float32)
    det = m32[:, 0, 0].astype(np.float64) * m32[:, 1, 1] - m32[:, 0, 1].astype(np.float64) * m32[:, 1, 0]
    bad = np.flatnonzero(np.abs(det) < MIN_DET)
    if bad.size:
        raise InvalidArgument(f"matrix: singular (|det| = {abs(det[bad[0]]):g} < {MIN_DET:g}, image {int(bad[0])})")
    out = np.ascontiguousarray(m32.reshape(-1, 6))
    out.flags.writeable = False
    if len(_MATRICES) >= 256:
        _MATRICES.clear()
    _MATRICES[key] = out
    return out


#: Recently validated matrices (by shape, batch and float64 bytes): repeating a
#: matrix skips the checks.
_MATRICES: dict[tuple[Any, ...], np.ndarray] = {}


def offset(value: Any) -> tuple[int, int]:
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 2:
        raise InvalidArgument(f"offset: expected (x, y), got {show(value)}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not -(1 << 31) <= int(v) < (1 << 31):
            raise InvalidArgument(f"offset[{i}]: {v!r} is not an int32")
        out.append(int(v))
    return out[0], out[1]


def graph_of(device: Any, graph: Any) -> Any:
    from hrx_core.graph import Graph

    if not isinstance(graph, Graph):
        raise InvalidArgument(f"graph: expected an hrx Graph (stream.access_graph()), got {type(graph).__name__}")
    if graph.device is not device:
        raise InvalidArgument(f"graph: records on {graph.device.name}, not {device.name}")
    if not graph.inferred:
        raise Unsupported("graph: fragments record into access graphs (stream.access_graph() or owned_graph())")
    return graph
