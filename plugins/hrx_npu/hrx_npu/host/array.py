"""The simulated array of an npu-host device: columns, their tile memory and locks.

An invocation occupies its program's columns for as long as it runs: it takes the
columns' locks (in column order, so contexts that time-share columns take turns and
never deadlock), loads its context where another context ran last (a context
switch), and re-establishes the columns' state -- the tile memory its contract
exposes as scratch is zeroed -- before the program runs. Nothing a previous
invocation left behind, of this context or another, is visible to the next one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np

PAGE = 4096


class HostArray:
    def __init__(self, columns: int, column_memory_bytes: int) -> None:
        self.columns = columns
        self.column_memory_bytes = column_memory_bytes
        self._locks = [threading.Lock() for _ in range(columns)]
        raw = np.zeros(columns * column_memory_bytes + PAGE, dtype=np.uint8)
        start = -raw.ctypes.data % PAGE
        self._raw = raw
        #: tile memory of each column (page-aligned)
        self.memory = [raw[start + c * column_memory_bytes : start + (c + 1) * column_memory_bytes] for c in range(columns)]
        self._last = [0] * columns
        self._stats_lock = threading.Lock()
        self.invocations = 0
        self.context_switches = 0
        self.state_resets = 0

    @contextlib.contextmanager
    def occupy(self, context: int, start: int, count: int, scratch_bytes: int) -> Iterator[list[np.ndarray]]:
        """Hold columns ``[start, start + count)`` for one invocation of ``context``;
        yields each column's scratch (zeroed)."""
        locks = self._locks[start : start + count]
        for lock in locks:
            lock.acquire()
        try:
            switches = 0
            scratch = []
            for c in range(start, start + count):
                if self._last[c] != context:
                    self._last[c] = context
                    switches += 1
                view = self.memory[c][:scratch_bytes]
                if scratch_bytes:
                    view.fill(0)
                scratch.append(view)
            with self._stats_lock:
                self.invocations += 1
                self.context_switches += switches
                self.state_resets += count
            yield scratch
        finally:
            for lock in reversed(locks):
                lock.release()
