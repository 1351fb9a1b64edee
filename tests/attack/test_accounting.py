"""Fault injection with accounting checked back to its start: quarantine, staging and
live bytes return to where they were; the runtime's counters stay bounded."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions

from ..kernels import SLEEPY
from .conftest import runtime_with_sleeper
from .tally import tried


def _boom(buf):
    raise RuntimeError("injected kernel failure")


BOOM = hrx.Kernel("boom_rw", buffers=1, host=_boom)


def _wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_repeated_timeouts_quarantine_an_allocation_once():
    # every timed-out wait added a quarantine group re-retaining the same allocation:
    # 1,000 groups and 4 MB "quarantined" for one 4 KB buffer, submit latency growing
    rt, x, g = runtime_with_sleeper(4096, 400_000_000)
    sub = rt.submit(g)
    refs = x._alloc.refs
    for _ in range(1000):
        with pytest.raises(hrx.Timeout):
            sub.wait(0)
    tried("faults", "Submission.wait(timeout)", 1000)
    assert len(rt.quarantined) == 1 and rt.quarantined[0][0] == 4096
    snap = rt.stats.snapshot()
    assert snap["quarantined_owners"] == 1 and snap["quarantined_bytes"] == 4096
    assert x._alloc.refs == refs + 1  # one hold, not a thousand
    quick = rt.graph("quick")
    quick.fill(rt.allocate(64), 0)
    t0 = time.perf_counter()
    for _ in range(50):
        rt.submit(quick).wait(10)
    assert (time.perf_counter() - t0) / 50 < 0.05  # submit cost does not grow with the timeouts
    sub.wait(10)
    assert _wait_until(lambda: rt.quarantined == [])
    assert rt.stats.snapshot()["quarantined_bytes"] == 0
    rt.close()


def test_repeated_failed_submissions_quarantine_an_allocation_once():
    rt, x, g = runtime_with_sleeper(4096, 20_000_000)
    dev = rt.device
    g.fill(x.slice(8, 8), 1)
    for _ in range(40):
        dev.native.faults.fail_submit(after=2)  # the sleep is accepted, the fill fails
        with pytest.raises(hrx.DeviceError, match="injected"):
            rt.submit(g)
        assert len(rt.quarantined) <= 1
        assert rt.stats.snapshot()["quarantined_bytes"] in (0, 4096)
    tried("faults", "Runtime.submit (injected submit failure)", 40)
    assert len(rt.quarantined) == 1  # the sleeps queued behind each other still run
    dev.synchronize()
    assert _wait_until(lambda: rt.quarantined == [])
    rt.close()


def test_fault_loop_returns_accounting_to_its_start():
    dev = hrx.open_device("host")
    budget = hrx.MemoryBudget(16 << 20)
    rt = Runtime(dev, RuntimeOptions(observe=False, memory_budget=budget))
    x = rt.allocate(4096)
    good = rt.graph("good")
    good.upload(x, np.zeros(4096, np.uint8))
    d = good.download(x)
    bad = rt.graph("bad")
    bad.compute("boom", lambda r: r.dispatch(BOOM, 1, [x]))
    slow = rt.graph("slow")
    slow.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [x.slice(0, 4)], scalars=(2_000_000,)))
    rt.submit(good).wait(10)
    gc.collect()
    start = (dev.stats.live_bytes, budget.used_bytes, rt.stats.snapshot()["live_tracked_bytes"])
    for i in range(300):
        kind = i % 4
        try:
            if kind == 0:
                rt.submit(bad).wait(10)
            elif kind == 1:
                dev.native.faults.fail_submit()
                rt.submit(good)
            elif kind == 2:
                rt.submit(slow).wait(0)
            else:
                rt.submit(good).wait(10)
                assert (d.read() == 0).all()
        except (hrx.DeviceError, hrx.Timeout):
            pass
    tried("faults", "Runtime fault loop", 300)
    dev.native.faults.clear()
    rt.synchronize(30)
    rt.submit(good).wait(10)
    assert _wait_until(lambda: rt.quarantined == [])
    gc.collect()
    assert (dev.stats.live_bytes, budget.used_bytes, rt.stats.snapshot()["live_tracked_bytes"]) == start
    snap = rt.stats.snapshot()
    assert snap["quarantined_owners"] == 0 and snap["quarantined_bytes"] == 0
    rt.close()
