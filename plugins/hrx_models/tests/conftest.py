"""Fixtures: every test runs on each engine present (host always; cuda on a GPU machine),
over small GPT-2 checkpoints written with seeded random weights (no downloads)."""

from __future__ import annotations

import pytest

import hrx_core as hrx
from hrx_core.testing import engine_params, open_device
#: The test model: 2 layers, 128 wide, 4 heads, vocab 512, 128 positions. std 0.1 makes the
#: greedy choices decisive (std 0.02, HF's, gives near-uniform logits that repeat one token).
TINY = {"n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 128, "vocab_size": 512}
TINY_STD = 0.1
TINY_SEED = 9  # the seed whose test prompts have the widest greedy margins (0.3% of the top logit)


@pytest.fixture(scope="module", params=engine_params())
def engine(request):
    """The name of each engine present (skips the others)."""
    open_device(request.param)
    return request.param


@pytest.fixture(scope="module")
def dev(engine):
    return hrx.device(engine)


@pytest.fixture(scope="module")
def cuda_dev():
    return open_device("cuda")


@pytest.fixture(scope="session")
def tiny_config():
    from hrx_models.gpt2 import Gpt2Config

    return Gpt2Config(**TINY)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from hrx_models.gpt2 import Gpt2Config, write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("tiny"), Gpt2Config(**TINY), seed=TINY_SEED, std=TINY_STD)


@pytest.fixture(scope="session")
def reference(tiny_dir):
    from hrx_models.gpt2.reference import NumpyGpt2

    return NumpyGpt2(tiny_dir)


@pytest.fixture(scope="module")
def decoder(dev, tiny_dir):
    from hrx_models.gpt2 import Gpt2Decoder

    dec = Gpt2Decoder.load(tiny_dir, dev)
    yield dec
    dec.close()
