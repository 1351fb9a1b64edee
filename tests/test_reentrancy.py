"""Buffer finalizers run wherever the collector runs -- on Python 3.12 at any bytecode
boundary, also while this thread holds a runtime or budget lock. Freeing memory
there untracks it and releases its charge: those locks must be reentrant and their
counters stay exact (a deadlock here hung the H200 suite once)."""

from __future__ import annotations

import threading

import hrx_core as hrx
from hrx_core.execution.profile import RuntimeStats


def _in_thread(fn) -> bool:
    """Run ``fn`` in a daemon thread; True when it finished (False: it hung)."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(10)
    return not t.is_alive()


def test_runtime_stats_reenter_from_a_finalizer():
    stats = RuntimeStats()
    stats.track_bytes(100)

    def nested():
        with stats._lock:  # as if a finalizer ran inside track_bytes
            stats.track_bytes(-40)
            stats.track_bytes(5)

    assert _in_thread(nested)
    snap = stats.snapshot()
    assert snap["live_tracked_bytes"] == 65 and snap["peak_tracked_bytes"] == 100


def test_budget_charges_release_from_a_finalizer():
    budget = hrx.MemoryBudget(1 << 10)
    a = budget.charge(100)
    budget.charge(50)

    def nested():
        with budget._lock:  # a charge released while the budget's lock is held
            a.release()

    assert _in_thread(nested)
    assert budget.used_bytes == 50 and budget.peak_bytes == 150


def test_buffers_dropped_inside_tracking_leave_exact_counts():
    from hrx_core.execution import Runtime

    dev = hrx.device("host")
    with Runtime(dev) as rt:
        bufs = [rt.allocate(64) for _ in range(4)]

        def nested():
            with rt.stats._lock:
                bufs.clear()  # the last handles go: untracking re-enters the lock

        assert _in_thread(nested)
        assert rt.live_tracked_bytes() == 0
