"""Memory budgets as far as the foundation uses them: charged before allocation."""

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx

from .conftest import live_bytes


def test_budget_refuses_before_allocating(dev):
    budget = hrx.MemoryBudget(1000, name="tiny")
    live = live_bytes(dev)
    a = dev.allocate(600, budget=budget)
    assert budget.used_bytes == 600
    with pytest.raises(hrx.BudgetExceeded) as info:
        dev.allocate(600, budget=budget)
    assert "tiny" in str(info.value) and "1000" in str(info.value)
    assert live_bytes(dev) == live + 600  # nothing allocated by the refused call
    a.close()
    assert budget.used_bytes == 0 and budget.peak_bytes == 600


def test_stream_budget_charges_allocations_and_staging(dev):
    budget = hrx.MemoryBudget(10 << 20)
    s = dev.stream().with_memory_budget(budget)
    assert s.memory_budget is budget
    buf = s.allocate_from(np.zeros(1 << 20, np.uint8))
    s.upload(buf, np.ones(1 << 20, np.uint8)).wait()
    assert budget.used_bytes == buf.nbytes + s.staging_bytes
    s.close()
    assert budget.used_bytes == buf.nbytes
    with pytest.raises(hrx.InvalidArgument):
        s.with_memory_budget("lots")  # type: ignore[arg-type]


def test_pending_work_and_owned_graphs_keep_the_charge(dev):
    from .kernels import SLEEPY

    budget = hrx.MemoryBudget(1 << 20)
    s = dev.stream()
    flag = dev.allocate(64, budget=budget)
    s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(100_000_000,))
    flag.close()
    assert budget.used_bytes == 64  # pending work retains the owner's charge
    s.synchronize()
    assert budget.used_bytes == 0
    buf = dev.allocate(128, budget=budget)
    g = s.owned_graph()
    g.fill(buf, pattern=1)
    buf.close()
    assert budget.used_bytes == 128  # the owned graph retains it through replays
    g.launch().wait()
    g.close()
    s.synchronize()
    assert budget.used_bytes == 0


def test_budget_validates():
    with pytest.raises(hrx.InvalidArgument):
        hrx.MemoryBudget(-1)
    b = hrx.MemoryBudget(10)
    with pytest.raises(hrx.InvalidArgument):
        b.charge(-3)
    c = b.charge(10)
    c.release()
    c.release()  # exactly once
    assert b.used_bytes == 0


def test_reservation_and_its_allocations_count_once(dev):
    parent = hrx.MemoryBudget(1 << 20, name="model")
    with parent.reservation(256 << 10, "weights") as weights:
        assert parent.used_bytes == 256 << 10
        a = dev.allocate(100 << 10, budget=weights)
        b = dev.allocate(100 << 10, budget=weights)
        assert parent.used_bytes == 256 << 10  # not charged twice
        assert weights.used_bytes == 200 << 10
        live = live_bytes(dev)
        with pytest.raises(hrx.BudgetExceeded):
            dev.allocate(100 << 10, budget=weights)  # over the reservation
        assert live_bytes(dev) == live  # nothing allocated
        a.close()
    # closed while b is alive: the parent keeps the bytes until b goes
    assert parent.used_bytes == 256 << 10
    with pytest.raises(hrx.InvalidArgument):
        dev.allocate(8, budget=weights)
    b.close()
    assert parent.used_bytes == 0


def test_aliases_views_and_exports_keep_one_charge(dev):
    budget = hrx.MemoryBudget(1 << 20)
    s = dev.stream()
    buf = dev.allocate(4096, budget=budget)
    views = [buf.slice(0, 1024), buf.slice(1024, 1024).read(), buf.binding().write()]
    assert budget.used_bytes == 4096  # views and bindings are aliases: no charge
    g = s.owned_graph()
    g.fill(views[0], pattern=1)
    buf.close()
    assert budget.used_bytes == 4096  # the graph still owns the backing
    g.launch().wait()
    g.close()
    s.synchronize()
    assert budget.used_bytes == 0
    if dev.kind == "host":
        import numpy as np

        wrapped = dev.wrap(np.zeros(64, np.uint8))  # external memory: never charged
        assert budget.used_bytes == 0 and wrapped.nbytes == 64


def test_quarantined_work_keeps_its_charge(dev):
    from hrx_core.execution import Runtime, RuntimeOptions

    from .kernels import SLEEPY

    budget = hrx.MemoryBudget(1 << 20)
    rt = Runtime(dev, RuntimeOptions(memory_budget=budget))
    x = rt.allocate(1024)
    g = rt.graph()
    g.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [x.slice(0, 4)], scalars=(200_000_000,)))
    sub = rt.submit(g)
    with pytest.raises(hrx.Timeout):
        sub.wait(timeout=0.01)
    g.close()
    x.close()
    assert budget.used_bytes == 1024  # quarantined (and pending): the charge stays
    sub.wait()
    rt.synchronize()
    assert budget.used_bytes == 0
    rt.close()


def test_synchronize_waits_for_a_release_another_thread_started(dev, monkeypatch):
    """Quarantined owners may be released by a completion callback's thread; a
    synchronize that finds the quarantine empty meanwhile still returns only once that
    release has freed the memory and returned the charge."""
    import threading
    import time

    from hrx_core.buffer import Allocation
    from hrx_core.execution import Runtime, RuntimeOptions

    from .kernels import SLEEPY

    started = threading.Event()
    free_native = Allocation._free_native

    def slow_free(self):
        if threading.current_thread() is not threading.main_thread() and self.nbytes == 1024:
            started.set()
            time.sleep(0.3)
        free_native(self)

    monkeypatch.setattr(Allocation, "_free_native", slow_free)
    budget = hrx.MemoryBudget(1 << 20)
    rt = Runtime(dev, RuntimeOptions(memory_budget=budget))
    x = rt.allocate(1024)
    g = rt.graph()
    g.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [x.slice(0, 4)], scalars=(200_000_000,)))
    sub = rt.submit(g)
    with pytest.raises(hrx.Timeout):  # a timed-out submission quarantines its owners
        sub.wait(timeout=0.01)
    g.close()
    x.close()
    # no wait here: this thread's wait would retire the submission's hold itself, and
    # then the last reference could go here rather than on the callback's thread
    assert started.wait(10), "the completion callback did not release the quarantined owner"
    rt.synchronize()
    assert budget.used_bytes == 0
    rt.close()



def test_synchronize_releases_what_lanes_held_for_finished_work(dev):
    """Runtime.synchronize releases what the lanes' queues still hold for work that has
    finished (memory freed while it was in use is freed then, and its charge returned),
    instead of leaving it to the queue's next retirement: on the H200 a quarantined
    buffer's charge was once still there after synchronize returned."""
    from hrx_core.execution import Runtime

    from .kernels import INC_BYTES

    rt = Runtime(dev)
    lane = rt.lane("compute")
    x = rt.allocate(64)
    done = lane.stream.dispatch(INC_BYTES, 1, [x], block=64, scalars=(np.uint32(64),))
    done.wait()
    released = []

    class Held:
        def release(self):
            released.append(True)

    lane.stream.slot.retained.append((done.value, Held()))  # held for finished work, not retired yet
    rt.synchronize()
    assert released == [True]
    x.close()
    rt.close()


def test_synchronize_waits_for_releases_another_thread_popped(dev):
    """A retirement pops owners of finished work under the queue's lock and releases
    them after it: synchronize (runtime, stream, device) waits for such releases by
    another thread, so memory is freed and charges returned when it returns. On the
    H200 a completion callback's thread once released a submission's hold just after
    Runtime.synchronize returned, and a quarantined buffer's charge was still there."""
    import threading
    import time

    from hrx_core.execution import Runtime

    from .kernels import INC_BYTES

    rt = Runtime(dev)
    stream = rt.lane("compute").stream
    slot = stream.slot
    x = rt.allocate(64)
    done = stream.dispatch(INC_BYTES, 1, [x], block=64, scalars=(np.uint32(64),))
    done.wait()
    class Slow:
        def __init__(self):
            self.entered, self.released = threading.Event(), threading.Event()

        def release(self):
            self.entered.set()
            time.sleep(0.3)
            self.released.set()

    for sync in (rt.synchronize, stream.synchronize, dev.synchronize):
        held = Slow()
        slot.retained.append((done.value, held))
        other = threading.Thread(target=slot.retire)
        other.start()
        assert held.entered.wait(5)
        sync()
        assert held.released.is_set(), sync
        other.join()
    x.close()
    rt.close()


def test_settle_inside_a_release_does_not_wait_for_itself(dev):
    """A release that settles its own queue (a free callback that synchronizes, say)
    returns at once rather than waiting for its own release; a timeout on another
    thread's slow release raises Timeout."""
    import threading
    import time

    stream = dev.stream()
    slot = stream.slot
    x = dev.allocate(64)
    done = stream.fill(x, pattern=1)
    done.wait()
    seen = []

    class Reentrant:
        def release(self):
            t0 = time.monotonic()
            slot.settle(timeout=5)
            seen.append(time.monotonic() - t0)

    slot.retained.append((done.value, Reentrant()))
    slot.retire()
    assert len(seen) == 1 and seen[0] < 1.0
    entered = threading.Event()

    class Slow:
        def release(self):
            entered.set()
            time.sleep(0.5)

    slot.retained.append((done.value, Slow()))
    other = threading.Thread(target=slot.retire)
    other.start()
    assert entered.wait(5)
    with pytest.raises(hrx.Timeout):
        slot.settle(timeout=0.01)
    other.join()
    slot.settle(timeout=0)  # nothing in progress any more
    x.close()
