"""Fragments (issue 8, parts 6-7): validated stages recorded into one graph, prepared
once, chained without copies; opt-in reuse of private scratch."""

# ruff: noqa: F811 - pytest fixtures imported from test_model_support are redefined as parameters

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hrx_core as hrx
from hrx_core.model import InferenceGraph, SlotConflict, TensorSpec

from .kernels import XOR_BYTES
from .test_model_support import ADD_BYTES, budget, ctx, grid  # noqa: F401 - fixtures

N = 128


def definition_with(ctx, name: str, bias: int):
    session = ctx.session(name)
    session.load_kernel(ADD_BYTES)
    session.load_kernel(XOR_BYTES)
    session.weight("bias", np.full(N, bias, np.uint8))
    return session.freeze()


def add_bias(definition, *, reuse: bool = False, name: str = "add_bias"):
    """out = ((x ^ 0x0F) ^ 0x0F) + bias, through a scratch buffer it writes before reading."""

    def record(g, io):
        x, tmp, out = io.inputs["x"], io.scratch["tmp"], io.outputs["out"]
        xor = io.kernel("xor_bytes")
        g.dispatch(xor, **grid(N), bindings=[x.read(), tmp.write()], scalars=(0x0F, N))
        g.dispatch(xor, **grid(N), bindings=[tmp.read(), out.write()], scalars=(0x0F, N))
        g.dispatch(io.kernel("add_bytes"), **grid(N), bindings=[out.read(), io.weights["bias"].read(), out.write()], scalars=(N,))

    return definition.fragment(name, record, inputs={"x": ((N,), np.uint8)}, outputs={"out": ((N,), np.uint8)},
                               scratch={"tmp": N}, kernels=["xor_bytes", "add_bytes"], weights=["bias"],
                               reuse_private_scratch=reuse)


def scratch_alloc(slot, index: int):
    """The allocation a region's scratch dispatch writes (its first write target)."""
    region = slot.graph.regions[index]
    return region.device_graph.nodes[0].refs[1][0].allocation


def test_stages_chain_in_one_graph_without_copies(ctx, dev):
    first, second = definition_with(ctx, "first", 1), definition_with(ctx, "second", 2)
    stage1, stage2 = add_bias(first), add_bias(second)

    def factory(b):
        x = b.tensor(N, np.uint8)
        h = stage1.record(b.graph, {"x": x})["out"]
        y = stage2.record(b.graph, {"x": h})["out"]  # the output tensor feeds the next stage
        return InferenceGraph(inputs={"x": x}, outputs={"y": y}, graph=b.graph)

    model = first.prepare(factory, slots=2)
    slot = model.slot(0)
    regions = slot.graph.regions
    assert [r.kind for r in regions] == ["compute", "compute"]  # no copy regions between stages
    assert regions[1].deps == (0,)
    produced = [a for a, *_ in regions[0].accesses]
    consumed = [a for a, _, _, writes in regions[1].accesses if not writes]
    assert any(a is p for a in consumed for p in produced)  # reads the first stage's buffer in place

    x = np.arange(N, dtype=np.uint8)
    np.testing.assert_array_equal(slot.run({"x": x})["y"], x + 3)
    stats = ctx.runtime.stats.snapshot()
    copies, submissions = stats.get("copy_bytes", 0), stats["submissions"]
    step = slot.submit()  # device-only step: one submission, no copy between stages
    step.wait()
    stats = ctx.runtime.stats.snapshot()
    assert stats["submissions"] == submissions + 1
    assert stats.get("copy_bytes", 0) == copies
    with step.output("y") as y:
        np.testing.assert_array_equal(y.numpy(), x + 3)
    model.close()


def test_reuse_private_scratch_shares_within_a_slot_only(ctx):
    definition = definition_with(ctx, "m", 1)
    reusing, private = add_bias(definition, reuse=True), add_bias(definition, name="private")

    def factory(b):
        x = b.tensor(N, np.uint8)
        h1 = reusing.record(b.graph, {"x": x})["out"]
        h2 = reusing.record(b.graph, {"x": h1})["out"]
        h3 = private.record(b.graph, {"x": h2})["out"]
        y = reusing.record(b.graph, {"x": h3})["out"]
        return InferenceGraph(inputs={"x": x}, outputs={"y": y}, graph=b.graph)

    model = definition.prepare(factory, slots=2)
    s0, s1 = model.slot(0), model.slot(1)
    shared = scratch_alloc(s0, 0)
    assert scratch_alloc(s0, 1) is shared and scratch_alloc(s0, 3) is shared
    assert scratch_alloc(s0, 2) is not shared  # a stage without the opt-in keeps its own
    assert scratch_alloc(s1, 0) is not shared  # independent slots keep private scratch
    regions = s0.graph.regions
    assert regions[1].deps == (0,)  # the reuse is ordered by graph dependencies
    assert {1, 2} <= set(regions[3].deps)
    io_allocs = {id(s0.state("x").buffer.allocation), id(s0.state("y").buffer.allocation),
                 id(definition.weight("bias").buffer.allocation)}
    for i in range(4):
        outs = [a for a, _, _, w in regions[i].accesses if w]
        assert id(scratch_alloc(s0, i)) not in io_allocs
        assert len({id(a) for a in outs}) == 2  # scratch and a distinct output
    x = np.arange(N, dtype=np.uint8)
    for slot in model:
        np.testing.assert_array_equal(slot.run({"x": x})["y"], x + 4)
    model.close()


def test_fragment_outputs_can_be_given(ctx):
    definition = definition_with(ctx, "m", 5)
    stage = add_bias(definition)

    def factory(b):
        state = b.tensor(N, np.uint8)
        stage.record(b.graph, {"x": state}, outputs={"out": state})  # in place on slot state
        return InferenceGraph(inputs={"state": state}, outputs={"state": state}, graph=b.graph)

    model = definition.prepare(factory)
    out = model.slot(0).run({"state": np.zeros(N, np.uint8)})
    np.testing.assert_array_equal(out["state"], np.full(N, 5, np.uint8))
    model.close()


def test_fragment_validation(ctx, dev):
    definition = definition_with(ctx, "m", 1)
    ok = {"inputs": {"x": ((N,), np.uint8)}, "outputs": {"out": ((N,), np.uint8)}}

    def rec(g, io):
        return None
    with pytest.raises(hrx.InvalidArgument, match="callable"):
        definition.fragment("f", None, **ok)  # type: ignore[arg-type]
    with pytest.raises(hrx.InvalidArgument, match="name"):
        definition.fragment("", rec, **ok)
    with pytest.raises(hrx.InvalidArgument, match="declared twice"):
        definition.fragment("f", rec, inputs={"x": ((N,), np.uint8)}, outputs={"x": ((N,), np.uint8)})
    with pytest.raises(hrx.InvalidArgument, match="no outputs"):
        definition.fragment("f", rec, inputs=ok["inputs"], outputs={})
    with pytest.raises(hrx.InvalidArgument, match="TensorSpec"):
        definition.fragment("f", rec, inputs={"x": "big"}, outputs=ok["outputs"])
    with pytest.raises(hrx.InvalidArgument, match="empty"):
        definition.fragment("f", rec, inputs={"x": ((0,), np.uint8)}, outputs=ok["outputs"])
    with pytest.raises(hrx.InvalidArgument, match="no kernel named"):
        definition.fragment("f", rec, kernels=["gemm"], **ok)
    with pytest.raises(hrx.InvalidArgument, match="not a weight"):
        definition.fragment("f", rec, weights=["wte"], **ok)
    with pytest.raises(hrx.InvalidArgument, match="reuse_private_scratch"):
        definition.fragment("f", rec, reuse_private_scratch=1, **ok)  # type: ignore[arg-type]
    with pytest.raises(hrx.InvalidArgument, match="lane"):
        definition.fragment("f", rec, lane="upload", **ok)
    with pytest.raises(hrx.Unsupported):
        definition.fragment("f", rec, lane="npu", **ok)
    assert TensorSpec((N,), "f32").nbytes == 4 * N

    stage = add_bias(definition)
    graph = ctx.runtime.graph("g")
    x = ctx.session("io").tensor("x", (N,), np.uint8)
    with pytest.raises(hrx.InvalidArgument, match="takes"):
        stage.record(graph, {})
    with pytest.raises(hrx.InvalidArgument, match="does not match"):
        stage.record(graph, {"x": x.reshape((2, N // 2))})
    with pytest.raises(hrx.InvalidArgument, match="TrackedGraph"):
        stage.record(None, {"x": x})  # type: ignore[arg-type]
    other = hrx.execution.Runtime(dev)
    with pytest.raises(hrx.InvalidArgument, match="another runtime"):
        stage.record(other.graph(), {"x": x})
    other.close()
    with pytest.raises(hrx.InvalidArgument, match="not an output"):
        stage.record(graph, {"x": x}, outputs={"y": x})
    with pytest.raises(SlotConflict, match="immutable"):
        stage.record(graph, {"x": x}, outputs={"out": definition.weight("bias")})
    clobber = definition.fragment("clobber", lambda g, io: g.copyto(io.weights["bias"].write(), io.inputs["x"].read()), **ok)
    with pytest.raises(SlotConflict, match="immutable"):
        clobber.record(graph, {"x": x})
    assert not graph.regions  # rejected records appended nothing
    empty = definition.fragment("empty", rec, **ok)
    with pytest.raises(hrx.InvalidArgument, match="no work"):
        empty.record(graph, {"x": x})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chain=st.lists(st.tuples(st.integers(0, 255), st.booleans()), min_size=1, max_size=5), slots=st.integers(1, 3))
def test_random_fragment_chains_match_numpy(ctx, chain, slots):
    """Any chain of stages (biases, scratch opt-ins) computes x + sum(biases) in every
    slot; reusing stages of one slot share one scratch buffer, nothing else does."""
    stages = []
    for i, (bias, reuse) in enumerate(chain):
        stages.append(add_bias(definition_with(ctx, f"d{i}", bias), reuse=reuse, name=f"s{i}"))

    def factory(b):
        x = b.tensor(N, np.uint8)
        h = x
        for stage in stages:
            h = stage.record(b.graph, {"x": h})["out"]
        return InferenceGraph(inputs={"x": x}, outputs={"y": h}, graph=b.graph)

    model = stages[0].definition.prepare(factory, slots=slots)
    x = np.arange(N, dtype=np.uint8)
    expect = (x.astype(np.int64) + sum(b for b, _ in chain)).astype(np.uint8)
    scratch: list[list[int]] = []
    for slot in model:
        np.testing.assert_array_equal(slot.run({"x": x})["y"], expect)
        scratch.append([id(scratch_alloc(slot, i)) for i in range(len(chain))])
    flags = [reuse for _, reuse in chain]
    for ids in scratch:
        reused = {a for a, r in zip(ids, flags) if r}
        assert len(reused) == (1 if any(flags) else 0)
        assert len(set(ids)) == len([r for r in flags if not r]) + len(reused)
    everything = [a for ids in scratch for a in set(ids)]
    assert len(everything) == len(set(everything))  # no scratch shared between slots
    model.close()
