"""Checkpoints in the Hugging Face GPT-2 layout with seeded random weights.

``write_random_checkpoint(dir, config)`` writes ``config.json`` and
``model.safetensors`` exactly as ``GPT2LMHeadModel.save_pretrained`` lays them out:
``wte.weight [V, D]``, ``wpe.weight [P, D]``, per layer ``h.{i}.ln_1``,
``h.{i}.attn.c_attn`` (Conv1D: weight ``[D, 3D]`` = [in, out]), ``h.{i}.attn.c_proj``
``[D, D]``, ``h.{i}.ln_2``, ``h.{i}.mlp.c_fc [D, 4D]``, ``h.{i}.mlp.c_proj [4D, D]``,
``ln_f``; optionally with a ``transformer.`` prefix and the ``h.{i}.attn.bias``
causal-mask buffers older checkpoints carry. The same loader reads these files and
a real GPT-2 checkpoint.

The weights are not Hugging Face's initialization: every matrix is N(0, std), and
biases and layer-norm parameters are random as well (biases N(0, std), layer-norm
weights 1 + N(0, 0.1), layer-norm biases N(0, 0.1)), so a loader or kernel that
drops or misplaces any of them changes the logits and is caught by the tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from ml_dtypes import bfloat16

from hrx_core import progress
from hrx_core.errors import InvalidArgument

from .config import CONFIG_FILE, WEIGHTS_FILE, Gpt2Config

#: dtypes ``write_random_checkpoint`` can store (real GPT-2 checkpoints are F32).
DTYPES = {"f32": np.dtype(np.float32), "bf16": np.dtype(bfloat16)}


def tensor_shapes(config: Gpt2Config) -> dict[str, tuple[int, ...]]:
    """Every parameter of the HF layout (no prefix, no attn.bias buffers) and its shape."""
    d, v, p = config.n_embd, config.vocab_size, config.n_positions
    shapes: dict[str, tuple[int, ...]] = {"wte.weight": (v, d), "wpe.weight": (p, d)}
    for i in range(config.n_layer):
        h = f"h.{i}."
        shapes.update({
            h + "ln_1.weight": (d,), h + "ln_1.bias": (d,),
            h + "attn.c_attn.weight": (d, 3 * d), h + "attn.c_attn.bias": (3 * d,),
            h + "attn.c_proj.weight": (d, d), h + "attn.c_proj.bias": (d,),
            h + "ln_2.weight": (d,), h + "ln_2.bias": (d,),
            h + "mlp.c_fc.weight": (d, 4 * d), h + "mlp.c_fc.bias": (4 * d,),
            h + "mlp.c_proj.weight": (4 * d, d), h + "mlp.c_proj.bias": (d,),
        })
    shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    return shapes


def random_tensors(config: Gpt2Config, *, seed: int = 0, std: float = 0.02) -> dict[str, np.ndarray]:
    """Seeded random float32 parameters by HF name (the same seed gives the same weights)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in tensor_shapes(config).items():
        if name.endswith(("ln_1.weight", "ln_2.weight")) or name == "ln_f.weight":
            a = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        elif "ln_" in name:
            a = 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            a = rng.standard_normal(shape, dtype=np.float32)
            a *= np.float32(std)
        out[name] = a
    return out


def write_random_checkpoint(
    directory: str | os.PathLike[str],
    config: Gpt2Config,
    *,
    seed: int = 0,
    std: float = 0.02,
    dtype: str = "f32",
    prefix: str = "",
    attn_bias: bool = False,
) -> Path:
    """Write ``config.json`` and ``model.safetensors`` of ``config`` into ``directory``.

    ``dtype`` is ``"f32"`` (as released GPT-2 checkpoints) or ``"bf16"``; ``prefix``
    (``""`` or ``"transformer."``) goes before every name; ``attn_bias`` adds the
    ``h.{i}.attn.bias`` causal-mask buffers ([1, 1, P, P], as old checkpoints have).
    Returns the directory.
    """
    config.validate()
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise InvalidArgument(f"dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
    if not isinstance(prefix, str) or prefix not in ("", "transformer."):
        raise InvalidArgument(f"prefix: {prefix!r} is neither '' nor 'transformer.'")
    if not (isinstance(std, (int, float)) and 0 < std < 10):
        raise InvalidArgument(f"std: {std!r} is not in (0, 10)")
    from safetensors.numpy import save_file

    from hrx_core.artifacts.files import fspath
    from hrx_core.errors import ArtifactError

    out = Path(fspath("directory", directory))
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise InvalidArgument(f"seed: expected an int >= 0, got {type(seed).__name__}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArtifactError(f"directory: cannot create {str(out)!r}: {exc.strerror or exc}") from None
    tensors: dict[str, Any] = {}
    shapes = tensor_shapes(config)
    # one bar over the parameters generated, then the write (drawn on a terminal only)
    with progress.bar(total=config.parameters, desc="init weights", unit="param", unit_scale=True) as bar:
        for name, a in random_tensors(config, seed=seed, std=std).items():
            tensors[prefix + name] = a.astype(DTYPES[dtype]) if dtype != "f32" else a
            bar.update(int(np.prod(shapes[name])))
        if attn_bias:
            p = config.n_positions
            mask = np.tril(np.ones((p, p), dtype=np.float32)).reshape(1, 1, p, p).astype(DTYPES[dtype])
            for i in range(config.n_layer):
                tensors[f"{prefix}h.{i}.attn.bias"] = mask
        bar.set_description(f"writing {WEIGHTS_FILE}")
        save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    return out
