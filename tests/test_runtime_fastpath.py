"""The runtime's resubmission costs: what a replay of the same graph does per call.

These check operations rather than time them (the machine may be busy): a graph's
lanes, owners and counters are computed once; registering a completion callback on
unfinished work asks the driver nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from hrx_core.conformance import adder_graph
from hrx_core.execution import Runtime, RuntimeOptions

from .conftest import count_calls
from .kernels import ADD_U32, INC_BYTES, SLEEPY


def test_the_submission_plan_is_computed_once_per_graph(dev):
    rt = Runtime(dev, RuntimeOptions(observe=False))
    x, y = rt.allocate(64), rt.allocate(64)
    g = rt.graph("two")
    g.compute("a", lambda r: r.dispatch(INC_BYTES, 1, [x], block=64, scalars=(np.uint32(64),)))
    plan = g.submit_plan()
    assert plan.lanes == {"compute"} and plan.owners == (x.allocation,)
    assert plan.counters["submissions"] == 1 and plan.counters["regions"] == 1
    rt.submit(g).wait()
    assert g.submit_plan() is plan  # cached
    g.compute("b", lambda r: r.dispatch(INC_BYTES, 1, [y], block=64, scalars=(np.uint32(64),)))
    plan2 = g.submit_plan()  # a new region invalidates it
    assert plan2 is not plan and plan2.owners == (x.allocation, y.allocation) and plan2.counters["regions"] == 2
    sub = rt.submit(g)
    sub.wait()
    assert tuple(sub.owners) == (x.allocation, y.allocation)
    assert rt.stats.get("submissions") == 2 and rt.stats.get("regions") == 3
    rt.close()


@pytest.mark.parametrize("observe", [False, True])
def test_submission_counters_are_added_when_read_and_stay_bounded(dev, observe, monkeypatch):
    """A submission's counters are added when the statistics are read (no lock taken
    per submission), each exactly once whoever reads; unread, they are added every
    _FOLD_AFTER submissions, so nothing grows without bound."""
    from hrx_core.execution import profile
    from hrx_core.execution.runtime import _FOLD_AFTER

    rt = Runtime(dev, RuntimeOptions(observe=observe))
    x = rt.allocate(64)
    g = rt.graph("one")
    g.compute("a", lambda r: r.dispatch(INC_BYTES, 1, [x], block=64, scalars=(np.uint32(64),)))
    locked = count_calls(monkeypatch, profile.RuntimeStats, "_add_counted")
    for _ in range(3):
        rt.submit(g)
    assert locked[0] == 0  # nothing added yet
    assert rt.stats.get("submissions") == 3 and rt.stats.snapshot()["regions"] == 3
    assert rt.stats.get("submissions") == 3  # added once
    for _ in range(_FOLD_AFTER + 5):
        rt.submit(g)
    assert len(rt._uncounted) <= _FOLD_AFTER
    rt.synchronize()
    assert rt.stats.get("submissions") == _FOLD_AFTER + 8 and rt.stats.get("regions") == _FOLD_AFTER + 8
    rt.close()


def test_a_callback_on_unfinished_work_does_not_poll_the_driver(dev, monkeypatch):
    s = dev.stream()
    flag = dev.allocate(8)
    done = s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(np.uint64(50_000_000),))
    polls = count_calls(monkeypatch, type(done.slot.timeline), "poll")
    fired = []
    done.add_done_callback(fired.append)
    assert polls[0] == 0 or done.is_complete  # registering asked the driver nothing
    done.wait(timeout=30)
    for _ in range(1000):
        if fired:
            break
        hrx_sleep()
    assert fired == [done]
    done.wait()
    flag.close()


def hrx_sleep() -> None:
    import time

    time.sleep(0.005)


def test_exact_observation_folds_in_when_read(dev, monkeypatch):
    """observe="exact" stamps each region's end in its completion callback and adds
    lane time, latency and trace slices only when they are read."""
    import time

    from hrx_core.execution.profile import RuntimeStats

    folded = [0]  # regions added to the lanes' busy time
    lanes_busy = RuntimeStats._lanes_busy

    def counted(self, busy):
        folded[0] += sum(regions for _, regions in busy.values())
        return lanes_busy(self, busy)

    monkeypatch.setattr(RuntimeStats, "_lanes_busy", counted)
    rt = Runtime(dev, RuntimeOptions(observe="exact"))
    x, y = rt.allocate(64), rt.allocate(64)
    g = rt.graph("two lanes")
    g.compute("a", lambda r: r.dispatch(INC_BYTES, 1, [x], block=64, scalars=(np.uint32(64),)))
    g.compute("b", lambda r: r.dispatch(INC_BYTES, 1, [y], block=64, scalars=(np.uint32(64),)))
    subs = [rt.submit(g) for _ in range(5)]
    for s in subs:
        s.wait()
    ends = rt._observed
    for _ in range(400):  # the notifier stamps every region
        if len(ends) == 5 and all(0.0 not in e[1] for e in ends):
            break
        time.sleep(0.005)
    assert folded[0] == 0  # the callbacks stamped, nothing was added yet
    summary = rt.profile.summary()  # reading folds everything in
    assert folded[0] == 10 and summary["a"]["count"] == 5 and summary["b"]["count"] == 5
    snap = rt.stats.snapshot()
    assert snap["lane_regions"]["compute"] == 10 and snap["lane_busy_seconds"]["compute"] > 0
    trace = rt.trace.to_json()["traceEvents"]
    assert sum(1 for e in trace if e.get("ph") == "X" and e.get("name") in ("a", "b")) == 10
    assert folded[0] == 10  # folded once
    rt.close()


def test_default_observation_registers_no_callbacks(dev, monkeypatch):
    """observe=True (the default) costs a submission no completion callback: the
    runtime stamps ends when it notices them (its next submit, wait, synchronize or
    a read), never before the work finished."""
    import time

    from hrx_core.completion import Completion

    callbacks = [0]
    add = Completion.add_done_callback

    def counted(self, callback):
        callbacks[0] += 1
        return add(self, callback)

    monkeypatch.setattr(Completion, "add_done_callback", counted)
    rt = Runtime(dev)
    x = rt.allocate(64)
    g = rt.graph("one")
    g.compute("a", lambda r: r.dispatch(INC_BYTES, 1, [x], block=64, scalars=(np.uint32(64),)))
    spans = []
    for _ in range(5):
        before = time.perf_counter()
        sub = rt.submit(g)
        sub.wait()
        spans.append((before, time.perf_counter()))
    assert callbacks[0] == 0
    summary = rt.profile.summary()
    assert summary["a"]["count"] == 5
    # each latency is at most the submit-to-wait span around it (stamped at the wait)
    assert summary["a"]["max"] <= max(end - start for start, end in spans) + 1e-6
    snap = rt.stats.snapshot()
    assert snap["lane_regions"]["compute"] == 5
    assert sum(1 for e in rt.trace.to_json()["traceEvents"] if e.get("ph") == "X" and e.get("name") == "a") == 5
    rt.close()


def test_observe_option_is_checked(dev):
    import hrx_core as hrx

    for bad in (1, "yes", None):
        with pytest.raises(hrx.InvalidArgument, match="observe"):
            RuntimeOptions(observe=bad)
    assert RuntimeOptions(observe="exact").observe == "exact"


def test_a_notice_checks_one_unfinished_region_per_queue(dev, monkeypatch):
    """observe=True: a queue finishes in order, so noticing ends behind unfinished work
    asks one completion per queue, not one per queued region -- and every region is
    still stamped once it finished."""
    from hrx_core.completion import Completion

    rt = Runtime(dev)
    flag, x = rt.allocate(8), rt.allocate(64)
    slow = rt.graph("slow")
    slow.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(np.uint64(200_000_000),)))
    quick = rt.graph("quick")
    quick.compute("inc", lambda r: r.dispatch(INC_BYTES, 1, [x], block=64, scalars=(np.uint32(64),)))
    rt.submit(slow)
    for _ in range(12):
        last = rt.submit(quick)
    done_now = Completion.done_now
    checks = count_calls(monkeypatch, Completion, "done_now")
    rt._notice()
    assert checks[0] <= 1  # the sleeper on the compute queue: nothing behind it is asked
    monkeypatch.setattr(Completion, "done_now", done_now)
    last.wait(timeout=60)
    summary = rt.profile.summary()
    assert summary["sleep"]["count"] == 1 and summary["inc"]["count"] == 12
    rt.close()


def _trace_summary(rt):
    data = rt.trace.to_json()
    slices = [(e["name"], e["args"]["deps"]) for e in data["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "hrx"]
    kinds = sorted(e.get("ph") for e in data["traceEvents"] if e.get("ph") != "M")
    return slices, kinds, data["otherData"]["dropped_events"], len(rt.trace)


def test_trace_rows_are_built_when_the_trace_is_read(dev, monkeypatch):
    """observe=True builds a submission's trace rows (slices, flows, the memory sample)
    only when the trace is read; rows past the ring's capacity are never built and are
    counted as dropped: a trace read once at the end holds and drops what one read after
    every submission does."""
    from hrx_core.execution.trace import TraceRecorder

    built = [0]
    add = TraceRecorder._add_submissions

    def counted(self, rows, *args):
        built[0] += len(rows)
        return add(self, rows, *args)

    monkeypatch.setattr(TraceRecorder, "_add_submissions", counted)

    def run(read_each: bool):
        rt = Runtime(dev, RuntimeOptions(trace_events=40))
        x = rt.allocate(64)
        g = rt.graph("two")
        a = g.compute("a", lambda r: r.dispatch(INC_BYTES, 1, [x], block=64, scalars=(np.uint32(64),)))
        g.compute("b", lambda r: r.dispatch(INC_BYTES, 1, [x], block=64, scalars=(np.uint32(64),)), after=[a])
        for _ in range(100):  # 4 events a submission: 2 slices, a flow, a memory sample
            rt.submit(g).wait()
            if read_each:
                len(rt.trace)
        summary = _trace_summary(rt)
        rt.close()
        return summary

    lazy = run(False)
    assert built[0] <= 11, f"{built[0]} submissions' rows built for a ring of 40 events"
    built[0] = 0
    eager = run(True)
    assert built[0] == 100
    assert lazy == eager
    slices, kinds, dropped, held = lazy
    assert held == 40 and dropped == 400 - 40
    assert kinds.count("X") == 20 and kinds.count("C") == 10  # and 10 flows (an "s" and an "f" each)
    assert slices[-2:] == [("a", []), ("b", [0])]


def test_a_resubmission_launches_and_signals_under_one_hold_of_the_queue(dev, monkeypatch):
    from hrx_core.device import QueueSlot

    rt = Runtime(dev, RuntimeOptions(observe=False, signals="each"))
    x, g = adder_graph(rt)
    rt.submit(g).wait(60)
    slot = rt.lane("compute").stream.slot
    bookkeeping = count_calls(monkeypatch, QueueSlot, "_signaled_locked")
    flushes = count_calls(monkeypatch, QueueSlot, "_flush_locked")
    native = g.regions[0].device_graph._native
    fused = count_calls(monkeypatch, type(native), "launch_signaled") if native is not None else None
    signaled = slot.signaled
    subs = [rt.submit(g) for _ in range(10)]
    assert bookkeeping[0] == 10  # one signal a submission, recorded once
    assert slot.signaled == signaled + 10
    if fused is not None:  # native graphs: the engine launches and signals in one call
        assert fused[0] == 10 and flushes[0] == 0
    assert [s.events[0].completion.value for s in subs] == list(range(signaled + 1, signaled + 11))
    subs[-1].wait(60)
    assert (rt.lane("compute").stream.download(x).view(np.uint32)[:64] == 11).all()
    rt.close()


@pytest.mark.parametrize("signals", ["each", "lazy"])
def test_a_resubmission_the_engine_fails_to_launch_changes_nothing(dev, monkeypatch, signals):
    import hrx_core as hrx

    rt = Runtime(dev, RuntimeOptions(observe=False, signals=signals))
    x, g = adder_graph(rt)
    rt.submit(g).wait(60)
    device_graph = g.regions[0].device_graph
    native = device_graph._native
    if native is None:
        pytest.skip(f"{dev.name}: no native graphs")
    slot = rt.lane("compute").stream.slot
    before = (slot.pending_value, slot.signaled, slot.unsignaled_ops, len(slot.retained), device_graph._holds,
              device_graph.launches)

    def refuse(self, queue, *args):
        raise hrx.DeviceError("injected launch failure")

    # the signalled path launches through launch_signaled, the lazy one through the
    # launch its plan bound (NativeGraph.launch)
    if signals == "each":
        monkeypatch.setattr(type(native), "launch_signaled", refuse)
    else:
        plan = device_graph._plan
        monkeypatch.setattr(device_graph, "_plan", (plan[0], plan[1], lambda q: refuse(native, q)))
    with pytest.raises(hrx.DeviceError, match="injected"):
        rt.submit(g)
    assert (slot.pending_value, slot.signaled, slot.unsignaled_ops, len(slot.retained), device_graph._holds,
            device_graph.launches) == before
    monkeypatch.undo()
    rt.submit(g).wait(60)
    assert (rt.lane("compute").stream.download(x).view(np.uint32)[:64] == 2).all()
    rt.close()


def test_a_signal_the_engine_leaves_to_the_queue_is_emitted(dev, monkeypatch):
    rt = Runtime(dev, RuntimeOptions(observe=False, signals="each"))
    x, g = adder_graph(rt)
    native = g.regions[0].device_graph._native
    if native is None:
        pytest.skip(f"{dev.name}: no native graphs")

    def launch_only(self, queue, timeline, value):
        self.launch(queue)
        return False  # launched; the signal was not encoded

    monkeypatch.setattr(type(native), "launch_signaled", launch_only)
    slot = rt.lane("compute").stream.slot
    signaled = slot.signaled
    subs = [rt.submit(g) for _ in range(3)]
    assert slot.signaled == signaled + 3
    for s in subs:
        s.wait(60)
    assert (rt.lane("compute").stream.download(x).view(np.uint32)[:64] == 3).all()
    rt.close()


def test_a_stale_graph_refuses_the_launch_and_signal_path(dev):
    import hrx_core as hrx

    s = dev.stream()
    buf = s.allocate_from(np.zeros(64, np.uint32))
    g = s.access_graph()
    g.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    done = g._launch_signaled(s)
    assert done.value == s.slot.signaled
    done.wait(60)
    before = (s.slot.pending_value, s.slot.signaled, g.launches)
    buf.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        g._launch_signaled(s)
    assert (s.slot.pending_value, s.slot.signaled, g.launches) == before
    g.close()


def test_signals_option_is_checked_and_auto_follows_sticky_failures(dev):
    import hrx_core as hrx

    with pytest.raises(hrx.InvalidArgument, match="signals"):
        RuntimeOptions(signals="sometimes")
    rt = Runtime(dev)
    try:
        assert all(lane.lazy_signals == lane.device.info.sticky_failures for lane in rt.lanes.values())
    finally:
        rt.close()
    for mode, lazy in (("each", False), ("lazy", True)):
        rt = Runtime(dev, RuntimeOptions(signals=mode))
        try:
            assert all(lane.lazy_signals is lazy for lane in rt.lanes.values())
        finally:
            rt.close()


def test_lazy_resubmissions_signal_once_for_many(dev, monkeypatch):
    """signals="lazy": resubmissions encode no signal of their own; they share the lane's
    pending value until something waits (one signal covers them all) or AUTO_FLUSH_OPS
    operations accumulate; every submission's work runs once, in order."""
    from hrx_core.device import AUTO_FLUSH_OPS, QueueSlot

    rt = Runtime(dev, RuntimeOptions(observe=False, signals="lazy"))
    x, g = adder_graph(rt)
    rt.submit(g).wait(60)
    slot = rt.lane("compute").stream.slot
    signals = count_calls(monkeypatch, QueueSlot, "_signaled_locked")
    native = g.regions[0].device_graph._native
    fused = count_calls(monkeypatch, type(native), "launch_signaled") if native is not None else None
    signaled = slot.signaled
    subs = [rt.submit(g) for _ in range(10)]
    assert signals[0] == 0 and slot.signaled == signaled and slot.unsignaled_ops == 10
    assert fused is None or fused[0] == 0
    values = {s.events[0].completion.value for s in subs}
    assert values == {signaled + 1}  # one pending value, not signalled yet
    assert not any(s.events[0].completion.done_now() for s in subs)
    subs[0].wait(60)  # a wait emits the signal that covers every one of them
    assert signals[0] == 1 and slot.signaled == signaled + 1
    assert all(s.is_complete for s in subs)
    assert (rt.lane("compute").stream.download(x).view(np.uint32)[:64] == 11).all()
    # past AUTO_FLUSH_OPS operations the lane signals by itself
    signals[0] = 0
    subs = [rt.submit(g) for _ in range(AUTO_FLUSH_OPS + 1)]
    assert signals[0] == 1 and subs[AUTO_FLUSH_OPS - 1].events[0].completion.value == slot.signaled
    assert subs[-1].events[0].completion.value == slot.signaled + 1
    rt.synchronize()
    assert (rt.lane("compute").stream.download(x).view(np.uint32)[:64] == 11 + AUTO_FLUSH_OPS + 1).all()
    rt.close()


@pytest.mark.parametrize("signals", ["lazy", "each"])
@pytest.mark.parametrize("observe", [False, True, "exact"])
def test_lazy_signals_keep_results_order_and_room(dev, observe, signals):
    """Lazy signals with a tiny max_submissions (room is made by waiting on the oldest,
    which emits the signal), and a graph whose compute region reads what its upload
    region wrote on another lane and whose download region reads what it wrote (the
    hazard waits emit the producers' signals): rounds submitted back to back end with
    the last round's result, and observation stamps every region of every round (also
    with observe="exact" read right after synchronize, before the notifier ran every
    callback); as with a signal every submission."""
    rt = Runtime(dev, RuntimeOptions(observe=observe, signals=signals, max_submissions=2))
    try:
        x = rt.allocate(256)
        g = rt.graph("round")
        up = g.upload(x, np.zeros(64, np.uint32))
        g.compute("add", lambda r: r.dispatch(ADD_U32, 1, [x], block=64, scalars=(3, 64)))
        down = g.download(x)
        rounds = 6
        for i in range(rounds):
            up.write(np.full(64, i, np.uint32))
            sub = rt.submit(g)
        sub.wait(60)
        assert (down.read().view(np.uint32)[:64] == rounds - 1 + 3).all()
        rt.synchronize()
        assert rt.stats.snapshot()["regions"] == 3 * rounds
        if observe:  # what synchronize waited for is in the profile ("exact": its callbacks too)
            assert rt.profile.percentiles("add")["count"] == rounds
    finally:
        rt.close()
