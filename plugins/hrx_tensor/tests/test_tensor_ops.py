"""TensorOps conformance: numerics, gathers, validation, slots, fragments, engines."""

from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

from hrx_core.errors import HRXError, InvalidArgument, OutOfBounds, Unsupported
from hrx_core.execution import Runtime
from hrx_core.execution.plan_cache import PlanCache
from hrx_tensor import DeviceTensor, TensorOps

BF16_EPS = 2.0**-7  # one BF16 ulp relative to the leading power of two


def rand_bf16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(bfloat16)


def reference(x, w):
    xd = x.astype(np.float64).reshape(-1)
    wd = w.astype(np.float64)
    return wd @ xd, np.abs(wd) @ np.abs(xd)


def check_f32(y, ref, mag):
    assert y.dtype == np.float32
    err = np.abs(y.astype(np.float64) - ref)
    assert np.all(err <= 1e-5 * mag + 1e-30), float(np.max(err / np.maximum(mag, 1e-30)))


def check_bf16(y, ref, mag=None):
    assert y.dtype == bfloat16
    rounded = ref.astype(np.float32).astype(bfloat16).astype(np.float64)  # near-correct rounding
    got = y.astype(np.float64)
    # one BF16 ulp at the magnitude of the correctly rounded value, plus (given
    # ``mag`` = sum |w||x|) the F32 accumulation error check_f32 allows: after
    # cancellation a tiny result's F32 sum may sit more than an ulp of it from ``ref``
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(rounded), 1e-30)))) * BF16_EPS
    slack = 0.0 if mag is None else 1e-5 * mag
    assert np.all(np.abs(got - rounded) <= ulp * 1.0001 + slack)


#: K a multiple of 128 and not (1600: GPT-2 XL; 8, 72, 200, 6408: tails of 1 to 15 vectors past 16-vector steps)
SHAPES = [(128, 1), (128, 300), (256, 7), (1024, 64), (4096, 33), (2048, 1000), (1600, 77), (8, 3), (72, 40),
          (200, 9), (6408, 130)]


@pytest.mark.parametrize("k,n", SHAPES, ids=[f"K{k}xN{n}" for k, n in SHAPES])
@pytest.mark.parametrize("out_dtype", ["f32", "bf16"])
def test_linear_numerics(ops, k, n, out_dtype):
    rng = np.random.default_rng(k * 7 + n)
    x, w = rand_bf16(rng, (1, k)), rand_bf16(rng, (n, k), 0.05)
    with ops.upload(x) as xt, ops.upload(w) as wt, ops.linear(xt, wt, out_dtype=out_dtype) as y:
        assert y.shape == (1, n)
        got = y.numpy()[0]
    ref, mag = reference(x, w)
    (check_f32 if out_dtype == "f32" else check_bf16)(got, ref, *(() if out_dtype == "bf16" else (mag,)))


def test_linear_many_matches_separate(ops):
    rng = np.random.default_rng(1)
    k = 512
    x = rand_bf16(rng, (1, k))
    ws = [rand_bf16(rng, (n, k), 0.1) for n in (96, 32, 200)]
    xt = ops.upload(x)
    wts = [ops.upload(w) for w in ws]
    for out_dtype in ("f32", "bf16"):
        many = ops.linear_many(xt, wts, out_dtype=out_dtype)
        assert [t.shape for t in many] == [(1, 96), (1, 32), (1, 200)]
        for t, wt, w in zip(many, wts, ws):
            single = ops.linear(xt, wt, out_dtype=out_dtype).numpy()
            np.testing.assert_array_equal(t.numpy().view(np.uint8), single.view(np.uint8))
            ref, mag = reference(x, w)
            if out_dtype == "f32":
                check_f32(t.numpy()[0], ref, mag)
        for t in many:
            t.close()
    two = ops.linear_many(xt, wts[:2], out_dtype="f32")
    assert len(two) == 2


@pytest.mark.parametrize("dtype", [bfloat16, np.int8, np.float64])
def test_gather_rows_bit_exact(gops, dtype):
    rng = np.random.default_rng(2)
    rows, cols = 50, 24
    if dtype is bfloat16:
        bits = rng.integers(0, 2**16, (rows, cols), dtype=np.uint16)
        bits[3, :4] = [0x7FC1, 0xFF81, 0x7F81, 0xFFFF]  # NaN payloads, signalling and quiet
        table = bits.view(bfloat16)
    elif dtype is np.float64:
        table = rng.integers(0, 2**63, (rows, cols), dtype=np.uint64).view(np.float64)
        table[3, 0] = np.frombuffer(np.uint64(0x7FF0000000000123).tobytes(), np.float64)[0]
    else:
        table = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    idx = [3, 0, 49, 3, 3, 17, 2]
    with gops.upload(table) as tt, gops.gather_rows(tt, np.array(idx)) as out:
        assert out.shape == (len(idx), cols) and out.dtype == np.dtype(dtype)
        got = out.numpy()
    np.testing.assert_array_equal(got.view(np.uint8), table[idx].view(np.uint8))


# (row bytes, rows gathered): every thread-group size gather_launch picks (4 to 256
# threads a row), rows ending inside a group's four-load round, and each unit width
GATHER_GEOMETRIES = [(16, 1), (48, 5), (1536, 1), (1536, 700), (8192, 300), (8192 + 16, 33), (8200, 9),
                     (4100, 17), (4098, 3), (24, 4000), (16 * 1000, 2)]


@pytest.mark.parametrize("row_bytes,n", GATHER_GEOMETRIES, ids=[f"{b}Bx{n}" for b, n in GATHER_GEOMETRIES])
def test_gather_rows_geometries(gops, row_bytes, n):
    from hrx_tensor.kernels import gather_launch

    rng = np.random.default_rng(row_bytes * 7 + n)
    rows = 97
    table = rng.integers(0, 256, (rows, row_bytes), dtype=np.uint8)
    idx = rng.integers(0, rows, n)
    idx[0] = rows - 1
    grid, block, shift = gather_launch(row_bytes // 16 or 1, n)
    assert grid * block >= n << shift and block % 32 == 0 and block <= 256
    with gops.upload(table) as tt, gops.gather_rows(tt, idx) as out:
        np.testing.assert_array_equal(out.numpy(), table[idx])


def test_gather_rows_odd_rows_and_list(gops):
    table = np.arange(7 * 3, dtype=np.uint8).reshape(7, 3)  # 3-byte rows: byte-wise copies
    with gops.upload(table) as tt:
        np.testing.assert_array_equal(gops.gather_rows(tt, [6, 0, 6]).numpy(), table[[6, 0, 6]])
        one_d = gops.upload(np.arange(9, dtype=np.int16))
        np.testing.assert_array_equal(gops.gather_rows(one_d, [8, 1]).numpy(), [8, 1])


def _state(ops, dest):
    return dest.numpy().copy()


def test_validation_errors_change_nothing(ops, dev):
    rng = np.random.default_rng(3)
    x = ops.upload(rand_bf16(rng, (1, 256)))
    w = ops.upload(rand_bf16(rng, (64, 256)))
    y = ops.linear(x, w, out_dtype="f32")
    before = y.numpy().copy()
    xf32 = ops.upload(np.ones((1, 256), np.float32))
    x100 = ops.upload(rand_bf16(rng, (1, 100)))
    w128 = ops.upload(rand_bf16(rng, (8, 128)))
    x3d = ops.upload(rand_bf16(rng, (2, 256)))
    strided = DeviceTensor(w.view, (64, 128), bfloat16, strides=(512, 2))
    table = ops.upload(np.arange(10, dtype=np.int32))
    dispatches = dev.stats.dispatches
    cases = [
        (InvalidArgument, "x", lambda: ops.linear(xf32, w)),
        (InvalidArgument, "w", lambda: ops.linear(x, ops.tensor(w.buffer, (64, 128), np.float32))),
        (InvalidArgument, "x", lambda: ops.linear(x100, w)),
        (InvalidArgument, "w", lambda: ops.linear(x, w128)),
        (InvalidArgument, "x", lambda: ops.linear(x3d, w)),
        (InvalidArgument, "w", lambda: ops.linear(x, strided)),
        (InvalidArgument, "x", lambda: ops.linear(x.view, w)),
        (InvalidArgument, "out_dtype", lambda: ops.linear(x, w, out_dtype="f16")),
        (InvalidArgument, "ws", lambda: ops.linear_many(x, [w, w, w, w])),
        (InvalidArgument, "ws", lambda: ops.linear_many(x, [])),
        (InvalidArgument, "ws[1]", lambda: ops.linear_many(x, [w, w128])),
        (InvalidArgument, "indices", lambda: ops.gather_rows(table, [])),
        (OutOfBounds, "indices", lambda: ops.gather_rows(table, [0, 10])),
        (OutOfBounds, "indices", lambda: ops.gather_rows(table, [-1])),
        (OutOfBounds, "indices: -3 ", lambda: ops.gather_rows(table, np.array([2, -3], np.int8))),
        (OutOfBounds, "indices: 18446744073709551615 ", lambda: ops.gather_rows(table, np.array([1, 2**64 - 1], np.uint64))),
        (OutOfBounds, "indices: 10 ", lambda: ops.gather_rows(table, np.array([9, 10], np.uint16))),
        (InvalidArgument, "indices", lambda: ops.gather_rows(table, [0.5])),
        (InvalidArgument, "indices", lambda: ops.gather_rows(table, [[0]])),
        (InvalidArgument, "shape", lambda: ops.tensor(w.buffer, (64, 300), bfloat16)),
    ]
    for error, name, call in cases:
        with pytest.raises(error) as info:
            call()
        assert name in str(info.value), (name, str(info.value))
    assert dev.stats.dispatches == dispatches
    np.testing.assert_array_equal(y.numpy(), before)


def test_slot_retention(ops):
    rng = np.random.default_rng(4)
    x1, x2 = ops.upload(rand_bf16(rng, (1, 128))), ops.upload(rand_bf16(rng, (1, 128)))
    w = ops.upload(rand_bf16(rng, (16, 128)))
    cache = PlanCache(max_plans=4)
    local = TensorOps(ops.device, plan_cache=cache, stream=ops.stream)
    held = local.linear(x1, w, out_dtype="f32")
    first = held.numpy().copy()
    second = local.linear(x2, w, out_dtype="f32")  # the held slot is busy: a new slot
    assert second.buffer is not held.buffer
    np.testing.assert_array_equal(held.numpy(), first)
    assert not np.array_equal(second.numpy(), first)
    second_buffer = second.buffer
    second.close()
    third = local.linear(x1, w, out_dtype="f32")  # reuses the released slot
    assert third.buffer is second_buffer
    np.testing.assert_array_equal(held.numpy(), first)
    # one preparation through the cache; the repeats came from the op's own plan dict
    assert cache.stats.misses == 1 and cache.stats.hits == 0
    held.close(), third.close()
    assert cache.evict_idle() == 1


def test_linear_fragment_orders_with_neighbours(ops, dev):
    rng = np.random.default_rng(5)
    k, n = 256, 48
    x_host, w_host = rand_bf16(rng, (1, k)), rand_bf16(rng, (n, k), 0.1)
    rt = Runtime(dev)
    x = ops.upload(np.zeros((1, k), bfloat16))
    w = ops.upload(w_host)
    ops.stream.synchronize()
    with rt.graph("step") as g:
        up = g.upload(x.view, x_host.view(np.uint8).reshape(-1))
        region, out = ops.linear_fragment(g, x, w, out_dtype="f32")
        down = g.download(out.view)
        assert up.index in region.deps and region.index in down.deps
        rt.submit(g).wait(timeout=60)
        got = down.read(np.float32)
        ref, mag = reference(x_host, w_host)
        check_f32(got, ref, mag)
        # refill the input and replay: the recorded projection follows the new upload
        x2 = rand_bf16(rng, (1, k))
        up.write(x2.view(np.uint8).reshape(-1))
        rt.submit(g).wait(timeout=60)
        ref2, mag2 = reference(x2, w_host)
        check_f32(down.read(np.float32), ref2, mag2)
    out.close()


def test_linear_fragment_validates(ops, dev):
    rng = np.random.default_rng(6)
    rt = Runtime(dev)
    x, w = ops.upload(rand_bf16(rng, (1, 128))), ops.upload(rand_bf16(rng, (8, 128)))
    bad_out = ops.upload(np.zeros((1, 9), np.float32))
    with rt.graph() as g:
        with pytest.raises(InvalidArgument, match="out"):
            ops.linear_fragment(g, x, w, out=bad_out, out_dtype="f32")
        with pytest.raises(InvalidArgument, match="graph"):
            ops.linear_fragment(object(), x, w)  # type: ignore[arg-type]
        assert not g.regions


def test_record_linear_many_projections_in_one_region(ops, dev):
    """Projections recorded into one compute region replay as one unit; a chain
    (the output of one feeding the next) is ordered by the declared access."""
    rng = np.random.default_rng(7)
    k = 128
    x_host = rand_bf16(rng, (1, k))
    ws_host = [rand_bf16(rng, (k, k), 0.05) for _ in range(3)]
    rt = Runtime(dev)
    x = ops.upload(x_host)
    ws = [ops.upload(w) for w in ws_host]
    outs = []
    with rt.graph("chain") as g:

        def record(rg):
            h = x
            for w in ws:
                h = ops.record_linear(rg, h, w)
                outs.append(h)

        g.compute("three", record)
        assert len(g.regions) == 1
        down = g.download(outs[-1].view)
        for _ in range(2):
            rt.submit(g).wait(timeout=60)
            h = x_host
            for w in ws_host:  # the BF16 rounding of each stage, as the kernel does
                h = (w.astype(np.float64) @ h.astype(np.float64).reshape(-1)).astype(np.float32).astype(bfloat16).reshape(1, -1)
            got = down.read(bfloat16).astype(np.float64)
            np.testing.assert_allclose(got, h.astype(np.float64).reshape(-1), rtol=2**-6, atol=1e-3)
        with pytest.raises(InvalidArgument, match="g: expected"):
            ops.record_linear(object(), x, ws[0])  # type: ignore[arg-type]
    for o in outs:
        o.close()


def test_unsupported_engine_names_implementations(dev):
    class Info:
        engine = "npu-host"

    class Fake:
        info = Info()
        name = "npu-host:0"

    with pytest.raises(Unsupported, match="host, cuda"):
        TensorOps(Fake())


def test_hook_returns_kernels():
    from hrx_core.plugins import plugin_manager

    found = {}
    for result in plugin_manager().hook.hrx_kernels(engine="host"):
        found.update(result)
    assert "hrx_tensor_linear" in found and "hrx_tensor_gather" in found
    assert not any(k.startswith("hrx_tensor") for r in plugin_manager().hook.hrx_kernels(engine="xdna") for k in r)
    assert isinstance(HRXError, type)


@pytest.mark.parametrize("use_native", [True, False], ids=["native-c", "numpy"])
@pytest.mark.parametrize("out_dtype", ["f32", "bf16"])
def test_host_linear_both_paths(monkeypatch, use_native, out_dtype):
    """The host engine's compiled C GEMV and its numpy fallback give the same bounds."""
    import hrx_core as hrx
    from hrx_tensor import kernels, native

    if use_native and not native.available():
        pytest.skip(f"no native kernel here: {native.why_unavailable()}")
    monkeypatch.setattr(kernels, "USE_NATIVE", use_native)
    ops = TensorOps(hrx.device("host"))
    rng = np.random.default_rng(11)
    for k, n in [(128, 5), (2048, 300), (4096, 129), (1600, 37), (200, 9), (8, 6), (6408, 67)]:
        x, w = rand_bf16(rng, (1, k)), rand_bf16(rng, (n, k), 0.05)
        with ops.upload(x) as xt, ops.upload(w) as wt, ops.linear(xt, wt, out_dtype=out_dtype) as y:
            got = y.numpy()[0]
        ref, mag = reference(x, w)
        (check_f32 if out_dtype == "f32" else check_bf16)(got, ref, *(() if out_dtype == "bf16" else (mag,)))


def test_reused_slot_rebinds_changed_inputs(ops):
    """A slot's prepared launch is rebound to whatever inputs each call passes: swapping
    x, weights and projection order across calls on one reused slot gives each call's
    own result, and nothing is launched twice or from a stale binding."""
    rng = np.random.default_rng(11)
    k = 256
    xs = [rand_bf16(rng, (1, k)) for _ in range(3)]
    ws = [rand_bf16(rng, (24, k), 0.05) for _ in range(3)]
    cache = PlanCache(max_plans=4)
    local = TensorOps(ops.device, plan_cache=cache, stream=ops.stream)
    xt, wt = [local.upload(x) for x in xs], [local.upload(w) for w in ws]
    dispatches = ops.device.stats.dispatches
    for i, j in [(0, 0), (1, 0), (1, 2), (2, 1), (0, 2), (0, 2)]:
        with local.linear(xt[i], wt[j], out_dtype="f32") as y:
            ref, mag = reference(xs[i], ws[j])
            check_f32(y.numpy()[0], ref, mag)
    for order in ([0, 1, 2], [2, 0, 1], [1, 1, 0]):
        outs = local.linear_many(xt[2], [wt[o] for o in order], out_dtype="f32")
        for o, y in zip(order, outs):
            check_f32(y.numpy()[0], *reference(xs[2], ws[o]))
        for y in outs:
            y.close()
    assert ops.device.stats.dispatches == dispatches + 9
    assert cache.stats.misses == 2  # one plan per shape; slots were reused, not re-prepared


def test_idle_slot_does_not_keep_inputs_alive(ops):
    """An idle output slot remembers its inputs weakly: dropping the last reference to
    a weight frees its device memory even though the slot stays prepared."""
    import gc

    rng = np.random.default_rng(12)
    dev = ops.device
    x = ops.upload(rand_bf16(rng, (1, 128)))
    w = ops.upload(rand_bf16(rng, (4096, 128)))  # 1 MiB
    ops.linear(x, w).close()
    ops.stream.synchronize()
    gc.collect()
    before = dev.stats.live_bytes
    del w
    gc.collect()
    assert dev.stats.live_bytes <= before - 4096 * 128 * 2


def test_back_to_back_gathers(gops):
    """Indices live in host-visible slot memory that the next call on the slot may
    overwrite while an earlier, already closed gather still runs: results that are
    still held are never affected, and every index stays in range."""
    rng = np.random.default_rng(13)
    table = rng.integers(0, 2**31, (512, 64), dtype=np.int32)
    t = gops.upload(table)
    picks = [rng.integers(0, 512, 300) for _ in range(12)]
    for p in picks:  # closed at once: one slot, rewritten while the last may run
        gops.gather_rows(t, p).close()
    last = gops.gather_rows(t, picks[0])
    np.testing.assert_array_equal(last.numpy(), table[picks[0]])
    last.close()
    held = [(p, gops.gather_rows(t, p)) for p in picks]  # all held: distinct slots
    for p, y in held:
        np.testing.assert_array_equal(y.numpy(), table[p])
        y.close()
    t.close()
