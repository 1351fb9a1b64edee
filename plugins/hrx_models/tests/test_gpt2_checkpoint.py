"""Checkpoints: the HF layout written by write_random_checkpoint, its variants
(prefix, mask buffers, BF16, a tied lm_head), and typed errors for malformed ones."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")
from hrx_models.gpt2 import (
    CheckpointError,
    ConfigError,
    Gpt2Config,
    Gpt2Decoder,
    MissingTensor,
    TensorShapeError,
    load_weights,
    write_random_checkpoint,
)
from hrx_models.gpt2.checkpoint import tensor_shapes
from safetensors.numpy import load_file, save_file

from hrx_core.budget import MemoryBudget
from hrx_core.errors import ArtifactError, BudgetExceeded, Unsupported

SMALL = Gpt2Config(n_embd=128, n_layer=2, n_head=2, n_positions=16, vocab_size=64)


def test_layout_is_hugging_face_gpt2(tmp_path):
    write_random_checkpoint(tmp_path, SMALL, seed=3)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert {k: v.shape for k, v in tensors.items()} == tensor_shapes(SMALL)
    assert tensors["h.0.attn.c_attn.weight"].shape == (128, 384)  # Conv1D [in, out]
    assert tensors["h.1.mlp.c_proj.weight"].shape == (512, 128)
    assert all(v.dtype == np.float32 for v in tensors.values())
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu_new"
    assert Gpt2Config.load(tmp_path) == SMALL
    again = tmp_path / "again"
    write_random_checkpoint(again, SMALL, seed=3)
    assert (again / "model.safetensors").read_bytes() == (tmp_path / "model.safetensors").read_bytes()  # seeded


def device_bytes(dev, directory):
    s = dev.stream()
    w = load_weights(directory, s)
    try:
        return s.download(w.buffer)
    finally:
        w.close()


def test_variants_load_the_same_weights(dev, tmp_path):
    plain = write_random_checkpoint(tmp_path / "plain", SMALL, seed=4)
    want = device_bytes(dev, plain)
    variants = {"prefixed": {"prefix": "transformer."}, "masks": {"attn_bias": True}, "bf16": {"dtype": "bf16"},
                "all": {"prefix": "transformer.", "attn_bias": True, "dtype": "bf16"}}
    for name, kw in variants.items():
        d = write_random_checkpoint(tmp_path / name, SMALL, seed=4, **kw)
        assert np.array_equal(device_bytes(dev, d), want), name
    # a tied lm_head.weight, as GPT2LMHeadModel checkpoints may carry, is ignored
    tensors = load_file(str(plain / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["wte.weight"]
    save_file(tensors, str(plain / "model.safetensors"))
    s = dev.stream()
    w = load_weights(plain, s)
    assert w.ignored == ("lm_head.weight",)
    assert np.array_equal(s.download(w.buffer), want)
    w.close()


def test_conv1d_weights_are_transposed_at_load(dev, tmp_path):
    d = write_random_checkpoint(tmp_path, SMALL, seed=5)
    src = load_file(str(d / "model.safetensors"))["h.1.attn.c_attn.weight"]  # [in=128, out=384]
    s = dev.stream()
    w = load_weights(d, s)
    got = s.download(w.view("h.1.attn.c_attn.weight")).view(np.uint16).reshape(384, 128)
    import ml_dtypes

    assert np.array_equal(got, src.T.astype(ml_dtypes.bfloat16).view(np.uint16))
    w.close()


def rewrite(directory, change):
    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path))


@pytest.mark.parametrize("case,error,match", [
    ("missing", MissingTensor, r"missing 1 GPT-2 tensor.*'h\.1\.mlp\.c_fc\.bias'"),
    ("transposed", TensorShapeError, r"'h\.0\.attn\.c_attn\.weight' has shape \[384, 128\], the config needs \[128, 384\] \(Conv1D"),
    ("int", TensorShapeError, r"'wpe\.weight' has dtype I32"),
    ("vocab", TensorShapeError, r"'wte\.weight' has shape \[63, 128\]"),
    ("duplicate", CheckpointError, r"both with and without the 'transformer\.' prefix"),
])
def test_malformed_tensors_raise_typed_errors(dev, tmp_path, case, error, match):
    d = write_random_checkpoint(tmp_path, SMALL, seed=6)
    changes = {
        "missing": lambda t: t.pop("h.1.mlp.c_fc.bias"),
        "transposed": lambda t: t.update({"h.0.attn.c_attn.weight": np.ascontiguousarray(t["h.0.attn.c_attn.weight"].T)}),
        "int": lambda t: t.update({"wpe.weight": t["wpe.weight"].astype(np.int32)}),
        "vocab": lambda t: t.update({"wte.weight": t["wte.weight"][:63].copy()}),
        "duplicate": lambda t: t.update({"transformer.ln_f.bias": t["ln_f.bias"]}),
    }
    rewrite(d, changes[case])
    budget = MemoryBudget(1 << 30)
    with pytest.raises(error, match=match):
        load_weights(d, dev.stream(), budget=budget)
    assert budget.used_bytes == 0  # validated before anything was allocated


def test_malformed_directories(dev, tmp_path):
    d = write_random_checkpoint(tmp_path / "ok", SMALL)
    (d / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_weights(d, dev.stream())
    (d / "config.json").write_text(json.dumps({"n_embd": 128, "n_layer": 2, "vocab_size": 64}))
    with pytest.raises(ConfigError, match="missing 'n_head'"):
        load_weights(d, dev.stream())
    (d / "config.json").write_text(json.dumps({**SMALL.to_dict(), "activation_function": "relu"}))
    with pytest.raises(ConfigError, match="activation_function = 'relu'"):
        load_weights(d, dev.stream())
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="cannot read"):
        load_weights(empty, dev.stream())
    (empty / "config.json").write_text(json.dumps(SMALL.to_dict()))
    with pytest.raises(CheckpointError, match="model.safetensors: no such file"):
        load_weights(empty, dev.stream())
    (empty / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(ArtifactError):
        load_weights(empty, dev.stream())


def test_shapes_the_kernels_cannot_run_are_refused_clearly(dev, tmp_path):
    d = write_random_checkpoint(tmp_path, Gpt2Config(n_embd=100, n_layer=1, n_head=4, n_positions=8, vocab_size=32))
    with pytest.raises(Unsupported, match=r"n_embd = 100 is not a multiple of 8.*16-byte vectors"):
        Gpt2Decoder.load(d, dev)


def test_budget_covers_weights_and_slots(dev, tiny_dir, tiny_config):
    from hrx_models.gpt2.decoder import PREFILL_CHUNK, slot_layout
    from hrx_models.gpt2.loader import weights_layout

    cfg = tiny_config
    chunk = min(PREFILL_CHUNK, cfg.n_positions)
    wbytes, sbytes = weights_layout(cfg).nbytes, slot_layout(cfg, cfg.n_positions, chunk).nbytes
    with pytest.raises(BudgetExceeded):
        Gpt2Decoder.load(tiny_dir, dev, budget=MemoryBudget(wbytes - 1))
    budget = MemoryBudget(wbytes + sbytes)
    dec = Gpt2Decoder.load(tiny_dir, dev, budget=budget, max_slots=2)
    try:
        assert budget.used_bytes == wbytes
        with dec.slot():
            assert budget.used_bytes == wbytes + sbytes
            with pytest.raises(BudgetExceeded):
                dec.acquire()  # a second slot does not fit
    finally:
        dec.close()
    assert budget.used_bytes == 0
