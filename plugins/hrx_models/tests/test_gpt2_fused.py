"""The fused decode step: its kernels against numpy formulas written here (float64),
and the fused decoder against the step of separate kernels, on each engine (cuda: the
gpu marker)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")
from hrx_models.gpt2 import Gpt2Decoder
from hrx_models.gpt2 import fused_kernels as FK
from hrx_models.gpt2.testing import check_greedy, check_logits, step_logits
from hrx_tensor.kernels import linear_launch
from ml_dtypes import bfloat16

from hrx_core.errors import InvalidArgument

BF16_ULP = 2.0**-8


def bf16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(bfloat16)


def f64(a):
    return np.asarray(a).astype(np.float64)


class Run:
    def __init__(self, dev):
        self.s = dev.stream()

    def buf(self, a):
        return self.s.allocate_from(np.ascontiguousarray(a).reshape(-1).view(np.uint8))

    def get(self, b, dtype):
        return self.s.download(b).view(dtype)


def gelu_new(v):
    return 0.5 * v * (1.0 + np.tanh(0.7978845608028654 * (v + 0.044715 * v**3)))


# (K, N): GPT-2 small's QKV, fc and logits widths, XL's 1600, K = 200 (a tail), and
# shapes whose split of K over warps is 1, 2, 4 and 8
LN_CASES = [(768, 2304), (768, 3072), (1600, 300), (200, 72), (2048, 40), (4096, 64), (8192, 33), (768, 50257)]


def budget_kernel(dev, kernel, blocks, width=None, head_dim=None):
    """``kernel`` as the decoder dispatches it at register budget ``blocks`` (None: as
    given); the budgets change only CUDA code, so they run on cuda alone."""
    if blocks is None:
        return kernel
    if dev.info.engine != "cuda":
        pytest.skip("register budgets specialize CUDA code only (the host mirror is the base kernel's)")
    return FK.specialize(kernel, blocks=blocks, width=width, head_dim=head_dim)


BUDGETS = [None, *FK.FUSED_GEMV_BUDGETS]
BUDGET_IDS = ["generic", *(f"b{b}" for b in FK.FUSED_GEMV_BUDGETS)]


@pytest.mark.parametrize("blocks", BUDGETS, ids=BUDGET_IDS)
@pytest.mark.parametrize("gelu", [0, 1], ids=["y", "gelu"])
@pytest.mark.parametrize("k,n", LN_CASES, ids=[f"K{k}xN{n}-split{linear_launch(k, n)[2]}" for k, n in LN_CASES])
def test_ln_linear(dev, k, n, gelu, blocks):
    rng = np.random.default_rng(k * 3 + n)
    eps = np.float32(1e-5)
    x = (rng.standard_normal(k) * 2 + 0.5).astype(np.float32)
    g, b = bf16(rng, k, 0.3) + bfloat16(1), bf16(rng, k, 0.3)
    w, bias = bf16(rng, (n, k), 0.05), bf16(rng, n, 0.5)
    r = Run(dev)
    y, act = r.buf(np.zeros(n, np.float32)), r.buf(np.zeros(n, bfloat16))
    grid, block, ks = linear_launch(k, n)
    kernel = budget_kernel(dev, FK.LN_LINEAR, blocks, k)
    r.s.dispatch(kernel, grid, [r.buf(x), r.buf(g), r.buf(b), r.buf(w), r.buf(bias), y, act], block=block,
                 scalars=(k, n, eps, ks, gelu))
    xd = f64(x)
    # xn as the device rounds it (BF16 of the F32 layer norm), then the float64 GEMV
    xn = ((xd - xd.mean()) / np.sqrt(xd.var() + 1e-5) * f64(g) + f64(b)).astype(np.float32).astype(bfloat16)
    acc, mag = f64(w) @ f64(xn), np.abs(f64(w)) @ np.abs(f64(xn))
    if gelu:
        got = f64(r.get(act, bfloat16))
        want = gelu_new(acc + f64(bias))
        # one BF16 rounding of xn may land on the other side (a few elements an ulp of xn off)
        tol = 2 * BF16_ULP * (np.abs(want) + BF16_ULP * mag) + 1e-4
        assert (np.abs(got - want) <= tol).all(), f"ln_linear gelu: worst {np.max(np.abs(got - want) - tol):.3g} over"
        assert (f64(r.get(y, np.float32)) == 0).all(), "ln_linear wrote y in gelu mode"
    else:
        got = f64(r.get(y, np.float32))
        tol = 2 * BF16_ULP * mag + 1e-5
        assert (np.abs(got - acc) <= tol).all(), f"ln_linear: worst {np.max(np.abs(got - acc) / np.maximum(mag, 1e-9)):.3g}"
        assert (f64(r.get(act, bfloat16)) == 0).all(), "ln_linear wrote act without gelu"


RES_CASES = [(768, 768), (3072, 768), (6400, 1600), (200, 200), (16384, 64)]


@pytest.mark.parametrize("blocks", BUDGETS, ids=BUDGET_IDS)
@pytest.mark.parametrize("k,n", RES_CASES, ids=[f"K{k}xN{n}-split{linear_launch(k, n)[2]}" for k, n in RES_CASES])
def test_linear_residual(dev, k, n, blocks):
    rng = np.random.default_rng(k + 5 * n)
    a, w, bias = bf16(rng, k), bf16(rng, (n, k), 0.05), bf16(rng, n, 0.5)
    x0 = rng.standard_normal(n).astype(np.float32)
    r = Run(dev)
    x = r.buf(x0)
    grid, block, ks = linear_launch(k, n)
    r.s.dispatch(budget_kernel(dev, FK.LINEAR_RESIDUAL, blocks), grid, [r.buf(a), r.buf(w), r.buf(bias), x], block=block,
                 scalars=(k, n, ks))
    got = f64(r.get(x, np.float32))
    want = f64(x0) + f64(w) @ f64(a) + f64(bias)
    mag = np.abs(f64(x0)) + np.abs(f64(w)) @ np.abs(f64(a)) + np.abs(f64(bias))
    assert (np.abs(got - want) <= 1e-5 * mag + 1e-6).all(), "linear_residual: x += a . w + bias"


def test_embed(dev):
    rng = np.random.default_rng(1)
    v, p, d = 50, 20, 1600
    wte, wpe = bf16(rng, (v, d)), bf16(rng, (p, d))
    r = Run(dev)
    x = r.buf(np.zeros(d, np.float32))
    r.s.dispatch(FK.EMBED, -(-d // FK.EMBED_THREADS), [r.buf(wte), r.buf(wpe), r.buf(np.array([37, 11], np.int64)), x],
                 block=FK.EMBED_THREADS, scalars=(d,))
    np.testing.assert_array_equal(r.get(x, np.float32), (f64(wte[37]) + f64(wpe[11])).astype(np.float32))


@pytest.fixture(scope="module")
def pair(dev, tiny_dir):
    fused = Gpt2Decoder.load(tiny_dir, dev, fused=True)
    separate = Gpt2Decoder.load(tiny_dir, dev, fused=False)
    yield fused, separate
    fused.close()
    separate.close()


# (n_embd, n_head): GPT-2 small, the test model, 1.3B (head_dim 128), XL (1600 wide), and a
# width whose QKV GEMV splits K over warps (fewer rows a block)
ATTEND_CASES = [(768, 12), (128, 4), (2048, 16), (1600, 25), (4096, 32)]


@pytest.mark.parametrize("blocks", BUDGETS, ids=BUDGET_IDS)
@pytest.mark.parametrize("d,heads", ATTEND_CASES,
                         ids=[f"D{d}-hd{d // h}-split{linear_launch(d, 3 * d)[2]}" for d, h in ATTEND_CASES])
def test_ln_linear_attend(dev, d, heads, blocks):
    """ln_1 + QKV + attention in one kernel == ln_linear, then the streamed attention with
    one split: the same qkv and cache rows bit for bit, the same output (exactly on the
    host, whose mirror composes the two; within F32 rounding, then one BF16 rounding, on a
    device, whose tail sums in another order), at positions below and past
    ATTENTION_MIN_ROWS, over consecutive launches (the counters go back to 0 each time)."""
    from hrx_models.gpt2 import kernels as K
    from hrx_models.gpt2.attention_streamed import ATTENTION_STREAMED

    rng = np.random.default_rng(d + heads)
    hd, p, eps = d // heads, 200, np.float32(1e-5)
    scale = np.float32(1.0 / np.sqrt(hd))
    g, b = bf16(rng, d, 0.3) + bfloat16(1), bf16(rng, d, 0.3)
    w, bias = bf16(rng, (3 * d, d), 0.05), bf16(rng, 3 * d, 0.5)
    cache = bf16(rng, (2, p, d))
    r = Run(dev)
    wb, gb, bb, biasb = r.buf(w), r.buf(g), r.buf(b), r.buf(bias)
    grid, block, ks = linear_launch(d, 3 * d)
    fused_kernel = budget_kernel(dev, FK.LN_LINEAR_ATTEND, blocks, d, hd)
    ln_kernel = budget_kernel(dev, FK.LN_LINEAR, blocks, d)
    sides = []
    for _ in range(2):
        sides.append({"kc": r.buf(cache[0]), "vc": r.buf(cache[1]), "qkv": r.buf(np.zeros(3 * d, np.float32)),
                      "out": r.buf(np.zeros(d, bfloat16)), "sync": r.buf(np.zeros(heads, np.uint32))})
    part = r.buf(np.zeros(heads * (hd + 2), np.float32))
    for pos in (0, 1, 57, K.ATTENTION_MIN_ROWS - 1, K.ATTENTION_MIN_ROWS, p - 1):
        x = (rng.standard_normal(d) * 2 + 0.5).astype(np.float32)
        xb, state = r.buf(x), r.buf(np.array([pos, 0, 0, 0], np.uint32))
        a, ref = sides
        r.s.dispatch(fused_kernel, grid, [xb, gb, bb, wb, biasb, a["qkv"], state, a["kc"], a["vc"], a["out"], a["sync"]],
                     block=block, scalars=(d, eps, ks, hd, p, scale))
        r.s.dispatch(ln_kernel, grid, [xb, gb, bb, wb, biasb, ref["qkv"], ref["qkv"]], block=block,
                     scalars=(d, 3 * d, eps, ks, 0))
        r.s.dispatch(ATTENTION_STREAMED, heads, [ref["qkv"], biasb, state, ref["kc"], ref["vc"], ref["out"], part,
                                                  ref["sync"]],
                     block=K.ATTENTION_THREADS, scalars=(d, hd, p, scale, 1))
        for name, dtype in (("qkv", np.float32), ("kc", np.uint16), ("vc", np.uint16)):
            got, want = r.get(a[name], dtype), r.get(ref[name], dtype)
            assert np.array_equal(got, want), f"position {pos}: {name} differs at {np.flatnonzero(got != want)[:8]}"
        got, want = f64(r.get(a["out"], bfloat16)), f64(r.get(ref["out"], bfloat16))
        if dev.info.engine == "host":
            assert np.array_equal(got, want), f"position {pos}: the host mirror's output differs"
        else:  # one BF16 ulp apart at most (sums that differ in their last F32 bits round apart)
            tol = BF16_ULP * np.abs(want) + 1e-6
            assert (np.abs(got - want) <= tol).all(), f"position {pos}: out {np.max(np.abs(got - want) - tol):.3g} over"
        assert np.abs(got).max() > 0, f"position {pos}: no output"
        assert not r.get(a["sync"], np.uint32).any(), f"position {pos}: the head counters are not back to 0"
    for side in sides:
        for buf in side.values():
            buf.close()
    r.s.close()


def test_fused_step_has_fewer_kernels(pair, tiny_config, dev, tiny_dir):
    fused, separate = pair
    layers = tiny_config.n_layer
    with fused.slot() as a, separate.slot() as b:
        assert len(a.step_graph.nodes) == 1 + 5 * layers + 2
        assert len(b.step_graph.nodes) == 3 + 8 * layers + 2
        assert a.short_step_graph is None and b.short_step_graph is None  # (short steps: off by default)
    short = Gpt2Decoder.load(tiny_dir, dev, short_steps=True)
    no_short = Gpt2Decoder.load(tiny_dir, dev, short_steps=True, fused=False)  # (no short form of separate kernels)
    try:
        with short.slot() as a, no_short.slot() as b:
            assert len(a.short_step_graph.nodes) == 1 + 4 * layers + 2
            assert b.short_step_graph is None and not no_short.short_steps
    finally:
        short.close()
        no_short.close()


def test_short_steps_equal_the_full_step(dev, tmp_path, tiny_config):
    """The short fused step (attention in the QKV kernel, positions below
    ATTENTION_MIN_ROWS) and the full one: the same logits at every position of a prompt
    that crosses the threshold (exactly on the host; within BF16 tolerance on a device,
    whose tail sums the attention in another order), the same greedy tokens wherever the
    reference is not on a near-tie; each graph replayed where it should be."""
    import attrs
    from hrx_models.gpt2 import kernels as K
    from hrx_models.gpt2 import write_random_checkpoint
    from hrx_models.gpt2.reference import NumpyGpt2

    cfg = attrs.evolve(tiny_config, n_positions=K.ATTENTION_MIN_ROWS + 24)
    path = write_random_checkpoint(tmp_path, cfg, seed=9, std=0.1)  # (the test model's: conftest.py)
    short, full = Gpt2Decoder.load(path, dev, prefill_chunk=0, short_steps=True), Gpt2Decoder.load(path, dev,
                                                                                                    prefill_chunk=0)
    try:
        assert short.short_steps and not full.short_steps
        ids = [int(v) for v in np.random.default_rng(3).integers(0, cfg.vocab_size, K.ATTENTION_MIN_ROWS + 8)]
        with short.slot() as s:
            before = s.short_step_graph.launches, s.step_graph.launches
        got, want = step_logits(short, ids), step_logits(full, ids)
        for t in range(len(ids)):
            if dev.info.engine == "host":
                assert np.array_equal(got[t], want[t]), f"position {t}: short and full steps differ"
            else:
                check_logits(got[t], want[t], f"position {t}: short vs full step")
        with short.slot() as s:
            assert s.short_step_graph.launches - before[0] == K.ATTENTION_MIN_ROWS
            assert s.step_graph.launches - before[1] == len(ids) - K.ATTENTION_MIN_ROWS
        prompt = ids[:20]
        a_tokens, b_tokens = short.generate(prompt, 8).tokens, full.generate(prompt, 8).tokens
        if dev.info.engine == "host":
            assert a_tokens == b_tokens
        check_greedy(NumpyGpt2(path), prompt, a_tokens, b_tokens)
    finally:
        short.close()
        full.close()


def test_short_steps_are_validated(dev, tiny_dir, tiny_config):
    from hrx_models.gpt2.decoder import StepKernels, record_step

    with pytest.raises(InvalidArgument, match="short_steps"):
        Gpt2Decoder.load(tiny_dir, dev, short_steps=1)
    with pytest.raises(ValueError, match="short"):
        record_step(None, StepKernels.for_engine("host"), tiny_config, 16, None, {}, logits=True, short=True)


@pytest.mark.parametrize("prompt", [[1, 2, 3, 4, 5], [7], [100, 200, 300, 400, 500, 13, 17, 19]],
                         ids=["5-token", "1-token", "8-token"])
def test_fused_step_equals_separate_kernels(pair, reference, prompt):
    fused, separate = pair
    ids = prompt + list(range(40, 60))
    got, want = step_logits(fused, ids), step_logits(separate, ids)
    for t in range(len(ids)):
        check_logits(got[t], want[t], f"position {t}: fused vs separate kernels")
    a, b = fused.generate(prompt, 32).tokens, separate.generate(prompt, 32).tokens
    if fused.device.info.engine == "host":
        assert a == b  # the host mirrors compose the separate kernels' host functions: exact
    check_greedy(reference, prompt, a, b)


def test_fused_is_validated(dev, tiny_dir):
    with pytest.raises(InvalidArgument, match="fused"):
        Gpt2Decoder.load(tiny_dir, dev, fused=1)


def test_streamed_attention_decoder_equals_default(dev, tiny_dir, reference):
    """The decoder's attention kernel (the streamed one, hrx_models.gpt2.attention_streamed)
    and the earlier kernels.ATTENTION swapped in: the same logits and greedy tokens, each
    the kernel recorded in the step graph."""
    import attrs
    from hrx_models.gpt2 import kernels as K

    # (without the short steps, whose QKV kernel attends with the streamed kernel's code)
    streamed = Gpt2Decoder.load(tiny_dir, dev, short_steps=False)
    default = Gpt2Decoder.load(tiny_dir, dev, short_steps=False)
    default.kernels = attrs.evolve(default.kernels, attention=K.ATTENTION)
    try:
        for dec, want_name, other in ((streamed, "hrx_gpt2_attention_streamed", "hrx_gpt2_attention"),
                                      (default, "hrx_gpt2_attention", "hrx_gpt2_attention_streamed")):
            with dec.slot() as s:
                names = {n.params["executable"].name for n in s.step_graph.nodes if n.kind == "dispatch"}
                assert want_name in names and other not in names
        prompt = [9, 8, 7, 6, 5]
        ids = prompt + list(range(20, 50))
        got, want = step_logits(streamed, ids), step_logits(default, ids)
        for t in range(len(ids)):
            check_logits(got[t], want[t], f"position {t}: streamed vs earlier attention")
        check_greedy(reference, prompt, streamed.generate(prompt, 24).tokens, default.generate(prompt, 24).tokens)
    finally:
        default.close()
        streamed.close()


def test_session_loads_every_gemv_kernel_the_steps_record(tiny_config):
    """StepKernels.fused_gemv_kernels (what a model session loads) names every fused GEMV
    kernel the decode step and the prefill step record."""
    import attrs
    from hrx_models.gpt2.decoder import StepKernels, record_step

    kernels = attrs.evolve(StepKernels.for_engine("host"), gemv_sms=2, ln_linear_attend=FK.LN_LINEAR_ATTEND)

    class View:
        length = 4096

    class Recorder:
        names: set[str] = set()

        def dispatch(self, kernel, grid, bindings, block=None, scalars=()):
            self.names.add(kernel.name)

    class Slot(dict):
        def __missing__(self, key):
            return View()

    rec = Recorder()
    for logits in (True, False):
        for short in (True, False):
            record_step(rec, kernels, tiny_config, 16, lambda name: View(), Slot(), logits=logits, fused=True,
                        short=short)
    gemvs = {x for x in rec.names if "ln_linear" in x or "linear_residual" in x}
    assert gemvs and gemvs == {x.name for x in kernels.fused_gemv_kernels(tiny_config)}


# -- register budgets of the fused GEMVs (the plan: fused_gemv_blocks, specialize) ------


def test_fused_gemvs_share_the_tensor_gemv_budgets():
    """The fused GEMVs are hrx_tensor's GEMV body: the same budgets and the same rule
    (tested in hrx_tensor's test_linear_variants)."""
    from hrx_tensor import kernels as tk

    assert FK.FUSED_GEMV_BUDGETS is tk.GEMV_BUDGETS
    assert FK.fused_gemv_blocks is tk.gemv_budget and FK.lane_share is tk.gemv_lane_share


def test_specialize():
    ln = FK.specialize(FK.LN_LINEAR, blocks=8, width=1600)
    assert ln.name == "hrx_gpt2_ln_linear_w2048_b8" and ln.entry == ln.name
    assert FK.specialize(FK.LN_LINEAR, blocks=8, width=2048) is ln  # one kernel a width class and budget
    src = ln.sources["cuda"]
    assert src.startswith("#define HRX_GEMV_UNROLL 2\n") and "#define HRX_MAX_EMBD 2048u\n" in src
    assert "__launch_bounds__(256, 8) hrx_gpt2_ln_linear_w2048_b8(" in src and "hrx_gpt2_ln_linear(" not in src
    assert src.replace("#define HRX_GEMV_UNROLL 2\n", "", 1).replace("2048u", "8192u").replace(
        "__launch_bounds__(256, 8) hrx_gpt2_ln_linear_w2048_b8(", "__launch_bounds__(256) hrx_gpt2_ln_linear(") \
        == FK.LN_LINEAR.sources["cuda"]  # nothing else changes
    assert ln.sources["host"] is FK.LN_LINEAR.sources["host"]
    assert (ln.buffer_access, ln.scalar_types, ln.programmatic) == \
        (FK.LN_LINEAR.buffer_access, FK.LN_LINEAR.scalar_types, FK.LN_LINEAR.programmatic)
    lr = FK.specialize(FK.LINEAR_RESIDUAL, blocks=6)
    assert lr.name == "hrx_gpt2_linear_residual_b6"
    assert lr.sources["cuda"].startswith("#define HRX_GEMV_UNROLL 4\n")
    assert "__launch_bounds__(256, 6) hrx_gpt2_linear_residual_b6(" in lr.sources["cuda"]
    assert FK.specialize(FK.LN_LINEAR, blocks=6, width=768).name == "hrx_gpt2_ln_linear_w1024_b6"
    # the generic kernels keep the compiler's register choice and the widest layer norm
    assert "__launch_bounds__(256) hrx_gpt2_ln_linear(" in FK.LN_LINEAR.sources["cuda"]


def test_specialize_attend():
    """ln_linear_attend specialized for a head_dim compiles that head_dim's tail alone
    (HRX_ATTN_DPL), refuses the others grid-wide (a launch of the wrong kernel changes
    nothing), and is one kernel a DPL class, width class and budget."""
    k = FK.specialize(FK.LN_LINEAR_ATTEND, blocks=8, width=2048, head_dim=128)
    assert k.name == "hrx_gpt2_ln_linear_attend_w2048_d4_b8" and k.entry == k.name
    assert FK.specialize(FK.LN_LINEAR_ATTEND, blocks=8, width=1600, head_dim=128) is k
    src = k.sources["cuda"]
    assert src.startswith("#define HRX_ATTN_DPL 4\n") and "#define HRX_MAX_EMBD 2048u" in src
    assert "__launch_bounds__(256, 8) hrx_gpt2_ln_linear_attend_w2048_d4_b8(" in src
    assert [FK.attend_dpl(h) for h in (8, 32, 64, 128, 256)] == [2, 2, 2, 4, 8]
    assert FK.specialize(FK.LN_LINEAR_ATTEND, blocks=6, width=768, head_dim=32).name.endswith("_d2_b6")


@pytest.mark.parametrize("kernel,kwargs,match", [
    (FK.LN_LINEAR, {"blocks": 7, "width": 768}, "blocks 7"),
    (FK.LN_LINEAR, {"blocks": 6}, "width is for ln_linear"),
    (FK.LINEAR_RESIDUAL, {"blocks": 6, "width": 768}, "width is for ln_linear"),
    (FK.EMBED, {"blocks": 6}, "no CUDA source with a register budget"),
    (FK.LN_LINEAR, {"blocks": 6, "width": 8193}, "n_embd 8193"),
    (FK.LN_LINEAR_ATTEND, {"blocks": 6, "width": 768}, "head_dim is for ln_linear_attend"),
    (FK.LN_LINEAR, {"blocks": 6, "width": 768, "head_dim": 64}, "head_dim is for ln_linear_attend"),
    (FK.LN_LINEAR_ATTEND, {"blocks": 6, "width": 768, "head_dim": 48}, "head_dim 48"),
])
def test_specialize_refuses(kernel, kwargs, match):
    with pytest.raises(ValueError, match=match):
        FK.specialize(kernel, **kwargs)


def test_step_kernels_budget_plan():
    """The decoder's kernels choose a budget per GEMV on CUDA (the multiprocessor count
    of the device info) and none elsewhere."""
    from types import SimpleNamespace

    import attrs
    from hrx_models.gpt2 import SHAPES
    from hrx_models.gpt2.decoder import StepKernels

    cuda = StepKernels.for_device(SimpleNamespace(engine="cuda", properties={"compute_capability": "9.0",
                                                                             "multiprocessors": 132}))
    assert cuda.gemv_sms == 132 and cuda.tensor_cores
    assert StepKernels.for_device(SimpleNamespace(engine="cuda", properties={"compute_capability": "9.0"})).gemv_sms == 0
    for odd in ("many", None, -4):
        info = SimpleNamespace(engine="cuda", properties={"compute_capability": "9.0", "multiprocessors": odd})
        assert StepKernels.for_device(info).gemv_sms == 0
    info = SimpleNamespace(engine="cuda", properties={"compute_capability": "9.0", "multiprocessors": "132"})
    assert StepKernels.for_device(info).gemv_sms == 132
    host = StepKernels.for_device(SimpleNamespace(engine="host", properties={"multiprocessors": 132}))
    assert host.gemv_sms == 0 and host.fused_gemv_kernels(SHAPES["gpt2"]) == []
    assert host.fused_gemv(FK.LN_LINEAR, 768, 2304, 768) is FK.LN_LINEAR
    # GPT-2 small: grids of 96-384 blocks at six blocks an SM, the 6283-block logits at eight
    assert [x.name for x in cuda.fused_gemv_kernels(SHAPES["gpt2"])] == [
        "hrx_gpt2_ln_linear_w1024_b6", "hrx_gpt2_linear_residual_b6", "hrx_gpt2_ln_linear_w1024_b8"]
    # gpt2-medium and 1.3B: every GEMV at eight
    for shape, width in (("gpt2-medium", 1024), ("1b", 2048)):
        assert [x.name for x in cuda.fused_gemv_kernels(SHAPES[shape])] == [
            f"hrx_gpt2_ln_linear_w{width}_b8", "hrx_gpt2_linear_residual_b8"], shape
    # with the short step: its QKV kernel at the QKV projection's budget
    short = attrs.evolve(cuda, ln_linear_attend=FK.LN_LINEAR_ATTEND)
    assert [x.name for x in short.fused_gemv_kernels(SHAPES["gpt2"])] == [
        "hrx_gpt2_ln_linear_w1024_b6", "hrx_gpt2_linear_residual_b6", "hrx_gpt2_ln_linear_w1024_b8",
        "hrx_gpt2_ln_linear_attend_w1024_d2_b6"]  # (head_dim 64: two values a lane of a K/V row)
    assert short.fused_gemv_kernels(SHAPES["1b"])[-1].name == "hrx_gpt2_ln_linear_attend_w2048_d4_b8"
    loaded = object()
    k2 = attrs.evolve(cuda, gemv_loaded={"hrx_gpt2_linear_residual_b8": loaded})
    assert k2.fused_gemv(FK.LINEAR_RESIDUAL, 2048, 2048) is loaded  # a session's loaded kernel wins
    assert k2 == cuda  # what a session loaded is not part of the kernels' identity


def test_budget_plan_decoder(dev, tiny_dir, reference):
    """A decoder whose GEMVs are specialized (on the host engine: forced, as on a device of
    two multiprocessors) records the specialized kernels, and decodes as the generic ones
    (exactly on the host, whose mirrors are the same; within BF16 tolerance on cuda)."""
    import attrs

    plan = Gpt2Decoder.load(tiny_dir, dev, short_steps=True)
    generic = Gpt2Decoder.load(tiny_dir, dev, short_steps=True)
    try:
        if not plan.kernels.gemv_sms:
            plan.kernels = attrs.evolve(plan.kernels, gemv_sms=2)
        generic.kernels = attrs.evolve(generic.kernels, gemv_sms=0)
        want = {k.name for k in plan.kernels.fused_gemv_kernels(plan.config)}
        assert want
        with plan.slot() as a, generic.slot() as b:
            names = {n.params["executable"].name for g in (a.step_graph, a.short_step_graph) for n in g.nodes
                     if n.kind == "dispatch"}
            assert want <= names and not names & {FK.LN_LINEAR.name, FK.LINEAR_RESIDUAL.name, FK.LN_LINEAR_ATTEND.name}
            names = {n.params["executable"].name for g in (b.step_graph, b.short_step_graph) for n in g.nodes
                     if n.kind == "dispatch"}
            assert {FK.LN_LINEAR.name, FK.LINEAR_RESIDUAL.name, FK.LN_LINEAR_ATTEND.name} <= names
        prompt = [3, 1, 4, 1, 5]
        ids = prompt + list(range(30, 50))
        got, ref = step_logits(plan, ids), step_logits(generic, ids)
        for t in range(len(ids)):
            check_logits(got[t], ref[t], f"position {t}: register budgets vs generic kernels")
        a_tokens, b_tokens = plan.generate(prompt, 24).tokens, generic.generate(prompt, 24).tokens
        if dev.info.engine == "host":
            assert a_tokens == b_tokens
        check_greedy(reference, prompt, a_tokens, b_tokens)
    finally:
        plan.close()
        generic.close()
