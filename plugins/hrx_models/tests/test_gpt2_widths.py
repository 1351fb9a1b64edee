"""GPT-2 widths that are not a multiple of 128: GPT-2 XL's 1600 (25 heads of 64) and
200 (25 heads of 8: rows of 25 16-byte vectors, a tail past every unrolled step),
on each engine against the numpy reference."""

from __future__ import annotations

import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")
from hrx_models.gpt2 import Gpt2Config, Gpt2Decoder, write_random_checkpoint
from hrx_models.gpt2.reference import NumpyGpt2
from hrx_models.gpt2.testing import check_greedy, check_logits, step_logits

#: GPT-2 XL's width and heads, one layer, a small vocabulary (the weights stay ~70 MB).
XL_WIDTH = Gpt2Config(n_embd=1600, n_layer=1, n_head=25, n_positions=32, vocab_size=256)
NARROW = Gpt2Config(n_embd=200, n_layer=2, n_head=25, n_positions=64, vocab_size=384)


@pytest.fixture(scope="module")
def xl_dir(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("xl"), XL_WIDTH, seed=3, std=0.05)


@pytest.fixture(scope="module")
def narrow_dir(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("narrow"), NARROW, seed=5, std=0.1)


def test_xl_width_loads_and_matches_the_reference(dev, xl_dir):
    assert XL_WIDTH.n_embd % 128 and XL_WIDTH.head_dim == 64
    ids = [5, 250, 17, 0, 99, 128]
    want = NumpyGpt2(xl_dir).logits(ids)
    with Gpt2Decoder.load(xl_dir, dev, context=16) as dec:
        got = step_logits(dec, ids)
    for t in range(len(ids)):
        check_logits(got[t], want[t], f"n_embd 1600, position {t}")


def test_narrow_width_greedy_matches_the_reference(dev, narrow_dir):
    ref = NumpyGpt2(narrow_dir)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    want = ref.greedy(prompt, 24)
    assert len(set(want)) > 3, "the test model should not be degenerate"
    with Gpt2Decoder.load(narrow_dir, dev) as dec:
        got = dec.generate(prompt, 24).tokens
        logits = step_logits(dec, prompt)
    ref_logits = ref.logits(prompt)
    for t in range(len(prompt)):
        check_logits(logits[t], ref_logits[t], f"n_embd 200, position {t}")
    check_greedy(ref, prompt, got, want)
