"""Scoped tracked graphs and the checks the model layer makes on their access.

A :class:`ScopedGraph` is a :class:`~hrx_core.execution.TrackedGraph` whose region
names carry a scope (``"gpt2/slot0/attn"``): regions of different sessions and
slots stay apart in profiles and traces while sharing one runtime.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..buffer import Allocation
from ..execution.graph import Region, TrackedGraph
from .errors import SlotConflict

try:  # aliases (placement.Fabric.adopt) order as their original allocation
    from ..placement import backing_of
except ImportError:  # pragma: no cover - older cores without placement
    def backing_of(alloc: Allocation) -> Allocation:
        return alloc

if TYPE_CHECKING:
    from ..execution.runtime import Runtime
    from .tensor import DeviceTensor

#: (allocation, start, end, writes)
Span = tuple[Allocation, int, int, bool]


class ScopedGraph(TrackedGraph):
    """A tracked graph named ``f"{scope}/{name}"`` (or ``scope``) whose regions are
    named ``f"{scope}/{region}"``."""

    def __init__(self, runtime: Runtime, scope: str, name: str | None = None) -> None:
        super().__init__(runtime, scope if name is None else f"{scope}/{name}")
        self.scope = scope

    def _add(self, region: Region, after: Sequence[Region]) -> Region:
        region.name = f"{self.scope}/{region.name}"
        return super()._add(region, after)


def graph_spans(graph: TrackedGraph) -> list[Span]:
    """Every (allocation, start, end, writes) the graph's regions declare."""
    return [span for region in graph.regions for span in region.accesses]


def tensor_span(tensor: DeviceTensor, writes: bool) -> Span:
    view = tensor.view
    return (backing_of(view.buffer._alloc), view.start, view.end, writes)


def check_no_writes(spans: Iterable[Span], protected: Sequence[Span], what: str) -> None:
    """Raise SlotConflict if any writing span overlaps a protected range."""
    for alloc, start, end, writes in spans:
        if not writes:
            continue
        for p_alloc, p_start, p_end, _ in protected:
            if p_alloc is alloc and start < p_end and p_start < end:
                raise SlotConflict(f"{what}: writes bytes [{start}, {end}) of an immutable weight")


def check_private(spans_by_owner: Sequence[tuple[str, list[Span]]]) -> None:
    """Raise SlotConflict if two owners' spans overlap where either writes."""
    by_alloc: dict[int, list[tuple[int, int, bool, str]]] = {}
    for owner, spans in spans_by_owner:
        for alloc, start, end, writes in spans:
            for s, e, w, other in by_alloc.get(id(alloc), ()):
                if other != owner and s < end and start < e and (w or writes):
                    raise SlotConflict(
                        f"{owner} and {other} share writable memory (bytes [{max(s, start)}, {min(e, end)}) "
                        "of one allocation); independent slots need private I/O and scratch"
                    )
        for alloc, start, end, writes in spans:
            by_alloc.setdefault(id(alloc), []).append((start, end, writes, owner))
