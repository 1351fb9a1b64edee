"""The per-device queue pool: up to 8 queues, lazy, round-robin, one queue per stream."""

from __future__ import annotations

import pytest

import hrx_core as hrx


def _fresh_device(engine):
    from .conftest import open_device

    open_device(engine)  # skips when the engine is absent
    return hrx.open_device(engine)  # a new device: queue counts start clean


def test_queue_families_are_listed(dev):
    names = [f.name for f in dev.queue_families]
    assert "compute" in names
    for f in dev.queue_families:
        assert f.count >= 1 and f.operations


def test_round_robin_lazy_up_to_eight(engine):
    dev = _fresh_device(engine)
    assert dev.created_queues() == []
    streams = [dev.stream() for _ in range(10)]
    assert dev.created_queues() == []  # lazily: nothing created yet
    names = [s.queue for s in streams]
    assert len(set(names)) == min(8, dev.info.family("compute").count)
    assert names[8] == names[0] and names[9] == names[1]
    streams[0].fill(dev.allocate(4), 0).wait()
    assert dev.created_queues() == [streams[0].queue]
    # a stream stays on its queue
    assert streams[0].queue == names[0]


def test_set_stream_queue_count_only_before_first_stream(engine):
    dev = _fresh_device(engine)
    dev.set_stream_queue_count(2)
    assert dev.stream_queue_count == 2
    names = [dev.stream().queue for _ in range(4)]
    assert names[0] == names[2] and names[1] == names[3] and names[0] != names[1]
    with pytest.raises(hrx.InvalidArgument, match="before creating the first stream"):
        dev.set_stream_queue_count(4)
    with pytest.raises(hrx.InvalidArgument):
        _fresh_device(engine).set_stream_queue_count(0)


def test_unknown_family_is_rejected(dev):
    with pytest.raises(hrx.InvalidArgument, match="no 'dma' queues"):
        dev.stream("dma")


def test_copy_family_streams_cannot_dispatch(dev):
    from .kernels import EMPTY

    fam = dev.info.family("copy")
    if fam is None:
        pytest.skip("no copy family")
    s = dev.stream("copy")
    buf = dev.allocate(64)
    s.fill(buf, pattern=1).wait()
    with pytest.raises(hrx.Unsupported):
        s.dispatch(EMPTY, 1, [])
