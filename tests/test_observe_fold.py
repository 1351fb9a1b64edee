"""Runtime._fold (observe=True and "exact"): the fold of stamped submissions into lane
busy time, latencies and the trace gives, to the last bit, what a region-by-region fold
gives -- for runs of one graph's submissions (which share their plan's infos) and for
items interleaved from several graphs and lanes, stamps before their submission
included -- both where hrx_core.fastpath's compiled loops fold (fold_ready,
trace_defer) and where the Python loops do."""

from __future__ import annotations

import collections
from typing import Any

import hrx_core as hrx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrx_core import fastpath

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


_runs = st.lists(st.tuples(st.integers(0, len(_INFOS) - 1), st.integers(1, 4), _times,
                           st.lists(_times, min_size=3, max_size=3)), min_size=1, max_size=24)


def _compiled() -> bool:
    return fastpath.module().compiled


def _runtime(compiled: bool, **options: Any) -> Runtime:
    """A host runtime whose fold uses the compiled loops, or the Python ones."""
    if compiled and not _compiled():
        pytest.skip(f"no compiled hot path: {fastpath.module().reason}")
    rt = Runtime(hrx.device("host"), RuntimeOptions(observe=True, **options))
    if not compiled:
        rt._fold_fns = (None, None, None)
    return rt


def _items(runs: list[tuple[int, int, float, list[float]]]) -> list[tuple[Any, ...]]:
    items = []
    for which, repeat, submitted, ends in runs:  # a run: one graph submitted `repeat` times
        infos = _INFOS[which]
        for k in range(repeat):
            items.append((infos, [e + 0.5 * k for e in ends[: len(infos)]], submitted + 0.25 * k, None))
    return items


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@settings(max_examples=60, deadline=None)
@given(runs=_runs, start=st.lists(_times, min_size=2, max_size=2))
def test_the_fold_matches_a_region_by_region_fold(compiled: bool, runs: list[tuple[int, int, float, list[float]]],
                                                  start: list[float]) -> None:
    rt = _runtime(compiled)
    try:
        items = _items(runs)
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
        assert (rt._fold_fns[0] is not None) == compiled  # (the loops the test meant)
    finally:
        rt.close()


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(_runs, min_size=1, max_size=4), limit=st.integers(1, 40))
def test_the_trace_keeps_and_drops_what_the_python_loops_keep_and_drop(batches: list[Any], limit: int) -> None:
    """Folds into a trace of a few events: the submissions kept for it, their event
    counts, the lanes' ends of the dropped ones and the dropped count are the Python
    loops', and past the first what is kept stays under the limit."""
    if not _compiled():
        pytest.skip(f"no compiled hot path: {fastpath.module().reason}")
    results = []
    for compiled in (True, False):
        rt = _runtime(compiled, trace_events=limit)
        try:
            for runs in batches:
                rt._fold(_items(runs))
            kept = [(e[0][:3], e[1], e[2]) for e in rt._trace_pending]
            assert all(not e[0][3] for e in rt._trace_pending)  # (never the Events: None, or an emptied list)
            assert rt._trace_pending_events == sum(n for *_, n in kept)
            assert len(kept) == 1 or rt._trace_pending_events - kept[0][2] < limit
            results.append((kept, rt._trace_pending_events, dict(rt._trace_lane_end), rt.trace.dropped))
        finally:
            rt.close()
    assert results[0] == results[1]
    # the compiled loop drops all it should (nothing left for the Python loop after it)
    lib, pending, total = fastpath.module().lib, collections.deque(), 0
    for runs in batches:
        total, _ = lib.trace_defer(_items(runs), pending, 0, total, limit, {})
        assert len(pending) == 1 or total - pending[0][2] < limit


def test_items_the_compiled_fold_does_not_expect_are_folded_by_the_python_loop() -> None:
    """An item not as the runtime makes it (an int submission time, a tuple of ends)
    leaves the compiled loops without a change; the Python loops fold the lot, as the
    reference does."""
    if not _compiled():
        pytest.skip(f"no compiled hot path: {fastpath.module().reason}")
    lib = fastpath.module().lib
    good = (_INFOS[1], [2.0, 3.0], 1.0, None)
    for odd in ((_INFOS[0], [2.5], 1, None), (_INFOS[0], (2.5,), 1.0, None), (_INFOS[0], [2.5, 3.0], 1.0, None),
                (_INFOS[0], [2.5], 1.0), [_INFOS[0], [2.5], 1.0, None], ((("a", "nowhere", (), "g"),), [2.5], 1.0, None)):
        rt = _runtime(True)
        try:
            items = [good, odd]
            busy: dict[str, Any] = {}
            latencies: dict[str, Any] = {}
            assert lib.fold_ready(items, rt.lanes, busy, latencies) is False
            assert busy == {} and latencies == {} and all(lane.last_end == 0.0 for lane in rt.lanes.values())
            if odd[0] is _INFOS[0]:  # (a lane the runtime lacks is no matter to the trace)
                assert lib.trace_defer(items, rt._trace_pending, 0, 0, 100, {}) is None and not rt._trace_pending
            if odd[1] == [2.5] and len(odd) == 4 and odd[0] is _INFOS[0]:  # (one the Python loop folds)
                expected_lanes = {name: 0.0 for name in _LANES}
                expected = _reference(expected_lanes, [good, odd])
                seen: dict[str, Any] = {}
                rt.stats._lanes_busy = lambda b: seen.__setitem__("busy", b)  # type: ignore[method-assign]
                rt.profile._record_many = lambda lat: seen.__setitem__("latencies", lat)  # type: ignore[method-assign]
                rt._fold(items)
                assert (seen["busy"], seen["latencies"]) == expected[:2]
                assert {name: rt.lanes[name].last_end for name in _LANES} == expected_lanes
                assert [n for *_, n in rt._trace_pending] == expected[2]
        finally:
            rt.close()


def _take_python(waiting: collections.deque[Any]) -> list[Any]:
    """Runtime._fold_observed's partition written out: the stamped items, in order; the
    others back at the front of ``waiting``, in order."""
    items = list(waiting)
    waiting.clear()
    ready = [item for item in items if 0.0 not in item[1]]
    waiting.extendleft(reversed([item for item in items if 0.0 in item[1]]))
    return ready


_ends = st.lists(st.sampled_from([0.0, -0.0, 1.5, 2.0, 1e-300]), min_size=0, max_size=3)


@settings(max_examples=80, deadline=None)
@given(ends=st.lists(_ends, max_size=12), behind=st.lists(_ends, max_size=3))
def test_fold_take_partitions_as_the_python_lines(ends: list[list[float]], behind: list[list[float]]) -> None:
    """fastpath's fold_take: the same ready list and the same items left waiting, in the
    same order, as the Python lines (items still running stay for a later fold);
    ``behind``: items the deque holds at its front already (a fold that took none)."""
    if not _compiled():
        pytest.skip(f"no compiled hot path: {fastpath.module().reason}")
    take = fastpath.module().lib.fold_take
    items = [(_INFOS[0], e, 1.0, None) for e in behind + ends]
    waiting, expected_waiting = collections.deque(items), collections.deque(items)
    got = take(waiting)
    expected = _take_python(expected_waiting)
    assert [id(x) for x in got] == [id(x) for x in expected]
    assert [id(x) for x in waiting] == [id(x) for x in expected_waiting]


def test_fold_take_leaves_odd_items_to_the_python_lines() -> None:
    """An item whose ends are not a list of floats: None, and the deque as it was."""
    if not _compiled():
        pytest.skip(f"no compiled hot path: {fastpath.module().reason}")
    take = fastpath.module().lib.fold_take
    good = (_INFOS[0], [1.0], 1.0, None)
    for odd in ((_INFOS[0], (1.0,), 1.0, None), (_INFOS[0], [1], 1.0, None), [_INFOS[0], [1.0], 1.0, None], (_INFOS[0],)):
        waiting = collections.deque([good, odd, good])
        assert take(waiting) is None
        assert list(waiting) == [good, odd, good] and waiting[0] is good


def test_observe_folds_through_fold_take_and_keeps_running_submissions() -> None:
    """A runtime's fold takes the stamped submissions through fold_take where it is
    built (fails if the fold stops calling it) and keeps an unstamped one waiting."""
    if not _compiled():
        pytest.skip(f"no compiled hot path: {fastpath.module().reason}")
    rt = _runtime(True)
    try:
        calls: list[int] = []
        take = rt._compiled_fold()[2]
        rt._fold_fns = (rt._fold_fns[0], rt._fold_fns[1], lambda w: calls.append(len(w)) or take(w))  # type: ignore[index]
        done = (_INFOS[0], [2.0], 1.0, [])
        running = (_INFOS[0], [0.0], 1.5, [])
        folded: list[Any] = []
        rt._fold = folded.extend  # type: ignore[method-assign,assignment]
        rt._observed.extend([done, running])
        rt._fold_observed()
        assert calls == [2] and folded == [done] and list(rt._observed) == [running]
    finally:
        rt._observed.clear()
        rt.close()
