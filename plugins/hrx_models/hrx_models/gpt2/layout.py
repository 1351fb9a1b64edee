"""Packing named tensors into one device allocation.

The decoder keeps all weights in one allocation and all of a slot's state in
another: a recorded step then binds two allocations, not a hundred, so each replay's
bookkeeping (hazard ranges, retention) is a handful of entries whatever the depth.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from hrx_core.buffer import Buffer, View

#: Byte alignment of every packed tensor (the GEMV reads 16-byte vectors; 256 keeps
#: rows of different tensors out of one cache line and matches cudaMalloc's).
ALIGN = 256


class Layout:
    """Offsets of named tensors (shape, dtype) packed at ALIGN-byte boundaries."""

    def __init__(self, entries: Iterable[tuple[str, tuple[int, ...], Any]]) -> None:
        self.entries: dict[str, tuple[int, tuple[int, ...], np.dtype]] = {}
        offset = 0
        for name, shape, dtype in entries:
            dt = np.dtype(dtype)
            self.entries[name] = (offset, tuple(shape), dt)
            nbytes = math.prod(shape) * dt.itemsize
            offset += -(-max(nbytes, 1) // ALIGN) * ALIGN
        self.nbytes = max(offset, ALIGN)

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def nbytes_of(self, name: str) -> int:
        _, shape, dt = self.entries[name]
        return math.prod(shape) * dt.itemsize

    def view(self, buffer: Buffer, name: str) -> View:
        """The view of ``name`` inside ``buffer`` (an allocation of this layout)."""
        offset = self.entries[name][0]
        return buffer.slice(offset, self.nbytes_of(name))

    def views(self, buffer: Buffer) -> dict[str, View]:
        return {name: self.view(buffer, name) for name in self.entries}
