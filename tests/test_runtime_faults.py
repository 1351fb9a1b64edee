"""Fault injection through the host engine: the runtime quarantines, releases only when
safe, and stays usable; 10,000 submit-fail-recover iterations leak nothing."""

from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions

from .kernels import SLEEPY

ITERATIONS = int(os.environ.get("HRX_FAULT_ITERATIONS", "10000"))


def _boom(buf):
    raise RuntimeError("injected kernel failure")


BOOM = hrx.Kernel("boom", buffers=1, host=_boom)


def _gated(gate: threading.Event) -> hrx.Kernel:
    """A kernel that runs until ``gate`` opens (30 s at most)."""
    return hrx.Kernel("gated", buffers=1, host=lambda buf: gate.wait(30))


def _fresh():
    return hrx.open_device("host", jitter_us=0)


def test_failed_kernel_quarantines_until_proven_idle():
    dev = _fresh()
    rt = Runtime(dev, RuntimeOptions())
    x = rt.allocate(64)
    g = rt.graph()
    g.compute("boom", lambda r: r.dispatch(BOOM, 1, [x]))
    sub = rt.submit(g)
    with pytest.raises(hrx.DeviceError, match="injected"):
        sub.wait()
    # owners stay until the lanes prove the failed work retired
    rt.synchronize()
    assert rt.quarantined == []
    assert rt.stats.snapshot()["quarantined_owners"] == 0
    ok = rt.graph()
    d = ok.download(x)
    rt.submit(ok).wait()  # usable afterwards
    assert d.read().shape == (64,)
    rt.close()


def test_failed_submission_quarantines_accepted_regions():
    dev = _fresh()
    rt = Runtime(dev, RuntimeOptions())
    x = rt.allocate(64)
    g = rt.graph()
    g.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [x.slice(0, 4)], scalars=(300_000_000,)))
    g.fill(x.slice(8, 8), pattern=1)
    g.download(x)
    # 1: the sleep region and its event (one submission); 2: the fill region fails
    dev.native.faults.fail_submit(after=1)
    with pytest.raises(hrx.DeviceError, match="injected"):
        rt.submit(g)
    assert rt.quarantined and "failed submission" in rt.quarantined[0][1]
    assert x._alloc.quarantined
    pool_free_before = x._alloc.refs
    assert pool_free_before >= 2  # the quarantine holds the owner while the kernel runs
    dev.synchronize()
    rt.synchronize()
    assert rt.quarantined == [] and not x._alloc.quarantined
    rt.close()


def test_failed_teardown_quarantines():
    dev = _fresh()
    rt = Runtime(dev, RuntimeOptions())
    x = rt.allocate(64)
    g = rt.graph()
    gate = threading.Event()  # the kernel runs until the test opens the gate (no timing)
    g.compute("gated", lambda r: r.dispatch(_gated(gate), 1, [x]))
    rt.submit(g)
    with pytest.raises(hrx.Timeout):
        rt.close(timeout=0.01)
    assert rt.quarantined
    live = dev.stats.live_bytes
    x.close()
    g.close()
    gc.collect()
    assert dev.stats.live_bytes == live  # quarantined: not freed while the kernel may run
    gate.set()
    dev.synchronize()
    # released once the kernel finished, by completion callbacks: no further call into
    # the closed runtime is needed (it used to hold them forever)
    deadline = time.monotonic() + 10
    while rt.quarantined and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rt.quarantined == []
    gc.collect()
    assert dev.stats.live_bytes < live
    assert all(lane.closed for lane in rt.lanes.values())  # the lanes' staging went too


def test_submit_fail_recover_loop_returns_to_starting_bytes():
    dev = _fresh()
    rt = Runtime(dev, RuntimeOptions(observe=False))
    x = rt.allocate(256)
    bad = rt.graph("bad")
    bad.compute("boom", lambda r: r.dispatch(BOOM, 1, [x]))
    good = rt.graph("good")
    good.upload(x, np.zeros(256, np.uint8))
    rt.submit(good).wait()
    gc.collect()
    start = dev.stats.live_bytes
    start_tracked = rt.stats.snapshot()["live_tracked_bytes"]
    failures = 0
    for i in range(ITERATIONS):
        if i % 3 == 2:
            dev.native.faults.fail_submit()
            try:
                rt.submit(good)
            except hrx.DeviceError:
                failures += 1
            continue
        try:
            rt.submit(bad).wait()
        except hrx.DeviceError:
            failures += 1
        if i % 100 == 0:
            rt.submit(good).wait()
    dev.native.faults.clear()
    rt.synchronize()
    dev.synchronize()
    rt._prove_idle()
    gc.collect()
    assert failures == ITERATIONS
    assert rt.quarantined == []
    assert dev.stats.live_bytes == start
    assert rt.stats.snapshot()["live_tracked_bytes"] == start_tracked
    assert rt.stats.snapshot()["quarantined_owners"] == 0
    rt.close()


def _bad_and_ok(options: RuntimeOptions):
    """A runtime on a fresh host device with x (64 bytes) and y (64 zeroed uint32),
    a graph "bad" whose kernel fails writing x and a graph "ok" adding 1 to y."""
    from hrx_core.conformance import ADD_U32

    rt = Runtime(_fresh(), options)
    x, y = rt.allocate(64), rt.allocate(256)
    init = rt.graph("init")
    init.upload(y, np.zeros(64, np.uint32))
    rt.submit(init).wait(60)
    bad = rt.graph("bad")
    bad.compute("boom", lambda r: r.dispatch(BOOM, 1, [x]))
    ok = rt.graph("ok")
    ok.compute("add", lambda r: r.dispatch(ADD_U32, 1, [y], block=64, scalars=(1, 64)))
    return rt, x, y, bad, ok


def test_lazy_signals_share_a_failure_with_the_submissions_of_its_value():
    """signals="lazy" on an engine whose failures are not sticky (the host engine; "auto"
    keeps a signal every submission here): a submission that shares a failed one's
    timeline value reports that failure too, its owners are quarantined like the failed
    one's, and the runtime recovers; with "each" the next submission stands alone."""
    for signals, second_fails in (("each", False), ("lazy", True)):
        rt, x, y, bad, ok = _bad_and_ok(RuntimeOptions(signals=signals))
        assert not rt.device.info.sticky_failures
        rt.submit(ok).wait(60)
        first, second = rt.submit(bad), rt.submit(ok)
        shared = first.events[0].completion.value == second.events[0].completion.value
        assert shared is second_fails
        with pytest.raises(hrx.DeviceError, match="injected"):
            first.wait(60)
        if second_fails:
            with pytest.raises(hrx.DeviceError, match="injected"):
                second.wait(60)
        else:
            second.wait(60)
        rt.synchronize()
        assert rt.quarantined == []
        rt.submit(ok).wait(60)  # usable afterwards
        d = rt.graph("read")
        down = d.download(y)
        rt.submit(d).wait(60)
        assert (down.read().view(np.uint32)[:64] == 3).all()  # every add ran once, the shared one too
        rt.close()


def test_batch_settling_quarantines_the_failed_and_releases_the_rest():
    """Room for a submission is made by settling the finished prefix of the pending
    ones at once: a failed submission in that batch has its owners quarantined (its
    failure still raised by its wait), the clean ones are settled without it, and
    unfinished work is never settled early."""
    rt, x, y, bad, ok = _bad_and_ok(RuntimeOptions(max_submissions=4, signals="each"))
    reasons: list[tuple[str, list]] = []
    quarantine = rt._quarantine

    def spy(owners, reason):
        reasons.append((reason, list(owners)))
        return quarantine(owners, reason)

    rt._quarantine = spy
    subs = [rt.submit(g) for g in (ok, bad, ok, ok)]
    for s in subs:  # finished, not settled: their completions only
        s.events[0].completion.wait_quiet(60)
    assert len(rt._pending) == 4 and not any(s._settled for s in subs)
    gate = threading.Event()
    held = rt.graph("held")
    z = rt.allocate(64)
    held.compute("gated", lambda r: r.dispatch(_gated(gate), 1, [z]))
    late = rt.submit(held)  # no room: the four are settled in one batch
    assert all(s._settled for s in subs) and list(rt._pending) == [late]
    failed = [(r, o) for r, o in reasons if r.startswith("failed")]
    assert len(failed) == 1 and x.allocation in failed[0][1] and y.allocation not in failed[0][1]
    assert not late._settled and not late.is_complete  # still running: not settled
    gate.set()
    late.wait(60)
    with pytest.raises(hrx.DeviceError, match="injected"):
        subs[1].wait(60)
    for s in (subs[0], subs[2], subs[3]):
        s.wait(60)
    rt.synchronize()
    assert rt.quarantined == []
    d = rt.graph("read")
    down = d.download(y)
    rt.submit(d).wait(60)
    assert (down.read().view(np.uint32)[:64] == 3).all()
    rt.close()


def _count_calls(monkeypatch, owner, name: str) -> list[int]:
    """Count the calls of ``owner.name`` (the original still runs)."""
    calls = [0]
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.mark.parametrize("settle", ["compiled", "python"])
def test_synchronize_settles_its_submissions_in_one_batch_and_raises_the_first_failure(monkeypatch, settle):
    """Runtime.synchronize waits once a queue and settles the finished submissions
    together (no per-submission wait) -- in C where the newest one's graph has a compiled
    resubmission, else through Runtime._settle_finished -- and still raises the first
    failure, quarantines the failed one's owners, delivers each failure and proves them
    idle after."""
    from hrx_core import fastpath
    from hrx_core.execution.runtime import Submission

    if settle == "compiled" and not fastpath.module().compiled:
        pytest.skip(f"no compiled resubmission here: {fastpath.module().reason}")
    if settle == "python":
        monkeypatch.setattr(Runtime, "_make_fast_submit", lambda self, graph, plan: setattr(graph, "_fast_submit", False))
    rt, x, y, bad, ok = _bad_and_ok(RuntimeOptions(signals="each"))
    rt.submit(ok).wait(60)  # (a first submission: the compiled resubmission is made after it)
    rt.submit(ok).wait(60)
    assert bool(ok._fast_submit) is (settle == "compiled")
    reasons: list[str] = []
    quarantine = rt._quarantine
    monkeypatch.setattr(rt, "_quarantine", lambda owners, reason: (reasons.append(reason), quarantine(owners, reason))[1])
    waits = _count_calls(monkeypatch, Submission, "wait")
    settles = _count_calls(monkeypatch, Runtime, "_settle_finished")
    subs = [rt.submit(g) for g in (ok, bad, ok, ok)]
    with pytest.raises(hrx.DeviceError, match="injected"):
        rt.synchronize(60)
    assert waits[0] == 0, "settled one by one"
    assert settles[0] == (0 if settle == "compiled" else 1)
    assert all(s._settled for s in subs) and not rt._pending
    assert [r for r in reasons if r.startswith("failed")], "the failed submission's owners were not quarantined"
    assert rt.quarantined == []  # proven idle before synchronize returned
    assert subs[1].events[0].resolved is not None and subs[0].events[0].resolved is not None
    with pytest.raises(hrx.DeviceError, match="injected"):
        subs[1].wait(60)
    for s in (subs[0], subs[2], subs[3]):
        s.wait(60)
    d = rt.graph("read")
    down = d.download(y)
    rt.submit(d).wait(60)
    assert (down.read().view(np.uint32)[:64] == 5).all()  # (two before, three here)
    rt.close()


def test_synchronize_past_its_timeout_settles_what_finished_and_quarantines_the_rest():
    """A synchronize whose timeout passes with work still running raises Timeout, after
    settling the submissions that finished; the running one's owners wait in quarantine
    until it finishes, and the runtime stays usable."""
    rt, x, y, bad, ok = _bad_and_ok(RuntimeOptions(signals="each"))
    gate = threading.Event()
    held = rt.graph("held")
    z = rt.allocate(64)
    held.compute("gated", lambda r: r.dispatch(_gated(gate), 1, [z]))
    first, second = rt.submit(ok), rt.submit(ok)
    late = rt.submit(held)
    first.events[0].completion.wait_quiet(60)
    second.events[0].completion.wait_quiet(60)
    try:
        with pytest.raises(hrx.Timeout):
            rt.synchronize(0.05)
        assert first._settled and second._settled and not late._settled
        assert z.allocation.quarantined == 1
    finally:
        gate.set()
    rt.synchronize(60)
    assert rt.quarantined == [] and z.allocation.quarantined == 0
    rt.close()
