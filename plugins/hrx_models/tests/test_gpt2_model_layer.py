"""The decoder on the hrx_core.model layer: a frozen definition, prepared slots with
"chunk" (batched prefill), "prefill" and "step" entries, the same tokens as the stream-level decoder and the
reference; slots from several threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")

model_layer = pytest.importorskip("hrx_core.model", reason="the hrx_core.model layer is not in this tree")

PROMPTS = [[1, 2, 3, 4, 5], [7], [100, 200, 300]]


@pytest.fixture(scope="module")
def gpt2(dev, tiny_dir):
    from hrx_models.gpt2.model_layer import Gpt2Definition

    from hrx_core.budget import MemoryBudget
    from hrx_core.execution import RuntimeOptions

    budget = MemoryBudget(256 << 20)
    ctx = model_layer.ModelContext(dev, RuntimeOptions(memory_budget=budget))
    d = Gpt2Definition.load(tiny_dir, ctx)
    yield d, budget, ctx
    d.close()
    ctx.close()


@pytest.mark.parametrize("chunk", [1024, 2, 0], ids=["one-chunk", "chunks-of-2", "per-position"])
def test_same_tokens_as_the_decoder_and_reference(gpt2, decoder, reference, chunk):
    """Batched prefill in one chunk (the default: at most the context), in several, and
    one position a submission: the decoder's tokens (and the reference's on the host)."""
    d, _, _ = gpt2
    model = d.prepare(slots=1, context=96, prefill_chunk=chunk)
    assert model.gpt2_chunk == min(chunk, 96)
    assert ("chunk" in model.slot(0).entries) == (chunk > 0)
    try:
        slot = model.slot(0)
        submit, entries = slot.submit, []

        def counted(inputs, entry=None, **kwargs):
            entries.append(entry)
            return submit(inputs, entry=entry, **kwargs)

        slot.submit = counted
        for prompt in PROMPTS:
            entries.clear()
            got = d.generate(slot, prompt, 40)
            assert got == decoder.generate(prompt, 40).tokens
            if decoder.device.info.engine == "host":
                assert list(got) == reference.greedy(prompt, 40)
            prefill = [e for e in entries if e != "step"]
            if chunk:
                assert prefill == ["chunk"] * -(-(len(prompt) - 1) // min(chunk, 96))
            else:
                assert prefill == ["prefill"] * (len(prompt) - 1)
    finally:
        model.close()


def test_logits_output(gpt2, decoder):
    d, _, _ = gpt2
    model = d.prepare(slots=1, context=32)
    try:
        slot = model.slot(0)
        head = d.head(32, np.array([5, 6, 7], np.int32))
        slot.submit({"head": head}, entry="prefill")
        slot.submit(None, entry="prefill")
        logits = slot.run(None, entry="step", read=["logits"])["logits"]
        with decoder.slot() as s:
            s.start([5, 6, 7])
            for _ in range(3):
                s.step()
            np.testing.assert_array_equal(logits, s.logits())
    finally:
        model.close()


def _settled(budget, ctx) -> int:
    """Budget use once earlier tests' finished work has retired (their closed slots'
    memory is released when its queue next retires, not at the close)."""
    ctx.runtime.synchronize()
    ctx.runtime.device._retire_finished()
    return budget.used_bytes


def test_slots_from_threads(gpt2, decoder):
    d, budget, ctx = gpt2
    before = _settled(budget, ctx)
    model = d.prepare(slots=len(PROMPTS), context=64)
    try:
        assert budget.used_bytes > before  # slots are charged to the context's budget
        alone = [decoder.generate(p, 24).tokens for p in PROMPTS]
        results: list = [None] * len(PROMPTS)

        def run(i: int) -> None:
            with model.acquire(timeout=30) as slot:
                results[i] = d.generate(slot, PROMPTS[i], 24)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == alone
    finally:
        model.close()
    # the slots' memory is released once the work that used it has retired
    deadline = time.monotonic() + 10
    while _settled(budget, ctx) != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert budget.used_bytes == before


def test_prefill_chunk_is_validated(gpt2):
    from hrx_core.errors import InvalidArgument

    d, _, _ = gpt2
    for bad in (-1, 1.5, True, "16"):
        with pytest.raises(InvalidArgument, match="prefill_chunk"):
            d.prepare(slots=1, context=32, prefill_chunk=bad)
