"""Concurrency scenarios with deadlock detection: every wait is bounded and a hang
dumps every thread's stack (conftest.join_all) instead of hanging CI."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.buffer import Allocation

from .conftest import bounded, join_all
from .tally import tried


class _Cycle:
    """Garbage only the cycle collector frees: what it holds is released inside gc."""

    def __init__(self, payload):
        self.me = self
        self.payload = payload


def test_pool_finalizer_inside_allocate_does_not_deadlock(monkeypatch):
    # The garbage collector ran PooledBuffer.__del__ inside BufferPool.allocate, which
    # re-entered the pool's plain Lock on the same thread: a self-deadlock.
    dev = hrx.open_device("host")
    pool = dev.buffer_pool()
    x, y, z = pool.allocate(64), pool.allocate(64), pool.allocate(64)
    x.close()  # a free allocation, so allocate() scans under the lock
    _Cycle(z)  # garbage: its PooledBuffer is released by the collector
    del z
    real_busy = Allocation.busy

    def busy_with_gc(self, *args, **kwargs):
        gc.collect()  # what an allocation inside the locked scan may trigger
        return real_busy(self, *args, **kwargs)

    monkeypatch.setattr(Allocation, "busy", busy_with_gc)
    tried("concurrency", "BufferPool.allocate (gc finalizer)")
    buf = bounded(lambda: pool.allocate(64))
    monkeypatch.setattr(Allocation, "busy", real_busy)
    assert buf.nbytes == 64
    assert pool.free_bytes == 64  # the finalized buffer came back to the pool
    buf.close()
    y.close()
    pool.close()


def test_pool_returns_from_many_threads_keep_accounting():
    dev = hrx.open_device("host")
    pool = dev.buffer_pool(max_free_bytes=1 << 20)
    errors: list[BaseException] = []

    def worker():
        try:
            for _ in range(200):
                b = pool.allocate(4096)
                if np.random.random() < 0.5:
                    b.close()
                else:
                    _Cycle(b)
                    del b
                if np.random.random() < 0.1:
                    gc.collect()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    tried("concurrency", "BufferPool.allocate/close", 800)
    join_all(threads, 60)
    assert not errors
    gc.collect()
    free = pool.free_bytes
    assert free <= 1 << 20  # finalizer returns were drained within the limit
    live = dev.stats.live_bytes
    pool.trim()
    assert dev.stats.live_bytes == live - free
    pool.close()


# -- the runtime ----------------------------------------------------------------------

from hrx_core.execution import Runtime, RuntimeOptions  # noqa: E402

from ..kernels import SLEEPY  # noqa: E402


def test_native_session_and_submit_do_not_invert_lock_order():
    # Thread A inside rt.native_session() submits from its model while thread B submits
    # a graph with a compute region: B held the submit lock waiting for the compute
    # lane, A held the lane (as a lock) waiting for the submit lock.
    dev = hrx.open_device("host")
    rt = Runtime(dev, RuntimeOptions(observe=False))
    a_buf, b_buf = rt.allocate(64), rt.allocate(64)
    ga = rt.graph("a")
    ga.compute("a", lambda g: g.fill(a_buf, pattern=1))
    gb = rt.graph("b")
    gb.compute("b", lambda g: g.fill(b_buf, pattern=2))
    b_started = threading.Event()
    results: dict[str, object] = {}

    def thread_b():
        b_started.set()
        results["b"] = rt.submit(gb).wait(10)

    def model(ns):
        tb = threading.Thread(target=thread_b, daemon=True, name="submitter-b")
        tb.start()
        b_started.wait(5)
        import time

        time.sleep(0.05)  # B is inside submit now, waiting for the reserved lane
        rt.submit(ga).wait(10)  # A submits from inside its session
        results["tb"] = tb
        return "ok"

    def thread_a():
        with rt.native_session() as ns:
            results["a"] = ns.run(model, timeout=10)

    ta = threading.Thread(target=thread_a, daemon=True, name="session-a")
    tried("concurrency", "NativeSession.run + Runtime.submit")
    ta.start()
    join_all([ta], 20)
    join_all([results["tb"]], 20)
    assert results["a"] == "ok"
    down = rt.graph("d")
    da, db = down.download(a_buf), down.download(b_buf)
    rt.submit(down).wait(10)
    assert (da.read() == 1).all() and (db.read() == 2).all()
    rt.close()


def test_submit_waits_for_another_threads_session_and_honours_block_and_timeout():
    dev = hrx.open_device("host")
    rt = Runtime(dev, RuntimeOptions(observe=False))
    buf = rt.allocate(64)
    g = rt.graph()
    g.compute("c", lambda r: r.fill(buf, pattern=3))
    up = rt.graph("up")
    up.upload(buf.slice(0, 8), np.zeros(8, np.uint8))
    inside, leave = threading.Event(), threading.Event()

    def session():
        with rt.native_session():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=session, daemon=True)
    t.start()
    inside.wait(5)
    tried("concurrency", "Runtime.submit (lane reserved)", 3)
    with pytest.raises(hrx.QueueFull, match="reserved"):
        rt.submit(g, block=False)
    with pytest.raises(hrx.Timeout, match="reserved"):
        rt.submit(g, timeout=0.05)
    rt.submit(up).wait(10)  # other lanes are not reserved
    leave.set()
    join_all([t], 10)
    rt.submit(g).wait(10)
    assert rt._room_taken == 0 and rt.stats.snapshot()["submissions"] == 2
    rt.close()


def test_max_submissions_holds_under_concurrent_non_blocking_submits(monkeypatch):
    # The limit was checked outside its lock: 8 concurrent submit(block=False) against
    # max_submissions=1 were all accepted. A slow encode widens the window.
    dev = hrx.open_device("host")
    rt = Runtime(dev, RuntimeOptions(max_submissions=1, observe=False))
    buf = rt.allocate(64)
    graphs = []
    for i in range(8):
        g = rt.graph(f"g{i}")
        g.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [buf.slice(0, 4)], scalars=(200_000_000,)))
        graphs.append(g)
    real_encode = Runtime._encode

    def slow_encode(self, region, events):
        import time

        time.sleep(0.02)
        return real_encode(self, region, events)

    monkeypatch.setattr(Runtime, "_encode", slow_encode)
    barrier = threading.Barrier(8)
    accepted, refused = [], []

    def submit(g):
        barrier.wait(5)
        try:
            accepted.append(rt.submit(g, block=False))
        except hrx.QueueFull:
            refused.append(g)

    threads = [threading.Thread(target=submit, args=(g,), daemon=True) for g in graphs]
    for t in threads:
        t.start()
    tried("concurrency", "Runtime.submit(block=False)", 8)
    join_all(threads, 30)
    assert len(accepted) == 1 and len(refused) == 7
    monkeypatch.setattr(Runtime, "_encode", real_encode)
    rt.synchronize(30)
    rt.close()


def _add_each(a, b, c):
    for x in (a, b, c):
        x.view(np.uint32)[:4] += 1


ADD_EACH = hrx.Kernel("add_each", buffers=3, host=_add_each)


def test_a_bindings_list_shrunk_by_another_thread_during_dispatch():
    """Another thread empties and refills the list a dispatch is given, as fast as it
    can, with thread switches every microsecond: each dispatch launches with the three
    buffers or is refused (InvalidArgument), the compiled dispatch included (it runs
    Python code between the list's items on the host engine); nothing crashes, and
    every buffer counts exactly the launches accepted."""
    import random
    import sys
    import time

    dev = hrx.open_device("host")
    s = dev.stream()
    bufs = [dev.allocate(256) for _ in range(3)]
    for b in bufs:
        s.upload(b, np.zeros(64, np.uint32))
    s.dispatch(ADD_EACH, 1, bufs)  # makes the queue and the compiled dispatch
    shared = list(bufs)
    stop = threading.Event()

    # The list's content after each step is drawn at random, so what the dispatching
    # thread sees does not depend on where the interpreter's thread switches fall
    # (a strict empty/full alternation could lock step with them and refuse every
    # dispatch, which CI once saw). A dispatch of the host engine runs Python code
    # (thread switches) between its reads of the list, so a loaded machine can see a
    # change inside every dispatch and refuse them all (CI saw 0 of 3000 accepted):
    # every 16th step leaves the list whole for 200 us, the thread sleeping.
    lists = [[], bufs[:1], bufs[:2], bufs, bufs, bufs]

    def mutate():
        draw = random.Random(15).choice
        step = 0
        while not stop.is_set():
            step += 1
            if step % 16 == 0:
                shared[:] = bufs
                time.sleep(200e-6)
            else:
                shared[:] = draw(lists)

    accepted, refused = 1, 0
    reasons: set[str] = set()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    t = threading.Thread(target=mutate, daemon=True)
    t.start()
    try:
        for _ in range(3000):
            try:
                s.dispatch(ADD_EACH, 1, shared)
                accepted += 1
            except hrx.InvalidArgument as e:
                refused += 1
                reasons.add(str(e))
    finally:
        stop.set()
        sys.setswitchinterval(old)
        join_all([t], 60)
    tried("concurrency", "Stream.dispatch (bindings list mutated)", 3000)
    s.synchronize(60)
    # refused only for the count the list had when read, never for anything else
    assert reasons <= {f"bindings: kernel 'add_each' takes 3 buffers, got {n}" for n in (0, 1, 2)}
    assert accepted > 1 and accepted + refused == 3001
    for b in bufs:
        assert s.download(b).view(np.uint32)[:4].tolist() == [accepted] * 4
