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


def test_small_chunk_entry(dev, tmp_path):
    """Chunks larger than PREFILL_SMALL_CHUNK rows: a prompt's last positions up to that
    many go through the "chunk_small" entry (a 300-token prompt: "chunk" then
    "chunk_small"; a 100-token one: "chunk_small" alone), with the tokens of the
    stream-level decoder with the same chunks, and those of prefill one position a step
    wherever the reference is not on a near-tie. Both with short steps, which the model
    layer's steps take below ATTENTION_MIN_ROWS positions."""
    from hrx_models.gpt2 import Gpt2Config, Gpt2Decoder, write_random_checkpoint
    from hrx_models.gpt2.decoder import PREFILL_SMALL_CHUNK, prefill_launches
    from hrx_models.gpt2.model_layer import Gpt2Definition
    from hrx_models.gpt2.reference import NumpyGpt2
    from hrx_models.gpt2.testing import check_greedy

    from hrx_core.execution import RuntimeOptions

    assert prefill_launches(299, 256) == [256, PREFILL_SMALL_CHUNK] and prefill_launches(99, 256) == [PREFILL_SMALL_CHUNK]
    assert prefill_launches(99, 128) == [128] and prefill_launches(300, 100) == [100, 100, 100]
    config = Gpt2Config(n_embd=128, n_layer=2, n_head=4, n_positions=320, vocab_size=512)
    ckpt = write_random_checkpoint(tmp_path / "long", config, seed=5, std=0.1)
    ctx = model_layer.ModelContext(dev, RuntimeOptions())
    d = Gpt2Definition.load(ckpt, ctx, short_steps=True)
    model = d.prepare(slots=1, context=320, prefill_chunk=256)
    batched = Gpt2Decoder.load(ckpt, dev, context=320, prefill_chunk=256, short_steps=True)
    steps = Gpt2Decoder.load(ckpt, dev, context=320, prefill_chunk=0)
    try:
        slot = model.slot(0)
        assert {"chunk", "chunk_small"} <= set(slot.entries)
        submit, entries = slot.submit, []

        def counted(inputs, entry=None, **kwargs):
            entries.append(entry)
            return submit(inputs, entry=entry, **kwargs)

        slot.submit = counted
        prompt = [(i * 37 + 5) % 512 for i in range(300)]
        for p, want in ((prompt, ["chunk", "chunk_small"]), (prompt[:100], ["chunk_small"])):
            entries.clear()
            got = d.generate(slot, p, 8)
            assert [e for e in entries if not e.startswith("step")] == want
            assert got == batched.generate(p, 8).tokens
            check_greedy(NumpyGpt2(ckpt), p, got, steps.generate(p, 8).tokens)
        # steps at positions 119..134 (short_steps=True, here and in ``batched``): the short
        # step's entry below ATTENTION_MIN_ROWS (128), the full step's from there
        entries.clear()
        got = d.generate(slot, prompt[:120], 16)
        assert [e for e in entries if e.startswith("step")] == ["step_short"] * 9 + ["step"] * 7
        assert got == batched.generate(prompt[:120], 16).tokens
    finally:
        batched.close()
        steps.close()
        model.close()
        d.close()
        ctx.close()


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
