"""ModelSession and ModelContext (issue 8, parts 1-3): kernels, arena, graph cache,
budgets during loading, freezing without double charges, adoption charges."""

# ruff: noqa: F811 - pytest fixtures imported from test_model_support are redefined as parameters

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions
from hrx_core.model import DeviceTensor, ModelContext, ModelSession, SlotConflict

from .kernels import ADD_U32, INC_BYTES, launch_1d
from .test_model_support import ADD_BYTES, budget, ctx, grid  # noqa: F401 - fixtures

W = np.arange(256, dtype=np.uint8)


def test_in_context_charges_weights_and_working_tensors(ctx):
    session = ctx.session("m")
    own = hrx.MemoryBudget(1 << 20, name="own")
    with session.in_context(own):
        assert session.budget is own
        session.weight("w", W)
        session.tensor("t", (64,), np.float32)
    assert own.used_bytes == 256 + 256
    assert session.budget is ctx.budget
    session.weight("w2", W)  # outside: the context's budget
    assert ctx.budget.used_bytes == 256
    session.close()
    assert own.used_bytes == 0 and ctx.budget.used_bytes == 0


def test_budget_exceeded_while_loading_changes_nothing(ctx):
    session = ctx.session("m")
    tiny = hrx.MemoryBudget(100)
    with session.in_context(tiny), pytest.raises(hrx.BudgetExceeded):
        session.weight("w", W)
    assert "w" not in session.weights and tiny.used_bytes == 0
    session.weight("w", W)  # the name is still free
    session.close()


def test_kernel_ids_are_session_scoped_and_code_is_shared(ctx, dev):
    a, b = ctx.session("a"), ctx.session("b")
    assert a.load_kernel(ADD_U32) == 0 and a.load_kernel(INC_BYTES) == 1
    assert b.load_kernel(INC_BYTES) == 0  # ids count per session
    assert a.load_kernel(ADD_U32) == 0  # loading again returns the id
    twin = hrx.Kernel("inc_bytes", buffers=("read_write",), scalars=(np.uint32,),
                      sources=dict(INC_BYTES.sources))
    c = ctx.session("c")
    c.load_kernel(twin)
    assert c.kernel("inc_bytes") is b.kernel(0)  # equal kernels load once per context
    assert a.kernel("inc_bytes").executable(dev) is c.kernel(0).executable(dev)
    with pytest.raises(hrx.InvalidArgument, match="no kernel named"):
        a.kernel("missing")
    with pytest.raises(hrx.InvalidArgument, match="expected an id"):
        a.kernel(7)
    with pytest.raises(hrx.InvalidArgument, match="expected an hrx Kernel"):
        a.load_kernel("add")  # type: ignore[arg-type]


def test_freezing_into_the_same_budget_does_not_charge_weights_twice(ctx, budget):
    first = ctx.session("first")
    with first.in_context(budget):
        first.weight("w", W)
    assert budget.used_bytes == 256
    d1 = first.freeze(budget=budget)
    d2 = first.freeze(budget=budget)
    assert budget.used_bytes == 256
    # a second session sharing the weight, frozen into the same budget: still once
    second = ctx.session("second")
    with second.in_context(budget):
        second.adopt("w", d1.weight("w"))
    d3 = second.freeze(budget=budget)
    assert budget.used_bytes == 256
    assert d3.weight("w").view.start == d1.weight("w").view.start
    assert d3.weight("w").buffer.allocation is d1.weight("w").buffer.allocation
    for x in (first, second, d1, d2, d3):
        x.close()
    assert budget.used_bytes == 0


def test_freezing_unbudgeted_weights_charges_once_and_rolls_back(ctx):
    session = ctx.session("m")
    with session.in_context(None):
        session.weight("a", W)
        session.weight("b", np.zeros(512, np.uint8))
    other = hrx.MemoryBudget(1 << 20, name="other")
    d1 = session.freeze(budget=other)
    d2 = session.freeze(budget=other)
    assert other.used_bytes == 768
    small = hrx.MemoryBudget(600, name="small")
    with pytest.raises(hrx.BudgetExceeded):
        session.freeze(budget=small)  # 256 fits, 512 does not: nothing stays charged
    assert small.used_bytes == 0
    d1.close()
    assert other.used_bytes == 768  # d2 still shares the weights
    d2.close()
    session.close()
    assert other.used_bytes == 0


def test_adopted_buffers_are_charged_at_adoption(ctx, dev, budget):
    raw = dev.allocate(1024)  # allocated outside any budget (a file-backed load, say)
    s = dev.stream()
    s.upload(raw, np.arange(1024, dtype=np.uint32).view(np.uint8)[:1024])
    s.synchronize()
    session = ctx.session("m")
    with session.in_context(budget):
        w = session.adopt("w", raw.slice(0, 512), shape=(128,), dtype=np.uint32)
        assert budget.used_bytes == 1024  # the whole allocation, at adoption
        session.adopt("w_hi", raw.slice(512, 512))  # same allocation: not again
        assert budget.used_bytes == 1024
    raw.close()  # the session holds its own handle
    assert w.shape == (128,) and w.dtype == np.uint32
    np.testing.assert_array_equal(session.read(w), np.arange(1024, dtype=np.uint32).view(np.uint8)[:512].view(np.uint32))
    before = budget.used_bytes  # the weights and the read's staging
    d = session.freeze(budget=budget)
    assert budget.used_bytes == before  # freezing adds nothing
    session.close()
    d.close()
    assert budget.used_bytes == 0


def test_eager_runs_infer_dependencies_and_cache_graphs(ctx):
    session = ctx.session("eager")
    kid = session.load_kernel(ADD_BYTES)
    w = session.weight("w", np.full(64, 3, np.uint8))
    x = session.tensor("x", (64,), np.uint8)
    y = session.tensor("y", (64,), np.uint8)
    recorded = []

    def step(g):
        recorded.append(1)
        g.compute("add", lambda r: r.dispatch(session.kernel(kid), 1, [x.read(), w.read(), y.write()],
                                              block=64, scalars=(64,)))
        g.compute("back", lambda r: r.copyto(x.write(), y.read()))

    session.write(x, np.arange(64, dtype=np.uint8))
    for _ in range(3):
        session.run("step", step)
    assert len(recorded) == 1  # recorded once, submitted three times
    graph = session.graph("step", step)
    assert graph.regions[1].deps == (0,)  # inferred from declared access
    assert [r.name for r in graph.regions] == ["eager/add", "eager/back"]  # session-scoped
    np.testing.assert_array_equal(session.read(x), np.arange(64, dtype=np.uint8) + 9)
    with pytest.raises(hrx.InvalidArgument, match="no graph"):
        session.run("missing")
    session.close()


def test_readback_and_write_staging_is_reused(ctx, dev):
    session = ctx.session("m")
    x = session.tensor("x", (256,), np.uint8)
    session.write(x, W).wait()
    np.testing.assert_array_equal(session.read(x), W)
    before = dev.stats.allocations
    for i in range(3):
        session.write(x, W + i).wait()
        np.testing.assert_array_equal(session.read(x), W + i)
    assert dev.stats.allocations == before
    session.close()


def test_frozen_weights_are_immutable(ctx):
    session = ctx.session("m")
    w = session.weight("w", W)
    session.freeze()
    with pytest.raises(hrx.InvalidArgument, match="frozen"):
        session.weight("w2", W)
    with pytest.raises(SlotConflict, match="immutable"):
        session.write(w, W)
    with pytest.raises(SlotConflict, match="immutable"):
        session.run("clobber", lambda g: g.fill(w.write(), 0))
    session.close()


def test_session_argument_validation(ctx, dev):
    session = ctx.session("m")
    for bad in ("", "a/b", 3):
        with pytest.raises(hrx.InvalidArgument, match="name"):
            session.tensor(bad, (4,), np.uint8)  # type: ignore[arg-type]
    session.tensor("t", (4,), np.uint8)
    with pytest.raises(hrx.InvalidArgument, match="already"):
        session.weight("t", W)
    with pytest.raises(hrx.InvalidArgument, match="empty"):
        session.weight("e", np.zeros(0, np.uint8))
    with pytest.raises(hrx.InvalidArgument, match="shape"):
        session.weight("s", W, shape=(3, 3))
    with pytest.raises(hrx.InvalidArgument, match="budget"), session.in_context(1 << 20):  # type: ignore[arg-type]
        pass
    with pytest.raises(hrx.InvalidArgument, match="no weights"):
        session.freeze()
    with pytest.raises(hrx.InvalidArgument, match="source"):
        session.adopt("a", np.zeros(4))  # type: ignore[arg-type]
    with pytest.raises(hrx.InvalidArgument, match="budget"):
        session.weight("w", W)
        session.freeze(budget="lots")  # type: ignore[arg-type]
    with pytest.raises(hrx.InvalidArgument, match="tensor"):
        session.read("x")  # type: ignore[arg-type]
    session.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        session.weight("late", W)
    with pytest.raises(hrx.InvalidArgument, match="ModelContext or Device"):
        ModelSession("host")  # type: ignore[arg-type]


def test_context_shares_one_runtime_and_validates(dev):
    rt = Runtime(dev, RuntimeOptions(observe=False))
    ctx = ModelContext(runtime=rt)
    a, b = ctx.session("a"), ctx.session("b")
    assert a.runtime is b.runtime is rt
    plain = ModelSession(dev, "own")  # a device gets a private context
    assert plain.runtime is not rt
    with pytest.raises(hrx.InvalidArgument, match="not both"):
        ModelContext(runtime=rt, options=RuntimeOptions())
    with pytest.raises(hrx.InvalidArgument, match="device"):
        ModelContext()
    with pytest.raises(hrx.InvalidArgument, match="runtime"):
        ModelContext(runtime="rt")  # type: ignore[arg-type]
    ctx.close()
    assert not rt.closed  # a shared runtime stays open
    rt.close()
    plain.close()
    plain.context.close()


def test_device_tensor_metadata_and_derived_views(dev):
    buf = dev.allocate(64)
    released = []
    hold = hrx.model.SharedHold(lambda: released.append(1))
    t = DeviceTensor(buf, (4, 4), np.float32, hold=hold)
    rows = t.rows(1, 2)
    flat = t.reshape(16)
    assert rows.shape == (2, 4) and rows.offset == 16 and rows.hold is hold
    assert flat.shape == (16,) and flat.dtype == np.float32
    t.close()
    rows.close()
    assert not released  # the reshaped view still holds the lease
    flat.close()
    assert released == [1]
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        t.read()
    with pytest.raises(hrx.OutOfBounds):
        DeviceTensor(buf, (32,), np.float32)
    with pytest.raises(hrx.InvalidArgument, match="slice the view"):
        DeviceTensor(buf, (4,), np.float32)
    with pytest.raises(hrx.InvalidArgument, match="dtype"):
        DeviceTensor(buf, (16,), "nope")
    with pytest.raises(hrx.InvalidArgument, match="shape"):
        DeviceTensor(buf, (4.5,), np.float32)
    with pytest.raises(hrx.OutOfBounds):
        DeviceTensor(buf, (16,), np.float32).rows(10, 7)
    assert launch_1d(1)  # the shared helpers import cleanly
    assert grid(64) == {"grid": 1, "block": 64}
    buf.close()


def test_reservations_count_as_their_parent_budget(ctx, budget):
    session = ctx.session("m")
    # room for a staging chunk: engines without direct host access stage the upload,
    # and the transient staging is charged to the loading budget too
    size = 1 << 20
    with budget.reservation(size, "weights") as reserved:
        with session.in_context(reserved):
            session.weight("w", W)
        assert budget.used_bytes == size and reserved.used_bytes == 256
        d = session.freeze(budget=budget)  # counted through the reservation: no new charge
        assert budget.used_bytes == size
        session.close()
        d.close()
    assert budget.used_bytes == 0


def test_graph_cache_is_bounded_and_rerecords(ctx):
    session = ModelSession(ctx, "small", graph_cache_size=1)
    x = session.tensor("x", (16,), np.uint8)
    recorded = []

    def fill(value):
        def record(g):
            recorded.append(value)
            g.fill(x.write(), pattern=value)
        return record

    session.run("a", fill(1)).wait()
    session.run("b", fill(2)).wait()  # evicts "a"
    session.run("a", fill(1)).wait()  # recorded again
    assert recorded == [1, 2, 1]
    np.testing.assert_array_equal(session.read(x), np.ones(16, np.uint8))
    with pytest.raises(hrx.InvalidArgument, match="graph_cache_size"):
        ModelSession(ctx, "bad", graph_cache_size=0)
    session.close()
