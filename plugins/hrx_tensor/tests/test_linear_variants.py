"""The GEMV's shape classes: the split of K over warps that a plan picks from the
shape, and the numerics of every split (1, 2, 4, 8 warps a row, with row tails) on
each engine -- on cuda also at shapes of bench/tensor.py's sweep (gpu marker)."""

from __future__ import annotations

import numpy as np
import pytest
from hrx_tensor import TensorOps
from hrx_tensor import kernels as tk
from ml_dtypes import bfloat16
from test_tensor_ops import check_bf16, check_f32, rand_bf16, reference

# (K, N, warps a row): GPT-2 small's projections (K = 768: three vectors a lane, no
# split; K = 3072, N = 768: split 4), square shapes that fill the GPU unsplit, short N
# with long K split 8, rows of 4096 or more split at least 4 ways (measured faster on the
# H200 even with the grid full), rows of 8192 or more 8 ways once there are 2048 of them,
# and the limit of two vectors a lane a warp.
SPLITS = [
    (768, 2304, 1), (768, 768, 1), (3072, 768, 4), (768, 50257, 1), (16384, 1024, 8), (8192, 8192, 8),
    (16384, 8192, 8), (6144, 8192, 4), (4096, 16384, 4), (3072, 16384, 1), (8192, 2048, 8), (8192, 1536, 8),
    (12288, 1536, 8), (8192, 50257, 8),
    (4096, 4096, 4), (2048, 1000, 4), (1024, 64, 2), (1016, 64, 1), (6408, 130, 8), (128, 1, 1),
]


@pytest.mark.parametrize("k,n,ks", SPLITS, ids=[f"K{k}xN{n}" for k, n, _ in SPLITS])
def test_split_is_chosen_by_shape_class(k, n, ks):
    assert tk.linear_split(k, n) == ks
    grid, block, split = tk.linear_launch(k, n)
    assert split == ks and block == 32 * tk.LINEAR_WARPS
    rows = tk.LINEAR_WARPS // ks
    assert (grid - 1) * rows < n <= grid * rows  # every row covered, no empty block


def test_the_plan_carries_the_split(dev):
    ops = TensorOps(dev)
    for k, n, ks in SPLITS[:6]:
        kernel, grid, block, scalars = ops._linear_geometry(k, [n], np.dtype(np.float32))
        assert kernel in (ops._linear, ops._linear_b8)
        assert int(scalars[-1]) == ks and (grid, block) == tk.linear_launch(k, n)[:2]


# -- register budgets (kernels.gemv_budget: hrx_tensor_linear or hrx_tensor_linear_b8) --

@pytest.mark.parametrize("grid,sms,share,want", [
    (96, 132, 3, 6), (288, 132, 3, 6), (792, 132, 3, 6),  # one wave at six, two loads take two steps
    (792, 132, 4, 6), (1, 1, 3, 6), (6, 1, 5, 6),
    (768, 132, 2, 8), (256, 132, 1, 8),                    # one wave, but two loads take one step too
    (793, 132, 3, 8), (1536, 132, 4, 8), (6283, 132, 3, 8), (7, 1, 3, 8),  # more than a wave at six
])
def test_gemv_budget(grid, sms, share, want):
    assert tk.gemv_budget(grid, sms, share) == want


@pytest.mark.parametrize("grid,sms,share", [(0, 132, 3), (10, 0, 3), (-1, 4, 3), (10, 4, 0)])
def test_gemv_budget_refuses(grid, sms, share):
    with pytest.raises(ValueError, match="must be positive"):
        tk.gemv_budget(grid, sms, share)


@pytest.mark.parametrize("k,ksplit,want", [(768, 1, 3), (1024, 2, 2), (2048, 1, 8), (2048, 2, 4), (8192, 8, 4),
                                           (1600, 2, 4), (200, 1, 1), (3072, 4, 3)])
def test_gemv_lane_share(k, ksplit, want):
    assert tk.gemv_lane_share(k, ksplit) == want


def test_budget_kernel_source():
    """hrx_tensor_linear_b8 is hrx_tensor_linear with two loads a lane, launch bounds of
    eight blocks an SM and its own name: nothing else differs."""
    src = tk.LINEAR_B8.sources["cuda"]
    assert src.startswith("#define HRX_GEMV_UNROLL 2\n")
    back = src.removeprefix("#define HRX_GEMV_UNROLL 2\n").replace(
        "__launch_bounds__(256, 8)\nhrx_tensor_linear_b8(", "__launch_bounds__(256)\nhrx_tensor_linear(")
    assert back == tk.LINEAR.sources["cuda"]
    assert (tk.LINEAR_B8.buffer_access, tk.LINEAR_B8.scalar_types, tk.LINEAR_B8.programmatic) == \
        (tk.LINEAR.buffer_access, tk.LINEAR.scalar_types, tk.LINEAR.programmatic)
    assert tk.LINEAR_B8.sources["host"] is tk.LINEAR.sources["host"]
    assert tk.kernels_for("cuda")[tk.LINEAR_B8.name] is tk.LINEAR_B8
    assert tk.LINEAR_B8.name not in tk.kernels_for("host") and tk.LINEAR_B8.name not in tk.kernels_for("amdgpu")
    with pytest.raises(ValueError, match="blocks 7"):
        tk.budget_source(tk.LINEAR.sources["cuda"], tk.LINEAR.name, "x", 7)
    with pytest.raises(ValueError, match="no CUDA source with a register budget"):
        tk.budget_source('extern "C" __global__ void __launch_bounds__(128) k() {}', "k", "x", 8)


def test_the_budget_kernel_is_planned_on_cuda_only(dev, monkeypatch):
    """On cuda (a multiprocessor count known) the plan takes hrx_tensor_linear_b8 where
    gemv_budget says eight; elsewhere, or with use_budget_linear off, never. The host
    engine runs the choice as well when forced (the same host function)."""
    ops = TensorOps(dev)
    sms = dev.info.properties.get("multiprocessors", 0) if dev.info.engine == "cuda" else 0
    assert (ops._linear_b8 is tk.LINEAR_B8) == bool(sms)
    if not sms:
        ops._linear_b8, ops._sms = tk.LINEAR_B8, 132  # forced: the choice is engine-neutral
    for k, n in ((768, 2304), (768, 50257), (4096, 4096), (8192, 2048), (2048, 8192), (1024, 64)):
        grid, _block, ks = tk.linear_launch(k, n)
        kernel = ops._linear_geometry(k, [n], np.dtype(np.float32))[0]
        want = tk.LINEAR_B8 if tk.gemv_budget(grid, ops._sms, tk.gemv_lane_share(k, ks)) == 8 else ops._linear
        assert kernel is want, (k, n)
    if not sms:  # a forced plan runs on the host: the same numerics
        rng = np.random.default_rng(3)
        x, w = rand_bf16(rng, (1, 768)), rand_bf16(rng, (8000, 768))  # 1000 blocks: eight an SM
        ref, mag = reference(x, w)
        with ops.upload(x) as xt, ops.upload(w) as wt, ops.linear(xt, wt, out_dtype="f32") as y:
            assert ops._linear_geometry(768, [8000], np.dtype(np.float32))[0] is tk.LINEAR_B8
            check_f32(y.numpy()[0], ref, mag)
    monkeypatch.setattr(TensorOps, "use_budget_linear", False)
    assert TensorOps(dev)._linear_b8 is None


@pytest.mark.parametrize("k", [8, 16, 512, 1016, 1536, 2560, 4096, 4104, 6144, 8192, 8200, 12288, 16384, 16392, 24576])
def test_bulk_chunk_is_the_largest_divisor_of_the_row_up_to_the_ring_slot(k):
    chunk, row = tk.linear_bulk_chunk(k), 2 * k
    assert row % chunk == 0 and chunk % 16 == 0 and chunk <= tk.LINEAR_BULK_CHUNK
    assert not any(row % c == 0 and c % 16 == 0 for c in range(chunk + 16, min(row, tk.LINEAR_BULK_CHUNK) + 1, 16))


@pytest.mark.parametrize("k", [0, 4, 4100])
def test_bulk_chunk_refuses_rows_of_partial_vectors(k):
    with pytest.raises(ValueError):
        tk.linear_bulk_chunk(k)


# (K, N, threads a block or None): rows of 12288 or more, at least 4096 of them, stream
# through bulk copies; 128 threads a block for rows of 16384 or more, at least 8192 of
# them, else 256
BULK = [(16384, 16384, 128), (16384, 8192, 128), (16384, 4096, 256), (12288, 6144, 256), (12288, 4096, 256),
        (12288, 16384, 256), (16384, 8184, 256), (16384, 4095, None), (8192, 8192, None), (4096, 16384, None),
        (8192, 16384, None), (6144, 12288, None), (16384, 2048, None), (12280, 8192, None)]


@pytest.mark.parametrize("k,n,threads", BULK, ids=[f"K{k}xN{n}" for k, n, _ in BULK])
def test_bulk_is_chosen_by_shape_class(k, n, threads):
    got = tk.linear_bulk_launch(k, n, 132)
    assert (got is not None) == (threads is not None)
    if threads is not None:
        assert got == (min(n, 132 * tk.LINEAR_BULK_BLOCKS_PER_SM), threads, tk.linear_bulk_chunk(k))
        assert tk.BULK_BY_THREADS[threads].name == ("hrx_tensor_linear_bulk" if threads == 128
                                                    else "hrx_tensor_linear_bulk_t256")


def test_bulk_source_sets_the_block_size_and_name():
    src = tk.linear_bulk_source(256, name="hrx_bulk_probe")
    assert "__launch_bounds__(256)\nhrx_bulk_probe(" in src and "#define HRX_BULK_THREADS 256" in src
    assert tk.LINEAR_BULK_T256.sources["cuda"].count("hrx_tensor_linear_bulk_t256(") == 1
    for bad in (0, 48, 2048):
        with pytest.raises(ValueError):
            tk.linear_bulk_source(bad)


# cuda properties: (compute capability, SMs, peak memory bytes a second) -> bulk planned
PAYS = [
    (("9.0", 132, 4_917_248_000_000), True),  # H200: 37 GB/s an SM
    (("9.0", 132, 3_352_320_000_000), False),  # H100 SXM: 25 GB/s an SM
    (("9.0", 132, 0), True),  # no bandwidth reported: the bulk kernel, as before the rule
    (("9.0", 132, None), True),
    (("10.0", 148, 8_000_000_000_000), True),
    (("8.0", 108, 4_917_248_000_000), False),  # no bulk copies before Hopper
    (("9.0", 0, 4_917_248_000_000), False),  # no SM count
    (("9.0", "many", 4_917_248_000_000), False),
    (("sm90", 132, 4_917_248_000_000), False),
]


@pytest.mark.parametrize("props,pays", PAYS, ids=[f"cc{p[0]}-sms{p[1]}-bw{p[2]}" for p, _ in PAYS])
def test_the_bulk_kernel_pays_where_the_memory_bandwidth_an_sm_is_high(props, pays):
    cc, sms, bandwidth = props
    got = {"compute_capability": cc, "multiprocessors": sms}
    if bandwidth is not None:
        got["memory_bandwidth"] = bandwidth
    assert tk.bulk_linear_pays(got) is pays
    assert tk.bulk_linear_pays(None) is False and tk.bulk_linear_pays({}) is False


def test_the_bulk_kernel_is_planned_only_on_hopper_cuda(dev):
    ops = TensorOps(dev)
    props = dev.info.properties
    hopper = dev.info.engine == "cuda" and int(str(props.get("compute_capability", "0")).split(".")[0]) >= 9
    assert (ops._linear_bulk is tk.LINEAR_BULK) == (hopper and tk.bulk_linear_pays(props))
    TensorOps.use_bulk_linear = "always"  # any Hopper, whatever its memory
    try:
        ops = TensorOps(dev)
    finally:
        TensorOps.use_bulk_linear = True
    assert (ops._linear_bulk is tk.LINEAR_BULK) == hopper
    kernel, grid, block, scalars = ops._linear_geometry(16384, [8192, 8192], np.dtype(np.float32))
    wide = ops._linear_geometry(16384, [4096], np.dtype(np.float32))
    if hopper:
        sms = int(props["multiprocessors"])
        assert kernel is tk.LINEAR_BULK and (grid, block) == (min(16384, 8 * sms), tk.LINEAR_BULK_THREADS)
        assert int(scalars[-1]) == tk.linear_bulk_chunk(16384)
        assert wide[0] is tk.LINEAR_BULK_T256 and wide[1:3] == (min(4096, 8 * sms), 256)
    else:
        assert kernel is ops._linear and (grid, block) == tk.linear_launch(16384, 16384)[:2]
        assert wide[0] in (ops._linear, tk.LINEAR_B8) and wide[1:3] == tk.linear_launch(16384, 4096)[:2]
    TensorOps.use_bulk_linear = False
    try:
        assert TensorOps(dev)._linear_bulk is None
    finally:
        TensorOps.use_bulk_linear = True


@pytest.mark.parametrize("offset", [2, 8])
def test_unaligned_tensors_are_refused_before_anything_runs(ops, offset):
    """The GEMV reads 16-byte vectors: a tensor starting off a 16-byte boundary is an
    InvalidArgument (a misaligned load would poison a CUDA context), also after a call
    of the same shapes vouched for them."""
    from hrx_core.errors import InvalidArgument

    rng = np.random.default_rng(offset)
    x, w = rand_bf16(rng, (1, 64)), rand_bf16(rng, (16, 64))
    with ops.upload(x) as xt, ops.upload(w) as wt:
        ops.linear(xt, wt).close()  # the shapes are known now
        buf = ops.device.allocate(4096)
        try:
            ops.stream.upload(buf.slice(offset, 128), x.view(np.uint8))
            ops.stream.upload(buf.slice(1024 + offset, 64 * 32), w.view(np.uint8))
            bad_x = ops.tensor(buf.slice(offset, 128), (1, 64), bfloat16)
            bad_w = ops.tensor(buf.slice(1024 + offset, 64 * 32), (16, 64), bfloat16)
            with pytest.raises(InvalidArgument, match="x: starts at byte"):
                ops.linear(bad_x, wt)
            with pytest.raises(InvalidArgument, match="w: starts at byte"):
                ops.linear(xt, bad_w)
            with pytest.raises(InvalidArgument, match=r"ws\[1\]: starts at byte"):
                ops.linear_many(xt, [wt, bad_w])
            with pytest.raises(InvalidArgument, match="x: starts at byte"):
                ops.linear_many(bad_x, [wt])
            g = ops.stream.access_graph()
            with pytest.raises(InvalidArgument, match="x: starts at byte"):
                ops.record_linear(g, bad_x, wt)
            out = ops.tensor(buf.slice(3001, 32), (1, 16), bfloat16)
            with pytest.raises(InvalidArgument, match="out: starts at byte"):
                ops.record_linear(g, xt, wt, out=out)
            assert not g.nodes
            g.close()
        finally:
            ops.stream.synchronize()
            buf.close()


# shapes whose split is 1, 2, 4 and 8, with K not a multiple of the 4 x 32 x split
# vectors of one unrolled step (tails), and N not a multiple of the rows a block
EXACT = [(1016, 61), (1032, 70), (2056, 300), (4104, 33), (6408, 130), (200, 5), (8, 9)]


@pytest.mark.parametrize("k,n", EXACT, ids=[f"K{k}xN{n}-split{tk.linear_split(k, n)}" for k, n in EXACT])
@pytest.mark.parametrize("out_dtype", ["f32", "bf16"])
def test_every_split_matches_the_reference(ops, k, n, out_dtype):
    rng = np.random.default_rng(k + 3 * n)
    x, w = rand_bf16(rng, (1, k)), rand_bf16(rng, (n, k), 0.05)
    with ops.upload(x) as xt, ops.upload(w) as wt, ops.linear(xt, wt, out_dtype=out_dtype) as y:
        got = y.numpy()[0]
    ref, mag = reference(x, w)
    (check_f32 if out_dtype == "f32" else check_bf16)(got, ref, *(() if out_dtype == "bf16" else (mag,)))


#: A sample of bench/tensor.py's sweep (K, N over 1024..16384, >= 4 MiB of weights):
#: the corners, a non-power-of-two and the split classes.
SWEEP_SAMPLE = [(1024, 2048), (1024, 16384), (16384, 1024), (2560, 6144), (6144, 2560), (12288, 12288), (16384, 16384)]


@pytest.mark.gpu
@pytest.mark.parametrize("k,n", SWEEP_SAMPLE, ids=[f"K{k}xN{n}" for k, n in SWEEP_SAMPLE])
def test_sweep_shapes_on_cuda(cuda_ops, k, n):
    rng = np.random.default_rng(k ^ n)
    x = rand_bf16(rng, (1, k))
    w = (rng.standard_normal((n, k), dtype=np.float32) * 0.02).astype(bfloat16)
    with cuda_ops.upload(x) as xt, cuda_ops.upload(w) as wt, cuda_ops.linear(xt, wt, out_dtype="f32") as y:
        got = y.numpy()[0].astype(np.float64)
    xd = x.astype(np.float64).reshape(-1)
    for r in range(0, n, 2048):  # float64 reference, 2048 rows at a time
        wd = w[r : r + 2048].astype(np.float64)
        err, mag = np.abs(got[r : r + 2048] - wd @ xd), np.abs(wd) @ np.abs(xd)
        assert np.all(err <= 1e-5 * mag + 1e-30), f"K={k} N={n}: worst relative error {float(np.max(err / mag)):.3g}"


@pytest.fixture(scope="module")
def cuda_ops():
    from hrx_core.testing import open_device

    return TensorOps(open_device("cuda"))


@pytest.fixture(scope="module")
def bulk_ops(cuda_ops):
    """A cuda TensorOps that plans the bulk-copy GEMV on any Hopper (the bandwidth rule
    left out), so that its tests run on every Hopper; skips before Hopper."""
    TensorOps.use_bulk_linear = "always"
    try:
        ops = TensorOps(cuda_ops.device)
    finally:
        TensorOps.use_bulk_linear = True
    if ops._linear_bulk is None:
        pytest.skip("the bulk-copy GEMV needs compute capability 9.0+")
    return ops


# (K, [N0, N1, N2], grid): chunks of 3280 bytes (5 a row: a partial last pass of the
# block's threads), 16 bytes (K = 8: one vector a row), whole 8192-byte slots, with
# empty projections, blocks owning several rows (grid < N) and blocks owning none.
BULK_DIRECT = [(8200, [5, 0, 7], 3), (8, [9, 4, 0], 2), (4096, [33, 1, 2], 40), (12288, [70], 16), (1024, [3], 8)]


@pytest.mark.gpu
@pytest.mark.parametrize("threads", sorted(tk.BULK_BY_THREADS))
@pytest.mark.parametrize("out_dtype", ["f32", "bf16"])
@pytest.mark.parametrize("k,ns,grid", BULK_DIRECT, ids=[f"K{k}xN{'+'.join(map(str, ns))}-grid{g}" for k, ns, g in BULK_DIRECT])
def test_the_bulk_kernel_matches_the_reference(bulk_ops, k, ns, grid, out_dtype, threads):
    cuda_ops = bulk_ops
    rng = np.random.default_rng(k + sum(ns))
    x = rand_bf16(rng, (1, k))
    ws = [rand_bf16(rng, (max(n, 1), k), 0.05) for n in ns]
    dt = np.dtype(np.float32) if out_dtype == "f32" else np.dtype(bfloat16)
    s = cuda_ops.stream
    tensors = [cuda_ops.upload(a) for a in (x, *ws)]
    y = cuda_ops.device.allocate(sum(ns) * dt.itemsize + 64)
    try:
        s.fill(y, pattern=0xFF)  # NaN in every slot the kernel misses
        n3 = list(ns) + [0] * (3 - len(ns))
        views = [t.view for t in tensors] + [tensors[1].view] * (4 - len(tensors))
        scalars = tuple(np.uint32(v) for v in (k, *n3, dt == np.float32, tk.linear_bulk_chunk(k)))
        s.dispatch(tk.BULK_BY_THREADS[threads], grid, [*views[:4], y], block=threads, scalars=scalars)
        got = s.download(y).view(dt)[: sum(ns)]
    finally:
        for t in tensors:
            t.close()
        y.close()
    start = 0
    for w, n in zip(ws, ns):
        ref, mag = reference(x, w[:n])
        part = got[start : start + n]
        (check_f32 if out_dtype == "f32" else check_bf16)(part, ref, *(() if out_dtype == "bf16" else (mag,)))
        start += n


@pytest.mark.gpu
@pytest.mark.parametrize("k,n", [(16384, 4096), (12288, 6144), (16384, 8192)],
                         ids=["K16384xN4096", "K12288xN6144", "K16384xN8192"])
def test_bulk_and_warp_kernels_agree_through_the_op(bulk_ops, k, n):
    """The same call through the plan's bulk kernel (of the block size it plans) and,
    with it switched off, the warp-per-row kernel: both within the F32 bound of the
    float64 reference."""
    cuda_ops = bulk_ops
    threads = tk.linear_bulk_launch(k, n, cuda_ops._sms)[1]
    assert cuda_ops._linear_geometry(k, [n], np.dtype(np.float32))[0] is tk.BULK_BY_THREADS[threads]
    agrees_with_the_choice_off(cuda_ops, "use_bulk_linear", k, n, k * n)


def agrees_with_the_choice_off(cuda_ops, switch, k, n, seed):
    """A K x N linear through the plan of ``cuda_ops`` and through a TensorOps made with
    the plan's choice ``switch`` (a class attribute) off: both within the F32 bound of
    the float64 reference, eager, and the plan's also recorded."""
    setattr(TensorOps, switch, False)
    try:
        other = TensorOps(cuda_ops.device)
    finally:
        setattr(TensorOps, switch, True)
    rng = np.random.default_rng(seed)
    x = rand_bf16(rng, (1, k))
    w = (rng.standard_normal((n, k), dtype=np.float32) * 0.02).astype(bfloat16)
    ref, mag = reference(x, w)
    with cuda_ops.upload(x) as xt, cuda_ops.upload(w) as wt:
        for o in (cuda_ops, other):
            with o.linear(xt, wt, out_dtype="f32") as y:
                check_f32(y.numpy()[0], ref, mag)
        g = cuda_ops.stream.access_graph()  # recorded: the same plan
        out = cuda_ops.record_linear(g, xt, wt, out_dtype="f32")
        g.launch()
        check_f32(out.numpy()[0], ref, mag)
        out.close()
        g.close()


def test_recorded_bulk_linears_run_one_after_another(dev, monkeypatch):
    """Persistent bulk GEMVs recorded into one graph are chained (each fills the GPU);
    other linears stay independent branches. The plan's choice is forced here on any
    engine (the host runs the same numerics for either kernel)."""
    monkeypatch.setattr(tk, "LINEAR_BULK_MIN_K", 64)
    monkeypatch.setattr(tk, "LINEAR_BULK_MIN_N", 8)
    monkeypatch.setattr(tk, "LINEAR_BULK_SMALL_MIN_K", 64)  # N = 24: 128 threads, 16 and 8: 256
    monkeypatch.setattr(tk, "LINEAR_BULK_SMALL_MIN_N", 20)
    if dev.info.engine == "amdgpu":
        pytest.skip("the bulk-copy GEMV is Hopper PTX: gfx1151 has no build of it")
    TensorOps.use_bulk_linear = "always"  # any Hopper, whatever its memory
    try:
        ops = TensorOps(dev)
    finally:
        TensorOps.use_bulk_linear = True
    if ops._linear_bulk is None:
        if dev.info.engine == "cuda":
            pytest.skip("the bulk-copy GEMV needs compute capability 9.0+")
        ops._linear_bulk, ops._sms = tk.LINEAR_BULK, 2
    rng = np.random.default_rng(5)
    x = rand_bf16(rng, (1, 64))
    ws = [rand_bf16(rng, (n, 64), 0.05) for n in (24, 16, 4, 8)]  # N = 4: the warp kernel
    with ops.upload(x) as xt:
        wts = [ops.upload(w) for w in ws]
        g = ops.stream.access_graph()
        outs = [ops.record_linear(g, xt, wt, out_dtype="f32") for wt in wts]
        kinds = [n.params["executable"].name for n in g.nodes]
        warp = ops._linear_geometry(64, [4], np.dtype(np.float32))[0]  # the warp kernel (cuda: at its budget)
        assert warp.name not in (tk.LINEAR_BULK.name, tk.LINEAR_BULK_T256.name)
        assert kinds == [tk.LINEAR_BULK.name, tk.LINEAR_BULK_T256.name, warp.name, tk.LINEAR_BULK_T256.name]
        assert [n.deps for n in g.nodes] == [(), (0,), (), (1,)]
        g.launch()
        for w, o in zip(ws, outs):
            check_f32(o.numpy()[0], *reference(x, w))
            o.close()
        g.close()
        for wt in wts:
            wt.close()


@pytest.mark.gpu
@pytest.mark.parametrize("k,n", [(k, n) for k, n, _ in SPLITS if n >= 64],
                         ids=[f"K{k}xN{n}" for k, n, _ in SPLITS if n >= 64])
def test_budget_and_generic_kernels_agree_through_the_op(cuda_ops, k, n):
    """The same call through the plan (hrx_tensor_linear_b8 where it picks eight blocks
    an SM) and with the budget switched off: both within the F32 bound of the float64
    reference, eager and recorded."""
    if cuda_ops._linear_b8 is None:
        pytest.skip("no multiprocessor count: the plan keeps one budget")
    agrees_with_the_choice_off(cuda_ops, "use_budget_linear", k, n, k + 7 * n)
