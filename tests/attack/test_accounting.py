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
    g.fill(x.slice(8, 8), pattern=1)
    for _ in range(40):
        dev.native.faults.fail_submit(after=1)  # the sleep is accepted, the fill fails
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


def test_loaded_code_is_charged_to_the_session_budget():
    # spec: budgets track executable image charges, during native loading in_context
    from hrx_core.model import ModelContext

    src = "def scale(buf):\n    buf[:] = buf * 2\n"
    kernel = hrx.Kernel("scale_src", buffers=1, host=src, entry="scale")
    ctx = ModelContext(hrx.open_device("host"), RuntimeOptions(observe=False))
    session = ctx.session("code")
    budget = hrx.MemoryBudget(1 << 20)
    with session.in_context(budget):
        session.load_kernel(kernel)
    code = ctx.kernel(kernel).code_bytes(ctx.device)
    assert code == len(src) and budget.used_bytes == code
    session.weight("w", np.zeros(8, np.uint8))
    definition = session.freeze()
    session.close()
    assert budget.used_bytes == code  # the definition keeps the code's charge
    definition.close()
    assert budget.used_bytes == 0
    tiny = hrx.MemoryBudget(code - 1)
    other = ctx.session("tiny")
    with other.in_context(tiny), pytest.raises(hrx.BudgetExceeded):
        other.load_kernel(kernel)
    assert len(other.kernels) == 0 and tiny.used_bytes == 0  # refused: not loaded into the session
    ctx.close()


def test_a_model_reservation_includes_private_workspace():
    # spec: include private workspace in model reservations
    from hrx_core.model import InferenceGraph, ModelContext

    budget = hrx.MemoryBudget(1 << 20)
    ctx = ModelContext(hrx.open_device("host"), RuntimeOptions(observe=False, memory_budget=budget))
    kernel = hrx.Kernel("with_scratch", buffers=1, host=lambda b: None)
    session = ctx.session("ws")
    session.load_kernel(kernel)
    session.weight("w", np.zeros(8, np.uint8))
    definition = session.freeze()
    ctx.kernel(kernel).executable(ctx.device).private_bytes = 1000  # what an engine reports for its scratch

    def factory(b):
        x = b.tensor(64, np.uint8)
        b.graph.compute("k", lambda g: g.dispatch(b.kernel("with_scratch"), 1, [x.read_write()]))
        return InferenceGraph(inputs={"x": x}, outputs={"x": x}, graph=b.graph)

    before = budget.used_bytes
    model = definition.prepare(factory, slots=2)
    assert model.workspace_bytes == 2000  # each slot may run at once
    assert budget.used_bytes - before == 2 * 64 + 2000 == model.reserved_bytes
    model.close()
    assert budget.used_bytes == before
    ctx.close()
