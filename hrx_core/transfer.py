"""Splitting of logical transfers to an engine's single-command limit.

Copies and fills accept logical ranges of any size. An engine encodes at most
``Limits.max_transfer_bytes`` per native command (4 GiB on the reference hardware's
SDMA rings); the core splits larger ranges into pieces that keep fill patterns
aligned, and one completion covers the whole transfer.
"""

from __future__ import annotations

from collections.abc import Iterator

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


def fill_pattern(value: object) -> bytes:
    """Normalise a fill value: an int byte, 1/2/4 bytes, or a numpy scalar of that size."""
    if isinstance(value, bool):
        raise InvalidArgument(f"value: expected a byte value, bytes or a numpy scalar, got {show(value)}")
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.generic):
        if not 0 <= value <= 255:
            raise InvalidArgument(f"value: an int fill value is one byte (0..255), got {value}")
        return bytes([value])
    if isinstance(value, np.generic):
        pattern = value.tobytes()
    elif isinstance(value, (bytes, bytearray, memoryview)):
        pattern = bytes(value)
    else:
        raise InvalidArgument(f"value: expected an int byte, bytes or a numpy scalar, got {type(value).__name__}")
    if len(pattern) not in (1, 2, 4):
        raise InvalidArgument(f"value: fill patterns are 1, 2 or 4 bytes, got {len(pattern)}")
    return pattern


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
