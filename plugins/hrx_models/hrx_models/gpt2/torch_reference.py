"""GPT-2 in plain PyTorch (no transformers): the GPU reference and the benchmark's peer.

Written independently of the HRX kernels, over the same checkpoint: parameters
from ``safetensors.numpy.load_file`` (prefix stripped, mask buffers dropped), Conv1D
weights transposed once for ``F.linear``. A decode step keeps the token and
position in device tensors and writes the greedy token into a device-side
sequence, so it can be captured once in a CUDA graph and replayed
(``TorchGpt2.cuda_graph()``) -- the standard static-KV-cache decode loop.

``dtype=torch.bfloat16`` is the benchmark's peer (BF16 weights, activations and
cache, as PyTorch users run it); ``torch.float32`` is the correctness reference
(the same BF16-rounded weights, F32 arithmetic).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np


class TorchGpt2:
    """A GPT-2 decoder in torch with a static KV cache of ``context`` positions."""

    def __init__(self, directory: str | os.PathLike[str], *, device: str = "cuda", dtype: Any = None,
                 context: int | None = None) -> None:
        import ml_dtypes
        import torch
        from safetensors.numpy import load_file

        self.torch = torch
        directory = Path(directory)
        cfg = json.loads((directory / "config.json").read_text())
        self.d, self.n_layer, self.n_head = int(cfg["n_embd"]), int(cfg["n_layer"]), int(cfg["n_head"])
        self.vocab = int(cfg["vocab_size"])
        self.eps = float(cfg.get("layer_norm_epsilon", 1e-5))
        self.context = int(context or cfg["n_positions"])
        self.dtype = torch.bfloat16 if dtype is None else dtype
        self.device = torch.device(device)
        params: dict[str, Any] = {}
        for name, a in load_file(str(directory / "model.safetensors")).items():
            name = name.removeprefix("transformer.")
            if name.endswith((".attn.bias", ".attn.masked_bias")) or name == "lm_head.weight":
                continue
            if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
                a = a.T  # Conv1D [in, out] -> Linear [out, in]
            bits = np.ascontiguousarray(a.astype(ml_dtypes.bfloat16)).view(np.int16)  # the device's BF16 weights
            params[name] = torch.from_numpy(bits).to(self.device).view(torch.bfloat16).to(self.dtype)
        self.p = params
        hd = self.d // self.n_head
        shape = (self.n_layer, self.context, self.n_head, hd)
        self.k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.positions = torch.arange(self.context, device=self.device)
        self.tok = torch.zeros(1, dtype=torch.long, device=self.device)
        self.pos = torch.zeros(1, dtype=torch.long, device=self.device)
        self.seq = torch.zeros(self.context + 1, dtype=torch.long, device=self.device)
        self.last_logits = torch.zeros(self.vocab, dtype=torch.float32, device=self.device)

    @property
    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.p.values())

    def forward(self) -> None:
        """One position: reads self.tok/self.pos, writes logits, next token, seq, pos + 1."""
        torch, p = self.torch, self.p
        F = torch.nn.functional
        d, nh = self.d, self.n_head
        hd = d // nh
        x = p["wte.weight"][self.tok] + p["wpe.weight"][self.pos]          # [1, D]
        masked = (self.positions > self.pos)[None, :]                       # [1, T]
        for i in range(self.n_layer):
            h = f"h.{i}."
            a = F.layer_norm(x, (d,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], self.eps)
            q, k, v = F.linear(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"]).view(3, nh, hd)
            self.k[i].index_copy_(0, self.pos, k[None])
            self.v[i].index_copy_(0, self.pos, v[None])
            scores = torch.einsum("hd,thd->ht", q, self.k[i]).float() / math.sqrt(hd)
            probs = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1).to(self.dtype)
            a = torch.einsum("ht,thd->hd", probs, self.v[i]).reshape(1, d)
            x = x + F.linear(a, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])
            m = F.layer_norm(x, (d,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], self.eps)
            m = F.gelu(F.linear(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]), approximate="tanh")
            x = x + F.linear(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
        x = F.layer_norm(x, (d,), p["ln_f.weight"], p["ln_f.bias"], self.eps)
        logits = F.linear(x, p["wte.weight"]).float().reshape(-1)
        self.last_logits.copy_(logits)
        nxt = torch.argmax(logits).reshape(1)
        self.pos.add_(1)
        self.seq.index_copy_(0, self.pos, nxt)
        self.tok.copy_(nxt)

    def start(self, prompt: list[int]) -> None:
        """Process all but the last prompt token; the next forward() handles the last."""
        torch = self.torch
        self.pos.zero_()
        for t in prompt[:-1]:
            self.tok.fill_(int(t))
            self.forward()
        self.tok.fill_(int(prompt[-1]))
        self.seq[: len(prompt)] = torch.tensor(prompt, device=self.device)

    def prefill(self, prompt: list[int]) -> None:
        """The whole prompt at once (the standard batched prefill: the layers over a [T, D]
        matrix, causal ``scaled_dot_product_attention``), filling the KV cache rows 0..T-1;
        leaves the state of ``start(prompt)`` followed by one ``forward()``: the first
        generated token in ``seq[T]`` and ``tok``, its logits in ``last_logits``."""
        torch, p = self.torch, self.p
        F = torch.nn.functional
        d, nh = self.d, self.n_head
        hd = d // nh
        n = len(prompt)
        ids = torch.tensor(prompt, dtype=torch.long, device=self.device)
        x = p["wte.weight"][ids] + p["wpe.weight"][:n]                      # [T, D]
        for i in range(self.n_layer):
            h = f"h.{i}."
            a = F.layer_norm(x, (d,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], self.eps)
            q, k, v = F.linear(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"]).view(n, 3, nh, hd).unbind(1)
            self.k[i, :n] = k
            self.v[i, :n] = v
            o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True)
            x = x + F.linear(o.transpose(0, 1).reshape(n, d), p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])
            m = F.layer_norm(x, (d,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], self.eps)
            m = F.gelu(F.linear(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]), approximate="tanh")
            x = x + F.linear(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
        x = F.layer_norm(x[n - 1 :], (d,), p["ln_f.weight"], p["ln_f.bias"], self.eps)
        logits = F.linear(x, p["wte.weight"]).float().reshape(-1)
        self.last_logits.copy_(logits)
        nxt = torch.argmax(logits).reshape(1)
        self.seq[:n] = ids
        self.pos.fill_(n)
        self.seq.index_copy_(0, self.pos, nxt)
        self.tok.copy_(nxt)

    def cuda_graph(self) -> Any:
        """Capture forward() once (after a warm-up on a side stream); replay() it per step."""
        torch = self.torch
        saved = (self.tok.clone(), self.pos.clone(), self.seq.clone())
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.forward()
        self.tok.copy_(saved[0]), self.pos.copy_(saved[1]), self.seq.copy_(saved[2])
        torch.cuda.synchronize()
        return graph

    def generate(self, prompt: list[int], n: int, graph: Any = None) -> list[int]:
        """Greedy: ``n`` tokens after ``prompt`` (eager, or replaying ``graph``)."""
        self.start(prompt)
        for _ in range(n):
            if graph is None:
                self.forward()
            else:
                graph.replay()
        return self.seq[len(prompt): len(prompt) + n].tolist()

    def logits(self, ids: list[int]) -> np.ndarray:
        """Logits [T, V] (float64) at every position of ``ids`` (from position 0)."""
        self.pos.zero_()
        out = []
        for t in ids:
            self.tok.fill_(int(t))
            self.forward()
            out.append(self.last_logits.double().cpu().numpy())
        return np.stack(out)
