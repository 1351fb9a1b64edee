"""Byte-range hazard tracking: which earlier work must finish before new work.

Accesses are (key, start, end, writes) with key identifying an allocation. A read
depends on earlier overlapping writes; a write depends on earlier overlapping reads
and writes. Disjoint ranges of one allocation never depend on each other. A write
that covers an earlier entry replaces it: later work that overlaps the old entry
overlaps the write too, and so still orders after it transitively.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

Access = tuple[Hashable, int, int, bool]


class HazardTracker:
    """Dependency inference by byte-range intervals per allocation."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, list[tuple[int, int, bool, int]]] = {}

    def add(self, node: int, accesses: Iterable[Access]) -> set[int]:
        """Record ``node``'s accesses; return the earlier nodes it must follow."""
        accesses = list(accesses)
        deps: set[int] = set()
        for key, start, end, writes in accesses:
            for s, e, w, n in self._entries.get(key, ()):
                if s < end and start < e and (writes or w):
                    deps.add(n)
        for key, start, end, writes in accesses:
            entries = self._entries.setdefault(key, [])
            if writes:
                entries[:] = [x for x in entries if not (start <= x[0] and x[1] <= end and x[3] != node)]
            entries.append((start, end, writes, node))
        deps.discard(node)
        return deps

    def clear(self) -> None:
        self._entries.clear()
