"""Each GPT-2 kernel on its own, against numpy formulas written here (float64).

These localize a failure on an engine to one kernel: the decoder tests below only
say that the logits or tokens differ.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")
from hrx_models.gpt2 import kernels as K
from hrx_models.gpt2.attention_streamed import ATTENTION_STREAMED
from ml_dtypes import bfloat16

BF16_ULP = 2.0**-8  # one BF16 ulp relative to the value (8 significant bits)


def bf16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(bfloat16)


def f64(a):
    return np.asarray(a).astype(np.float64)


def layer_norm(x, g, b, eps):
    x = f64(x)
    return (x - x.mean()) / np.sqrt(x.var() + eps) * f64(g) + f64(b)


def assert_bf16_close(got, want, what, ulps=2.0, atol=1e-6):
    got, want = f64(got), f64(want)
    tol = ulps * BF16_ULP * np.abs(want) + atol
    bad = np.abs(got - want) > tol
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.size} elements differ beyond {ulps} BF16 ulps; first at "
        f"{int(np.argmax(bad))}: got {got[bad][0]!r}, want {want[bad][0]!r}"
    )


class Run:
    """Upload arrays, dispatch one kernel, download results."""

    def __init__(self, dev):
        self.dev = dev
        self.s = dev.stream()

    def buf(self, a):
        return self.s.allocate_from(np.ascontiguousarray(a).reshape(-1).view(np.uint8))

    def get(self, b, dtype, shape=None):
        a = self.s.download(b).view(dtype)
        return a if shape is None else a.reshape(shape)


@pytest.mark.parametrize("d", [128, 384, 2048, 2304, 8192])
def test_embed_ln(dev, d):
    rng = np.random.default_rng(d)
    eps = 1e-5
    te, pe = bf16(rng, d), bf16(rng, d)
    g, b = bf16(rng, d, 0.3) + bfloat16(1), bf16(rng, d, 0.3)
    r = Run(dev)
    bufs = [r.buf(te), r.buf(pe), r.buf(g), r.buf(b), r.buf(np.zeros(d, np.float32)), r.buf(np.zeros(d, bfloat16))]
    r.s.dispatch(K.EMBED_LN, 1, bufs, block=K.ln_block(d), scalars=(d, eps))
    want = f64(te) + f64(pe)
    np.testing.assert_allclose(r.get(bufs[4], np.float32), want, rtol=1e-6, atol=1e-7, err_msg="embed_ln: x = te + pe")
    assert_bf16_close(r.get(bufs[5], bfloat16), layer_norm(want, g, b, eps), "embed_ln: xn = LN(x)")


@pytest.mark.parametrize("d", [128, 768, 4096])
def test_residual_ln(dev, d):
    rng = np.random.default_rng(d + 1)
    eps = 1e-5
    x0 = rng.standard_normal(d).astype(np.float32)
    y = rng.standard_normal(d).astype(np.float32)
    bias, g, b = bf16(rng, d), bf16(rng, d, 0.3) + bfloat16(1), bf16(rng, d, 0.3)
    r = Run(dev)
    bufs = [r.buf(x0), r.buf(y), r.buf(bias), r.buf(g), r.buf(b), r.buf(np.zeros(d, bfloat16))]
    r.s.dispatch(K.RESIDUAL_LN, 1, bufs, block=K.ln_block(d), scalars=(d, eps))
    want = f64(x0) + f64(y) + f64(bias)
    np.testing.assert_allclose(r.get(bufs[0], np.float32), want, rtol=1e-6, atol=1e-6, err_msg="residual_ln: x += y + bias")
    assert_bf16_close(r.get(bufs[5], bfloat16), layer_norm(want, g, b, eps), "residual_ln: xn = LN(x)")


@pytest.mark.parametrize("d,heads,p,pos", [(256, 4, 64, 0), (256, 4, 64, 17), (384, 3, 512, 300), (768, 12, 1024, 1023),
                                            (512, 2, 40, 39), (64, 8, 32, 20), (2048, 16, 300, 257),
                                            (256, 16, 64, 40), (512, 16, 700, 650)])
@pytest.mark.parametrize("splits", [1, 3, 16])
@pytest.mark.parametrize("kernel", [K.ATTENTION, ATTENTION_STREAMED], ids=["default", "streamed"])
def test_attention(dev, d, heads, p, pos, splits, kernel):
    """The decode attention with ``splits`` blocks a head: one block attends alone up to
    ATTENTION_MIN_ROWS rows; past it the splits' partials are combined (flash-decoding).
    Launched twice: the per-head counters are back at 0 after each launch, so the second
    launch combines as the first did. Both kernels: the default and the opt-in streamed one."""
    rng = np.random.default_rng(pos + d)
    hd = d // heads
    qkv = rng.standard_normal(3 * d).astype(np.float32)
    bias = bf16(rng, 3 * d, 0.5)
    kc, vc = bf16(rng, (p, d)), bf16(rng, (p, d))
    scale = 1.0 / math.sqrt(hd)
    r = Run(dev)
    part = np.full(heads * splits * (hd + 2), np.nan, np.float32)  # never read before written
    bufs = [r.buf(qkv), r.buf(bias), r.buf(np.array([pos, 1, 0, 0], np.uint32)), r.buf(kc), r.buf(vc),
            r.buf(np.zeros(d, bfloat16)), r.buf(part), r.buf(np.zeros(heads, np.uint32))]
    full = qkv.astype(np.float32) + bias.astype(np.float32)  # the sum is F32 on the device too
    k_new, v_new = full[d : 2 * d].astype(bfloat16), full[2 * d :].astype(bfloat16)
    keys, vals = f64(kc[: pos + 1]), f64(vc[: pos + 1])
    keys[pos], vals[pos] = f64(k_new), f64(v_new)
    q = f64(full[:d]).reshape(heads, hd)
    scores = np.einsum("hi,thi->ht", q, keys.reshape(pos + 1, heads, hd)) * scale
    probs = np.exp(scores - scores.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    want = np.einsum("ht,thi->hi", probs, vals.reshape(pos + 1, heads, hd)).reshape(d)
    outs = []
    for launch in range(2):
        r.s.dispatch(kernel, heads * splits, bufs, block=K.ATTENTION_THREADS, scalars=(d, hd, p, scale, splits))
        got_k, got_v = r.get(bufs[3], bfloat16, (p, d)), r.get(bufs[4], bfloat16, (p, d))
        np.testing.assert_array_equal(got_k[pos].view(np.uint16), k_new.view(np.uint16), err_msg="attention: K row appended at pos")
        np.testing.assert_array_equal(got_v[pos].view(np.uint16), v_new.view(np.uint16), err_msg="attention: V row appended at pos")
        np.testing.assert_array_equal(got_k[:pos].view(np.uint16), kc[:pos].view(np.uint16), err_msg="attention: earlier K rows changed")
        np.testing.assert_array_equal(r.get(bufs[7], np.uint32), 0, err_msg=f"attention: counters not reset (launch {launch})")
        out = r.get(bufs[5], bfloat16)
        assert_bf16_close(out, want, f"attention: out (pos {pos}, {heads} heads of {hd}, {splits} splits, launch {launch})",
                          ulps=2.0, atol=1e-3)
        outs.append(out.view(np.uint16).copy())
    np.testing.assert_array_equal(outs[1], outs[0], err_msg="attention: a second launch differs (deterministic combine)")
    _, active = K.attention_split_rows(pos, splits)
    used = r.get(bufs[6], np.float32, (heads, splits, hd + 2))
    if active > 1:  # the partials were written, and only by the splits that attend
        assert np.isfinite(used[:, :active]).all() and np.isnan(used[:, active:]).all()
    else:
        assert np.isnan(used).all(), "attention: one block per head wrote partials"


def test_attention_splits_plan():
    """The plan: one block a head for short contexts, more for long ones, bounded."""
    assert K.attention_splits(128, 12) == 1
    assert K.attention_splits(1024, 12) == 8
    assert K.attention_splits(8192, 4) == K.ATTENTION_MAX_SPLITS
    assert K.attention_splits(8192, 64) == K.ATTENTION_TARGET_BLOCKS // 64
    assert K.attention_splits(8192, 512) == 1
    for pos in (0, 127, 128, 500, 1023):
        for splits in (1, 2, 8, 16):
            rows, active = K.attention_split_rows(pos, splits)
            assert rows >= K.ATTENTION_MIN_ROWS and 1 <= active <= splits
            assert (active - 1) * rows < pos + 1 <= active * rows


def test_bias_gelu(dev):
    rng = np.random.default_rng(5)
    n = 1000
    y = (rng.standard_normal(n) * 3).astype(np.float32)
    bias = bf16(rng, n)
    r = Run(dev)
    bufs = [r.buf(y), r.buf(bias), r.buf(np.zeros(n, bfloat16))]
    r.s.dispatch(K.BIAS_GELU, -(-n // K.GELU_THREADS), bufs, block=K.GELU_THREADS, scalars=(n,))
    v = f64(y) + f64(bias)
    want = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    assert_bf16_close(r.get(bufs[2], bfloat16), want, "bias_gelu: gelu_new(y + bias)", atol=1e-5)


@pytest.mark.parametrize("n_prompt,expect_write", [(3, True), (9, False)])
def test_argmax(dev, n_prompt, expect_write):
    rng = np.random.default_rng(7)
    v, p, pos = 50257, 64, 5
    logits = rng.standard_normal(v).astype(np.float32)
    logits[[40000, 1234, 50256]] = 9.0  # a three-way tie: the lowest index wins
    seq = np.full(p, -1, np.int32)
    seq[pos + 1] = 77 if not expect_write else -1  # a prompt token stays
    r = Run(dev)
    bufs = [r.buf(logits), r.buf(np.array([pos, n_prompt, 0, 0], np.uint32)), r.buf(seq), r.buf(np.zeros(2, np.int64))]
    r.s.dispatch(K.ARGMAX, 1, bufs, block=K.ARGMAX_THREADS, scalars=(v, p))
    state, got, idx = r.get(bufs[1], np.uint32), r.get(bufs[2], np.int32), r.get(bufs[3], np.int64)
    assert state[0] == pos + 1, f"argmax: position not advanced ({state[0]})"
    want = seq.copy()
    if expect_write:
        want[pos + 1] = 1234
    np.testing.assert_array_equal(got, want, err_msg="argmax: seq[pos+1] = lowest index of the max (only past the prompt)")
    assert list(idx) == [want[pos + 1], pos + 1], f"argmax: next embedding indices {list(idx)}"


def test_advance(dev):
    r = Run(dev)
    seq = np.arange(100, 116, dtype=np.int32)
    state, idx = r.buf(np.array([6, 3, 0, 0], np.uint32)), r.buf(np.zeros(2, np.int64))
    bufs = [state, r.buf(seq), idx]
    r.s.dispatch(K.ADVANCE, 1, bufs, block=32, scalars=(16,))
    assert list(r.get(state, np.uint32)) == [7, 3, 0, 0]
    assert list(r.get(idx, np.int64)) == [107, 7]
    r.s.upload(state, np.array([15, 3, 0, 0], np.uint32))
    r.s.dispatch(K.ADVANCE, 1, bufs, block=32, scalars=(16,))
    assert list(r.get(idx, np.int64)) == [115, 15], "advance past the last position clamps the indices"
