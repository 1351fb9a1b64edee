"""An independent numpy GPT-2: the correctness reference (and the host benchmark's peer).

It shares no code with the loader or the kernels: parameters come straight from
``safetensors.numpy.load_file`` (prefix stripped, Conv1D weights kept in their
[in, out] layout and applied as ``x @ W``, as Hugging Face's Conv1D does), and the
forward pass is plain numpy in float64 (or float32). The device keeps weights in
BF16, so by default the reference rounds the parameters to BF16 first; with
``mirror=True`` it also rounds to BF16 where the device stores BF16 (layer-norm
outputs, K/V cache rows, attention outputs, GELU outputs), so that the remaining
difference is accumulation order -- which makes greedy comparisons over many
steps meaningful.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
from ml_dtypes import bfloat16


def _gelu_new(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


class NumpyGpt2:
    """GPT-2 forward with a KV cache in numpy: ``step(token) -> logits``."""

    def __init__(self, directory: str | os.PathLike[str], *, dtype: type = np.float64, bf16_weights: bool = True,
                 mirror: bool = True) -> None:
        from safetensors.numpy import load_file

        directory = Path(directory)
        cfg = json.loads((directory / "config.json").read_text())
        self.d = int(cfg["n_embd"])
        self.n_layer = int(cfg["n_layer"])
        self.n_head = int(cfg["n_head"])
        self.eps = float(cfg.get("layer_norm_epsilon", 1e-5))
        self.dtype = np.dtype(dtype)
        self.mirror = mirror
        raw = load_file(str(directory / "model.safetensors"))
        self.p: dict[str, np.ndarray] = {}
        for name, a in raw.items():
            name = name.removeprefix("transformer.")
            if name.endswith((".attn.bias", ".attn.masked_bias")) or name == "lm_head.weight":
                continue
            if bf16_weights:
                a = a.astype(bfloat16)
            self.p[name] = a.astype(self.dtype)
        self.reset()

    def reset(self) -> None:
        self.keys: list[list[np.ndarray]] = [[] for _ in range(self.n_layer)]
        self.values: list[list[np.ndarray]] = [[] for _ in range(self.n_layer)]
        self.pos = 0

    def _round(self, a: np.ndarray) -> np.ndarray:
        return a.astype(np.float32).astype(bfloat16).astype(self.dtype) if self.mirror else a

    def _ln(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean()
        var = ((x - mean) ** 2).mean()
        return self._round((x - mean) / np.sqrt(var + self.eps) * self.p[name + ".weight"] + self.p[name + ".bias"])

    def step(self, token: int) -> np.ndarray:
        """Process ``token`` at the next position; return the logits (this dtype)."""
        p, d, nh = self.p, self.d, self.n_head
        hd = d // nh
        x = p["wte.weight"][token] + p["wpe.weight"][self.pos]
        for i in range(self.n_layer):
            h = f"h.{i}."
            qkv = self._ln(x, h + "ln_1") @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
            q, k, v = qkv[:d], self._round(qkv[d : 2 * d]), self._round(qkv[2 * d :])
            self.keys[i].append(k)
            self.values[i].append(v)
            ks = np.stack(self.keys[i]).reshape(-1, nh, hd)      # [T, H, hd]
            vs = np.stack(self.values[i]).reshape(-1, nh, hd)
            scores = np.einsum("hd,thd->ht", q.reshape(nh, hd), ks) / math.sqrt(hd)
            probs = np.exp(scores - scores.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            a = self._round(np.einsum("ht,thd->hd", probs, vs).reshape(d))
            x = x + (a @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"])
            f = self._round(_gelu_new(self._ln(x, h + "ln_2") @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"]))
            x = x + (f @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"])
        self.pos += 1
        return p["wte.weight"] @ self._ln(x, "ln_f")

    def logits(self, ids: list[int]) -> np.ndarray:
        """Logits [T, V] at every position of ``ids`` (from a fresh cache)."""
        self.reset()
        return np.stack([self.step(int(t)) for t in ids])

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        """``n`` greedy tokens after ``prompt`` (lowest index among equal maxima)."""
        self.reset()
        for t in prompt[:-1]:
            self.step(int(t))
        out: list[int] = []
        token = int(prompt[-1])
        for _ in range(n):
            token = int(np.argmax(self.step(token)))
            out.append(token)
        return out
