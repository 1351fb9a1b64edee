"""On the GPU machine: the cuda decoder at the GPT-2-small shape against an independent
PyTorch implementation (hrx_models.gpt2.torch_reference, F32 over the same BF16 weights).
Skipped where torch or a CUDA GPU is missing."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")
from hrx_models.gpt2 import SHAPES, Gpt2Decoder, write_random_checkpoint
from hrx_models.gpt2.testing import check_greedy

pytestmark = pytest.mark.gpu

PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]
STEPS = 64
CONTEXT = 128


@pytest.fixture(scope="module")
def small(tmp_path_factory, cuda_dev):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    dev = cuda_dev
    d = write_random_checkpoint(tmp_path_factory.mktemp("gpt2"), SHAPES["gpt2"], seed=2, std=0.05, dtype="bf16")
    from hrx_models.gpt2.torch_reference import TorchGpt2

    ref = TorchGpt2(d, dtype=torch.float32, context=CONTEXT)
    dec = Gpt2Decoder.load(d, dev, context=CONTEXT)
    yield dec, ref
    dec.close()


def test_gpt2_small_logits_match_torch(small):
    dec, ref = small
    ids = PROMPT + list(range(1000, 1024))
    want = ref.logits(ids)
    with dec.slot() as s:
        s.start(ids)
        for t in range(len(ids)):
            s.step()
            got = s.logits()
            tol = 0.03 * float(np.abs(want[t]).max()) + 1e-2
            err = np.abs(got - want[t])
            assert err.max() <= tol, (f"position {t}: cuda logits differ from torch F32 by {err.max():.4g} at token "
                                      f"{int(err.argmax())} (tolerance {tol:.4g}; |logits| up to {np.abs(want[t]).max():.4g})")


def test_gpt2_small_greedy_matches_torch_for_64_steps(small):
    dec, ref = small
    want = ref.generate(PROMPT, STEPS)
    got = dec.generate(PROMPT, STEPS).tokens
    check_greedy(ref, PROMPT, got, want)


def test_torch_bf16_graph_peer_agrees_with_eager(small, tmp_path):
    """The benchmark's peers (BF16 eager and CUDA-graph replay) produce the same tokens."""
    import torch
    from hrx_models.gpt2.torch_reference import TorchGpt2

    dec, _ = small
    peer = TorchGpt2(dec.weights.source, dtype=torch.bfloat16, context=CONTEXT)
    eager = peer.generate(PROMPT, 32)
    graph = peer.cuda_graph()
    assert peer.generate(PROMPT, 32, graph=graph) == eager


def long_prompt(n):
    return [(i * 7919 + 13) % 50257 for i in range(n)]


def test_torch_sdpa_prefill_equals_step_by_step(small):
    """The benchmark's prefill peer (the prompt as a matrix, causal SDPA) is the same
    model as the step-by-step decoder: last-position logits and the continuation."""
    _, ref = small
    ids = long_prompt(100)
    want = ref.logits(ids)[-1]
    ref.prefill(ids)
    got = ref.last_logits.double().cpu().numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * np.abs(want).max())
    first = int(ref.tok.item())
    assert first == int(np.argmax(want))
    for _ in range(8):
        ref.forward()
    assert ref.seq[100:109].tolist() == ref.generate(ids, 9)


@pytest.mark.parametrize("n", [9, 100, 120], ids=["9-token", "100-token", "120-token"])
def test_gpt2_small_batched_prefill_matches_torch(small, n):
    """Batched prefill (chunks of the context, 128 rows: one partial chunk) then decode on cuda
    against torch F32 step by step: the first token's logits and 8 greedy tokens."""
    dec, ref = small
    ids = long_prompt(n)
    want = ref.logits(ids)[-1]
    with dec.slot() as s:
        assert s.chunk_graph is not None
        s.start(ids)
        s.prefill()
        s.step()
        got = s.logits()
    tol = 0.03 * float(np.abs(want).max()) + 1e-2
    assert np.abs(got - want).max() <= tol
    check_greedy(ref, ids, dec.generate(ids, 8).tokens, ref.generate(ids, 8))


def test_gpt2_small_1000_token_prefill_matches_torch(small, cuda_dev):
    """A 1000-token prompt at the full context (2 chunks of 512 rows, the last partial)
    against torch F32 prefill (SDPA; equal to step by step, above): the first token's
    logits within the decoder's tolerance and 4 greedy tokens."""
    import torch
    from hrx_models.gpt2.torch_reference import TorchGpt2

    dec, _ = small
    ids = long_prompt(1000)
    ref = TorchGpt2(dec.weights.source, dtype=torch.float32, context=1024)
    ref.prefill(ids)
    want = ref.last_logits.double().cpu().numpy()
    with Gpt2Decoder.load(dec.weights.source, cuda_dev, context=1024, max_slots=1, prefill_chunk=512) as full:
        with full.slot() as s:
            assert s.chunk == 512
            launches = s.chunk_graph.launches
            s.start(ids)
            s.prefill()
            s.step()
            got = s.logits()
            assert s.chunk_graph.launches - launches == 2
        tokens = full.generate(ids, 4).tokens
    tol = 0.03 * float(np.abs(want).max()) + 1e-2
    assert np.abs(got - want).max() <= tol
    for _ in range(3):
        ref.forward()
    check_greedy(ref, ids, tokens, ref.seq[1000:1004].tolist())
