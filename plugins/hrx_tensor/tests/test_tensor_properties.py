"""Property tests: random shapes and values for linear, linear_many and gather_rows.

HRX_TENSOR_EXAMPLES sets the number of examples per test (default 300).
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ml_dtypes import bfloat16

from test_tensor_ops import check_bf16, check_f32, reference

EXAMPLES = int(os.environ.get("HRX_TENSOR_EXAMPLES", "300"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@SETTINGS
@given(
    k=st.sampled_from([128, 256, 384, 640, 1024]),
    ns=st.lists(st.integers(1, 96), min_size=1, max_size=3),
    out_dtype=st.sampled_from(["f32", "bf16"]),
    scale=st.sampled_from([1e-3, 0.05, 1.0, 30.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_linear_many_random(ops, k, ns, out_dtype, scale, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((1, k)) * scale).astype(bfloat16)
    ws = [(rng.standard_normal((n, k)) * 0.05).astype(bfloat16) for n in ns]
    tx = ops.upload(x)
    tws = [ops.upload(w) for w in ws]
    ys = ops.linear_many(tx, tws, out_dtype=out_dtype)
    try:
        for y, w, n in zip(ys, ws, ns):
            assert y.shape == (1, n)
            got = y.numpy()[0]
            ref, mag = reference(x, w)
            if out_dtype == "f32":
                check_f32(got, ref, mag)
            else:
                check_bf16(got, ref, mag)
    finally:
        for t in (*ys, *tws, tx):
            t.close()


DTYPES = [np.int8, np.uint16, np.float32, np.float64, bfloat16, np.int64]


@SETTINGS
@given(
    dtype=st.sampled_from(DTYPES),
    rows=st.integers(1, 50),
    cols=st.lists(st.integers(1, 7), min_size=0, max_size=2),
    picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=40),
    seed=st.integers(0, 2**32 - 1),
)
def test_gather_rows_random(gops, dtype, rows, cols, picks, seed):
    rng = np.random.default_rng(seed)
    shape = (rows, *cols)
    raw = rng.integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    table = raw.view(dtype).reshape(shape)  # arbitrary bit patterns: NaN payloads included
    idx = np.array([p % rows for p in picks])
    with gops.upload(table) as t, gops.gather_rows(t, idx) as out:
        got = out.numpy()
    assert got.shape == (len(idx), *cols)
    assert got.tobytes() == np.take(table, idx, axis=0).tobytes()
