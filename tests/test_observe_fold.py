"""Runtime._fold (observe=True and "exact"): the fold of stamped submissions into lane
busy time, latencies and the trace gives, to the last bit, what a region-by-region fold
gives -- for runs of one graph's submissions (which share their plan's infos) and for
items interleaved from several graphs and lanes, stamps before their submission
included."""

from __future__ import annotations

from typing import Any

import hrx_core as hrx
from hypothesis import given, settings
from hypothesis import strategies as st

from hrx_core.execution import Runtime, RuntimeOptions
from hrx_core.execution.graph import RegionInfo


def _reference(lanes: dict[str, float], items: list[tuple[Any, ...]]) -> tuple[dict[str, list[Any]], dict[str, list[float]], list[int]]:
    """The fold region by region, as the runtime did it before it looked up a run's
    regions once (``lanes``: each lane's last_end, updated in place)."""
    busy: dict[str, list[Any]] = {}
    latencies: dict[str, list[float]] = {}
    for regions, ends, submitted, _ in items:
        for i, region in enumerate(regions):
            end = ends[i]
            start = max(submitted, lanes[region.lane])
            if end > lanes[region.lane]:
                lanes[region.lane] = end
            b = busy.get(region.lane)
            if b is None:
                b = busy[region.lane] = [0.0, 0]
            b[0] += max(0.0, end - start)
            b[1] += 1
            latencies.setdefault(region.name, []).append(max(0.0, end - submitted))
    events = [len(regions) + 1 + sum(len(r.deps) for r in regions) for regions, *_ in items]
    return busy, latencies, events


_LANES = ("compute", "upload")
_INFOS = [
    (RegionInfo("a", "compute", (), "g"),),
    (RegionInfo("b", "upload", (), "h"), RegionInfo("c", "compute", (0,), "h")),
    (RegionInfo("a", "compute", (), "g2"), RegionInfo("d", "upload", (0,), "g2"), RegionInfo("e", "upload", (0, 1), "g2")),
]
_times = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_INFOS) - 1), st.integers(1, 4), _times,
                          st.lists(_times, min_size=3, max_size=3)), min_size=1, max_size=24),
       st.lists(_times, min_size=2, max_size=2))
def test_the_fold_matches_a_region_by_region_fold(runs: list[tuple[int, int, float, list[float]]], start: list[float]) -> None:
    dev = hrx.device("host")
    rt = Runtime(dev, RuntimeOptions(observe=True))
    try:
        items = []
        for which, repeat, submitted, ends in runs:  # a run: one graph submitted `repeat` times
            infos = _INFOS[which]
            for k in range(repeat):
                items.append((infos, [e + 0.5 * k for e in ends[: len(infos)]], submitted + 0.25 * k, None))
        for name, t in zip(_LANES, start):
            rt.lanes[name].last_end = t
        expected_lanes = {name: rt.lanes[name].last_end for name in _LANES}
        busy, latencies, events = _reference(expected_lanes, items)
        seen: dict[str, Any] = {}
        rt.stats._lanes_busy = lambda b: seen.__setitem__("busy", b)  # type: ignore[method-assign]
        rt.profile._record_many = lambda lat: seen.__setitem__("latencies", lat)  # type: ignore[method-assign]
        before = len(rt._trace_pending)
        rt._fold(items)
        assert seen["busy"] == busy and list(seen["busy"]) == list(busy)
        assert seen["latencies"] == latencies and list(seen["latencies"]) == list(latencies)
        assert {name: rt.lanes[name].last_end for name in _LANES} == expected_lanes
        assert [n for _, _, n in list(rt._trace_pending)[before:]] == events
    finally:
        rt.close()
