"""Splitting of logical transfers to an engine's single-command limit.

Copies and fills accept logical ranges of any size. An engine encodes at most
``Limits.max_transfer_bytes`` per native command (4 GiB on the reference hardware's
SDMA rings); the core splits larger ranges into pieces that keep fill patterns
aligned, and one completion covers the whole transfer.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from .errors import InvalidArgument, show


def split(nbytes: int, limit: int, granule: int = 1) -> Iterator[tuple[int, int]]:
    """Yield (offset, length) pieces of at most ``limit`` bytes, multiples of ``granule``."""
    step = max(granule, limit - limit % granule)
    offset = 0
    while offset < nbytes:
        length = min(step, nbytes - offset)
        yield offset, length
        offset += length


def deprecated_copy(owner: str) -> None:
    """Warn (at the caller's caller) that ``owner.copy(src, dst)`` became ``copyto(dst, src)``."""
    warnings.warn(
        f"{owner}.copy(src, dst) is deprecated: use {owner}.copyto(dst, src) -- destination first, like "
        "upload(dst, data), fill(dst, value) and numpy.copyto; copy() will be removed in the next release",
        DeprecationWarning,
        stacklevel=3,
    )


def fill_args(dst: Any, value: Any = None, dtype: Any = None, pattern: Any = None) -> tuple[Any, bytes]:
    """The destination (a Buffer, View or Binding; a contiguous DeviceTensor becomes its
    write binding and gives the dtype) and the fill's byte pattern, see :func:`fill_pattern`."""
    from .buffer import Binding, Buffer, View

    if not isinstance(dst, (Buffer, View, Binding)):
        from .model.tensor import DeviceTensor

        if isinstance(dst, DeviceTensor):
            if not dst.contiguous:
                raise InvalidArgument(f"dst: a fill writes every byte; tensor is not contiguous (strides {list(dst.strides)})")
            if dtype is None and pattern is None and not isinstance(value, (bytes, bytearray, memoryview)):
                dtype = dst.dtype
            dst = dst.write()
    return dst, fill_pattern(value, dtype=dtype, pattern=pattern)


def fill_pattern(value: Any = None, *, dtype: Any = None, pattern: Any = None) -> bytes:
    """The 1-, 2- or 4-byte pattern of a fill.

    * ``value`` with ``dtype=`` (or a numpy scalar, which carries its dtype): one element
      of that type, converted exactly (an int that does not fit, or a fraction for an
      integer dtype, is refused);
    * ``pattern=`` (bytes, or an int byte 0..255): those bytes, repeated;
    * ``value`` as bytes: those bytes too;
    * a plain ``0``: zero bytes (zero in every dtype).

    Any other plain int without ``dtype=`` is deprecated: it still fills that byte, with
    a DeprecationWarning (``fill(x, 1)`` on float32 data would not write 1.0).
    """
    if pattern is not None:
        if value is not None:
            raise InvalidArgument("fill: pass a value (with dtype=) or pattern=, not both")
        if dtype is not None:
            raise InvalidArgument("dtype: a byte pattern= has no dtype; pass the value with dtype= instead")
        return _byte_pattern("pattern", pattern)
    if value is None:
        raise InvalidArgument("value: expected a fill value (with dtype=) or pattern= bytes, got None")
    if isinstance(value, (bytes, bytearray, memoryview)):
        if dtype is not None:
            raise InvalidArgument("dtype: bytes are a pattern already; pass a number with dtype=, or the bytes alone")
        return _byte_pattern("value", value)
    if isinstance(value, (bool, np.bool_)) and dtype is None:
        raise InvalidArgument(f"value: a bool fill value needs dtype= (e.g. dtype=np.bool_), got {show(value)}")
    if dtype is not None:
        from .model.tensor import as_dtype

        return _element("value", value, as_dtype("dtype", dtype))
    if isinstance(value, np.generic):
        return _element("value", value, value.dtype)
    if not isinstance(value, (int, float)):
        raise InvalidArgument(f"value: expected a number with dtype=, a numpy scalar or bytes, got {type(value).__name__}")
    if value == 0 and isinstance(value, int):
        return b"\0"
    if isinstance(value, float) or not 0 <= value <= 255:
        raise InvalidArgument(
            f"value: {show(value)} needs dtype= (e.g. dtype=np.float32): a buffer has no element type "
            f"(pattern= fills bytes)"
        )
    warnings.warn(
        f"fill(dst, {value}) without dtype= fills every byte with {value:#04x}, not the number {value} of the data's "
        f"element type; pass dtype= (e.g. dtype=np.float32) for a typed value or pattern={value} for bytes "
        "(a plain int other than 0 without either will be an error in the next release)",
        DeprecationWarning,
        stacklevel=4,
    )
    return bytes([value])


def _byte_pattern(name: str, value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        pattern = bytes(value)
    elif isinstance(value, (int, np.uint8, np.int8)) and not isinstance(value, bool):
        if not 0 <= int(value) <= 255:
            raise InvalidArgument(f"{name}: an int byte pattern is 0..255, got {value}")
        pattern = bytes([int(value)])
    else:
        raise InvalidArgument(f"{name}: expected bytes (1, 2 or 4) or an int byte 0..255, got {type(value).__name__}")
    if len(pattern) not in (1, 2, 4):
        raise InvalidArgument(f"{name}: fill patterns are 1, 2 or 4 bytes, got {len(pattern)}")
    return pattern


def _element(name: str, value: Any, dt: np.dtype) -> bytes:
    """``value`` as one element of ``dt``, exactly (no wraparound, no truncation)."""
    if dt.itemsize not in (1, 2, 4):
        raise InvalidArgument(f"dtype: fills write 1-, 2- or 4-byte elements; {dt} has {dt.itemsize}")
    if isinstance(value, np.generic):
        if value.dtype.kind not in "biufV" or value.dtype.itemsize > 8:
            raise InvalidArgument(f"{name}: {show(value)} is not a real number")
        number = value.item() if value.dtype.kind != "V" else float(np.float32(value))
    elif isinstance(value, (int, float)):
        number = value
    else:
        raise InvalidArgument(f"{name}: expected a scalar number, got {type(value).__name__}")
    if dt.kind in "biu":
        if isinstance(number, float) and not number.is_integer():
            raise InvalidArgument(f"{name}: {show(value)} is not an integer, which {dt} needs")
        low, high = (0, 1) if dt.kind == "b" else (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
        if not low <= int(number) <= high:
            raise InvalidArgument(f"{name}: {show(value)} is outside {dt}'s range {low}..{high}")
        return np.asarray(int(number)).astype(dt).tobytes()
    try:
        wide = float(number)  # a float dtype: rounding to it is expected; overflowing it is not
    except OverflowError:
        raise InvalidArgument(f"{name}: {show(value)} is outside {dt}'s range") from None
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray(wide).astype(dt)
    if math.isfinite(wide) and not np.isfinite(out.astype(np.float64)):
        raise InvalidArgument(f"{name}: {show(value)} is outside {dt}'s range")
    return out.tobytes()


def host_bytes(name: str, data: object) -> np.ndarray:
    """A flat uint8 view of host data (no copy for contiguous buffers)."""
    if isinstance(data, np.ndarray):
        if data.dtype.hasobject:
            raise InvalidArgument(f"{name}: an array of Python objects ({data.dtype}) has no bytes to copy")
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        flat = data.reshape(-1).view(np.uint8)
    else:
        try:
            mem = memoryview(data)  # type: ignore[arg-type]
        except TypeError:
            raise InvalidArgument(
                f"{name}: expected a numpy array or a bytes-like object, got {type(data).__name__}"
            ) from None
        if not mem.c_contiguous:
            raise InvalidArgument(f"{name}: host memory must be contiguous")
        flat = np.frombuffer(mem.cast("B") if mem.format != "B" or mem.ndim != 1 else mem, dtype=np.uint8)
    if flat.nbytes == 0:
        raise InvalidArgument(f"{name}: host data is empty")
    return flat
