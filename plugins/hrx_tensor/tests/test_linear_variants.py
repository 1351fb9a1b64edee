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
        grid, block, scalars = ops._linear_geometry(k, [n], np.dtype(np.float32))
        assert int(scalars[-1]) == ks and (grid, block) == tk.linear_launch(k, n)[:2]


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
