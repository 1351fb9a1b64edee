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


def _rebind_a_mapped_input(dev, s, g) -> None:
    """A host mapping moves EPOCH: a remembered binding of shared memory is validated
    again, and refused while the mapping is open (engines with coherent shared memory)."""
    if not dev.info.coherent_shared_memory:
        return
    shared = dev.allocate_shared(N * 4)
    s.fill(shared, 0).wait()
    g.launch(inputs={"x": shared}).wait()
    with shared.map("read"):
        with pytest.raises(hrx.AccessConflict):
            g.launch(inputs={"x": shared})
    g.launch(inputs={"x": shared}).wait()
    assert (_u32(s, shared) == 2 * 101).all()


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


@pytest.mark.parametrize("patching", [True, False], ids=["patch_args", "update"])
def test_a_replayed_inputs_mapping_is_resolved_once(dev, patching, monkeypatch):
    """A graph keeps a rebind record per inputs mapping it replayed (its names and the
    identity of its values): replaying it again validates nothing and resolves no
    cells, and gives what the general path gives -- whether the native graph patches
    argument cells or refuses and has its nodes updated."""
    from hrx_core.graph import Graph

    s = dev.stream()
    x, y = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    a, b = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    g = _graph_with_inputs(s, x, y)
    g.launch().wait()
    if not patching and dev.info.native_graphs:
        monkeypatch.setattr(type(g._native), "patch_args", lambda self, patches: False)
    validations = count_calls(monkeypatch, Graph, "_validate_inputs")
    applied = count_calls(monkeypatch, Graph, "_apply_inputs")
    one, two = {"x": a, "y": b.slice(0, N * 4)}, {"x": b, "y": a}
    gc.collect()
    gc.disable()  # (a collection inside the loop could move EPOCH)
    try:
        for _ in range(4):
            g.launch(inputs=one)
            g.launch(inputs=two)
            g.launch()  # the defaults between
    finally:
        gc.enable()
    s.synchronize()
    native = dev.info.native_graphs
    assert validations[0] == (2 if native else 8)  # engines without native graphs replan
    if native:
        # records apply without the general path where the native graph patches cells
        # (a replay of the defaults after a rebinding restores them: the first through
        # the general path, which keeps the graph's restore record, the others by it;
        # where patches are refused, each through the general path: 4 more)
        from hrx_core.engine import NativeGraph

        patches = patching and type(g._native).patch_args is not NativeGraph.patch_args
        assert applied[0] == (2 + 1 if patches else 8 + 4)
    assert (_u32(s, x) == 5 * 101).all() and (_u32(s, y) == 5 * 10).all()
    assert (_u32(s, a) == 4 * 101 + 4 * 10).all() and (_u32(s, b) == 4 * 10 + 4 * 101).all()


def test_rebind_records_honour_every_invalidation(dev):
    """A record is used only while EPOCH stands and each value is still the object it
    was made from: a closed binding is refused, a new object at a recycled id is
    validated afresh (a wrong size refused), host-mapped memory is never recorded,
    and the memo stays bounded."""
    from hrx_core.graph import _REBIND_MEMO

    s = dev.stream()
    x, y = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    g = _graph_with_inputs(s, x, y)
    g.launch().wait()
    a = s.allocate_from(np.zeros(N, np.uint32))
    g.launch(inputs={"x": a}).wait()
    g.launch(inputs={"x": a}).wait()
    a.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        g.launch(inputs={"x": a})
    # a value gone: a new object that reuses its id is not the recorded one
    v = s.allocate_from(np.zeros(N, np.uint32)).slice(0, N * 4)
    g.launch(inputs={"x": v}).wait()
    old = id(v)
    del v
    gc.collect()
    for _ in range(100):
        small = dev.allocate(16).slice(0, 16)
        if id(small) == old:
            break
    with pytest.raises(hrx.InvalidArgument, match="bytes"):
        g.launch(inputs={"x": small})
    _rebind_a_mapped_input(dev, s, g)
    for _ in range(2 * _REBIND_MEMO):
        g.launch(inputs={"y": s.allocate_from(np.zeros(N, np.uint32))}).wait()
    assert len(g._rebind_memo) <= _REBIND_MEMO
    g.launch().wait()
    assert (_u32(s, x) == (1 + 1 + 2 * _REBIND_MEMO) * 101).all()


def test_rebind_records_hold_their_memory_without_a_retain_per_launch(dev):
    """Memory a rebind record binds is held by the record (registered with the
    allocation), not retained and released per launch: it reads busy while a record
    launch runs, a host mapping conflicts with it, and closed meanwhile it lives until
    the launch retires, its budget charge with it."""
    s = dev.stream()
    flag = dev.allocate(4)
    g = s.graph()
    g.input("flag", flag)
    g.dispatch(SLEEPY, 1, [flag], scalars=(np.uint64(50_000_000),), deps=[])
    g.launch().wait()
    budget = hrx.MemoryBudget(1 << 20)
    other = dev.allocate(4, budget=budget)
    shared = dev.allocate_shared(4)  # host-mappable on every engine
    g.launch(inputs={"flag": other}).wait()  # validated, recorded
    g.launch(inputs={"flag": shared}).wait()
    refs = other.allocation.refs
    done = g.launch(inputs={"flag": other})  # the record's launch
    if dev.info.native_graphs:
        assert other.allocation.refs == refs  # nothing retained for it
        assert any(isinstance(r, LaunchRecord) for r in other.allocation.records)
    assert not other.is_idle()
    other.close()
    gc.collect()
    assert budget.used_bytes == 4  # in flight: not freed, charge kept
    done.wait()
    s.synchronize()
    for _ in range(100):
        s.completion().refresh()
        if budget.used_bytes == 0:
            break
        s.slot.retire()
    assert budget.used_bytes == 0
    done = g.launch(inputs={"flag": shared})
    with pytest.raises(hrx.AccessConflict):
        with shared.map("read"):
            pass
    done.wait()
    with shared.map("read") as host:
        assert host.view(np.uint32)[0] == 1
    g.close()
    assert not shared.allocation.records  # closing the graph closes its records


def test_rebind_record_after_the_graph_changes(dev):
    """Recording another node drops the records: the next replay of a recorded
    mapping goes through the general path and runs the new node too."""
    s = dev.stream()
    x, y = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    a = s.allocate_from(np.zeros(N, np.uint32))
    g = _graph_with_inputs(s, x, y)
    g.launch(inputs={"x": a}).wait()
    g.launch(inputs={"x": a}).wait()
    assert g._rebind_memo or not dev.info.native_graphs
    grid, block = launch_1d(N)
    g.dispatch(ADD_U32, grid, [x], block=block, scalars=(np.uint32(1000), np.uint32(N)))
    assert not g._rebind_memo
    g.launch(inputs={"x": a}).wait()
    assert (_u32(s, a) == 2 * 101 + 1101).all() and (_u32(s, x) == 0).all()


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
    gc.collect()  # handles of earlier tests collected now, not inside the loop (that moves EPOCH)
    gc.disable()
    try:
        for _ in range(3):  # alternating bindings: validated once each
            g.launch(inputs={"x": a, "y": view}).wait()
            g.launch(inputs={"x": b.slice(0, N * 4)}).wait()  # a new View object each time
    finally:
        gc.enable()
    assert checks[0] == 2 + 3
    assert (_u32(s, a) == 3 * 101).all() and (_u32(s, b) == 3 * 10 + 3 * 101).all()
    _rebind_a_mapped_input(dev, s, g)
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


def test_host_graph_patches_dispatch_buffer_arguments_or_refuses_whole():
    """The host engine's native graph patches buffer arguments of dispatch nodes (the
    core's rebinding fast path); a patch naming anything else -- a scalar, a copy or
    empty node, an index out of range -- is refused with nothing changed, and a
    replay already enqueued keeps the arguments it took."""
    from hrx_core.engine import Access, BufferArg, GraphNode
    from hrx_core.host.graph import HostGraph

    dev = hrx.device("host")
    s = dev.stream()
    x, y = (s.allocate_from(np.zeros(N, np.uint32)) for _ in range(2))
    exe = ADD_U32.executable(dev)
    grid, block = launch_1d(N)

    def arg(buf):
        return BufferArg(buf.allocation.native, 0, N * 4, Access.READ_WRITE)

    nodes = [GraphNode("dispatch", (), {"executable": exe, "grid": grid, "block": block,
                                        "args": (arg(x), np.uint32(1), np.uint32(N))}),
             GraphNode("empty", (0,), {})]
    g = HostGraph(nodes)
    for bad in ([(0, 1, arg(y))], [(1, 0, arg(y))], [(2, 0, arg(y))], [(0, 3, arg(y))], [(0, 0, arg(y)), (0, 1, arg(y))]):
        assert g.patch_args(bad) is False
        assert g._nodes[0].params["args"][0].buffer is x.allocation.native
    q = s.slot.native
    g.launch(q)  # enqueued with x
    assert g.patch_args([(0, 0, arg(y))]) is True
    g.launch(q)
    s.synchronize()
    assert (_u32(s, x) == 1).all() and (_u32(s, y) == 1).all()
