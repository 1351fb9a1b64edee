"""Finalizers never run engine code inside a garbage collection (hrx_core.finalize).

A handle in a reference cycle is finalized by the cyclic collector, which may start
inside HRX code holding a lock that freeing needs (a deadlock seen on the simulated
Strix Halo). Its close is queued then and runs at the next safe point: the end of a
collection that user code triggered, or the next allocation or synchronize."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core import finalize

from .conftest import collector_off

#: A function whose frame counts as HRX code (its module name starts with "hrx"), as
#: an engine's would: it holds ``lock`` while a collection runs, as an allocation
#: crossing the collector's threshold would start one.
_PROBE: dict[str, object] = {"__name__": "hrx_core._finalize_probe", "gc": gc}
exec(compile("def collect_holding(lock):\n    with lock:\n        gc.collect()\n", "<hrx probe>", "exec"), _PROBE)
collect_holding: Callable[[threading.Lock], None] = _PROBE["collect_holding"]  # type: ignore[assignment]


@pytest.fixture
def no_automatic_collections() -> Iterator[None]:
    """Only the collections a test makes run (one the test did not plan could collect
    its garbage at another point)."""
    with collector_off():
        yield


def _settled_live(dev: hrx.Device) -> int:
    """Live bytes once earlier work retired (its queues' deferred frees done)."""
    dev.synchronize()
    return dev.stats.live_bytes


def _cyclic_garbage(dev: hrx.Device, nbytes: int, on_free: Callable[[object], None] | None = None) -> None:
    """A buffer reachable only through a reference cycle (the collector frees it)."""
    buf = dev.allocate(nbytes)
    if on_free is not None:
        buf.allocation.on_free.append(on_free)
    cycle: list[object] = [buf]
    cycle.append(cycle)


def test_a_collection_inside_hrx_code_queues_the_close(dev: hrx.Device, no_automatic_collections: None) -> None:
    """The finalizer does not free while the collecting code holds the lock freeing
    needs; the next allocation user code makes frees it."""
    lock = threading.Lock()
    freed: list[bool] = []

    def needs_lock(alloc: object) -> None:  # the free path takes the lock the collector's caller holds
        got = lock.acquire(timeout=2)
        if got:
            lock.release()
        freed.append(got)

    live = _settled_live(dev)
    _cyclic_garbage(dev, 4096, needs_lock)
    collect_holding(lock)
    assert freed == [] and finalize.pending() >= 1
    assert dev.stats.live_bytes == live + 4096
    extra = dev.allocate(16)  # a public call from user code: the queued close runs first
    assert freed == [True] and finalize.pending() == 0
    assert dev.stats.live_bytes == live + 16
    extra.close()


def test_synchronize_drains_queued_closes(dev: hrx.Device, no_automatic_collections: None) -> None:
    s = dev.stream()
    live = _settled_live(dev)
    _cyclic_garbage(dev, 256)
    collect_holding(threading.Lock())
    assert finalize.pending() >= 1 and dev.stats.live_bytes == live + 256
    s.synchronize()
    assert finalize.pending() == 0 and dev.stats.live_bytes == live


def test_a_collection_user_code_triggers_closes_before_it_returns(dev: hrx.Device, no_automatic_collections: None) -> None:
    live = _settled_live(dev)
    _cyclic_garbage(dev, 4096)
    assert dev.stats.live_bytes == live + 4096
    gc.collect()
    assert finalize.pending() == 0 and dev.stats.live_bytes == live


def test_outside_a_collection_a_dropped_handle_closes_at_once(dev: hrx.Device) -> None:
    live = _settled_live(dev)
    buf = dev.allocate(512)
    assert dev.stats.live_bytes == live + 512
    del buf
    assert finalize.pending() == 0 and dev.stats.live_bytes == live


def test_queued_graphs_and_prepared_launches_close_too(dev: hrx.Device, no_automatic_collections: None) -> None:
    """Every handle with a finalizer queues its close the same way."""
    from .kernels import ADD_U32

    s = dev.stream()
    buf = s.allocate_from(np.zeros(64, np.uint32))
    prepared = s.prepare(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    g = s.graph()
    g.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64), deps=[])
    g.launch().wait(30)
    cycle: list[object] = [prepared, g]
    cycle.append(cycle)
    del prepared, g, cycle
    collect_holding(threading.Lock())
    assert finalize.pending() >= 2
    s.synchronize()
    assert finalize.pending() == 0
    assert s.download(buf).view(np.uint32)[0] == 1
    buf.close()


def test_a_dropped_graph_does_not_live_as_long_as_its_buffers(dev: hrx.Device) -> None:
    """A graph's launch record is registered on every allocation it binds; it holds
    the graph weakly, so a graph its user dropped without close() is collected (and
    closed) while its buffers live on -- before, each such graph stayed alive, with
    its native graph, as long as any buffer it bound."""
    import weakref

    from .kernels import ADD_U32

    s = dev.stream()
    buf = s.allocate_from(np.zeros(64, np.uint32))
    g = s.graph()
    g.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64), deps=[])
    g.launch().wait(30)
    assert len(buf.allocation.records) == 1
    ref = weakref.ref(g)
    del g
    gc.collect()
    assert ref() is None and buf.allocation.records == {}
    s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    assert s.download(buf).view(np.uint32)[0] == 2
    buf.close()
