"""Batched prefill: its kernels against numpy formulas written here (float64), and
prefill-then-decode against decode-only, on each engine (cuda: the gpu marker).

The kernel tests also prove the row masking: rows past the chunk's ``m`` (read from
the device-side state) and columns past N keep the sentinel they were filled with.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")
from hrx_models.gpt2 import Gpt2Decoder
from hrx_models.gpt2 import prefill_kernels as PK
from hrx_models.gpt2.decoder import PREFILL_SMALL_CHUNK
from hrx_models.gpt2.testing import check_greedy, check_logits
from ml_dtypes import bfloat16

from hrx_core.errors import InvalidArgument

SENTINEL = -7.0


def bf16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(bfloat16)


def f64(a):
    return np.asarray(a).astype(np.float64)


def state(pos, n_prompt):
    return np.array([pos, n_prompt, 0, 0], np.uint32)


class Run:
    def __init__(self, dev):
        self.s = dev.stream()

    def buf(self, a):
        return self.s.allocate_from(np.ascontiguousarray(a).reshape(-1).view(np.uint8))

    def get(self, b, dtype, shape):
        return self.s.download(b).view(dtype).reshape(shape)


# (K, N, chunk C, pos, n_prompt): m = min(C, n_prompt - 1 - pos) rows. GPT-2 small and
# XL projection shapes at full chunks, partial tiles in both dimensions, K = 8 and 200
# (one and 25 16-byte vectors: tails of the 32-wide k stage), m = 0.
GEMM_CASES = [
    (768, 2304, 256, 0, 1024), (3072, 768, 256, 256, 1024), (1600, 4800, 128, 0, 100), (6400, 1600, 64, 3, 60),
    (200, 72, 64, 0, 6), (8, 3, 16, 2, 12), (128, 96, 32, 5, 6),
]


GEMMS = [None, *PK.GEMM_TILINGS]


def tensor_cores(dev) -> bool:
    from hrx_models.gpt2.decoder import StepKernels

    return StepKernels.for_device(dev.info).tensor_cores


@pytest.mark.parametrize("tiles", GEMMS, ids=["gemm"] + [t.name for t in PK.GEMM_TILINGS])
@pytest.mark.parametrize("k,n,c,pos,n_prompt", GEMM_CASES, ids=[f"K{c[0]}xN{c[1]}xC{c[2]}" for c in GEMM_CASES])
def test_gemm(dev, tiles, k, n, c, pos, n_prompt):
    """The portable GEMM, and each tensor-core tiling (CUDA sm_80+; the host mirror
    elsewhere is the same function)."""
    if tiles is not None and dev.info.engine != "host" and not tensor_cores(dev):
        pytest.skip(f"{dev.name}: the tiled GEMMs need CUDA sm_80+")
    kernel, grid, block = ((PK.GEMM, (-(-n // PK.GEMM_BN), -(-c // PK.GEMM_BM)), PK.GEMM_THREADS) if tiles is None
                           else (PK.GEMM_TILED[tiles], tiles.grid(n, c), tiles.threads))
    rng = np.random.default_rng(k + n)
    m = max(0, min(c, n_prompt - 1 - pos))
    a, w = bf16(rng, (c, k)), bf16(rng, (n, k), 0.05)
    r = Run(dev)
    y = r.buf(np.full((c, n), SENTINEL, np.float32))
    r.s.dispatch(kernel, grid, [r.buf(a), r.buf(w), r.buf(state(pos, n_prompt)), y], block=block, scalars=(k, n, c))
    got = f64(r.get(y, np.float32, (c, n)))
    want = f64(a[:m]) @ f64(w).T
    mag = np.abs(f64(a[:m])) @ np.abs(f64(w)).T  # F32 accumulation: relative to the sum of |terms|
    err = np.abs(got[:m] - want)
    assert (err <= 1e-5 * mag + 1e-6).all(), f"gemm: rows < {m} differ by up to {err.max():.3g}"
    assert (got[m:] == SENTINEL).all(), "gemm wrote rows past the chunk's m"


@pytest.mark.parametrize("tiles", PK.GEMM_TILINGS, ids=[t.name for t in PK.GEMM_TILINGS])
@pytest.mark.parametrize("k,n,c,pos,n_prompt", GEMM_CASES, ids=[f"K{c[0]}xN{c[1]}xC{c[2]}" for c in GEMM_CASES])
def test_gemm_gelu(dev, tiles, k, n, c, pos, n_prompt):
    """Each tiling with bias_gelu_rows as its epilogue: BF16 gelu_new(a @ w.T + bias),
    against float64 (BF16 rounding of the output plus the GEMM's F32 accumulation)."""
    if dev.info.engine != "host" and not tensor_cores(dev):
        pytest.skip(f"{dev.name}: the tiled GEMMs need CUDA sm_80+")
    rng = np.random.default_rng(k + n + 1)
    m = max(0, min(c, n_prompt - 1 - pos))
    a, w, bias = bf16(rng, (c, k)), bf16(rng, (n, k), 0.05), bf16(rng, (n,), 0.5)
    r = Run(dev)
    out = r.buf(np.full((c, n), SENTINEL, bfloat16))
    r.s.dispatch(PK.GEMM_GELU_TILED[tiles], tiles.grid(n, c), [r.buf(a), r.buf(w), r.buf(state(pos, n_prompt)),
                                                              r.buf(bias), out],
                 block=tiles.threads, scalars=(k, n, c))
    got = f64(r.get(out, bfloat16, (c, n)))
    v = f64(a[:m]) @ f64(w).T + f64(bias)
    want = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    mag = np.abs(f64(a[:m])) @ np.abs(f64(w)).T + np.abs(f64(bias))
    err = np.abs(got[:m] - want)
    # BF16 output (2^-8 of the value) after an F32 sum (relative to the sum of |terms|);
    # gelu_new's slope is at most about 1.13
    assert (err <= np.abs(want) * 2.0**-8 + 1.2e-5 * mag + 1e-6).all(), f"gemm_gelu: rows < {m} differ by up to {err.max():.3g}"
    assert (got[m:] == SENTINEL).all(), "gemm_gelu wrote rows past the chunk's m"


# The tiling rule (gemm_tiles_for) at the measured projection shapes: GPT-2 small and
# the 1.3B shape at chunks of 128 and 1024 rows.
TILE_CHOICES = [
    (1024, 2048, 8192, PK.GEMM_LARGE), (1024, 2048, 6144, PK.GEMM_MEDIUM), (1024, 2048, 2048, PK.GEMM_MEDIUM),
    (1024, 8192, 2048, PK.GEMM_MEDIUM), (1024, 768, 3072, PK.GEMM_MEDIUM), (1024, 768, 2304, PK.GEMM_SMALL),
    (1024, 3072, 768, PK.GEMM_SMALL), (512, 2048, 8192, PK.GEMM_MEDIUM), (128, 2048, 8192, PK.GEMM_SMALL),
    (128, 768, 2304, PK.GEMM_SMALL),
]


@pytest.mark.parametrize("rows,k,n,want", TILE_CHOICES)
def test_gemm_tiles_for(rows, k, n, want):
    assert PK.gemm_tiles_for(rows, k, n) == want
    assert want.shared_bytes <= 48 * 1024 and want in PK.GEMM_TILED and want in PK.GEMM_GELU_TILED


# (n_embd, head_dim, context P, chunk C, pos, n_prompt): m = min(C, n_prompt - 1 - pos) rows
# in blocks of 8 (the last partial); keys in one 32-row tile or several; head dims 8..256.
# The tensor-core kernel's cases (head dims 64 and 128): rows in warps of 16 and blocks of
# 2 or 4 warps (the last partial, a warp without rows), keys in one 64-row tile or several
# (a diagonal tile in the middle of a warp), m = 1.
ATTN_CASES = [(256, 64, 48, 16, 20, 31), (128, 16, 100, 16, 70, 90), (512, 128, 160, 32, 100, 125),
              (200, 8, 40, 8, 0, 40), (512, 256, 80, 64, 33, 80)]
ATTN_MMA_CASES = [(256, 64, 48, 16, 20, 31), (512, 128, 160, 32, 100, 125), (768, 64, 300, 128, 150, 290),
                  (1024, 128, 200, 48, 90, 130), (384, 64, 140, 64, 0, 140), (256, 128, 70, 32, 68, 70),
                  (256, 64, 520, 96, 400, 520)]
KERNELS = [("scalar", a) for a in ATTN_CASES] + [("mma", a) for a in ATTN_MMA_CASES]


def attention_rows_launch(dev, kernel, d, hd, c):
    """(kernel, grid, block) of the scalar or the tensor-core attention_rows kernel; the
    tensor-core one needs CUDA sm_80+ (the decoder's rule, StepKernels.for_device)."""
    if kernel == "scalar":
        return PK.ATTENTION_ROWS, (d // hd, -(-c // PK.ATTENTION_ROWS_PER_BLOCK)), 256
    if dev.info.engine != "host" and not tensor_cores(dev):
        pytest.skip(f"{dev.name} has no BF16 tensor cores the kernel uses (CUDA sm_80+)")
    warps = PK.attention_mma_warps(d // hd, c)
    return PK.ATTENTION_ROWS_MMA[hd], (d // hd, -(-c // (16 * warps))), 32 * warps


@pytest.mark.parametrize("kernel,case", KERNELS, ids=[f"{k}-hd{a[1]}-C{a[3]}-pos{a[4]}" for k, a in KERNELS])
def test_kv_and_attention_rows(dev, kernel, case):
    """The chunk's K/V rows land in the cache at rows pos.. with the bias; each row r
    attends causally over cache rows 0 .. pos + r (rows before pos written earlier)."""
    d, hd, p, c, pos, n_prompt = case
    attention, grid, block = attention_rows_launch(dev, kernel, d, hd, c)
    rng = np.random.default_rng(4)
    m = min(c, n_prompt - 1 - pos)
    qkv = rng.standard_normal((c, 3 * d)).astype(np.float32)
    bias = bf16(rng, 3 * d, 0.1)
    kc0, vc0 = bf16(rng, (p, d)), bf16(rng, (p, d))
    scale = 1.0 / math.sqrt(hd)
    r = Run(dev)
    bufs = [r.buf(qkv), r.buf(bias), r.buf(state(pos, n_prompt)), r.buf(kc0), r.buf(vc0)]
    out = r.buf(np.zeros((c, d), bfloat16))
    r.s.dispatch(PK.KV_ROWS, c, bufs, block=256, scalars=(d, p, c))
    r.s.dispatch(attention, grid, [*bufs, out], block=block, scalars=(d, hd, p, scale, c))
    kc, vc = f64(r.get(bufs[3], bfloat16, (p, d))), f64(r.get(bufs[4], bfloat16, (p, d)))
    full = f64(qkv) + f64(bias)
    want_k, want_v = f64(kc0), f64(vc0)
    want_k[pos : pos + m] = f64(full[:m, d : 2 * d].astype(bfloat16))
    want_v[pos : pos + m] = f64(full[:m, 2 * d :].astype(bfloat16))
    np.testing.assert_array_equal(kc, want_k, err_msg="kv_rows: K cache")
    np.testing.assert_array_equal(vc, want_v, err_msg="kv_rows: V cache")
    got = f64(r.get(out, bfloat16, (c, d)))
    for row in range(m):
        t = pos + row + 1
        for h in range(d // hd):
            cols = slice(h * hd, (h + 1) * hd)
            s = want_k[:t, cols] @ full[row, cols] * scale
            prob = np.exp(s - s.max())
            want = prob @ want_v[:t, cols] / prob.sum()
            if kernel == "scalar":  # F32 throughout: the output's BF16 rounding
                np.testing.assert_allclose(got[row, cols], want, rtol=2 * 2.0**-8, atol=1e-3,
                                           err_msg=f"attention_rows: row {row}, head {h}")
                continue
            # tensor cores: queries and probabilities in BF16 too; a score moves by up to
            # 2^-8 of the sum of its |terms|, which moves each probability by that much
            # relatively, and a probability's own rounding by 2^-8: both bounded relative to
            # the probability-weighted |V|
            moved = 2.0**-8 * (np.abs(want_k[:t, cols]) @ np.abs(full[row, cols])).max() * scale
            weighted = prob @ np.abs(want_v[:t, cols]) / prob.sum()
            bound = 2 * 2.0**-8 * np.abs(want) + 2 * (moved + 2.0**-8) * weighted + 1e-5
            err = np.abs(got[row, cols] - want)
            assert (err <= bound).all(), f"attention_rows: row {row}, head {h}: error {err.max():.3g} (bound {bound[err.argmax()]:.3g})"
    assert (got[m:] == 0).all(), "attention_rows wrote rows past the chunk's m"


def test_advance_rows_moves_the_position_and_the_embedding_indices(dev):
    r = Run(dev)
    seq = np.arange(100, 140, dtype=np.int32)
    st, sq, idx = r.buf(state(3, 30)), r.buf(seq), r.buf(np.zeros(2, np.int64))
    for want_pos in (19, 29, 29):  # chunks of 16: 3 -> 19 -> 29 (n_prompt - 1), then nothing left
        r.s.dispatch(PK.ADVANCE_ROWS, 1, [st, sq, idx], block=32, scalars=(40, 16))
        assert r.get(st, np.uint32, (4,))[0] == want_pos
        assert r.get(idx, np.int64, (2,)).tolist() == [int(seq[want_pos]), want_pos]


PROMPTS = [[7], [3, 9], list(range(1, 17)), list(range(5, 22)), [(i * 37) % 512 for i in range(41)],
           [(i * 11 + 3) % 512 for i in range(100)]]


@pytest.fixture(scope="module")
def decoders(dev, tiny_dir):
    """The same checkpoint with chunks of 16 rows (prompts of several chunks and partial
    ones) and with prefill one position per step (decode-only)."""
    batched = Gpt2Decoder.load(tiny_dir, dev, prefill_chunk=16)
    steps = Gpt2Decoder.load(tiny_dir, dev, prefill_chunk=0)
    yield batched, steps
    batched.close()
    steps.close()


@pytest.mark.parametrize("prompt", PROMPTS, ids=[f"{len(p)}-token" for p in PROMPTS])
def test_prefill_then_decode_equals_decode_only(decoders, reference, prompt):
    batched, steps = decoders
    with batched.slot() as a, steps.slot() as b:
        assert a.chunk == 16 and a.chunk_graph is not None and b.chunk_graph is None
        launches = a.chunk_graph.launches
        for s in (a, b):
            s.start(prompt)
            s.prefill()
            s.step()
        assert a.chunk_graph.launches - launches == -(-(len(prompt) - 1) // 16)
        assert a.position == b.position == len(prompt)
        check_logits(a.logits(), b.logits(), "first token's logits, batched prefill vs decode-only")
        # the prompt's KV cache rows: within BF16 tolerance (four ulps of the largest value;
        # the second layer's rows carry the first's accumulation-order differences)
        for name in ("k0", "v0", "k1", "v1"):
            ka = a.stream.download(a.layout.view(a.buffer, name)).view(bfloat16)[: len(prompt) * 128].astype(np.float64)
            kb = b.stream.download(b.layout.view(b.buffer, name)).view(bfloat16)[: len(prompt) * 128].astype(np.float64)
            np.testing.assert_allclose(ka, kb, rtol=0, atol=4 * 2.0**-8 * np.abs(kb).max(), err_msg=f"cache {name}")
    got, want = batched.generate(prompt, 16).tokens, steps.generate(prompt, 16).tokens
    if batched.device.info.engine == "host":
        assert got == want
    check_greedy(reference, prompt, got, want)


def test_prefill_chunk_is_validated(dev, tiny_dir):
    for bad in (-1, 1.5, True, "16"):
        with pytest.raises(InvalidArgument, match="prefill_chunk"):
            Gpt2Decoder.load(tiny_dir, dev, prefill_chunk=bad)


@pytest.mark.parametrize("n_head", [4, 2], ids=["hd64", "hd128"])
def test_wide_head_prefill_matches_the_reference(dev, tmp_path, n_head):
    """Head dimensions 64 and 128 (GPT-2's and the 1.3B shape's): on CUDA sm_80+ the
    prefill attention runs on tensor cores. A 300-token prompt in chunks of 128 rows
    (queries in several 64-key tiles, a partial last chunk): the first token's logits
    against the numpy reference and decode-only, then 8 greedy tokens. Chunks of 256 rows:
    the 300-token prompt takes one launch of the 256-row graph and one of the small
    (PREFILL_SMALL_CHUNK) graph for its last 43 positions, a 100-token prompt the small
    graph alone."""
    from hrx_models.gpt2 import Gpt2Config, write_random_checkpoint
    from hrx_models.gpt2.reference import NumpyGpt2

    config = Gpt2Config(n_embd=256, n_layer=2, n_head=n_head, n_positions=320, vocab_size=512)
    ckpt = write_random_checkpoint(tmp_path / "wide", config, seed=3, std=0.1)
    reference = NumpyGpt2(ckpt)
    prompt = [(i * 37 + 5) % 512 for i in range(300)]
    batched = Gpt2Decoder.load(ckpt, dev, prefill_chunk=256)
    steps = Gpt2Decoder.load(ckpt, dev, prefill_chunk=0)
    try:
        with batched.slot() as a, steps.slot() as b:
            assert PREFILL_SMALL_CHUNK < 256 and a.small_chunk_graph is not None and b.small_chunk_graph is None
            for p, large, small in ((prompt, 1, 1), (prompt[:100], 0, 1)):
                before = (a.chunk_graph.launches, a.small_chunk_graph.launches)
                for s in (a, b):
                    s.start(p)
                    s.prefill()
                    s.step()
                assert (a.chunk_graph.launches - before[0], a.small_chunk_graph.launches - before[1]) == (large, small)
                want = reference.logits(p)[-1]
                check_logits(a.logits(), want, f"first token's logits, batched prefill of {len(p)} vs the numpy reference")
                check_logits(a.logits(), b.logits(), f"first token's logits, batched prefill of {len(p)} vs decode-only")
        got = batched.generate(prompt, 8).tokens
        check_greedy(reference, prompt, got, steps.generate(prompt, 8).tokens)
    finally:
        batched.close()
        steps.close()
