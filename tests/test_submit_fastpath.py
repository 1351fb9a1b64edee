"""The runtime's compiled resubmission (hrx_core.fastpath.Submitter) against the Python path.

Every engine present. Once a submission left each region of a graph able to skip the
hazard scan, ``Runtime.submit`` of that graph runs in one C call: the same events,
Submission, room, counters and observation as the Python path. It does nothing (and
the Python path runs) wherever that path would do more: no room, a lane reserved by
another thread, another graph submitted in between, a region added, a closed graph
or runtime, ``block=False`` or a timeout, the fast resubmission switched off.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core import fastpath
from hrx_core.completion import Completion
from hrx_core.execution import Runtime, RuntimeOptions

from .conftest import compiled_or_python, run_threads
from .kernels import ADD_U32, SLEEPY

MODES = ["compiled", "python"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the compiled resubmission, then with the Python path only."""
    return compiled_or_python(request.param, monkeypatch, lambda mp: mp.setattr(
        Runtime, "_make_fast_submit", lambda self, graph, plan: setattr(graph, "_fast_submit", False)))


def _pipeline(rt: Runtime) -> tuple[Any, Any, Any, Any]:
    """An upload -> add 3 -> download graph over one buffer, and a one-region graph
    adding 1 to another buffer."""
    x, y = rt.allocate(256), rt.allocate(256)
    init = rt.graph("init")
    init.upload(y, np.zeros(64, np.uint32))
    rt.submit(init).wait(60)
    g = rt.graph("round")
    up = g.upload(x, np.zeros(64, np.uint32))
    g.compute("add", lambda r: r.dispatch(ADD_U32, 1, [x], block=64, scalars=(3, 64)))
    down = g.download(x)
    h = rt.graph("count")
    h.compute("inc", lambda r: r.dispatch(ADD_U32, 1, [y], block=64, scalars=(1, 64)))
    return g, up, down, h


def _scenario(dev: hrx.Device, observe: Any) -> dict[str, Any]:
    rt = Runtime(dev, RuntimeOptions(observe=observe))
    try:
        g, up, down, h = _pipeline(rt)
        counts = []
        subs = []
        for i in range(4):
            up.write(np.full(64, i, np.uint32))
            subs.append(rt.submit(g))
            for _ in range(3):  # back to back: the compiled resubmission, once made
                subs.append(rt.submit(h))
            subs[-1].wait(60)
            counts.append(down.read(np.uint32, timeout=60)[0])
        for _ in range(5):
            subs.append(rt.submit(h))
        rt.synchronize(60)
        y = rt.lane("compute").stream.download(_buffer_of(h))
        snap = rt.stats.snapshot()
        out = {
            "counts": [int(c) for c in counts],
            "y": int(y.view(np.uint32)[0]),
            "sequences": [s.sequence for s in subs],
            "regions": [len(s.events) for s in subs],
            "complete": all(s.is_complete for s in subs),
            "failures": [s.failure for s in subs],
            "stats": {k: snap[k] for k in ("submissions", "regions", "upload_bytes", "download_bytes")},
            "pending": len(rt._pending),
            "room": rt._room_taken,
            "hits": getattr(h._fast_submit, "hits", 0),
        }
        if observe:
            summary = rt.profile.summary()
            out["profile"] = {name: summary[name]["count"] for name in ("inc", "add")}
            out["lane_regions"] = dict(snap["lane_regions"])
        return out
    finally:
        rt.close()


def _buffer_of(graph: Any) -> Any:
    return graph.regions[0].device_graph.nodes[0].refs[0][0]


@pytest.mark.parametrize("observe", [False, True, "exact"])
def test_resubmissions_match_the_python_path(dev: hrx.Device, mode: str, observe: Any) -> None:
    got = _scenario(dev, observe)
    assert got["counts"] == [3, 4, 5, 6]
    assert got["y"] == 17
    assert got["sequences"] == list(range(1, 1 + len(got["sequences"])))  # (0: the initial upload)
    assert got["complete"] and not any(got["failures"])
    assert got["stats"]["submissions"] == 1 + 4 + 17 and got["pending"] == 0 and got["room"] == 0
    if observe:
        assert got["profile"] == {"inc": 17, "add": 4}
    # every resubmission of the one-region graph after its first (the first of each
    # group of three follows the pipeline: a scan) goes through C
    assert got["hits"] == (0 if mode == "python" else 4 * 2 + 5)


def test_a_submitter_is_made_after_a_submission_that_left_every_region_able_to_skip_the_scan(
        dev: hrx.Device, mode: str) -> None:
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        g, _, _, h = _pipeline(rt)
        assert h._fast_submit is None
        rt.submit(h)
        if mode == "python":
            assert h._fast_submit is False
            return
        fast = h._fast_submit
        assert isinstance(fast, fastpath.module().lib.Submitter) and fast.plan is h.submit_plan()
        rt.submit(h)
        assert (fast.hits, fast.misses) == (1, 0)
        # a region added: a new plan, so the submitter is dropped and made again
        z = rt.allocate(256)
        zero = rt.graph("zero")
        zero.fill(z, 0)
        rt.submit(zero).wait(60)
        h.compute("more", lambda r: r.dispatch(ADD_U32, 1, [z], block=64, scalars=(1, 64)))
        assert h._fast_submit is None
        rt.submit(h)
        rt.submit(h)  # two regions: each submission scans (see _fast_submit_wanted)
        assert h._fast_submit is None
        rt.synchronize(60)
        s = rt.lane("compute").stream
        assert (s.download(_buffer_of(h)).view(np.uint32)[0], s.download(z).view(np.uint32)[0]) == (4, 2)
    finally:
        rt.close()


def test_what_it_leaves_to_the_python_path(dev: hrx.Device, mode: str) -> None:
    if mode == "python":
        pytest.skip("the compiled resubmission's refusals")
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        g, up, down, h = _pipeline(rt)
        rt.submit(h)
        rt.submit(h)
        fast = h._fast_submit
        hits, misses = fast.hits, fast.misses
        # another graph submitted in between: the next one scans again (no change)
        rt.submit(g)
        rt.submit(h)
        assert (fast.hits, fast.misses) == (hits, misses + 1)
        rt.submit(h)
        assert fast.hits == hits + 1
        # block=False and a timeout take the Python path without asking it
        rt.submit(h, block=False)
        rt.submit(h, timeout=30)
        assert (fast.hits, fast.misses) == (hits + 1, misses + 1)
        # the fast resubmission switched off
        rt.fast_resubmit = False
        rt.submit(h)
        assert fast.misses == misses + 2
        rt.fast_resubmit = True
        rt.submit(h)  # (scanned: the note was not kept meanwhile)
        rt.submit(h)
        assert fast.hits == hits + 2
        rt.synchronize(60)
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 9
        # a closed graph is refused by the Python path
        h.close()
        with pytest.raises(hrx.InvalidArgument, match="closed"):
            rt.submit(h)
        assert h._fast_submit is None
    finally:
        rt.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        rt.submit(g)


def test_no_room_waits_in_the_python_path(dev: hrx.Device, mode: str) -> None:
    """max_submissions=1 with a slow submission in flight: the next one finds no room,
    the compiled resubmission leaves it, and the Python path waits for room."""
    rt = Runtime(dev, RuntimeOptions(observe=False, max_submissions=1))
    try:
        flag = rt.allocate(64)
        slow = rt.graph("slow")
        slow.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [flag], block=1, scalars=(np.uint64(50_000_000),)))
        rt.submit(slow).wait(60)
        rt.submit(slow).wait(60)
        fast = slow._fast_submit
        t = time.perf_counter()
        first = rt.submit(slow)
        second = rt.submit(slow)  # waits for the first to make room
        assert first.is_complete and time.perf_counter() - t >= 0.04
        with pytest.raises(hrx.QueueFull):
            rt.submit(slow, block=False)
        second.wait(60)
        if mode == "compiled":
            assert fast.hits >= 1 and fast.misses >= 1
        assert rt._room_taken == 0 and len(rt._pending) <= 1
    finally:
        rt.close()


def test_a_lane_reserved_by_another_thread_is_waited_for(dev: hrx.Device, mode: str) -> None:
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        _, _, _, h = _pipeline(rt)
        rt.submit(h)
        rt.submit(h)
        reserved, release = threading.Event(), threading.Event()

        def hold() -> None:
            rt._reserve_lane("compute")
            reserved.set()
            release.wait(30)
            rt._release_lane("compute")

        t = threading.Thread(target=hold)
        t.start()
        reserved.wait(30)
        threading.Timer(0.05, release.set).start()
        start = time.perf_counter()
        rt.submit(h).wait(60)
        assert time.perf_counter() - start >= 0.04  # waited for the reservation
        t.join(30)
        if mode == "compiled":
            assert h._fast_submit.misses >= 1
        rt.synchronize(60)
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 3
    finally:
        rt.close()


@pytest.mark.parametrize("signals", ["each", "lazy"])
def test_a_failing_encode_changes_nothing_and_gives_the_room_back(dev: hrx.Device, mode: str, signals: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The region of a resubmission fails to encode: the error is raised, the room is
    given back, nothing is pending or quarantined -- as in the Python path; afterwards
    the graph submits normally (through C again)."""
    from hrx_core.execution import runtime as runtime_mod

    rt = Runtime(dev, RuntimeOptions(observe=False, signals=signals))
    try:
        _, _, _, h = _pipeline(rt)
        rt.submit(h).wait(60)
        rt.submit(h).wait(60)
        region = h.regions[0]

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise hrx.DeviceError("injected encode failure")

        # the region's encode and, for lazy signals (cuda's), the replay it makes
        monkeypatch.setattr(region, "encode_signaled", refuse)
        monkeypatch.setattr(region.device_graph, "_fast", None)
        monkeypatch.setattr(region.device_graph, "_launch_signaled_py", refuse)
        encodes = [0]
        real = runtime_mod.Runtime._encode

        def counted(self: Runtime, *args: Any) -> Any:
            encodes[0] += 1
            return real(self, *args)

        monkeypatch.setattr(runtime_mod.Runtime, "_encode", counted)
        pending, sequence, last = len(rt._pending), rt._sequence, region.last
        with pytest.raises(hrx.DeviceError, match="injected"):
            rt.submit(h)
        assert encodes[0] == (0 if mode == "compiled" else 1)  # (the compiled one encodes in C)
        assert (rt._room_taken, len(rt._pending), rt._sequence, region.last) == (0, pending, sequence, last)
        assert not rt._quarantined
        monkeypatch.undo()
        rt.submit(h).wait(60)
        if mode == "compiled":
            assert h._fast_submit.hits == 2
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 3
    finally:
        rt.close()


def test_threads_resubmitting_one_graph(dev: hrx.Device, mode: str) -> None:
    rt = Runtime(dev, RuntimeOptions(observe=True, max_submissions=8))
    try:
        _, _, _, h = _pipeline(rt)
        rt.submit(h).wait(60)
        subs: list[Any] = []
        lock = threading.Lock()

        def work(_: int) -> None:
            mine = [rt.submit(h) for _ in range(40)]
            with lock:
                subs.extend(mine)

        run_threads(4, work, timeout=60)
        rt.synchronize(60)
        assert sorted(s.sequence for s in subs) == list(range(2, 2 + 160))
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 161
        assert rt.stats.snapshot()["submissions"] == 162 and rt._room_taken == 0
        assert rt.profile.summary()["inc"]["count"] == 161
    finally:
        rt.close()


def test_a_region_class_with_its_own_encode_is_encoded_through_it(dev: hrx.Device, mode: str) -> None:
    """The submitter replays a recorded region's graph itself only where the region's
    class encodes as the recorded regions do; a subclass's own ``encode_signaled`` is
    called on every submission, compiled or not."""
    from hrx_core.execution.graph import ComputeRegion

    calls = [0]

    class Counted(ComputeRegion):
        def encode_signaled(self, lane: Any, lazy: bool = False) -> Any:
            calls[0] += 1
            return super().encode_signaled(lane, lazy)

    rt = Runtime(dev, RuntimeOptions(observe=False, signals="lazy"))
    try:
        _, _, _, h = _pipeline(rt)
        h.regions[0].__class__ = Counted
        for _ in range(5):
            rt.submit(h)
        rt.synchronize(60)
        assert calls[0] == 5
        if mode == "compiled":
            assert h._fast_submit.hits == 4
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 5
    finally:
        rt.close()


def test_c_made_objects_have_the_python_made_fields(dev: hrx.Device, mode: str) -> None:
    """The compiled resubmission builds its Event and Submission without calling their
    __init__ (and re-points the in-flight entries without calling _Inflight.replace):
    the fields must be exactly what the Python path sets, so that a field added there
    is not missing here."""
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        _g, _up, _down, h = _pipeline(rt)
        first = rt.submit(h)  # the Python path (a scan)
        first.wait(60)  # (finished cleanly: the next one inherits nothing from it)
        again = rt.submit(h)  # compiled in compiled mode
        if mode == "compiled":
            assert h._fast_submit.hits == 1
        assert type(again) is type(first) and not hasattr(again, "__dict__")  # (slots only: a new field is a new slot)
        fields = [k for k in type(first).__slots__ if k != "__weakref__"]
        assert [hasattr(again, k) for k in fields] == [hasattr(first, k) for k in fields] == [True] * len(fields)
        assert again.sequence == first.sequence + 1 and again._settled is False and again.graph is h
        assert again.owners is first.owners and again.runtime is rt
        (e1,), (e2,) = first.events, again.events
        slots = type(e1).__slots__
        assert [getattr(e2, k) is not None or k in ("resolved", "timestamp") for k in slots] == [True] * len(slots)
        assert e2.upstream == () and e2.resolved is None and e2.timestamp is None
        assert e2.completion.value > e1.completion.value
        stream = rt.lane(h.regions[0].lane).stream
        assert stream._reported == len(stream._values) and stream._waited == []
        region = h.regions[0]
        assert region.last is e2
        # the region's in-flight entries name the new event
        entries = [x for lst in rt._inflight._entries.values() for x in lst]
        assert any(x[3] is e2 for x in entries) and not any(x[3] is e1 for x in entries)
        again.wait(60)
    finally:
        rt.close()


def test_a_resubmission_behind_its_running_predecessor_carries_it_upstream(dev: hrx.Device, mode: str) -> None:
    """A region that reads what it writes, resubmitted while its previous submission
    still runs: the new event lists that one upstream (its failure would be this
    one's), compiled or not; resubmitted after it finished cleanly, it lists nothing."""
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        x = rt.allocate(256)
        init = rt.graph("init")
        init.upload(x, np.zeros(64, np.uint32))
        rt.submit(init).wait(60)
        g = rt.graph("slow_inc")

        def body(r: Any) -> None:
            r.dispatch(SLEEPY, 1, [x.slice(128, 64)], block=1, scalars=(np.uint64(50_000_000),))
            r.dispatch(ADD_U32, 1, [x], block=64, scalars=(1, 32))

        g.compute("slow_inc", body)
        assert g.regions[0].reads_own_writes
        rt.submit(g).wait(60)
        done = rt.submit(g)
        done.wait(60)
        running = rt.submit(g)
        behind = rt.submit(g)  # 50 ms of sleep ahead of it
        (e_done,), (e_running,), (e_behind,) = done.events, running.events, behind.events
        assert e_running.upstream == () and e_behind.upstream == (e_running,)
        if mode == "compiled":
            assert g._fast_submit.hits == 3
        behind.wait(60)
        assert rt.lane("compute").stream.download(x).view(np.uint32)[:2].tolist() == [4, 4]
    finally:
        rt.close()


def test_runtime_submit_is_a_compiled_entry_once_built(dev: hrx.Device) -> None:
    """Once a submitter is made, Runtime.submit is the compiled entry: it hands the graph
    to its submitter where that was made for this runtime; other calls (options given,
    another runtime's graph, not a graph) run the Python function, with its checks."""
    import inspect

    if not fastpath.module().compiled:
        pytest.skip(f"compiled resubmission not built here: {fastpath.module().reason}")
    rt = Runtime(dev, RuntimeOptions(observe=False))
    other = Runtime(dev, RuntimeOptions(observe=False))
    try:
        _, _, _, h = _pipeline(rt)
        for _ in range(3):
            rt.submit(h)
        entry = Runtime.__dict__["submit"]
        assert type(entry).__name__ == "FastEntry" and entry.kind == fastpath.ENTRY_KINDS["runtime_submit"]
        assert entry.rest is Runtime._submit_py and entry.__wrapped__.__name__ == "submit"
        assert list(inspect.signature(Runtime.submit).parameters) == ["self", "graph", "block", "timeout"]
        assert "Submit every region" in Runtime.submit.__doc__
        fast = h._fast_submit
        calls = fast.hits + fast.misses
        rt.submit(h)
        Runtime.submit(rt, h)  # unbound, through the class
        assert fast.hits + fast.misses == calls + 2
        rt.submit(h, block=True)  # an option given: the Python function (and its own compiled attempt)
        assert fast.hits + fast.misses == calls + 3
        with pytest.raises(hrx.InvalidArgument, match="TrackedGraph of this runtime"):
            other.submit(h)  # another runtime's submitter: not asked
        assert fast.hits + fast.misses == calls + 3
        with pytest.raises(hrx.InvalidArgument, match="TrackedGraph"):
            rt.submit(object())  # type: ignore[arg-type]
        rt.synchronize(60)
        y = rt.lane("compute").stream.download(_buffer_of(h))
        assert int(y.view(np.uint32)[0]) == 6
    finally:
        other.close()
        rt.close()


def _finished_in_flight(rt: Runtime, graph: Any, count: int) -> list[Any]:
    """``count`` submissions of ``graph``, each finished on its queue before the next
    (the lane drained) but none settled: the runtime still counts them in flight."""
    subs = []
    for _ in range(count):
        subs.append(rt.submit(graph))
        rt.lane(graph.regions[0].lane).stream.synchronize(60)
    return subs


@pytest.mark.parametrize("observe", [False, True])
def test_out_of_room_settles_what_finished_without_the_python_path(dev: hrx.Device, mode: str, observe: bool) -> None:
    """max_submissions reached with every submission finished: the compiled
    resubmission settles them (oldest first, once each) and goes on -- no call left to
    the Python path -- and the room, counts and results are the Python path's."""
    rt = Runtime(dev, RuntimeOptions(observe=observe, max_submissions=4))
    try:
        _, _, _, h = _pipeline(rt)
        rt.submit(h).wait(60)
        rt.submit(h).wait(60)
        fast = h._fast_submit
        hits, misses = (fast.hits, fast.misses) if mode == "compiled" else (0, 0)
        subs = _finished_in_flight(rt, h, 21)
        if mode == "compiled":
            assert (fast.hits, fast.misses) == (hits + 21, misses)
        # every settle freed room for the next: the oldest ones are settled, the newest in flight
        assert len(rt._pending) <= 4 and rt._room_taken == 0
        assert all(s._settled for s in subs[:-4]) and list(rt._pending) == subs[-len(rt._pending):]
        for s in subs:
            s.wait(60)  # (a settled one returns at once)
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 23
        assert rt.stats.snapshot()["submissions"] == 24  # init, 2, 21
        if observe:
            assert rt.profile.summary()["inc"]["count"] == 23
        assert rt.quarantined == []
    finally:
        rt.close()


def test_observed_resubmissions_are_noticed_together_and_leave_the_unstamped_queue(dev: hrx.Device, mode: str) -> None:
    """observe=True: what finished since the last notice is stamped with one reading at
    the next submission, oldest first, and leaves the unstamped queue (in C where the
    resubmission is compiled); a submission still running stays unstamped."""
    rt = Runtime(dev, RuntimeOptions(observe=True, signals="lazy"))
    try:
        h, _ = _warm_submitter(rt)
        lane = rt.lane("compute")
        lane.stream.synchronize(60)
        rt.submit(h)  # (notices the warm-up's submissions)
        lane.stream.synchronize(60)
        first = len(rt._observed)
        for _ in range(6):
            rt.submit(h)  # each notices the one before it: back to back, it may still run
        lane.stream.synchronize(60)
        assert len(rt._unstamped) >= 1
        last = rt.submit(h)
        items = list(rt._observed)[first:]
        # (each item keeps a list of the submission's Events of its own, emptied once stamped)
        assert len(items) == 7 and items[-1][3] == last.events and items[-1][3] is not last.events
        assert all(i[3] == [] for i in items[:-1])
        assert [i[1][0] for i in items[-1:]] == [0.0] and list(rt._unstamped) == items[-1:]
        stamps = [i[1][0] for i in items[:-1]]
        assert all(t > 0.0 for t in stamps) and stamps == sorted(stamps)
        assert all(i[1][0] >= i[2] for i in items[:-1])  # (never before it was submitted)
        assert stamps[-1] <= last.submitted or stamps[-1] == stamps[-2]  # (the last ones: this notice's one reading)
        rt.synchronize(60)
        assert rt.profile.summary()["inc"]["count"] == 2 + 1 + 6 + 1
    finally:
        rt.close()


def test_an_observed_item_the_compiled_notice_does_not_expect_goes_to_the_python_method(dev: hrx.Device) -> None:
    """An unstamped entry that is not what the runtime makes (here its ends are a list
    subclass) is left to Runtime._notice, which stamps it; the compiled notice's own
    stamps stay."""
    _compiled_only()

    class Ends(list):
        pass

    rt = Runtime(dev, RuntimeOptions(observe=True, signals="lazy"))
    calls = [0]
    notice = rt._notice
    rt._notice = lambda: (calls.__setitem__(0, calls[0] + 1), notice())[1]
    try:
        h, fast = _warm_submitter(rt)
        lane = rt.lane("compute")
        lane.stream.synchronize(60)
        rt.submit(h)
        lane.stream.synchronize(60)
        before = calls[0]
        rt.submit(h)  # a plain notice: the compiled one
        assert calls[0] == before and len(rt._unstamped) == 1
        lane.stream.synchronize(60)
        item = rt._unstamped[0]
        odd = (item[0], Ends(item[1]), item[2], item[3])
        rt._unstamped[0] = odd
        rt._observed[-1] = odd
        rt.submit(h)
        assert calls[0] == before + 1  # the Python method finished the notice
        assert odd[1][0] > 0.0 and list(rt._unstamped) == [rt._observed[-1]]
        rt.synchronize(60)
        assert rt.profile.summary()["inc"]["count"] == 2 + 3
    finally:
        rt.close()


def test_a_failure_met_while_settling_quarantines_like_the_python_path(mode: str) -> None:
    """A failed submission among the finished ones the compiled resubmission settles:
    its owners are quarantined (the Python method, asked because the timeline shows a
    failure), its wait raises, the clean ones settle, and the runtime goes on."""
    from .test_runtime_faults import BOOM

    dev = hrx.open_device("host", jitter_us=0)
    rt = Runtime(dev, RuntimeOptions(observe=False, max_submissions=4, signals="each"))
    reasons: list[tuple[str, list[Any]]] = []
    quarantine = rt._quarantine
    rt._quarantine = lambda owners, reason: (reasons.append((reason, list(owners))), quarantine(owners, reason))[1]
    try:
        _, _, _, h = _pipeline(rt)
        x = rt.allocate(64)
        bad = rt.graph("bad")
        bad.compute("boom", lambda r: r.dispatch(BOOM, 1, [x]))
        rt.submit(h).wait(60)
        rt.submit(h).wait(60)
        failed = rt.submit(bad)
        rt.lane("compute").stream.synchronize(60)
        subs = _finished_in_flight(rt, h, 3)  # the first after `bad` scans again
        hits = h._fast_submit.hits if mode == "compiled" else 0
        assert len(rt._pending) == 4 and not failed._settled
        more = rt.submit(h)  # no room: the four are settled
        if mode == "compiled":
            assert h._fast_submit.hits == hits + 1
        assert failed._settled and all(s._settled for s in subs) and list(rt._pending) == [more]
        bad_reasons = [(r, o) for r, o in reasons if r.startswith("failed")]
        assert len(bad_reasons) == 1 and x.allocation in bad_reasons[0][1]
        with pytest.raises(hrx.DeviceError, match="injected"):
            failed.wait(60)
        for s in (*subs, more):
            s.wait(60)
        rt.synchronize(60)
        assert rt.quarantined == []
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 6
    finally:
        rt.close()


def test_pending_entries_it_does_not_know_are_settled_by_the_python_method(dev: hrx.Device, mode: str) -> None:
    """A pending submission of another class (a subclass here) is not settled in C: the
    Python method settles them all, and the compiled resubmission goes on."""
    from hrx_core.execution.runtime import Submission

    class Other(Submission):
        __slots__ = ()

    calls = [0]
    rt_settle = Runtime._settle_finished

    def counted(self: Runtime) -> None:
        calls[0] += 1
        rt_settle(self)

    rt = Runtime(dev, RuntimeOptions(observe=False, max_submissions=4))
    try:
        _, _, _, h = _pipeline(rt)
        rt.submit(h).wait(60)
        rt.submit(h).wait(60)
        subs = _finished_in_flight(rt, h, 4)
        subs[0].__class__ = Other
        rt._settle_finished = counted.__get__(rt)  # type: ignore[method-assign]
        hits = h._fast_submit.hits if mode == "compiled" else 0
        more = rt.submit(h)
        assert calls[0] == 1 and all(s._settled for s in subs) and list(rt._pending) == [more]
        if mode == "compiled":
            assert h._fast_submit.hits == hits + 1
        more.wait(60)
    finally:
        rt.close()


def test_the_resubmit_note_is_read_by_index_only_where_its_fields_are_known() -> None:
    """The submitter reads a region's _Resubmit note by tuple index (generation, slot,
    places) once it checked the class's fields; a class with other fields is read by
    name (nothing is misread if the named tuple changes)."""
    from typing import NamedTuple

    from hrx_core.completion import Event
    from hrx_core.execution.runtime import Submission, _Resubmit

    assert _Resubmit._fields[:3] == ("generation", "slot", "places")
    mod = fastpath.module()
    if not mod.compiled:
        pytest.skip(f"hrx_core.fastpath not built here: {mod.reason}")

    class Other(NamedTuple):
        slot: Any
        generation: int
        places: Any

    dev = hrx.open_device("host")
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        _, _, _, h = _pipeline(rt)
        rt.submit(h).wait(60)
        rt.submit(h).wait(60)
        fast = h._fast_submit
        region = h.regions[0]
        note = region.resubmit
        assert type(note) is _Resubmit
        by_name = type(fast)(rt, fast.plan, ((region, rt.lane(region.lane), True, region.reads_own_writes, True),),
                             Submission, Event, time.perf_counter, False, 64, 1024, Other)
        region.resubmit = Other(note.slot, note.generation, note.places)
        hits = by_name.hits
        sub = by_name(h)
        assert sub is not None and by_name.hits == hits + 1
        sub.wait(60)
        rt.synchronize(60)
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 3
    finally:
        rt.close()


def test_threads_settling_while_others_resubmit_settle_each_submission_once(dev: hrx.Device, mode: str) -> None:
    """Four threads resubmit one graph under max_submissions=4 (the compiled
    resubmission settles the finished head whenever room runs out) while two others
    wait on those submissions (Submission._settle, the Python side): every submission
    is settled exactly once, none early, and every one ran."""
    rt = Runtime(dev, RuntimeOptions(observe=False, max_submissions=4))
    settles: dict[int, int] = {}
    lock = threading.Lock()
    real = rt._retired

    def counted(settled: Any) -> None:
        with lock:
            for s in settled:
                settles[id(s)] = settles.get(id(s), 0) + 1
        real(settled)

    try:
        _, _, _, h = _pipeline(rt)
        rt.submit(h).wait(60)
        rt.submit(h).wait(60)
        if mode == "compiled":
            # (the C settling pops the settled itself; count them by their flag instead)
            assert h._fast_submit is not None
        rt._retired = counted  # type: ignore[method-assign]
        made: list[Any] = []
        done = threading.Event()

        def submitter(_: int) -> None:
            for _ in range(30):
                s = rt.submit(h)
                with lock:
                    made.append(s)

        errors: list[BaseException] = []

        def waiter() -> None:
            try:
                while not done.is_set():
                    with lock:
                        some = list(made[-8:])
                    for s in some:
                        s.wait(60)
                        assert s._settled and s.is_complete
            except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
                errors.append(exc)

        waiters = [threading.Thread(target=waiter) for _ in range(2)]
        for t in waiters:
            t.start()
        try:
            run_threads(4, submitter, timeout=120)
        finally:
            done.set()
            for t in waiters:
                t.join(60)
        assert not any(t.is_alive() for t in waiters) and errors == []
        for s in made:
            s.wait(60)
        assert len(made) == 120 and all(s._settled for s in made)
        assert all(n == 1 for n in settles.values())  # the Python side never twice
        assert rt._room_taken == 0 and len(rt._pending) == 0
        rt.synchronize(60)
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 122
        assert rt.quarantined == []
    finally:
        rt.close()


def _compiled_only() -> None:
    if not fastpath.module().compiled:
        pytest.skip(f"compiled resubmission not built here: {fastpath.module().reason}")


def _warm_submitter(rt: Runtime) -> tuple[Any, Any]:
    """_pipeline's one-region graph submitted twice (its submitter made): it and the submitter."""
    _, _, _, h = _pipeline(rt)
    rt.submit(h).wait(60)
    rt.submit(h).wait(60)
    return h, h._fast_submit


def _spares(fast: Any) -> list[Any]:
    """The settled submissions a submitter keeps for reuse (it visits them for the GC)."""
    from hrx_core.execution import Submission

    return [x for x in gc.get_referents(fast) if type(x) is Submission]


@pytest.mark.parametrize("signals", ["auto", "lazy"])
def test_settled_submissions_nothing_holds_are_reused_with_fresh_fields(dev: hrx.Device, signals: str) -> None:
    """A settled submission that nothing but the settling holds is kept (with its events
    list and Event, every other field None but a Completion nothing else holds) and
    filled in by a later resubmission, its Completion by the replay where signals are
    lazy: the results, counts and each returned submission's fields are those of a new one."""
    _compiled_only()
    rt = Runtime(dev, RuntimeOptions(observe=False, max_submissions=4, signals=signals))
    try:
        h, fast = _warm_submitter(rt)
        hits, before = fast.hits, rt._sequence
        seen = []
        for i in range(40):
            s = rt.submit(h)
            assert s.runtime is rt and s.graph is h and s.owners is h._submit_plan.owners and not s._settled
            assert s.sequence == before + i and type(s.submitted) is float
            (e,) = s.events
            assert e.completion is not None and e.upstream == () and e.resolved is None and e.timestamp is None
            assert h.regions[0].last is e
            seen.append((s.sequence, e.completion.value))
            del s, e
            rt.lane("compute").stream.synchronize(60)
        assert fast.hits == hits + 40 and fast.recycled > 20  # (settled 4 at a time, kept, filled in again)
        if rt.lane("compute").lazy_signals:  # (their Events' Completions filled in by the replay)
            assert fast.refilled > 20
        else:  # (a signal each: the region's Python encode makes each Completion)
            assert fast.refilled == 0
        assert [q for q, _ in seen] == sorted(q for q, _ in seen) and len({v for _, v in seen}) == 40
        rt.synchronize(60)
        for _ in range(5):  # the fifth settles the ones before it and keeps them
            rt.submit(h)
            rt.lane("compute").stream.synchronize(60)
        assert _spares(fast)
        for spare in _spares(fast):  # a spare keeps nothing alive but a Completion nothing else holds
            # (and what its Submitter holds anyway, written back by the next resubmission
            # unchanged: the runtime and this graph's owners)
            assert (spare.graph, spare.submitted, spare.sequence) == (None,) * 3
            assert spare.runtime is rt and spare.owners is h._submit_plan.owners
            (e,) = spare.events
            assert (e.upstream, e.resolved, e.timestamp) == ((), None, None)
            c = e.completion
            assert c is None or (type(c) is Completion and sys.getrefcount(c) == 3)  # (e, c, the call's argument)
            del c
            assert repr(spare) == "<hrx.execution.Submission: settled, kept for reuse>"  # (what gc shows)
        rt.synchronize(60)
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 47
        assert rt.stats.snapshot()["submissions"] == 48  # init, 2, 40, 5
        assert rt.quarantined == []
    finally:
        rt.close()


def test_observed_submissions_let_their_events_go_once_stamped_and_are_reused(dev: hrx.Device, mode: str) -> None:
    """observe=True: the runtime's item for a submission keeps a list of its Events of its
    own, emptied once the ends are stamped -- the submission's own list stays whole --
    so a settled observed submission is reused like an unobserved one (compiled), and
    the profile, lane busy time and results are unchanged."""
    rt = Runtime(dev, RuntimeOptions(observe=True, max_submissions=4, signals="lazy"))
    try:
        h, fast = _warm_submitter(rt)
        lane = rt.lane("compute")
        held = []
        for i in range(40):
            s = rt.submit(h)
            if i % 10 == 0:
                held.append(s)
            del s
            lane.stream.synchronize(60)
        rt.synchronize(60)
        rt.profile.summary()  # (a fold: every item stamped, folded and emptied)
        assert all(len(s.events) == 1 and s.events[0].completion.is_complete for s in held)
        assert not rt._unstamped and all(item[3] == [] for item in rt._observed)
        if mode == "compiled":
            assert fast.hits >= 40 and fast.recycled > 20
        assert rt.profile.summary()["inc"]["count"] == 2 + 40
        assert rt.stats.snapshot()["lane_regions"]["compute"] == 2 + 40
        assert lane.stream.download(_buffer_of(h)).view(np.uint32)[0] == 42
    finally:
        rt.close()


@pytest.mark.parametrize("signals", ["auto", "lazy"])
def test_a_submission_something_holds_is_never_reused(dev: hrx.Device, signals: str) -> None:
    """Submissions the caller keeps, reaches through a weak reference, or whose event
    another reference holds are not kept: each stays what it was when made."""
    import weakref

    _compiled_only()
    rt = Runtime(dev, RuntimeOptions(observe=False, max_submissions=4, signals=signals))
    try:
        h, fast = _warm_submitter(rt)
        kept = _finished_in_flight(rt, h, 20)
        assert fast.recycled == 0 and len({id(s) for s in kept}) == 20
        assert [s.sequence for s in kept] == list(range(kept[0].sequence, kept[0].sequence + 20))
        assert all(s.runtime is rt and s.graph is h for s in kept)
        refs, events, completions = [], [], []
        for i in range(20):
            s = rt.submit(h)
            if i % 2:
                refs.append((weakref.ref(s), s.sequence))
            elif i % 4:
                events.append((s.events[0], s.events[0].completion))
            else:  # the Completion alone: its Event is settled with the submission
                c = s.events[0].completion
                completions.append((c, c.slot, c.value))
                del c
            del s
            rt.lane("compute").stream.synchronize(60)
            for ref, seq in refs:  # freed, or still its own: a weak reference never sees a reused one
                assert ref() is None or ref().sequence == seq
        rt.synchronize(60)
        assert all(ref() is None for ref, _ in refs)
        for e, c in events:
            assert e.completion is c and c.is_complete  # its own, untouched
        assert len(completions) == 5 and len({v for _, _, v in completions}) == 5
        for c, slot, value in completions:  # never filled in for a later replay
            assert c.slot is slot and c.value == value and c.is_complete
        assert all(s.runtime is rt and s.graph is h and s._settled for s in kept)
    finally:
        rt.close()


def test_a_spare_something_reached_meanwhile_is_dropped_not_reused(dev: hrx.Device) -> None:
    """A spare someone took hold of (gc.get_referents, gc.get_objects) after it was kept
    is dropped when the submitter next looks for one: never filled in under them."""
    _compiled_only()
    rt = Runtime(dev, RuntimeOptions(observe=False, max_submissions=4))
    try:
        h, fast = _warm_submitter(rt)
        for _ in range(6):
            rt.submit(h)
            rt.lane("compute").stream.synchronize(60)
        held = _spares(fast)
        assert held and fast.spares == len(held)
        for _ in range(12):
            rt.submit(h)
            rt.lane("compute").stream.synchronize(60)
        assert all(s.graph is None and s.sequence is None for s in held)  # dropped, untouched
        assert all("kept for reuse" in repr(s) for s in held)
        assert not any(s in held for s in _spares(fast))
        rt.synchronize(60)
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 20
    finally:
        rt.close()


def test_counted_runs_of_resubmissions_add_up_with_the_python_paths_counts(dev: hrx.Device, mode: str) -> None:
    """The compiled resubmission counts a run of one graph's submissions in one entry of
    the uncounted queue; interleaved with another graph's and the Python path's, read
    between and after: the statistics count every submission and region once."""
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        g, up, _, h = _pipeline(rt)
        total, regions = 1, 1  # init
        for rnd in range(5):
            for _ in range(7):
                rt.submit(h)
            total, regions = total + 7, regions + 7
            rt.submit(g)  # three regions, the Python path's counters between the runs
            total, regions = total + 1, regions + 3
            if rnd % 2:
                snap = rt.stats.snapshot()
                assert (snap["submissions"], snap["regions"]) == (total, regions)
        if mode == "compiled":
            assert any(type(x) is tuple for x in rt._uncounted)
        rt.synchronize(60)
        snap = rt.stats.snapshot()
        assert (snap["submissions"], snap["regions"]) == (total, regions)
        assert len(rt._uncounted) == 0
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 35
    finally:
        rt.close()


def test_the_submission_time_is_time_perf_counter(dev: hrx.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled resubmission stamps `submitted` with time.perf_counter's clock, read in
    C where that is CLOCK_MONOTONIC (Linux), else by calling the function it was given."""
    import sys

    _compiled_only()
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        h, fast = _warm_submitter(rt)
        assert fast.c_clock == (1 if sys.platform.startswith("linux") else 0)
        for _ in range(20):
            before = time.perf_counter()
            s = rt.submit(h)
            after = time.perf_counter()
            assert type(s.submitted) is float and before <= s.submitted <= after
    finally:
        rt.close()
    monkeypatch.setattr(time, "perf_counter", lambda: 1234.5)  # another clock: called
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        h, fast = _warm_submitter(rt)
        hits = fast.hits
        assert fast.c_clock == 0 and rt.submit(h).submitted == 1234.5 and fast.hits == hits + 1
    finally:
        rt.close()


def test_a_resubmission_waits_for_a_thread_inside_the_room_section(dev: hrx.Device) -> None:
    """The compiled resubmission runs its room sections without taking the runtime's
    space lock only while that lock is free: a thread holding it (inside _make_room, a
    settle, a reader of the pending queue) is waited for, and the room and the pending
    queue stay consistent."""
    _compiled_only()
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        h, fast = _warm_submitter(rt)
        assert fast.plain == 1
        hits = fast.hits
        inside, hold = threading.Event(), 0.3

        def holder() -> None:
            with rt._space_lock:
                inside.set()
                time.sleep(hold)

        t = threading.Thread(target=holder)
        t.start()
        assert inside.wait(30)
        start = time.perf_counter()
        s = rt.submit(h)
        waited = time.perf_counter() - start
        t.join(30)
        assert fast.hits == hits + 1 and waited >= hold * 0.8, f"did not wait for the lock ({waited:.3f} s)"
        assert rt._room_taken == 0 and list(rt._pending)[-1] is s
        s.wait(60)
        rt.synchronize(60)
        assert rt._room_taken == 0 and len(rt._pending) == 0
    finally:
        rt.close()


def test_a_pending_queue_that_is_not_a_deque_keeps_the_locks_taken(dev: hrx.Device) -> None:
    """The lock-free room sections need the runtime's own pending deque: a replaced one
    (a subclass, whose methods could run Python code) makes a submitter that takes the
    locks every time, with the same results."""
    import collections

    _compiled_only()

    class Pending(collections.deque):  # type: ignore[type-arg]
        pass

    rt = Runtime(dev, RuntimeOptions(observe=False))
    rt._pending = Pending()
    try:
        h, fast = _warm_submitter(rt)
        assert fast is not None and fast.plain == 0
        hits = fast.hits
        for _ in range(10):
            rt.submit(h)
        rt.synchronize(60)
        assert fast.hits == hits + 10 and rt._room_taken == 0 and len(rt._pending) == 0
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 12
    finally:
        rt.close()


def test_settle_settles_the_finished_prefix_of_every_graph(dev: hrx.Device) -> None:
    """Submitter.settle() (what Runtime.synchronize uses once its waits are done)
    settles the finished prefix of the runtime's whole pending queue, other graphs'
    submissions too; an uninitialized submitter refuses."""
    _compiled_only()
    Submitter = fastpath.module().lib.Submitter
    with pytest.raises(ValueError, match="not initialized"):
        Submitter.__new__(Submitter).settle()
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        g, up, down, h = _pipeline(rt)
        h, fast = _warm_submitter(rt)
        subs = [rt.submit(h), rt.submit(g), rt.submit(h)]
        for s in subs:
            for e in s.events:
                e.completion.wait_quiet(60)
        assert fast.settle() is True
        assert all(s._settled for s in subs) and len(rt._pending) == 0 and rt._room_taken == 0
        assert fast.settle() is False  # nothing left
        rt.synchronize(60)
    finally:
        rt.close()


def test_a_settling_of_more_than_64_submissions_settles_them_all(dev: hrx.Device, mode: str) -> None:
    """max_submissions above the compiled settling's stack (64): out of room with 100
    finished submissions, one settling takes all of them off the queue (oldest first,
    each once), and the results and counts are the Python path's."""
    rt = Runtime(dev, RuntimeOptions(observe=False, max_submissions=100))
    try:
        h, _ = _warm_submitter(rt)
        subs = _finished_in_flight(rt, h, 100)
        assert len(rt._pending) == 100 and not any(s._settled for s in subs)
        hits = h._fast_submit.hits if mode == "compiled" else 0
        more = rt.submit(h)  # no room: the hundred are settled
        if mode == "compiled":
            assert h._fast_submit.hits == hits + 1
        assert all(s._settled for s in subs) and list(rt._pending) == [more] and rt._room_taken == 0
        rt.synchronize(60)
        assert rt.lane("compute").stream.download(_buffer_of(h)).view(np.uint32)[0] == 103
        assert rt.stats.snapshot()["submissions"] == 104  # init, 2, 100, 1
    finally:
        rt.close()


def test_a_resubmission_proves_quarantined_owners_idle_as_the_python_path_does(dev: hrx.Device, mode: str,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """While owners wait in quarantine (or releases are in progress), each submission
    asks the runtime to prove them idle; otherwise it does not ask."""
    rt = Runtime(dev, RuntimeOptions(observe=False))
    try:
        h, fast = _warm_submitter(rt)
        calls = [0]
        prove = rt._prove_idle

        def counted() -> int:  # (counts; releases nothing, so the quarantine stays)
            calls[0] += 1
            return 0

        hits = fast.hits if fast else 0
        z = rt.allocate(64)
        monkeypatch.setattr(rt, "_prove_idle", counted)
        rt.submit(h).wait(60)
        assert calls[0] == 0
        rt._quarantine([z.allocation], "test")
        assert rt.quarantined
        calls[0] = 0
        rt.submit(h).wait(60)
        assert calls[0] == 1
        rt.submit(h).wait(60)
        assert calls[0] == 2
        monkeypatch.setattr(rt, "_prove_idle", prove)
        assert prove() == 1 and rt.quarantined == []
        monkeypatch.setattr(rt, "_prove_idle", counted)
        rt._releasing += 1  # a release in progress elsewhere
        try:
            rt.submit(h).wait(60)
        finally:
            rt._releasing -= 1
        assert calls[0] == 3
        rt.submit(h).wait(60)
        assert calls[0] == 3
        if mode == "compiled":
            assert fast.hits == hits + 5
    finally:
        rt.close()
