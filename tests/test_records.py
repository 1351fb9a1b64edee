"""Launch records (hrx_core.record) on every engine: prepared launches and graphs
validate once and launch on one epoch check, give the results of the slow path, and
honour every invalidation -- a stale record never launches."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.buffer import EPOCH
from hrx_core.record import LaunchRecord

from .conftest import count_calls
from .kernels import ADD_U32, SLEEPY, launch_1d

N = 1024
GRID, BLOCK = launch_1d(N)


def _u32(stream, buf) -> np.ndarray:
    return stream.download(buf).view(np.uint32)


def test_prepared_launch_validates_once_while_nothing_changes(dev, monkeypatch):
    import gc

    gc.collect()  # earlier tests' garbage: its frees would move the epoch during the loop
    s = dev.stream()
    x = s.allocate_from(np.zeros(N, np.uint32))
    p = s.prepare(ADD_U32, GRID, [x], block=BLOCK, scalars=(np.uint32(1), np.uint32(N)))
    calls = []
    real = LaunchRecord.validate
    monkeypatch.setattr(LaunchRecord, "validate", lambda self, what="launch": (calls.append(what), real(self, what))[1])
    for _ in range(50):
        p.launch()
    s.synchronize()
    assert len(calls) <= 1  # at most the first launch after prepare
    assert (_u32(s, x) == 50).all()
    # the same work through dynamic dispatches gives the same bytes
    y = s.allocate_from(np.zeros(N, np.uint32))
    for _ in range(50):
        s.dispatch(ADD_U32, launch_1d(N)[0], [y], block=launch_1d(N)[1], scalars=(np.uint32(1), np.uint32(N)))
    assert (_u32(s, y) == _u32(s, x)).all()


def test_host_mappings_and_unflushed_writes_stop_a_current_record(dev):
    s = dev.stream()
    x = dev.allocate_shared(N * 4)
    s.fill(x, 0).wait()
    p = s.prepare(ADD_U32, GRID, [x], block=BLOCK, scalars=(np.uint32(1), np.uint32(N)))
    p.launch().wait()
    with x.map("read"):
        with pytest.raises(hrx.AccessConflict):
            p.launch()  # the record was current: the mapping moved the epoch
    p.launch().wait()
    assert (_u32(s, x) == 2).all()
    if dev.info.host_mappable:
        y = dev.allocate(N * 4)
        s.fill(y, 0).wait()
        q = s.prepare(ADD_U32, GRID, [y], block=BLOCK, scalars=(np.uint32(1), np.uint32(N)))
        q.launch().wait()
        with y.map("write") as m:
            m[:] = 0
        with pytest.raises(hrx.InvalidArgument, match="flush"):
            q.launch()
        y.cache_control("flush")
        q.launch().wait()
        assert (_u32(s, y) == 1).all()


def test_closed_and_freed_memory_is_refused(dev):
    s = dev.stream()
    x = s.allocate_from(np.zeros(N, np.uint32))
    p = s.prepare(ADD_U32, GRID, [x], block=BLOCK, scalars=(np.uint32(1), np.uint32(N)))
    p.launch().wait()
    x.close()
    gc.collect()
    with pytest.raises(hrx.InvalidArgument, match="freed"):
        p.launch()
    # a graph that borrows a handle refuses once it is closed; an owned graph does not
    a = s.allocate_from(np.zeros(N, np.uint32))
    b = s.allocate_from(np.zeros(N, np.uint32))
    c = dev.allocate(N * 4)
    g = s.access_graph()
    g.dispatch(ADD_U32, launch_1d(N)[0], [a], block=launch_1d(N)[1], scalars=(np.uint32(1), np.uint32(N)))
    og = s.owned_graph()
    og.dispatch(ADD_U32, launch_1d(N)[0], [b], block=launch_1d(N)[1], scalars=(np.uint32(2), np.uint32(N)))
    og.copyto(c, b)
    g.launch().wait()
    og.launch().wait()
    a.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        g.launch()
    b.close()
    og.launch().wait()  # retained by the owned graph
    assert (_u32(s, c) == 4).all()


def test_memory_closed_during_a_launch_lives_until_it_retires(dev):
    s = dev.stream()
    budget = hrx.MemoryBudget(1 << 20)
    flag = dev.allocate(4, budget=budget)
    p = s.prepare(SLEEPY, 1, [flag], scalars=(np.uint64(50_000_000),))
    done = p.launch()
    assert not flag.is_idle()  # the record's launch is pending use
    flag.close()
    gc.collect()
    assert budget.used_bytes == 4  # in flight: not freed, charge kept
    done.wait()
    s.synchronize()
    for _ in range(100):  # retirement releases it (at the latest on the queue's next poll)
        s.completion().refresh()
        if budget.used_bytes == 0:
            break
        s.slot.retire()
    assert budget.used_bytes == 0
    with pytest.raises(hrx.InvalidArgument, match="freed"):
        p.launch()


def test_rebinding_a_prepared_launch_keeps_the_old_memory_busy(dev):
    s = dev.stream()
    a = dev.allocate_shared(4)  # host-mappable on every engine
    b = dev.allocate(4)
    p = s.prepare(SLEEPY, 1, [a], scalars=(np.uint64(50_000_000),))
    done = p.launch()
    p.rebind(0, b)
    assert not a.is_idle()  # the launch before the rebind still uses it
    with pytest.raises(hrx.AccessConflict):
        with a.map("read"):
            pass
    done.wait()
    assert a.is_idle()
    p.launch().wait()
    p.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        p.launch()


def _graph_with_inputs(s, x, y):
    g = s.access_graph()
    g.input("x", x)
    g.input("y", y)
    grid, block = launch_1d(N)
    g.dispatch(ADD_U32, grid, [x], block=block, scalars=(np.uint32(1), np.uint32(N)))
    g.dispatch(ADD_U32, grid, [y], block=block, scalars=(np.uint32(10), np.uint32(N)))
    g.dispatch(ADD_U32, grid, [x], block=block, scalars=(np.uint32(100), np.uint32(N)))
    return g


@pytest.mark.parametrize("patching", [True, False], ids=["patch_args", "update"])
def test_graph_rebinding_matches_fresh_graphs(dev, patching, monkeypatch):
    s = dev.stream()
    x, y = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    others = [s.allocate_from(np.full(N, i, np.uint32)) for i in range(3)]
    g = _graph_with_inputs(s, x, y)
    g.launch().wait()
    if not patching and dev.info.native_graphs:
        native = type(g._native)
        monkeypatch.setattr(native, "patch_args", lambda self, patches: False)
    expect = {id(b): _u32(s, b).copy() for b in [x, y, *others]}

    def bump(buf, by):
        expect[id(buf)] = expect[id(buf)] + np.uint32(by)

    g.launch(inputs={"x": others[0]}).wait()
    bump(others[0], 101), bump(y, 10)
    g.launch(inputs={"x": others[1], "y": others[2]}).wait()
    bump(others[1], 101), bump(others[2], 10)
    g.launch().wait()  # defaults again
    bump(x, 101), bump(y, 10)
    g.launch(inputs={"y": others[0].binding()}).wait()
    bump(x, 101), bump(others[0], 10)
    for b in [x, y, *others]:
        assert (_u32(s, b) == expect[id(b)]).all()


def test_refused_rebinding_changes_nothing(dev):
    s = dev.stream()
    x, y = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    g = _graph_with_inputs(s, x, y)
    g.launch().wait()
    small = dev.allocate(16)
    with pytest.raises(hrx.InvalidArgument, match="bytes"):
        g.launch(inputs={"x": small})
    with pytest.raises(hrx.InvalidArgument, match="needs"):
        g.launch(inputs={"x": s.allocate_from(np.zeros(N, np.uint32)).binding().read()})
    with pytest.raises(hrx.Overlap):
        g.launch(inputs={"x": y})
    closed = s.allocate_from(np.zeros(N, np.uint32))
    closed.close()
    with pytest.raises(hrx.InvalidArgument):
        g.launch(inputs={"x": closed})
    g.launch().wait()
    assert (_u32(s, x) == 202).all() and (_u32(s, y) == 20).all()


def test_remembered_bindings_honour_every_invalidation(dev, monkeypatch):
    """A graph remembers the Buffer and View bindings it validated (a few per input);
    a remembered one is used only while EPOCH stands still, so closing, freeing and
    host-mapping memory re-validate it, and other objects are always validated."""
    from hrx_core.graph import _INPUT_MEMO

    s = dev.stream()
    x, y = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    a, b = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    g = _graph_with_inputs(s, x, y)
    g.launch().wait()
    checks = count_calls(monkeypatch, type(g), "_input_binding")
    view = b.slice(0, N * 4)
    for _ in range(3):  # alternating bindings: validated once each
        g.launch(inputs={"x": a, "y": view}).wait()
        g.launch(inputs={"x": b.slice(0, N * 4)}).wait()  # a new View object each time
    assert checks[0] == 2 + 3
    assert (_u32(s, a) == 3 * 101).all() and (_u32(s, b) == 3 * 10 + 3 * 101).all()
    # a host mapping moves EPOCH: validated again, and refused while it is open
    shared = dev.allocate_shared(N * 4) if dev.info.coherent_shared_memory else None
    if shared is not None:
        s.fill(shared, 0).wait()
        g.launch(inputs={"x": shared}).wait()
        with shared.map("read"):
            with pytest.raises(hrx.AccessConflict):
                g.launch(inputs={"x": shared})
        g.launch(inputs={"x": shared}).wait()
        assert (_u32(s, shared) == 2 * 101).all()
    # closing moves EPOCH: a remembered binding of a closed buffer is refused
    g.launch(inputs={"x": a}).wait()
    a.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        g.launch(inputs={"x": a})
    # memory freed behind a remembered binding: the next object is validated afresh
    c = s.allocate_from(np.zeros(N, np.uint32))
    g.launch(inputs={"x": c}).wait()
    del c
    gc.collect()
    small = dev.allocate(16)
    with pytest.raises(hrx.InvalidArgument, match="bytes"):
        g.launch(inputs={"x": small})
    for _ in range(2 * _INPUT_MEMO):  # bounded: a few bindings an input
        g.launch(inputs={"y": s.allocate_from(np.zeros(N, np.uint32))}).wait()
    assert len(g._input_memo["y"]) <= _INPUT_MEMO
    g.launch().wait()
    assert (_u32(s, x) == (2 + 2 * _INPUT_MEMO) * 101).all()  # the launches that kept x's default


def test_binding_an_inputs_own_default_needs_no_overlap_pass(dev, monkeypatch):
    """Naming an input's default memory again is the recorded configuration: only
    memory bound elsewhere in the graph needs the full overlap pass."""
    s = dev.stream()
    x, y = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    g = _graph_with_inputs(s, x, y)
    g.launch().wait()
    passes = [0]
    resolve = type(g)._resolve

    def counted(self, inputs):
        if inputs is not None:
            passes[0] += 1
        return resolve(self, inputs)

    monkeypatch.setattr(type(g), "_resolve", counted)
    g.launch(inputs={"x": x, "y": y}).wait()
    g.launch(inputs={"x": x.binding()}).wait()
    assert passes[0] == 0
    with pytest.raises(hrx.Overlap):
        g.launch(inputs={"x": y})  # y's memory is bound elsewhere: checked, refused
    assert passes[0] == 1
    with pytest.raises(hrx.Overlap):
        g.launch(inputs={"x": x, "y": x})
    g.launch().wait()
    assert (_u32(s, x) == 4 * 101).all() and (_u32(s, y) == 40).all()


def test_a_failed_launch_leaves_the_record_stale(dev):
    s = dev.stream()
    x = dev.allocate_shared(N * 4)
    s.fill(x, 0).wait()
    p = s.prepare(ADD_U32, GRID, [x], block=BLOCK, scalars=(np.uint32(1), np.uint32(N)))
    with x.map("read"):
        with pytest.raises(hrx.AccessConflict):
            p.launch()
        assert p._record.epoch != EPOCH.value
        with pytest.raises(hrx.AccessConflict):
            p.launch()  # still refused: nothing was cached by the failure
    p.launch().wait()
    assert (_u32(s, x) == 1).all()


def test_rebinding_per_launch_updates_the_record_in_place_and_signals_nothing(dev, monkeypatch):
    """TensorOps rebinds a slot's prepared launch per call: the record changes only the
    entries of the rebound allocation (the others keep theirs), and handing over the
    old binding's launches emits no timeline signal (no driver call per rebind)."""
    from hrx_core.device import AUTO_FLUSH_OPS, QueueSlot

    s = dev.stream()
    bufs = [s.allocate_from(np.zeros(N, np.uint32)) for _ in range(4)]
    grid, block = launch_1d(N)
    p = s.prepare(ADD_U32, grid, [bufs[0]], block=block, scalars=(np.uint32(1), np.uint32(N)))
    s.synchronize()
    record = p._record
    flushes = [0]
    flush = QueueSlot._flush_locked

    def counted(self):
        flushes[0] += 1
        return flush(self)

    monkeypatch.setattr(QueueSlot, "_flush_locked", counted)
    for i in range(40):
        p.rebind(0, bufs[i % 4])
        p.launch()
    assert flushes[0] <= 40 // AUTO_FLUSH_OPS + 1
    assert p._record is record  # the same record, updated in place
    for i, b in enumerate(bufs):
        assert (record in b.allocation.records) == (i == 3)
    s.synchronize()
    for b in bufs:
        assert (s.download(b).view(np.uint32) == 10).all()  # every launch used its binding
        assert b.is_idle()
    p.close()
    assert record not in bufs[3].allocation.records


def test_prepared_launches_between_signals_share_one_completion(dev):
    """A prepared launch counts its operation and signals every AUTO_FLUSH_OPS
    launches (inlined on its hot path): launches between two signals return the same
    completion, each completion covers its launch, and the results are every launch's."""
    from hrx_core.device import AUTO_FLUSH_OPS

    s = dev.stream()
    x = s.allocate_from(np.zeros(N, np.uint32))
    grid, block = launch_1d(N)
    p = s.prepare(ADD_U32, grid, [x], block=block, scalars=(np.uint32(1), np.uint32(N)))
    s.synchronize()
    slot = s.slot
    signaled = slot.signaled
    done = [p.launch() for _ in range(AUTO_FLUSH_OPS + 3)]
    assert slot.signaled == signaled + 1  # one signal for the first AUTO_FLUSH_OPS launches
    first = done[: AUTO_FLUSH_OPS]
    assert all(c is first[0] for c in first) and first[0].value == signaled + 1
    assert all(c is done[-1] for c in done[AUTO_FLUSH_OPS:]) and done[-1].value == signaled + 2
    first[0].wait(60)
    done[-1].wait(60)
    assert (_u32(s, x) == AUTO_FLUSH_OPS + 3).all()
