"""The GPT-2 decoder against the independent numpy reference: logits, 64 greedy steps,
slots (threads, asyncio, reuse), graph replay, request validation."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")
from hrx_models.gpt2 import Gpt2Decoder
from hrx_models.gpt2.testing import check_greedy, check_logits, step_logits

from hrx_core.errors import InvalidArgument

PROMPTS = [[1, 2, 3, 4, 5], [7], [100, 200, 300, 400, 500, 13, 17, 19], [511, 0, 255]]
STEPS = 64


def test_logits_match_reference(decoder, reference, tiny_dir):
    ids = PROMPTS[2] + PROMPTS[0] + list(range(40, 80))
    got = step_logits(decoder, ids)
    want = reference.logits(ids)  # mirrors the device's BF16 rounding points
    for t in range(len(ids)):
        check_logits(got[t], want[t], f"position {t} vs the BF16-mirroring reference")
    from hrx_models.gpt2.reference import NumpyGpt2

    exact = NumpyGpt2(tiny_dir, mirror=False).logits(ids)  # float64 after BF16 weights: no activation rounding
    for t in range(len(ids)):
        tol = 0.03 * float(np.abs(exact[t]).max()) + 1e-2
        err = float(np.abs(got[t] - exact[t]).max())
        assert err <= tol, f"position {t}: logits differ from the float64 reference by {err:.4g} (tolerance {tol:.4g})"


@pytest.mark.parametrize("prompt", PROMPTS[:2], ids=["5-token", "1-token"])
def test_greedy_64_steps(decoder, reference, prompt):
    want = tuple(reference.greedy(prompt, STEPS))
    assert len(set(want)) > 5, "the test model should not be degenerate"
    r = decoder.generate(prompt, STEPS)
    assert r.prompt == tuple(prompt) and len(r.tokens) == STEPS
    if decoder.device.info.engine == "host":
        assert r.tokens == want  # the host kernels mirror the reference's rounding closely: exact
    check_greedy(reference, prompt, r.tokens, want)
    assert r.decode_s > 0 and r.tokens_per_s > 0


def test_streaming_and_batched_agree(decoder):
    seen: list[tuple[int, int]] = []
    with decoder.slot() as s:
        streamed = s.generate(PROMPTS[0], 12, on_token=lambda i, t: seen.append((i, t)))
        batched = s.generate(PROMPTS[0], 12)
        assert s.tokens(0, 17).tolist() == PROMPTS[0] + list(batched.tokens)
    assert streamed.tokens == batched.tokens
    assert seen == list(enumerate(streamed.tokens))


def test_step_graph_is_recorded_once_and_replayed(decoder):
    with decoder.slot() as s:
        step, prefill, chunk = s.step_graph, s.prefill_graph, s.chunk_graph
        before = step.launches, prefill.launches, chunk.launches
        s.generate(PROMPTS[2], 10)
        assert s.step_graph is step and s.prefill_graph is prefill and s.chunk_graph is chunk
        # the 7 prompt positions before the last go through one batched-prefill chunk
        assert step.launches - before[0] == 10 and prefill.launches == before[1] and chunk.launches - before[2] == 1
        # two allocations bound: the packed weights and the slot's packed state
        assert step.binding_bytes == chunk.binding_bytes == decoder.weights.nbytes + s.layout.nbytes


def alone(decoder):
    return [decoder.generate(p, 24).tokens for p in PROMPTS]


def test_slot_reuse_forgets_the_previous_request(decoder):
    with decoder.slot() as s:
        first = s.generate(PROMPTS[2], 24).tokens   # a long request leaves cache rows behind
        short = s.generate(PROMPTS[1], 24).tokens
    with decoder.slot() as s2:
        again = s2.generate(PROMPTS[1], 24).tokens
    assert short == again and first != short


def test_concurrent_threads_use_separate_slots(dev, tiny_dir):
    dec = Gpt2Decoder.load(tiny_dir, dev, max_slots=len(PROMPTS))
    try:
        expected = alone(dec)
        for _ in range(3):
            results: list = [None] * len(PROMPTS)
            barrier = threading.Barrier(len(PROMPTS))

            def run(i, barrier=barrier, results=results):
                with dec.slot() as s:
                    barrier.wait()
                    results[i] = (s, s.generate(PROMPTS[i], 24).tokens)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert [r[1] for r in results] == expected
            assert len({id(r[0]) for r in results}) == len(PROMPTS)  # one slot each
    finally:
        dec.close()


def test_concurrent_asyncio_uses_separate_slots(dev, tiny_dir):
    dec = Gpt2Decoder.load(tiny_dir, dev, max_slots=len(PROMPTS))
    try:
        expected = alone(dec)

        async def main():
            return await asyncio.gather(*(dec.generate_async(p, 24) for p in PROMPTS))

        got = asyncio.run(main())
        assert [g.tokens for g in got] == expected
    finally:
        dec.close()


def test_pool_bounds_slots(dev, tiny_dir):
    from hrx_core.errors import Timeout

    dec = Gpt2Decoder.load(tiny_dir, dev, max_slots=1, context=32)
    try:
        with dec.slot(), pytest.raises(Timeout, match="1 slots"):
            dec.acquire(block=False)
        with dec.slot() as s:
            assert s.context == 32
    finally:
        dec.close()


def test_request_validation(decoder):
    with decoder.slot() as s:
        with pytest.raises(InvalidArgument, match="token id 512 is outside 0..511"):
            s.generate([1, 512], 4)
        with pytest.raises(InvalidArgument, match="exceeds the context of 128"):
            s.generate([1] * 100, 29)
        with pytest.raises(InvalidArgument, match="max_new_tokens"):
            s.generate([1], 0)
        with pytest.raises(InvalidArgument, match="nonempty"):
            s.generate([], 3)
        assert s.generate([1] * 100, 28).tokens  # exactly the context
