"""BufferPool: bounded best-fit reuse; leases return allocations."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import hrx_core as hrx

from .conftest import live_bytes


def test_best_fit_reuse(dev):
    pool = dev.buffer_pool(max_free_bytes=1 << 20)
    a = pool.allocate(1000)
    b = pool.allocate(4000)
    a_alloc, b_alloc = a.allocation, b.allocation
    a.close()
    b.close()
    assert pool.free_bytes == 5000
    c = pool.allocate(900)  # best fit: the 1000-byte allocation, not the 4000 one
    assert c.allocation is a_alloc and c.nbytes == 900
    d = pool.allocate(3000)
    assert d.allocation is b_alloc
    e = pool.allocate(100)  # 4000 would waste more than half: new allocation
    assert e.allocation is not b_alloc
    assert pool.hits == 2 and pool.misses == 3


def test_dropping_a_pooled_buffer_returns_it(dev):
    pool = dev.buffer_pool()
    buf = pool.allocate(256)
    alloc = buf.allocation
    del buf
    gc.collect()
    assert pool.allocate(256).allocation is alloc


def test_pool_is_bounded(dev):
    pool = dev.buffer_pool(max_free_bytes=3000)
    live = live_bytes(dev)
    bufs = [pool.allocate(1000) for _ in range(5)]
    for b in bufs:
        b.close()
    assert pool.free_bytes <= 3000
    assert live_bytes(dev) == live + 3000
    pool.close()
    assert live_bytes(dev) == live


def test_graph_retention_does_not_prevent_reuse(dev):
    s = dev.stream()
    pool = dev.buffer_pool()
    buf = pool.allocate(64)
    alloc = buf.allocation
    g = s.owned_graph()
    g.fill(buf, pattern=5)
    buf.close()  # the lease ends; the graph still retains the native backing
    again = pool.allocate(64)
    assert again.allocation is alloc  # reused: the lease is the caller's contract
    g.launch().wait()
    assert (s.download(again) == 5).all()
    g.close()


def test_pending_work_delays_reuse(dev):
    from .kernels import SLEEPY

    s = dev.stream()
    pool = dev.buffer_pool()
    buf = pool.allocate(64)
    alloc = buf.allocation
    s.dispatch(SLEEPY, 1, [buf.slice(0, 4)], scalars=(200_000_000,))
    buf.close()
    other = pool.allocate(64)
    assert other.allocation is not alloc  # still busy: not handed out
    s.synchronize()
    other.close()


def test_pool_validates(dev):
    pool = dev.buffer_pool()
    with pytest.raises(hrx.InvalidArgument):
        pool.allocate(0)
    with pytest.raises(hrx.InvalidArgument):
        dev.buffer_pool(max_free_bytes=-1)


def test_pooled_buffer_is_a_buffer(dev):
    s = dev.stream()
    pool = dev.buffer_pool()
    with pool.allocate(16) as buf:
        assert isinstance(buf, hrx.PooledBuffer) and isinstance(buf, hrx.Buffer)
        s.upload_blocking(buf, np.arange(16, dtype=np.uint8))
        assert s.download(buf)[15] == 15
