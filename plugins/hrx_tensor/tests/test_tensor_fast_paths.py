"""The eager fast paths of TensorOps give the slow paths' results, and every change
under a cached binding is honoured: a closed, freed, host-mapped or replaced input is
never launched from a stale binding.

Fast paths under test: the per-op spec dicts (a repeated call shape skips the shape
checks), the plan dict in front of the plan cache, each slot's prepared launch
rebinding only changed arguments, and gather_rows' ring of index buffers with the
range check fused into the index write.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hrx_tensor import DeviceTensor, TensorOps, native
from hrx_tensor import ops as ops_module
from hrx_tensor.plans import LRU_TOUCH
from ml_dtypes import bfloat16
from tensor_ops_variants import make_ops
from test_tensor_ops import check_f32, rand_bf16, reference

from hrx_core.errors import AccessConflict, InvalidArgument, OutOfBounds, Unsupported
from hrx_core.execution.plan_cache import PlanCache


def fresh(ops):
    """A TensorOps with empty spec and plan dicts and its own cache (the slow path), on
    the same gather path as ``ops``."""
    return make_ops(ops.device, param_gather=bool(ops._gather_params), stream=ops.stream, plan_cache=PlanCache(max_plans=8))


def linear_f32(ops, x, w):
    with ops.linear(x, w, out_dtype="f32") as y:
        return y.numpy().copy()


def test_linear_fast_path_equals_slow_path(ops):
    rng = np.random.default_rng(21)
    xs = [ops.upload(rand_bf16(rng, (1, 256))) for _ in range(3)]
    ws = [ops.upload(rand_bf16(rng, (40, 256), 0.1)) for _ in range(3)]
    for i in range(9):  # repeated shapes: spec dict, plan dict, rebinding
        x, w = xs[i % 3], ws[(i * 2) % 3]
        fast = linear_f32(ops, x, w)
        slow = linear_f32(fresh(ops), x, w)
        assert fast.tobytes() == slow.tobytes()
    many = ops.linear_many(xs[0], ws)
    slow = fresh(ops).linear_many(xs[0], ws)
    for a, b in zip(many, slow):
        assert a.numpy().tobytes() == b.numpy().tobytes()
        a.close(), b.close()


def test_gather_fast_path_equals_slow_path(gops):
    rng = np.random.default_rng(22)
    table = rng.integers(-(2**31), 2**31, (300, 24), dtype=np.int32)
    t = gops.upload(table)
    for dtype in (np.int64, np.int32, np.uint16, np.int8):
        for _ in range(3):
            idx = rng.integers(0, 128, 57).astype(dtype)
            with gops.gather_rows(t, idx) as a, fresh(gops).gather_rows(t, list(idx)) as b:
                assert a.numpy().tobytes() == b.numpy().tobytes() == table[idx.astype(np.int64)].tobytes()
    strided = np.arange(0, 200, 2)[::3]  # not contiguous: the numpy writer
    with gops.gather_rows(t, strided) as a:
        assert a.numpy().tobytes() == table[strided].tobytes()


@pytest.mark.parametrize("writer", ["compiled", "numpy"])
def test_gather_range_check_in_the_index_write(gops, dev, monkeypatch, writer):
    """A bad index after the fast path is warm is the typed error, launches nothing,
    and leaves the next call correct -- with either index writer."""
    if writer == "numpy":
        monkeypatch.setattr(native, "_index_functions", lambda: None)
    elif native._index_functions() is None:
        pytest.skip(f"no compiled index writer: {native.why_unavailable()}")
    table = np.arange(40 * 3, dtype=np.float32).reshape(40, 3)
    t = gops.upload(table)
    rng = np.random.default_rng(23)
    for _ in range(3):
        gops.gather_rows(t, rng.integers(0, 40, 16)).close()
    dispatches = dev.stats.dispatches
    for bad, text in [([0, 40] + [1] * 14, "40 is outside 0..39"), ([-1] + [0] * 15, "-1 is outside"),
                      (np.array([3] * 15 + [2**63 + 5], np.uint64), str(2**63 + 5)),
                      (np.array([1] * 15 + [-7], np.int32), "-7 is outside")]:
        with pytest.raises(OutOfBounds, match=text):
            gops.gather_rows(t, np.asarray(bad))
    assert dev.stats.dispatches == dispatches
    idx = rng.integers(0, 40, 16)
    with gops.gather_rows(t, idx) as y:
        assert y.numpy().tobytes() == table[idx].tobytes()


def _gather_ring(ops, cols: int) -> int:
    """The index ring length of the (idle) gather slot of rows of ``cols`` uint16."""
    plan = next(p for key, p in ops._front.items() if key[0] == "gather" and key[1] == 2 * cols)
    slot = plan.take_idle()
    assert slot is not None
    try:
        return len(slot.entries)
    finally:
        plan.give(slot)


@pytest.mark.parametrize("cols, ring", [(8, 8), (256, ops_module.INDEX_RING)])
def test_gather_ring_reuse_and_held_results(ring_ops, cols, ring):
    """More calls than index ring entries, results closed at once (entries reused
    while earlier gathers may run) and held (distinct slots): every result is its own.
    Narrow rows get a ring of 8 entries (its indices within the output's bytes), wide
    rows the whole INDEX_RING."""
    rng = np.random.default_rng(24)
    table = rng.integers(0, 2**16, (64, cols), dtype=np.uint16)
    t = ring_ops.upload(table)
    ring_ops.gather_rows(t, rng.integers(0, 64, 33)).close()
    assert _gather_ring(ring_ops, cols) == ring
    picks = [rng.integers(0, 64, 33) for _ in range(3 * ops_module.INDEX_RING + 1)]
    for p in picks:
        ring_ops.gather_rows(t, p).close()
    held = [(p, ring_ops.gather_rows(t, p)) for p in picks[:5]]
    closed_meanwhile = [ring_ops.gather_rows(t, p) for p in picks[5:]]
    for y in closed_meanwhile:
        y.close()
    for p, y in held:
        assert y.numpy().tobytes() == table[p].tobytes()
        y.close()


def test_gather_plan_picks_the_smallest_param_capacity(dev):
    """Index counts up to each capacity the device's argument limit takes go in the
    launch's parameters (the smallest record that holds them); more go through the ring."""
    from hrx_tensor import kernels as tk

    ops = make_ops(dev, param_gather=True)
    limit = dev.info.limits.max_kernel_arg_bytes
    caps = [c for c in tk.GATHER_PARAM_CAPS if tk.GATHER_PARAM[c].argument_bytes <= limit]
    assert [c for c, _ in ops._gather_params] == caps
    assert make_ops(dev, param_gather=False)._gather_params == []
    table = np.arange(64 * 4, dtype=np.uint32).reshape(64, 4)
    t = ops.upload(table)
    rng = np.random.default_rng(31)
    for n in (1, 256, 257, 1024, 1025, 4096, 4097):
        idx = rng.integers(0, 64, n)
        with ops.gather_rows(t, idx) as y:
            assert y.numpy().tobytes() == table[idx].tobytes()
        cap = next((c for c in caps if n <= c), None)
        key = ("gather_i", 16, 16, n, cap) if cap else ("gather", 16, 16, n)
        assert key in ops._front, (n, sorted(k for k in ops._front if k[0].startswith("gather")))


def test_gather_params_keep_each_calls_indices(dev):
    """Every call's indices travel with its launch: calls made back to back -- results
    closed at once (one slot, its record rewritten while earlier gathers wait) or held
    -- each give their own rows. On the host engine a gate kernel holds the stream
    shut, so every launch is queued before the record is rewritten."""
    import threading

    from hrx_core.kernel import Kernel

    ops = make_ops(dev, param_gather=True)
    if not ops._gather_params:
        pytest.skip(f"{dev.name} takes no index record")
    rng = np.random.default_rng(32)
    table = rng.integers(0, 2**31, (512, 8), dtype=np.int32)
    t = ops.upload(table)
    ops.gather_rows(t, rng.integers(0, 512, 100)).close()
    picks = [rng.integers(0, 512, 100) for _ in range(20)]
    gate = threading.Event()
    if dev.info.engine == "host":
        ops.stream.dispatch(Kernel("gate", buffers=0, host=lambda: gate.wait(30)), 1, [])
    for p in picks[:10]:
        ops.gather_rows(t, p).close()
    held = [(p, ops.gather_rows(t, p)) for p in picks]
    gate.set()
    for p, y in held:
        assert y.numpy().tobytes() == table[p].tobytes()
        y.close()


def test_closed_buffer_under_cached_binding_raises(ops, dev):
    rng = np.random.default_rng(25)
    w = ops.upload(rand_bf16(rng, (16, 128)))
    buf = dev.allocate(256)
    ops.stream.upload_blocking(buf, rand_bf16(rng, (1, 128)).view(np.uint8).reshape(-1))
    x = ops.tensor(buf, (1, 128), bfloat16)
    linear_f32(ops, x, w)
    linear_f32(ops, x, w)  # bound: the slot's launch holds x's view
    buf.close()  # the tensor is still open; its buffer is not
    dispatches = dev.stats.dispatches
    with pytest.raises(InvalidArgument, match="buffer"):
        ops.linear(x, w)
    table = ops.upload(np.arange(12, dtype=np.int32).reshape(6, 2))
    tbuf = dev.allocate(48)
    ops.stream.upload_blocking(tbuf, np.arange(12, dtype=np.int32).view(np.uint8))
    tt = ops.tensor(tbuf, (6, 2), np.int32)
    ops.gather_rows(tt, [1, 2]).close()
    tbuf.close()
    assert dev.stats.dispatches == dispatches + 1
    with pytest.raises(InvalidArgument, match="buffer"):
        ops.gather_rows(tt, [1, 2])
    assert dev.stats.dispatches == dispatches + 1
    table.close()


def test_closed_tensor_raises(ops, dev):
    rng = np.random.default_rng(26)
    x, w = ops.upload(rand_bf16(rng, (1, 128))), ops.upload(rand_bf16(rng, (8, 128)))
    linear_f32(ops, x, w)
    w.close()
    dispatches = dev.stats.dispatches
    with pytest.raises(InvalidArgument, match="w: tensor is closed"):
        ops.linear(x, w)
    with pytest.raises(InvalidArgument, match="ws\\[0\\]: tensor is closed"):
        ops.linear_many(x, [w])
    assert dev.stats.dispatches == dispatches


def test_host_mapped_input_under_cached_binding_raises(ops, dev):
    """A mapping opened after the binding was cached is still seen by the launch."""
    rng = np.random.default_rng(27)
    x, w = ops.upload(rand_bf16(rng, (1, 128))), ops.upload(rand_bf16(rng, (8, 128)))
    linear_f32(ops, x, w)
    _mapped_input_is_refused(ops, dev, x, w)


def _mapped_input_is_refused(ops, dev, x, w):
    """With ``w``'s buffer mapped for host access, ops.linear(x, w) raises and launches nothing."""
    ops.stream.synchronize()
    try:
        mapping = w.buffer.map("read_write")
        mapping.__enter__()
    except Unsupported:
        pytest.skip("buffers of this engine are not host-mappable")
    try:
        dispatches = dev.stats.dispatches
        with pytest.raises(AccessConflict):
            ops.linear(x, w)
        assert dev.stats.dispatches == dispatches
    finally:
        mapping.__exit__(None, None, None)


def test_replaced_and_modified_views_are_rebound(ops):
    """Same tensor object, other bytes: a view swapped on the tensor, or a view whose
    range was changed in place, is rebound -- the result reads the new bytes."""
    rng = np.random.default_rng(28)
    a, b = rand_bf16(rng, (1, 128)), rand_bf16(rng, (1, 128))
    w_host = rand_bf16(rng, (8, 128), 0.1)
    w = ops.upload(w_host)
    both = ops.upload(np.concatenate([a, b], axis=1))
    x = DeviceTensor(both.view.slice(0, 256), (1, 128), bfloat16)
    check_f32(linear_f32(ops, x, w)[0], *reference(a, w_host))
    x.view = both.view.slice(256, 256)  # another View object
    check_f32(linear_f32(ops, x, w)[0], *reference(b, w_host))
    x.view.offset = 0  # the same View object, moved back to a's bytes
    check_f32(linear_f32(ops, x, w)[0], *reference(a, w_host))


def test_plan_dict_survives_eviction_in_use(ops, dev):
    """A plan the cache evicts while its output lives keeps that output's memory until
    it is closed; the next call prepares a new plan; nothing is leaked."""
    rng = np.random.default_rng(29)
    cache = PlanCache(max_plans=4)
    local = TensorOps(ops.device, plan_cache=cache, stream=ops.stream)
    x, w = ops.upload(rand_bf16(rng, (1, 128))), ops.upload(rand_bf16(rng, (32, 128), 0.1))
    x.numpy()  # any staging memory of downloads exists from here on
    gc.collect()  # earlier tests' garbage, and their deferred frees retired on every queue
    dev.synchronize()
    live0 = dev.stats.live_bytes
    held = local.linear(x, w, out_dtype="f32")
    expect = held.numpy().copy()
    ops.stream.synchronize()
    live = dev.stats.live_bytes
    assert cache.evict_idle() == 1  # the op holds no lease: its plan is idle to the cache
    assert dev.stats.live_bytes == live  # ... but the output's slot stays
    assert held.numpy().tobytes() == expect.tobytes()
    second = local.linear(x, w, out_dtype="f32")  # the evicted plan hands out nothing: a new one
    assert cache.stats.misses == 2 and second.buffer is not held.buffer
    assert second.numpy().tobytes() == expect.tobytes()
    held.close()  # the evicted plan's last use: its slot is freed now
    second.close()  # the new plan keeps its slot idle ...
    assert cache.evict_idle() == 1  # ... until evicted in turn
    dev.synchronize()
    assert dev.stats.live_bytes == live0


def test_plan_dict_touches_the_cache_now_and_then(ops):
    rng = np.random.default_rng(30)
    cache = PlanCache(max_plans=4)
    local = TensorOps(ops.device, plan_cache=cache, stream=ops.stream)
    x, w = ops.upload(rand_bf16(rng, (1, 128))), ops.upload(rand_bf16(rng, (8, 128)))
    for _ in range(2 * LRU_TOUCH + 1):
        local.linear(x, w).close()
    assert cache.stats.misses == 1 and cache.stats.hits == 2


def test_shared_cache_across_streams(ops, dev):
    """Two TensorOps on different streams sharing a plan cache: each call runs on the
    caller's stream (a slot's prepared launch is re-prepared for another stream)."""
    rng = np.random.default_rng(31)
    cache = PlanCache(max_plans=4)
    a = TensorOps(dev, plan_cache=cache)
    b = TensorOps(dev, plan_cache=cache)
    x_host, w_host = rand_bf16(rng, (1, 128)), rand_bf16(rng, (8, 128), 0.1)
    x, w = a.upload(x_host), a.upload(w_host)
    a.stream.synchronize()
    for ops_, other in ((a, b), (b, a), (a, b)):
        y = ops_.linear(x, w, out_dtype="f32")
        assert y.completion.slot is ops_.stream.slot
        check_f32(y.numpy()[0], *reference(x_host, w_host))
        y.close()
    assert cache.stats.misses == 1


def test_out_dtype_spellings_share_nothing_wrongly(ops):
    rng = np.random.default_rng(32)
    x, w = ops.upload(rand_bf16(rng, (1, 128))), ops.upload(rand_bf16(rng, (8, 128)))
    for spelling in ("f32", np.float32, np.dtype(np.float32), "bf16", bfloat16, "float32"):
        with ops.linear(x, w, out_dtype=spelling) as y:
            assert y.dtype == np.dtype(spelling if spelling not in ("f32", "bf16") else {"f32": np.float32, "bf16": bfloat16}[spelling])
    with pytest.raises(InvalidArgument, match="out_dtype"):
        ops.linear(x, w, out_dtype=np.float16)
    with pytest.raises(InvalidArgument, match="out_dtype"):
        ops.linear(x, w, out_dtype=[1])  # unhashable: the slow path names it


def test_same_shape_bad_tensor_after_warm_path(ops, dev):
    """A spec dict entry vouches for shapes only: a tensor of a cached shape that is
    strided, of another dtype or on another device still fails its check."""
    rng = np.random.default_rng(33)
    x, w = ops.upload(rand_bf16(rng, (1, 128))), ops.upload(rand_bf16(rng, (8, 256)))
    w8 = DeviceTensor(w.view, (8, 128), bfloat16, strides=(512, 2))
    good = ops.upload(rand_bf16(rng, (8, 128)))
    linear_f32(ops, x, good)
    dispatches = dev.stats.dispatches
    with pytest.raises(InvalidArgument, match="not contiguous"):
        ops.linear(x, w8)
    f16 = ops.upload(np.zeros((8, 128), np.float16))
    with pytest.raises(InvalidArgument, match="bfloat16"):
        ops.linear(x, f16)
    assert dev.stats.dispatches == dispatches


def test_refused_gather_allocates_nothing(gops, dev):
    """A bad index on a cold call (no plan yet) or with every slot held (a new slot
    would be made) is refused before anything is prepared or allocated."""
    table = gops.upload(np.arange(30, dtype=np.int16).reshape(10, 3))
    gops.stream.synchronize()
    before = (dev.stats.allocations, dev.stats.live_bytes, dev.stats.dispatches)
    for bad in ([0, 10], np.array([11], np.uint64), np.array([-2, 0], np.int32)):
        with pytest.raises(OutOfBounds):
            gops.gather_rows(table, bad)
    assert (dev.stats.allocations, dev.stats.live_bytes, dev.stats.dispatches) == before
    held = gops.gather_rows(table, [1, 2])  # the plan's only slot is now held
    before = (dev.stats.allocations, dev.stats.live_bytes, dev.stats.dispatches)
    with pytest.raises(OutOfBounds):
        gops.gather_rows(table, [3, 10])
    assert (dev.stats.allocations, dev.stats.live_bytes, dev.stats.dispatches) == before
    assert held.numpy().tobytes() == np.arange(30, dtype=np.int16).reshape(10, 3)[[1, 2]].tobytes()
    held.close()


def _count_calls(monkeypatch, cls, name):
    calls = []
    real = getattr(cls, name)

    def counted(self, *args, **kwargs):
        calls.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


def _rotation(ops, dev, seed, k, n, count=5):
    """A TensorOps of its own on ``ops``' stream, an input [1, k] and ``count`` weights
    [n, k]: (ops, x host, x, weight hosts, weights)."""
    rng = np.random.default_rng(seed)
    local = TensorOps(dev, stream=ops.stream, plan_cache=PlanCache(max_plans=4))
    x_host = rand_bf16(rng, (1, k))
    hosts = [rand_bf16(rng, (n, k), 0.1) for _ in range(count)]
    return local, x_host, local.upload(x_host), hosts, [local.upload(h) for h in hosts]


def test_rotating_weights_keep_a_launch_each(ops, dev, monkeypatch):
    """Eager decoding rotates one slot through many weights: the slot keeps a prepared
    launch per argument set, so after the first round nothing is prepared or rebound,
    and every result equals a fresh TensorOps' (the slow path)."""
    from hrx_core.stream import PreparedLaunch, Stream

    local, x_host, x, hosts, ws = _rotation(ops, dev, 34, 128, 24)
    slow = [linear_f32(fresh(ops), x, w) for w in ws]
    for w in ws:  # first round: one prepared launch per weight
        linear_f32(local, x, w)
    prepares = _count_calls(monkeypatch, Stream, "prepare")
    rebinds = _count_calls(monkeypatch, PreparedLaunch, "rebind")
    for i in range(15):
        got = linear_f32(local, x, ws[i % 5])
        check_f32(got[0], *reference(x_host, hosts[i % 5]))
        assert got.tobytes() == slow[i % 5].tobytes()
    assert prepares == [] and rebinds == []


def test_rotation_beyond_the_kept_launches_rebinds(ops, dev, monkeypatch):
    """More argument sets than a slot keeps: the least recently used launch is rebound
    (never a new one per call), and results stay right."""
    from hrx_core.stream import PreparedLaunch, Stream
    from hrx_tensor import plans

    monkeypatch.setattr(plans, "MAX_BINDINGS", 2)
    local, x_host, x, hosts, ws = _rotation(ops, dev, 35, 64, 16)
    prepares = _count_calls(monkeypatch, Stream, "prepare")
    rebinds = _count_calls(monkeypatch, PreparedLaunch, "rebind")
    for i in range(20):
        check_f32(linear_f32(local, x, ws[i % 5])[0], *reference(x_host, hosts[i % 5]))
    assert len(prepares) == 3  # the current launch and two kept ones
    assert len(rebinds) == 20 - 3  # every later call rebinds the oldest (one weight each)


def test_kept_launch_of_a_closed_buffer_never_launches(ops, dev):
    """A weight whose buffer was closed while its launch was kept (not current) is
    refused by that launch's validation: nothing is dispatched."""
    rng = np.random.default_rng(36)
    local = TensorOps(dev, stream=ops.stream, plan_cache=PlanCache(max_plans=4))
    x = local.upload(rand_bf16(rng, (1, 128)))
    buf = dev.allocate(16 * 128 * 2)
    ops.stream.upload_blocking(buf, rand_bf16(rng, (16, 128)).view(np.uint8).reshape(-1))
    w_closed = local.tensor(buf, (16, 128), bfloat16)
    w_other = local.upload(rand_bf16(rng, (16, 128)))
    for w in (w_closed, w_other, w_closed, w_other):
        local.linear(x, w).close()
    buf.close()  # w_closed's launch is kept, not current
    dispatches = dev.stats.dispatches
    with pytest.raises(InvalidArgument, match="buffer"):
        local.linear(x, w_closed)
    assert dev.stats.dispatches == dispatches
    local.linear(x, w_other).close()  # the other kept launch still works
    assert dev.stats.dispatches == dispatches + 1


def test_kept_launch_sees_a_later_host_mapping(ops, dev):
    rng = np.random.default_rng(37)
    local = TensorOps(dev, stream=ops.stream, plan_cache=PlanCache(max_plans=4))
    x = local.upload(rand_bf16(rng, (1, 128)))
    a, b = local.upload(rand_bf16(rng, (8, 128))), local.upload(rand_bf16(rng, (8, 128)))
    for w in (a, b, a, b):
        local.linear(x, w).close()
    _mapped_input_is_refused(local, dev, x, a)  # a's launch is kept, not current


def test_kept_launch_rebinds_a_view_modified_since(ops, dev):
    """A kept (not current) launch whose input view was moved in place meanwhile is
    rebound when it is switched to: the result reads the view's new bytes."""
    rng = np.random.default_rng(38)
    local = TensorOps(dev, stream=ops.stream, plan_cache=PlanCache(max_plans=4))
    a, b = rand_bf16(rng, (1, 128)), rand_bf16(rng, (1, 128))
    both = local.upload(np.concatenate([a, b], axis=1))
    x = DeviceTensor(both.view.slice(0, 256), (1, 128), bfloat16)
    hosts = [rand_bf16(rng, (8, 128), 0.1) for _ in range(2)]
    w0, w1 = (local.upload(h) for h in hosts)
    for w, h in ((w0, hosts[0]), (w1, hosts[1])):
        check_f32(linear_f32(local, x, w)[0], *reference(a, h))
    x.view.offset = 256  # moved while w0's launch is kept, w1's current
    check_f32(linear_f32(local, x, w0)[0], *reference(b, hosts[0]))
    check_f32(linear_f32(local, x, w1)[0], *reference(b, hosts[1]))
