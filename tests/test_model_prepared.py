"""PreparedModel slots (issue 8, parts 4-5): private bindings, conflicts, lazy reused
staging, submit_host_with, output leases, concurrent slots."""

# ruff: noqa: F811 - pytest fixtures imported from test_model_support are redefined as parameters

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hrx_core as hrx
from hrx_core.model import InferenceGraph, SlotBusy, SlotConflict

from .test_model_support import ADD_BYTES, SET_BYTES, budget, ctx, grid  # noqa: F401 - fixtures

N = 256


def make_definition(ctx, bias: int = 7):
    session = ctx.session("adder")
    session.load_kernel(ADD_BYTES)
    session.weight("bias", np.full(N, bias, np.uint8))
    return session.freeze()


def adder(b):
    """y = x + bias."""
    x, y = b.tensor(N, np.uint8), b.tensor(N, np.uint8)
    b.graph.compute("add", lambda g: g.dispatch(b.kernel("add_bytes"), **grid(N),
                                                  bindings=[x.read(), b.weight("bias").read(), y.write()],
                                                  scalars=(N,)))
    return InferenceGraph(inputs={"x": x}, outputs={"y": y}, graph=b.graph)


def test_slots_compute_privately(ctx):
    model = make_definition(ctx).prepare(adder, slots=3)
    xs = [np.arange(N, dtype=np.uint8) * i for i in range(3)]
    steps = [slot.submit({"x": x}, read=["y"]) for slot, x in zip(model, xs)]
    for x, step in zip(xs, steps):
        np.testing.assert_array_equal(step.read("y"), x + 7)
    assert [r.name for r in model.slot(1).graph.regions] == ["adder/slot1/add"]
    model.close()


def test_sliced_and_in_place_io(ctx):
    definition = make_definition(ctx)

    def factory(b):
        both = b.tensor(2 * N, np.uint8)  # inputs are slices of one buffer
        lo, hi = both.rows(0, N), both.rows(N, N)
        b.graph.compute("add", lambda g: g.dispatch(b.kernel(0), **grid(N), bindings=[lo.read(), hi.read(), hi.write()],
                                                      scalars=(N,)))
        return InferenceGraph(inputs={"lo": lo, "hi": hi}, outputs={"hi": hi}, graph=b.graph)

    model = definition.prepare(factory, slots=2)
    a, c = np.arange(N, dtype=np.uint8), np.full(N, 5, np.uint8)
    out = model.slot(1).run({"lo": a, "hi": c})
    np.testing.assert_array_equal(out["hi"], a + c)
    model.close()


def test_slots_sharing_writable_io_are_rejected(ctx, dev):
    definition = make_definition(ctx)
    shared = {}

    def factory(b):
        if "y" not in shared:
            shared["y"] = b.tensor(N, np.uint8)
        x, y = b.tensor(N, np.uint8), shared["y"]
        b.graph.compute("add", lambda g: g.dispatch(b.kernel(0), **grid(N), bindings=[x.read(), b.weight("bias").read(), y.write()],
                                                      scalars=(N,)))
        return InferenceGraph(inputs={"x": x}, outputs={"y": y}, graph=b.graph)

    live = dev.stats.live_bytes
    with pytest.raises(SlotConflict, match="slot 1 and slot 0 share writable memory"):
        definition.prepare(factory, slots=2)
    assert isinstance(SlotConflict("x"), hrx.InvalidArgument)
    assert dev.stats.live_bytes <= live + N  # built slots were released (the shared y stays referenced here)

    const = {}

    def reads_shared(b):  # sharing read-only memory is fine
        if "c" not in const:
            const["c"] = b.tensor(N, np.uint8)
        x, y = b.tensor(N, np.uint8), b.tensor(N, np.uint8)
        b.graph.compute("add", lambda g: g.dispatch(b.kernel(0), **grid(N), bindings=[x.read(), const["c"].read(), y.write()],
                                                      scalars=(N,)))
        return InferenceGraph(inputs={"x": x}, outputs={"y": y}, graph=b.graph)

    definition.prepare(reads_shared, slots=2).close()


def test_slots_cannot_write_weights(ctx):
    definition = make_definition(ctx)

    def factory(b):
        x = b.tensor(N, np.uint8)
        b.graph.compute("clobber", lambda g: g.copyto(b.weight("bias").write(), x.read()))
        return InferenceGraph(inputs={"x": x}, outputs={"x": x}, graph=b.graph)

    with pytest.raises(SlotConflict, match="immutable weight"):
        definition.prepare(factory)


def test_staging_is_allocated_on_first_upload_and_reused(ctx, dev):
    model = make_definition(ctx).prepare(adder, slots=1)
    slot = model.slot(0)
    assert slot.staging_bytes == 0  # nothing until the first host step
    before = dev.stats.allocations
    x = np.arange(N, dtype=np.uint8)
    np.testing.assert_array_equal(slot.run({"x": x})["y"], x + 7)
    assert dev.stats.allocations == before + 2  # input staging, then readback staging
    assert slot.staging_bytes == 2 * N
    before = dev.stats.allocations
    for i in range(4):
        np.testing.assert_array_equal(slot.run({"x": x + i})["y"], x + i + 7)
    assert dev.stats.allocations == before
    model.close()


def test_device_only_pipeline_allocates_no_staging(ctx, dev):
    definition = make_definition(ctx)

    def factory(b):
        x, y = b.tensor(N, np.uint8), b.tensor(N, np.uint8)
        b.graph.compute("init", lambda g: g.dispatch(SET_BYTES, **grid(N), bindings=[x.write()], scalars=(3, N)))
        b.graph.compute("add", lambda g: g.dispatch(b.kernel(0), **grid(N), bindings=[x.read(), b.weight("bias").read(), y.write()],
                                                      scalars=(N,)))
        return InferenceGraph(inputs={}, outputs={"y": y}, graph=b.graph)

    model = definition.prepare(factory, slots=2)
    before = dev.stats.allocations
    ys = []
    for _ in range(3):
        for y in ys:
            y.close()
        ys = [slot.submit().output("y") for slot in model]
        for y in ys:
            y.wait()
            assert y.is_ready
    assert dev.stats.allocations == before  # no staging, no allocation at all
    assert all(slot.staging_bytes == 0 for slot in model)
    np.testing.assert_array_equal(ys[1].numpy(), np.full(N, 10, np.uint8))
    for y in ys:
        y.close()
    model.close()


def test_submit_host_with_writes_into_staging(ctx, dev):
    definition = make_definition(ctx)

    def factory(b):
        x = b.tensor((2, N // 2), np.uint8)
        y = b.tensor(N, np.uint8)
        xf = x.reshape(N)
        b.graph.compute("add", lambda g: g.dispatch(b.kernel(0), **grid(N), bindings=[xf.read(), b.weight("bias").read(), y.write()],
                                                      scalars=(N,)))
        return InferenceGraph(inputs={"x": x}, outputs={"y": y}, graph=b.graph)

    slot = definition.prepare(factory).slot(0)
    seen = []

    def fill(staged):
        arr = staged["x"]
        assert arr.shape == (2, N // 2) and arr.dtype == np.uint8 and arr.flags.writeable
        assert np.shares_memory(arr, staged.packed)
        seen.append(staged.packed.nbytes)
        arr[0] = 1
        arr[1] = 2

    step = slot.submit_host_with(fill, read=True)
    expect = np.concatenate([np.full(N // 2, 8), np.full(N // 2, 9)]).astype(np.uint8)
    np.testing.assert_array_equal(step.read("y"), expect)
    assert seen == [N]  # the packed staging itself: no intermediate host copy
    before = dev.stats.allocations
    step2 = slot.submit_host_with(lambda s: s["x"].fill(0), read=["y"])
    np.testing.assert_array_equal(step2.read("y"), np.full(N, 7, np.uint8))
    assert dev.stats.allocations == before
    with pytest.raises(hrx.InvalidArgument, match="callable"):
        slot.submit_host_with(None)  # type: ignore[arg-type]
    slot.model.close()


def test_output_is_not_reused_while_a_view_is_held(ctx):
    model = make_definition(ctx).prepare(adder, slots=1)
    slot = model.slot(0)
    x = np.arange(N, dtype=np.uint8)
    step = slot.submit({"x": x})
    y = step.output("y")
    assert y.completion is not None and y.shape == (N,)
    row = y.rows(0, 16)  # a derived view keeps the lease
    y.close()
    assert slot.busy and slot.leases == 1
    with pytest.raises(SlotBusy, match="output view"):
        slot.submit({"x": x})
    with pytest.raises(hrx.Timeout):
        slot.submit({"x": x}, timeout=0.05)
    np.testing.assert_array_equal(row.numpy(), (x + 7)[:16])  # still the first step's data

    def later():
        time.sleep(0.1)
        row.close()

    t = threading.Thread(target=later)
    t.start()
    step2 = slot.submit({"x": x + 1}, read=["y"], timeout=10)  # waits for the consumer
    t.join()
    np.testing.assert_array_equal(step2.read("y"), x + 8)
    with pytest.raises(hrx.InvalidArgument, match="stale"):
        step.output("y")
    with pytest.raises(hrx.InvalidArgument, match="stale"):
        step.read("y")
    model.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["take", "derive", "close"]), st.integers(0, 5)), max_size=12))
def test_slot_is_busy_exactly_while_views_are_open(ctx, ops):
    model = make_definition(ctx).prepare(adder, slots=1)
    slot = model.slot(0)
    step = slot.submit({"x": np.zeros(N, np.uint8)})
    views = []
    for op, i in ops:
        if op == "take":
            views.append(step.output("y"))
        elif op == "derive" and views:
            views.append(views[i % len(views)].reshape(N))
        elif op == "close" and views:
            views.pop(i % len(views)).close()
        assert slot.busy == bool(views)
    for v in views:
        v.close()
    slot.submit({"x": np.zeros(N, np.uint8)}).wait()
    model.close()


def test_concurrent_slots_match_serial_results(ctx):
    model = make_definition(ctx).prepare(adder, slots=4)
    inputs = [np.random.default_rng(i).integers(0, 256, N, dtype=np.uint8) for i in range(16)]
    alone = [model.slot(0).run({"x": x})["y"] for x in inputs]
    results: dict[int, np.ndarray] = {}
    errors = []

    def worker(k: int) -> None:
        try:
            for i in range(k, len(inputs), 4):
                with model.acquire(timeout=30) as slot:
                    results[i] = slot.run({"x": inputs[i]})["y"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, y in enumerate(alone):
        np.testing.assert_array_equal(results[i], y)
    model.close()


def test_acquire_reserves_slots(ctx):
    model = make_definition(ctx).prepare(adder, slots=2)
    a = model.acquire()
    b = model.acquire()
    assert a is not b
    with pytest.raises(SlotBusy, match="reserved"):
        model.acquire(timeout=0)
    a.release()
    with model.acquire(timeout=0) as c:
        assert c is a
    with pytest.raises(hrx.InvalidArgument, match="not reserved"):
        a.release()
    b.release()
    model.close()


def test_prepare_validation(ctx, dev):
    definition = make_definition(ctx)
    with pytest.raises(hrx.InvalidArgument, match="slots"):
        definition.prepare(adder, slots=0)
    with pytest.raises(hrx.InvalidArgument, match="callable"):
        definition.prepare("adder")  # type: ignore[arg-type]
    with pytest.raises(hrx.InvalidArgument, match="InferenceGraph"):
        definition.prepare(lambda b: b.graph)
    with pytest.raises(hrx.InvalidArgument, match="no regions"):
        definition.prepare(lambda b: InferenceGraph(inputs={}, outputs={}, graph=b.graph))
    other = hrx.execution.Runtime(dev)
    with pytest.raises(hrx.InvalidArgument, match="another runtime"):
        definition.prepare(lambda b: InferenceGraph(inputs={}, outputs={}, graph=other.graph()))
    other.close()
    with pytest.raises(hrx.InvalidArgument, match="DeviceTensor"):
        InferenceGraph(inputs={"x": np.zeros(3)}, outputs={}, graph=None)  # type: ignore[dict-item]
    with pytest.raises(hrx.InvalidArgument, match="TrackedGraph"):
        InferenceGraph(inputs={}, outputs={}, graph=None)  # type: ignore[arg-type]

    model = definition.prepare(adder)
    slot = model.slot(0)
    with pytest.raises(hrx.InvalidArgument, match="index"):
        model.slot(1)
    with pytest.raises(hrx.InvalidArgument, match="not an input"):
        slot.submit({"z": np.zeros(N, np.uint8)})
    with pytest.raises(hrx.InvalidArgument, match="elements"):
        slot.submit({"x": np.zeros(N + 1, np.uint8)})
    with pytest.raises(hrx.InvalidArgument, match="convert"):
        slot.submit({"x": np.zeros(N, np.float64)})
    with pytest.raises(hrx.InvalidArgument, match="read"):
        slot.submit({"x": np.zeros(N, np.uint8)}, read=["nope"])
    with pytest.raises(hrx.InvalidArgument, match="timeout"):
        slot.submit({"x": np.zeros(N, np.uint8)}, timeout=-1)
    assert slot.staging_bytes == 0 and not slot.busy  # rejected calls changed nothing
    model.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        slot.submit()
    definition.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        definition.prepare(adder)


def test_slot_memory_is_charged_to_the_definition_budget(ctx, budget, dev):
    definition = make_definition(ctx)
    weights = budget.used_bytes
    assert weights == N + ctx.kernel(ADD_BYTES).code_bytes(dev)  # the weights and the loaded code
    tracked = ctx.runtime.live_tracked_bytes()
    model = definition.prepare(adder, slots=2)
    assert budget.used_bytes == weights + 2 * 2 * N  # x and y of each slot
    model.slot(0).run({"x": np.zeros(N, np.uint8)})
    assert budget.used_bytes == weights + 4 * N + model.slot(0).staging_bytes
    assert ctx.runtime.live_tracked_bytes() > tracked
    model.close()
    ctx.runtime.synchronize()
    assert budget.used_bytes == weights
    assert ctx.runtime.live_tracked_bytes() == tracked
    tight = hrx.MemoryBudget(N + 3 * N)  # the weights and one and a half slots
    s = ctx.session("tight")  # its code is charged to the context's budget, not to tight
    s.load_kernel(ADD_BYTES)
    # loaded unbudgeted (engines without direct host access stage the upload, and a
    # staging chunk would not fit this budget), charged to it when frozen into it
    s.weight("bias", np.full(N, 7, np.uint8))
    with pytest.raises(hrx.BudgetExceeded):
        s.freeze(budget=tight).prepare(adder, slots=2)
    assert tight.used_bytes == N  # the slot built before the failure was released


def accumulator(shared=None):
    """Entries "reset" (acc = init) and "step" (acc += x) over one slot's state."""

    def factory(b):
        acc, x, init = b.tensor(N, np.uint8), b.tensor(N, np.uint8), b.tensor(N, np.uint8)
        other = shared(b) if shared is not None else b.tensor(N, np.uint8)
        reset = b.graph
        reset.compute("reset", lambda g: g.copyto(acc.write(), init.read()))
        step = b.new_graph("step")
        step.compute("add", lambda g: g.dispatch(ADD_BYTES, **grid(N), bindings=[acc.read(), x.read(), acc.write()],
                                                  scalars=(N,)))
        step.compute("mirror", lambda g: g.copyto(other.write(), acc.read()))
        return {"reset": InferenceGraph(inputs={"init": init}, outputs={"acc": acc}, graph=reset),
                "step": InferenceGraph(inputs={"x": x, "x2": other}, outputs={"acc": acc}, graph=step)}

    return factory


def test_entries_share_slot_state_and_inputs_upload_partially(ctx, dev):
    model = make_definition(ctx).prepare(accumulator(), slots=2, name="acc")
    slot = model.slot(1)
    assert list(slot.entries) == ["reset", "step"] and slot.default_entry == "reset"
    assert [r.name for r in slot.entry("step").graph.regions] == ["acc/slot1/add", "acc/slot1/mirror"]
    np.testing.assert_array_equal(slot.run({"init": np.full(N, 10, np.uint8)})["acc"], np.full(N, 10))
    one = np.ones(N, np.uint8)
    slot.submit({"x": one}, entry="step").wait()  # only x is uploaded; x2 is left alone
    assert slot.entry("step").staging_bytes == 2 * N  # one packed staging for the entry
    slot.submit(entry="step").wait()  # device-only: x keeps its device contents
    out = slot.run(entry="step")
    np.testing.assert_array_equal(out["acc"], np.full(N, 13))
    before = dev.stats.allocations
    step = slot.submit_host_with(lambda s: s["x"].fill(2), entry="step", inputs=["x"], read=True)
    np.testing.assert_array_equal(step.read("acc"), np.full(N, 15))
    assert dev.stats.allocations == before  # staging reused across input subsets
    np.testing.assert_array_equal(model.slot(0).run({"init": np.zeros(N, np.uint8)})["acc"], np.zeros(N))
    with pytest.raises(hrx.InvalidArgument, match="entry"):
        slot.submit(entry="decode")
    with pytest.raises(hrx.InvalidArgument, match="not an input"):
        slot.submit_host_with(lambda s: None, entry="step", inputs=["init"])
    with pytest.raises(hrx.InvalidArgument, match="list of input names"):
        slot.submit_host_with(lambda s: None, entry="step", inputs="x")  # type: ignore[arg-type]
    model.close()


def test_entries_are_checked_across_slots(ctx):
    definition = make_definition(ctx)
    shared = {}

    def one_buffer(b):
        return shared.setdefault("t", b.tensor(N, np.uint8))

    with pytest.raises(SlotConflict, match="share writable memory"):
        definition.prepare(accumulator(one_buffer), slots=2)
    with pytest.raises(hrx.InvalidArgument, match="mapping of entry names"):
        definition.prepare(lambda b: {})
    with pytest.raises(hrx.InvalidArgument, match="entry name"):
        definition.prepare(lambda b: {"a/b": adder(b)})
    with pytest.raises(hrx.InvalidArgument, match="expected an InferenceGraph"):
        definition.prepare(lambda b: {"main": b.graph})


def test_definition_outlives_its_session(ctx, budget, dev):
    session = ctx.session("adder")
    session.load_kernel(ADD_BYTES)
    session.weight("bias", np.full(N, 7, np.uint8))
    definition = session.freeze()
    session.close()
    code = ctx.kernel(ADD_BYTES).code_bytes(dev)
    assert budget.used_bytes == N + code  # the definition keeps the weights and the code's charge
    model = definition.prepare(adder)
    np.testing.assert_array_equal(model.slot(0).run({"x": np.ones(N, np.uint8)})["y"], np.full(N, 8))
    definition.close()  # deferred: the prepared model still uses the weights
    assert budget.used_bytes > N + code and not definition.closed
    model.close()
    ctx.runtime.synchronize()
    assert definition.closed and budget.used_bytes == 0


def test_steps_are_awaitable(ctx):
    import asyncio

    model = make_definition(ctx).prepare(adder, slots=2)

    async def request(slot, value):
        step = slot.submit({"x": np.full(N, value, np.uint8)}, read=["y"])
        await step
        assert step.is_complete and step.refresh()
        return step.read("y")

    async def main():
        return await asyncio.gather(*(request(slot, i) for i, slot in enumerate(model)))

    for i, y in enumerate(asyncio.run(main())):
        np.testing.assert_array_equal(y, np.full(N, i + 7))
    model.close()
