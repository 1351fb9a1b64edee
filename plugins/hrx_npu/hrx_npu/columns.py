"""Column accounting of an NPU array.

The array has ``columns`` columns. A loaded program (a hardware context) occupies a
contiguous range of ``k`` columns, validated against the device. Contexts get free
columns first; once the array is full, new contexts time-share the least loaded
range (their invocations take turns on those columns, and every invocation
re-establishes the columns' state). Closing a program frees its columns.
"""

from __future__ import annotations

import threading

from .errors import ColumnError


class ColumnMap:
    """Which contexts occupy which columns."""

    def __init__(self, columns: int) -> None:
        self.columns = columns
        self._lock = threading.Lock()
        self._owners: list[list[int]] = [[] for _ in range(columns)]
        #: context id -> (start, count)
        self._ranges: dict[int, tuple[int, int]] = {}
        self._next = 1

    def check(self, count: object) -> int:
        if isinstance(count, bool) or not isinstance(count, int):
            raise ColumnError(f"columns: expected an int, got {type(count).__name__}")
        if not 1 <= count <= self.columns:
            raise ColumnError(f"columns: a program occupies 1..{self.columns} columns on this device, asked for {count}")
        return count

    def reserve(self, count: int) -> tuple[int, int, int]:
        """Place a context of ``count`` columns; returns (context id, start, count)."""
        count = self.check(count)
        with self._lock:
            best_start, best_load = 0, None
            for start in range(self.columns - count + 1):
                load = max(len(self._owners[c]) for c in range(start, start + count))
                if best_load is None or load < best_load:
                    best_start, best_load = start, load
                if load == 0:
                    break
            ctx = self._next
            self._next += 1
            for c in range(best_start, best_start + count):
                self._owners[c].append(ctx)
            self._ranges[ctx] = (best_start, count)
            return ctx, best_start, count

    def release(self, ctx: int) -> None:
        with self._lock:
            span = self._ranges.pop(ctx, None)
            if span is None:
                return
            start, count = span
            for c in range(start, start + count):
                self._owners[c].remove(ctx)

    def in_use(self) -> int:
        """Columns occupied by at least one context."""
        with self._lock:
            return sum(1 for owners in self._owners if owners)

    def free(self) -> int:
        return self.columns - self.in_use()

    def occupancy(self) -> list[int]:
        """Number of contexts per column (more than 1: time-shared)."""
        with self._lock:
            return [len(o) for o in self._owners]

    def contexts(self) -> dict[int, tuple[int, int]]:
        with self._lock:
            return dict(self._ranges)


__all__ = ["ColumnMap"]
