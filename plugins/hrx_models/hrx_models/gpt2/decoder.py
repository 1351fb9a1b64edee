"""The GPT-2 decoder: shared weights, per-request slots, one recorded graph per step.

A :class:`DecoderSlot` owns everything one request writes -- its stream, the step
state (position, prompt length), the token sequence, activations and a BF16 KV
cache of ``context`` rows per layer, packed in one allocation -- and two graphs
recorded once on its stream:

* ``step``: embeddings (two row gathers at the device-side token and position) +
  ln_1, then per layer QKV projection, attention over the
  cache, output projection, residual + ln_2, MLP up-projection, bias + GELU, MLP
  down-projection, residual + next layer norm (ln_1 of the next layer, or ln_f);
  then the tied logits ``linear(h, wte)`` and greedy argmax, which writes the next
  token into the device-side sequence and advances the position;
* ``prefill``: the same without logits (one prompt position), advancing the position;
* ``chunk`` (batched prefill, ``prefill_chunk`` rows): up to that many prompt
  positions at once through the layers as a matrix -- row embeddings + ln_1, then per
  layer GEMMs (BF16 tensor cores on CUDA sm_80+), the chunk's K/V rows written into the
  cache in one pass, causal attention of every row over the cache, residual + layer
  norm per row, bias + GELU -- advancing the position by the rows done
  (:mod:`hrx_models.gpt2.prefill_kernels`). A T-token prompt is ceil((T - 1) / chunk)
  launches; its last position is the first decode step (which produces the first token).

Position and tokens live on the device, so every step replays the same graph with
nothing uploaded: generating N tokens from a T-token prompt is one upload (prompt
and state), ceil((T-1) / prefill_chunk) + N graph launches and one download. On CUDA each graph is one
native CUDA graph (8 kernels a layer). The projections are ``hrx_tensor.linear``
dispatches (BF16 GEMV, F32 out); the rest are this package's kernels
(:mod:`hrx_models.gpt2.kernels`).

Slots never share writable memory, so requests on different slots -- from threads
or asyncio tasks -- produce exactly what each produces alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import attrs
import numpy as np
from hrx_tensor.kernels import gather_launch, linear_launch
from ml_dtypes import bfloat16

from hrx_core.budget import MemoryBudget
from hrx_core.errors import ArtifactError, HRXError, InvalidArgument, Timeout, Unsupported, show
from hrx_core.timeouts import check_timeout

from . import fused_kernels as FK
from . import kernels as K
from . import prefill_kernels as PK
from .attention_streamed import ATTENTION_STREAMED
from .config import MAX_HEAD_DIM, Gpt2Config
from .layout import Layout
from ..tokenizer import Tokenizer
from .loader import Gpt2Weights, load_weights

BF16 = np.dtype(bfloat16)
#: Words of the step state at the start of a slot: uint32 [pos, n_prompt, 0, 0].
STATE_WORDS = 4
#: Default rows of a batched-prefill chunk (``Gpt2Decoder(prefill_chunk=)``; at most the context).
PREFILL_CHUNK = 1024  # a 1024-token prompt in one chunk: half the launches of 512, and GEMMs of twice
                     # the rows fill the GPU (H200: GPT-2 small's projections 30% less time a row)
#: Rows of the second, small chunk graph a slot records when its chunk is larger: a
#: prompt (or a prompt's last part) of at most this many rows goes through it, with
#: grids and GEMM tilings sized for its rows rather than for the whole chunk (the
#: large chunk's tiles leave most of the GPU idle for a short prompt).
PREFILL_SMALL_CHUNK = 128


@attrs.frozen
class Generation:
    """The result of one greedy request."""

    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    #: seconds from submission to the prompt's last position being processed
    prefill_s: float
    #: seconds from then to the last token being on the host
    decode_s: float

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else float("inf")


@attrs.frozen
class TextGeneration:
    """The result of one greedy request on text: the prompt, the decoded continuation
    and the token-level :class:`Generation` behind them."""

    prompt: str
    text: str
    generation: Generation


def has_small_chunk(chunk: int) -> bool:
    """Whether a slot with batched-prefill chunks of ``chunk`` rows records the small chunk
    graph (PREFILL_SMALL_CHUNK rows) as well."""
    return chunk > PREFILL_SMALL_CHUNK


def prefill_launches(left: int, chunk: int) -> list[int]:
    """The chunk graphs, by rows, that take ``left`` prompt positions through batched
    prefill with chunks of ``chunk`` rows: full chunks, and the last PREFILL_SMALL_CHUNK
    positions or fewer through the small graph where there is one."""
    out: list[int] = []
    while left > 0:
        rows = PREFILL_SMALL_CHUNK if has_small_chunk(chunk) and left <= PREFILL_SMALL_CHUNK else chunk
        out.append(rows)
        left -= rows
    return out


def slot_layout(config: Gpt2Config, context: int, chunk: int = 0) -> Layout:
    """A slot's packed state; ``chunk`` > 0 adds the activations of a batched-prefill
    chunk of that many rows."""
    d = config.n_embd
    splits = K.attention_splits(context, config.n_head)
    entries: list[tuple[str, tuple[int, ...], Any]] = [
        # attn_sync (the split attention's counters, 0 between launches) lies before seq,
        # so that every request's first upload (head_words) zeroes it as well
        ("state", (STATE_WORDS,), np.uint32), ("attn_sync", (config.n_head,), np.uint32),
        ("emb_idx", (2,), np.int64), ("seq", (context,), np.int32),
        ("te", (d,), BF16), ("pe", (d,), BF16),
        ("x", (d,), np.float32), ("xn", (d,), BF16), ("qkv", (3 * d,), np.float32), ("attn", (d,), BF16),
        ("proj", (d,), np.float32), ("fc", (4 * d,), np.float32), ("act", (4 * d,), BF16),
        ("logits", (config.vocab_size,), np.float32),
        ("attn_part", (config.n_head * splits * (config.head_dim + 2),), np.float32),
    ]
    for i in range(config.n_layer):
        entries += [(f"k{i}", (context, d), BF16), (f"v{i}", (context, d), BF16)]
    if chunk:
        entries += [
            ("px", (chunk, d), np.float32), ("pxn", (chunk, d), BF16), ("pqkv", (chunk, 3 * d), np.float32),
            ("pattn", (chunk, d), BF16), ("pproj", (chunk, d), np.float32), ("pfc", (chunk, 4 * d), np.float32),
            ("pact", (chunk, 4 * d), BF16),
        ]
    return Layout(entries)


@attrs.frozen
class StepKernels:
    """The kernels a decode step dispatches on one engine (hrx_tensor's linear + ours)."""

    linear: Any
    linear_warps: int
    gather: Any
    embed_ln: Any = K.EMBED_LN
    residual_ln: Any = K.RESIDUAL_LN
    #: the streamed decode attention (attention_streamed.py); kernels.ATTENTION is the
    #: earlier kernel with the same launch, buffers and host mirror
    attention: Any = ATTENTION_STREAMED
    bias_gelu: Any = K.BIAS_GELU
    argmax: Any = K.ARGMAX
    advance: Any = K.ADVANCE
    embed: Any = FK.EMBED
    ln_linear: Any = FK.LN_LINEAR
    #: ln_1 + QKV + attention in one kernel (fused_kernels.LN_LINEAR_ATTEND) for the short
    #: fused step (positions below K.ATTENTION_MIN_ROWS, where the split attention runs
    #: one block a head anyway); None (the default): no short step
    ln_linear_attend: Any = None
    linear_residual: Any = FK.LINEAR_RESIDUAL
    embed_rows: Any = PK.EMBED_ROWS
    gemm: Any = PK.GEMM
    kv_rows: Any = PK.KV_ROWS
    attention_rows: Any = PK.ATTENTION_ROWS
    residual_ln_rows: Any = PK.RESIDUAL_LN_ROWS
    bias_gelu_rows: Any = PK.BIAS_GELU_ROWS
    advance_rows: Any = PK.ADVANCE_ROWS
    #: BF16 tensor cores (CUDA compute capability 8.0 or newer): the prefill attention of
    #: PK.ATTENTION_ROWS_MMA (for the head dimensions it has) and the tiled GEMMs of
    #: PK.GEMM_TILED, chosen per projection shape
    tensor_cores: bool = False
    #: multiprocessors of a CUDA device: each fused GEMV then dispatches ``ln_linear`` /
    #: ``linear_residual`` specialized for the register budget its grid fills best
    #: (fused_kernels.specialize, fused_gemv_blocks); 0: the kernels as given
    gemv_sms: int = 0
    #: specialized kernels already loaded (a model session's), by name
    gemv_loaded: Mapping[str, Any] = attrs.field(factory=dict, eq=False)

    def fused_gemv(self, base: Any, k: int, n: int, width: int | None = None, head_dim: int | None = None) -> Any:
        """The kernel a fused GEMV of K = ``k`` and ``n`` rows dispatches: ``base``
        (``ln_linear``, with the model's ``width``; ``ln_linear_attend``, with its
        ``head_dim`` too; or ``linear_residual``) specialized for its register budget
        where ``gemv_sms`` is set, else ``base``."""
        if not self.gemv_sms:
            return base
        grid, _block, ksplit = linear_launch(k, n)
        blocks = FK.fused_gemv_blocks(grid, self.gemv_sms, FK.lane_share(k, ksplit))
        spec = FK.specialize(base, blocks=blocks, width=width, head_dim=head_dim)
        return self.gemv_loaded.get(spec.name, spec)

    def fused_gemv_kernels(self, cfg: Gpt2Config) -> list[Any]:
        """The specialized kernels the fused step of ``cfg`` dispatches (none where
        ``gemv_sms`` is 0): what a model session loads beside the others."""
        if not self.gemv_sms:
            return []
        found: dict[str, Any] = {}
        for base, k, n, width, head_dim in _fused_gemv_shapes(self, cfg):
            spec = self.fused_gemv(base, k, n, width, head_dim)
            found.setdefault(spec.name, spec)
        return list(found.values())

    @classmethod
    def for_device(cls, info: Any) -> StepKernels:
        """The kernels for a device (:class:`hrx_core.engine.DeviceInfo`): the engine's,
        with the tensor-core prefill attention where the device has BF16 mma (sm_80+)."""
        kernels = cls.for_engine(info.engine)
        cc = str(info.properties.get("compute_capability", "")) if info.engine == "cuda" else ""
        if cc and int(cc.split(".")[0]) >= 8:
            kernels = attrs.evolve(kernels, tensor_cores=True)
        try:
            sms = int(info.properties.get("multiprocessors", 0) or 0) if info.engine == "cuda" else 0
        except (TypeError, ValueError):  # not a count: the kernels as given
            sms = 0
        if sms > 0:
            kernels = attrs.evolve(kernels, gemv_sms=sms)
        return kernels

    @classmethod
    def for_engine(cls, engine: str) -> StepKernels:
        if not K.kernels_for(engine):
            raise Unsupported(f"device: hrx_models has no GPT-2 kernels for engine {engine!r}; "
                              f"implementations exist for: {', '.join(K.ENGINES)}")
        from hrx_tensor import kernels as tensor_kernels

        found = tensor_kernels.kernels_for(engine)
        if not found:
            raise Unsupported(f"device: hrx_tensor has no linear kernel for engine {engine!r}")
        return cls(found[tensor_kernels.LINEAR.name], tensor_kernels.LINEAR_WARPS, found[tensor_kernels.GATHER.name])


def record_step(g: Any, k: StepKernels, cfg: Gpt2Config, context: int, w: Callable[[str], Any],
                s: Mapping[str, Any], *, logits: bool, fused: bool = False, short: bool = False) -> None:
    """Record one decode step into ``g`` (anything with ``dispatch(kernel, grid, bindings,
    block=, scalars=)``: a stream's access graph, a tracked-graph compute region).

    ``w(name)`` gives the view of a parameter (HF name, device layout); ``s`` the slot's
    views by :func:`slot_layout` name. ``logits=False`` records the prefill variant.
    ``fused`` records the fused step (:mod:`.fused_kernels`: 5 kernels a layer, not 8);
    ``short`` with it, the fused step of positions below K.ATTENTION_MIN_ROWS (4 kernels a
    layer: :func:`attends_in_qkv` must hold). Either step is right at every position;
    the short one is meant for those positions (past them its one attention block a head
    is slower than the split kernel) and is not yet faster there (docs/model_gpt2.md).
    """
    if short and not (fused and attends_in_qkv(k, cfg)):
        raise ValueError("short: the fused step with a ln_linear_attend that fits this model (attends_in_qkv)")
    d, p, v = cfg.n_embd, context, cfg.vocab_size
    eps = np.float32(cfg.layer_norm_epsilon)
    scale = np.float32(1.0 / math.sqrt(cfg.head_dim))

    splits = K.attention_splits(context, cfg.n_head)

    def attention(i: int) -> None:
        h = f"h.{i}."
        g.dispatch(k.attention, cfg.n_head * splits,
                   [s["qkv"], w(h + "attn.c_attn.bias"), s["state"], s[f"k{i}"], s[f"v{i}"], s["attn"], s["attn_part"],
                    s["attn_sync"]],
                   block=K.ATTENTION_THREADS,
                   scalars=(np.uint32(d), np.uint32(cfg.head_dim), np.uint32(p), scale, np.uint32(splits)))

    def finish() -> None:
        if logits:
            g.dispatch(k.argmax, 1, [s["logits"], s["state"], s["seq"], s["emb_idx"]], block=K.ARGMAX_THREADS,
                       scalars=(np.uint32(v), np.uint32(p)))
        else:
            g.dispatch(k.advance, 1, [s["state"], s["seq"], s["emb_idx"]], block=32, scalars=(np.uint32(p),))

    if fused:
        _record_fused_layers(g, k, cfg, w, s, attention, logits=logits, short=short, context=p)
        finish()
        return

    def project(x: Any, weight: str, y: Any, kdim: int, n: int) -> None:
        wv = w(weight)
        grid, block, ksplit = linear_launch(kdim, n)
        g.dispatch(k.linear, grid, [x, wv, wv, wv, y], block=block,
                   scalars=(np.uint32(kdim), np.uint32(n), np.uint32(0), np.uint32(0), np.uint32(1), np.uint32(ksplit)))

    def residual_ln(bias: str, ln: str) -> None:
        g.dispatch(k.residual_ln, 1, [s["x"], s["proj"], w(bias), w(ln + ".weight"), w(ln + ".bias"), s["xn"]],
                   block=K.ln_block(d), scalars=(np.uint32(d), eps))

    # embeddings: hrx_tensor's gather (the kernel of TensorOps.gather_rows) of one row each,
    # indexed by the device-side emb_idx = [token, position]
    units = 2 * d // 16  # 16-byte units (rows are 2 * n_embd bytes, a multiple of 16)
    ggrid, gblock, gshift = gather_launch(units, 1)
    for table, idx, row in (("wte.weight", 0, "te"), ("wpe.weight", 8, "pe")):
        g.dispatch(k.gather, ggrid, [w(table), s["emb_idx"].slice(idx, 8), s[row]], block=gblock,
                   scalars=(np.uint64(units), np.uint32(16), np.uint64(1), np.uint32(gshift)))
    g.dispatch(k.embed_ln, 1, [s["te"], s["pe"], w("h.0.ln_1.weight"), w("h.0.ln_1.bias"), s["x"], s["xn"]],
               block=K.ln_block(d), scalars=(np.uint32(d), eps))
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        project(s["xn"], h + "attn.c_attn.weight", s["qkv"], d, 3 * d)
        attention(i)
        project(s["attn"], h + "attn.c_proj.weight", s["proj"], d, d)
        residual_ln(h + "attn.c_proj.bias", h + "ln_2")
        project(s["xn"], h + "mlp.c_fc.weight", s["fc"], d, 4 * d)
        g.dispatch(k.bias_gelu, -(-4 * d // K.GELU_THREADS), [s["fc"], w(h + "mlp.c_fc.bias"), s["act"]],
                   block=K.GELU_THREADS, scalars=(np.uint32(4 * d),))
        project(s["act"], h + "mlp.c_proj.weight", s["proj"], 4 * d, d)
        residual_ln(h + "mlp.c_proj.bias", f"h.{i + 1}.ln_1" if i + 1 < cfg.n_layer else "ln_f")
    if logits:
        project(s["xn"], "wte.weight", s["logits"], d, v)
    finish()


def _fused_gemv_shapes(k: StepKernels, cfg: Gpt2Config) -> list[tuple[Any, int, int, int | None, int | None]]:
    """(base kernel, K, N, width, head_dim) of every fused GEMV of a step: what
    :func:`_record_fused_layers` dispatches (the short steps' as well)."""
    d = cfg.n_embd
    shapes: list[tuple[Any, int, int, int | None, int | None]] = [
        (k.ln_linear, d, 3 * d, d, None), (k.linear_residual, d, d, None, None), (k.ln_linear, d, 4 * d, d, None),
        (k.linear_residual, 4 * d, d, None, None), (k.ln_linear, d, cfg.vocab_size, d, None)]
    if attends_in_qkv(k, cfg):
        shapes.append((k.ln_linear_attend, d, 3 * d, d, cfg.head_dim))
    return shapes


def short_position(pos: int) -> bool:
    """Whether a slot with short steps replays the short one at position ``pos``: below
    K.ATTENTION_MIN_ROWS, where the split attention runs one block a head anyway."""
    return pos < K.ATTENTION_MIN_ROWS


def attends_in_qkv(k: StepKernels, cfg: Gpt2Config) -> bool:
    """Whether the fused step of ``cfg`` has a short form (positions below
    K.ATTENTION_MIN_ROWS) with the attention in the QKV projection's kernel: there is a
    ``ln_linear_attend`` and its launch fits (each block's rows of linear_launch(d, 3 d)
    lie in one head's q, k or v rows; a power-of-two head_dim of 8..MAX_HEAD_DIM)."""
    if k.ln_linear_attend is None:
        return False
    hd, d = cfg.head_dim, cfg.n_embd
    _grid, block, ksplit = linear_launch(d, 3 * d)
    rows = block // 32 // ksplit
    return 8 <= hd <= MAX_HEAD_DIM and hd & (hd - 1) == 0 and d % hd == 0 and hd % rows == 0 and block == 256


def _record_fused_layers(g: Any, k: StepKernels, cfg: Gpt2Config, w: Callable[[str], Any], s: Mapping[str, Any],
                         attention: Callable[[int], None], *, logits: bool, short: bool = False,
                         context: int = 0) -> None:
    """The fused step up to the logits: embeddings, then per layer ln_1 + QKV, attention,
    proj + residual, ln_2 + fc + GELU, proj + residual; ln_f + the tied logits. ``short``
    (where :func:`attends_in_qkv`): ln_1 + QKV + attention as one kernel a layer."""
    d = cfg.n_embd
    eps = np.float32(cfg.layer_norm_epsilon)
    scale = np.float32(1.0 / math.sqrt(cfg.head_dim))

    def ln_linear_attend(i: int) -> None:
        h = f"h.{i}."
        grid, block, ksplit = linear_launch(d, 3 * d)
        g.dispatch(k.fused_gemv(k.ln_linear_attend, d, 3 * d, d, cfg.head_dim), grid,
                   [s["x"], w(h + "ln_1.weight"), w(h + "ln_1.bias"), w(h + "attn.c_attn.weight"),
                    w(h + "attn.c_attn.bias"), s["qkv"], s["state"], s[f"k{i}"], s[f"v{i}"], s["attn"], s["attn_sync"]],
                   block=block, scalars=(np.uint32(d), eps, np.uint32(ksplit), np.uint32(cfg.head_dim),
                                         np.uint32(context), scale))

    def ln_linear(ln: str, weight: str, bias: str, out: Any, n: int, gelu: int) -> None:
        grid, block, ksplit = linear_launch(d, n)
        # ``out`` is bound as both outputs (F32 y, BF16 act): the kernel writes the one ``gelu`` selects
        g.dispatch(k.fused_gemv(k.ln_linear, d, n, d), grid,
                   [s["x"], w(ln + ".weight"), w(ln + ".bias"), w(weight), w(bias), out, out],
                   block=block, scalars=(np.uint32(d), np.uint32(n), eps, np.uint32(ksplit), np.uint32(gelu)))

    def linear_residual(a: Any, weight: str, bias: str, kdim: int) -> None:
        grid, block, ksplit = linear_launch(kdim, d)
        g.dispatch(k.fused_gemv(k.linear_residual, kdim, d), grid, [a, w(weight), w(bias), s["x"]], block=block,
                   scalars=(np.uint32(kdim), np.uint32(d), np.uint32(ksplit)))

    g.dispatch(k.embed, -(-d // FK.EMBED_THREADS), [w("wte.weight"), w("wpe.weight"), s["emb_idx"], s["x"]],
               block=FK.EMBED_THREADS, scalars=(np.uint32(d),))
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        if short:
            ln_linear_attend(i)
        else:
            ln_linear(h + "ln_1", h + "attn.c_attn.weight", h + "attn.c_attn.bias", s["qkv"], 3 * d, 0)
            attention(i)
        linear_residual(s["attn"], h + "attn.c_proj.weight", h + "attn.c_proj.bias", d)
        ln_linear(h + "ln_2", h + "mlp.c_fc.weight", h + "mlp.c_fc.bias", s["act"], 4 * d, 1)
        linear_residual(s["act"], h + "mlp.c_proj.weight", h + "mlp.c_proj.bias", 4 * d)
    if logits:
        ln_linear("ln_f", "wte.weight", "ln_f.bias", s["logits"], cfg.vocab_size, 0)


def record_prefill_chunk(g: Any, k: StepKernels, cfg: Gpt2Config, context: int, chunk: int,
                         w: Callable[[str], Any], s: Mapping[str, Any]) -> None:
    """Record one batched-prefill chunk of up to ``chunk`` rows into ``g`` (the positions
    ``pos .. min(pos + chunk, n_prompt - 1) - 1``, read from the slot state by every
    kernel); ``w`` and ``s`` as for :func:`record_step` (``s`` of a layout with ``chunk``)."""
    d, p, c = cfg.n_embd, context, chunk
    eps, cs, st = np.float32(cfg.layer_norm_epsilon), np.uint32(chunk), s["state"]
    row_tiles = -(-c // PK.GEMM_BM)

    def gemm(a: Any, weight: str, y: Any, kdim: int, n: int) -> None:
        if k.tensor_cores:
            tiles = PK.gemm_tiles_for(c, kdim, n)
            kernel, grid, block = PK.GEMM_TILED[tiles], tiles.grid(n, c), tiles.threads
        else:
            kernel, grid, block = k.gemm, (-(-n // PK.GEMM_BN), row_tiles), PK.GEMM_THREADS
        g.dispatch(kernel, grid, [a, w(weight), st, y], block=block, scalars=(np.uint32(kdim), np.uint32(n), cs))

    def residual_ln(bias: str, ln: str) -> None:
        g.dispatch(k.residual_ln_rows, c, [s["px"], s["pproj"], w(bias), w(ln + ".weight"), w(ln + ".bias"), s["pxn"], st],
                   block=K.ln_block(d), scalars=(np.uint32(d), eps, cs))

    g.dispatch(k.embed_rows, c, [w("wte.weight"), w("wpe.weight"), st, s["seq"], w("h.0.ln_1.weight"),
                                 w("h.0.ln_1.bias"), s["px"], s["pxn"]],
               block=K.ln_block(d), scalars=(np.uint32(d), eps, cs, np.uint32(cfg.vocab_size), np.uint32(p)))
    scale = np.float32(1.0 / math.sqrt(cfg.head_dim))
    if k.tensor_cores and cfg.head_dim in PK.ATTENTION_ROWS_MMA:
        warps = PK.attention_mma_warps(cfg.n_head, c)
        attention_rows, attention_rows_block, attention_threads = PK.ATTENTION_ROWS_MMA[cfg.head_dim], 16 * warps, 32 * warps
    else:
        attention_rows, attention_rows_block, attention_threads = k.attention_rows, PK.ATTENTION_ROWS_PER_BLOCK, 256
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        gemm(s["pxn"], h + "attn.c_attn.weight", s["pqkv"], d, 3 * d)
        g.dispatch(k.kv_rows, c, [s["pqkv"], w(h + "attn.c_attn.bias"), st, s[f"k{i}"], s[f"v{i}"]], block=256,
                   scalars=(np.uint32(d), np.uint32(p), cs))
        g.dispatch(attention_rows, (cfg.n_head, -(-c // attention_rows_block)),
                   [s["pqkv"], w(h + "attn.c_attn.bias"), st, s[f"k{i}"], s[f"v{i}"], s["pattn"]],
                   block=attention_threads, scalars=(np.uint32(d), np.uint32(cfg.head_dim), np.uint32(p), scale, cs))
        gemm(s["pattn"], h + "attn.c_proj.weight", s["pproj"], d, d)
        residual_ln(h + "attn.c_proj.bias", h + "ln_2")
        if k.tensor_cores:  # bias and GELU in the GEMM's epilogue
            tiles = PK.gemm_tiles_for(c, d, 4 * d)
            g.dispatch(PK.GEMM_GELU_TILED[tiles], tiles.grid(4 * d, c),
                       [s["pxn"], w(h + "mlp.c_fc.weight"), st, w(h + "mlp.c_fc.bias"), s["pact"]],
                       block=tiles.threads, scalars=(np.uint32(d), np.uint32(4 * d), cs))
        else:
            gemm(s["pxn"], h + "mlp.c_fc.weight", s["pfc"], d, 4 * d)
            g.dispatch(k.bias_gelu_rows, -(-c * 4 * d // K.GELU_THREADS), [s["pfc"], w(h + "mlp.c_fc.bias"), st, s["pact"]],
                       block=K.GELU_THREADS, scalars=(np.uint32(4 * d), cs))
        gemm(s["pact"], h + "mlp.c_proj.weight", s["pproj"], 4 * d, d)
        residual_ln(h + "mlp.c_proj.bias", f"h.{i + 1}.ln_1" if i + 1 < cfg.n_layer else "ln_f")
    g.dispatch(k.advance_rows, 1, [st, s["seq"], s["emb_idx"]], block=32, scalars=(np.uint32(p), cs))


def head_words(layout: Layout, ids: np.ndarray, context: int | None = None) -> np.ndarray:
    """The first words of a slot for a request: state [0, len(ids), 0, 0], the embedding
    indices [ids[0], 0] (int64), then ``ids`` (int32) -- and zeros up to ``context``
    tokens if given."""
    seq_word = layout.entries["seq"][0] // 4
    out = np.zeros(seq_word + (ids.size if context is None else context), dtype=np.uint32)
    out[1] = ids.size
    idx_word = layout.entries["emb_idx"][0] // 4
    out[idx_word : idx_word + 4].view(np.int64)[:] = (int(ids[0]), 0)
    out[seq_word : seq_word + ids.size] = ids.astype(np.int32).view(np.uint32)
    return out


def check_prompt(config: Gpt2Config, context: int, prompt: Sequence[int] | np.ndarray) -> np.ndarray:
    """Validate token ids against ``config`` and ``context``; the prompt as int32."""
    try:
        ids = np.asarray(prompt)
    except (TypeError, ValueError):
        raise InvalidArgument(f"prompt: not a sequence of token ids ({type(prompt).__name__})") from None
    if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu":
        raise InvalidArgument(f"prompt: expected a nonempty 1-D sequence of integer token ids, got {ids.dtype} {list(ids.shape)}")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= config.vocab_size:
        raise InvalidArgument(f"prompt: token id {lo if lo < 0 else hi} is outside 0..{config.vocab_size - 1} (vocab_size)")
    if ids.size > context:
        raise InvalidArgument(f"prompt: {ids.size} tokens exceed the context of {context} positions")
    return ids.astype(np.int32)


def check_request(config: Gpt2Config, context: int, prompt: Sequence[int], max_new_tokens: int) -> np.ndarray:
    """Validate a request (prompt and max_new_tokens); the prompt as int32."""
    ids = check_prompt(config, context, prompt)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise InvalidArgument(f"max_new_tokens: expected an int >= 1, got {show(max_new_tokens)}")
    if ids.size + int(max_new_tokens) > context:
        raise InvalidArgument(
            f"max_new_tokens: prompt ({ids.size}) + max_new_tokens ({max_new_tokens}) = {ids.size + int(max_new_tokens)} "
            f"exceeds the context of {context} positions"
        )
    return ids


def encode_prompt(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """The token ids of a text prompt (InvalidArgument for a non-str or an empty encoding)."""
    if not isinstance(prompt, str):
        raise InvalidArgument(f"prompt: expected a str, got {type(prompt).__name__}")
    ids = tokenizer.encode(prompt)
    if not ids:
        raise InvalidArgument(f"prompt: {show(prompt)} encodes to no tokens")
    return ids


async def _settled(done: Any) -> None:
    """Await ``done`` without raising its failure (the stream reports it, once)."""
    try:
        await done
    except HRXError:
        pass


class DecoderSlot:
    """One request's state and recorded step graphs (see the module docstring).

    Use from one thread at a time (a lock serializes calls); create through
    :meth:`Gpt2Decoder.new_slot` or lease with :meth:`Gpt2Decoder.slot`.
    """

    def __init__(self, decoder: Gpt2Decoder, index: int) -> None:
        self.decoder = decoder
        self.index = index
        self.config = decoder.config
        self.context = decoder.context
        self.stream = decoder.device.stream()
        #: rows of a batched-prefill chunk (0: the prompt goes one position per step)
        self.chunk = min(decoder.prefill_chunk, self.context)
        self.layout = slot_layout(self.config, self.context, self.chunk)
        self.buffer = decoder.device.allocate(self.layout.nbytes, budget=decoder.budget)
        self._lock = threading.Lock()
        self._prompt: tuple[int, ...] = ()
        self._pos = 0
        graphs = []
        try:
            self.step_graph = self._record(logits=True)
            graphs.append(self.step_graph)
            self.prefill_graph = self._record(logits=False)
            graphs.append(self.prefill_graph)
            self.chunk_graph = self._record_chunk(self.chunk) if self.chunk else None
            if self.chunk_graph is not None:
                graphs.append(self.chunk_graph)
            #: the small chunk graph (PREFILL_SMALL_CHUNK rows), where the chunk is larger
            self.small_chunk_graph = self._record_chunk(PREFILL_SMALL_CHUNK) if has_small_chunk(self.chunk) else None
            if self.small_chunk_graph is not None:
                graphs.append(self.small_chunk_graph)
            #: the short steps (positions below K.ATTENTION_MIN_ROWS), where the decoder records them
            self.short_step_graph: Any = None
            self.short_prefill_graph: Any = None
            if decoder.short_steps:
                self.short_step_graph = self._record(logits=True, short=True)
                graphs.append(self.short_step_graph)
                self.short_prefill_graph = self._record(logits=False, short=True)
                graphs.append(self.short_prefill_graph)
        except BaseException:
            for graph in graphs:
                graph.close()
            self.buffer.close()
            raise

    def __repr__(self) -> str:
        return f"<hrx_models.DecoderSlot {self.index} of {self.decoder!r}>"

    # -- recording ------------------------------------------------------------------

    def _record(self, *, logits: bool, short: bool = False) -> Any:
        g = self.stream.access_graph()
        record_step(g, self.decoder.kernels, self.config, self.context, self.decoder.weights.view,
                    self.layout.views(self.buffer), logits=logits, fused=self.decoder.fused, short=short)
        return g

    def _record_chunk(self, rows: int) -> Any:
        g = self.stream.access_graph()
        record_prefill_chunk(g, self.decoder.kernels, self.config, self.context, rows, self.decoder.weights.view,
                             self.layout.views(self.buffer))
        return g

    # -- requests -------------------------------------------------------------------

    def check_prompt(self, prompt: Sequence[int] | np.ndarray) -> np.ndarray:
        """Validate token ids (InvalidArgument naming the bad id); the prompt as int32."""
        return check_prompt(self.config, self.context, prompt)

    def check_request(self, prompt: Sequence[int], max_new_tokens: int) -> np.ndarray:
        """Validate a request (prompt and max_new_tokens); the prompt as int32."""
        return check_request(self.config, self.context, prompt, max_new_tokens)

    def start(self, prompt: Sequence[int] | np.ndarray) -> None:
        """Reset the slot to position 0 with ``prompt`` (one upload of state and prompt; the
        cache needs no clearing: attention reads only rows this request wrote)."""
        ids = self.check_prompt(prompt)
        head = head_words(self.layout, ids)
        self.stream.upload(self.buffer.slice(0, head.nbytes), head.view(np.uint8))
        self._prompt = tuple(int(t) for t in ids)
        self._pos = 0

    @property
    def position(self) -> int:
        """The position the next step processes (host mirror of the device state)."""
        return self._pos

    def step(self, *, logits: bool = True) -> Any:
        """Process one position (replay a recorded graph); returns its Completion."""
        if self._pos >= self.context:
            raise InvalidArgument(f"step: position {self._pos} is past the context of {self.context}")
        if self.short_step_graph is not None and short_position(self._pos):
            graph = self.short_step_graph if logits else self.short_prefill_graph
        else:
            graph = self.step_graph if logits else self.prefill_graph
        done = graph.launch()
        self._pos += 1
        return done

    def prefill(self) -> Any:
        """After :meth:`start`: process the prompt's positions but the last -- in chunks of
        ``chunk`` rows through the batched graph (the last PREFILL_SMALL_CHUNK rows or
        fewer through the small chunk graph, where there is one), or one step each when
        ``chunk`` is 0. Returns the completion of the last launch (None for a one-token
        prompt); the next :meth:`step` produces the first token."""
        left = len(self._prompt) - 1 - self._pos
        done = None
        if left <= 0:
            return done
        if self.chunk_graph is None:
            for _ in range(left):
                done = self.step(logits=False)
            return done
        self._pos += left
        graphs = {self.chunk: self.chunk_graph}
        if self.small_chunk_graph is not None:
            graphs[PREFILL_SMALL_CHUNK] = self.small_chunk_graph
        for rows in prefill_launches(left, self.chunk):
            done = graphs[rows].launch()
        return done

    def logits(self) -> np.ndarray:
        """The F32 logits of the last ``step(logits=True)`` (downloaded)."""
        return self.stream.download(self.layout.view(self.buffer, "logits")).view(np.float32).copy()

    def tokens(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The device-side token sequence [start, stop) (prompt then generated), int32."""
        stop = self._pos + 1 if stop is None else stop
        seq_off = self.layout.entries["seq"][0]
        if not 0 <= start < stop <= self.context:
            raise InvalidArgument(f"tokens: range [{start}, {stop}) is outside 0..{self.context}")
        return self.stream.download(self.buffer.slice(seq_off + 4 * start, 4 * (stop - start))).view(np.int32).copy()

    def generate(self, prompt: Sequence[int], max_new_tokens: int, *,
                 on_token: Callable[[int, int], Any] | None = None, trace: Any = None) -> Generation:
        """Greedy decoding: ``max_new_tokens`` tokens after ``prompt``.

        Without ``on_token``/``trace`` the steps are launched back to back and the
        tokens downloaded once at the end. ``on_token(index, token)`` or a
        ``trace`` (:class:`hrx_core.execution.trace.TraceRecorder`) waits for each step
        and reports it (one slice per step on the track ``slot <index>``).
        """
        ids = self.check_request(prompt, max_new_tokens)
        n = int(max_new_tokens)
        with self._lock:
            t0 = time.perf_counter_ns()
            self.start(ids)
            self.prefill()
            self.stream.synchronize()
            t1 = time.perf_counter_ns()
            track = None
            if trace is not None:
                track = trace.track(f"slot {self.index}", "gpt2")
                trace.slice(track, "prefill", t0, t1, args={"prompt_tokens": int(ids.size)})
            if on_token is None and trace is None:
                for _ in range(n):
                    self.step()
                self.stream.synchronize()  # raises (once) if any step failed: never stale tokens
                out = self.tokens(ids.size, ids.size + n)
            else:
                out = np.empty(n, dtype=np.int32)
                seq_off = self.layout.entries["seq"][0]
                for i in range(n):
                    ts = time.perf_counter_ns()
                    self.step()
                    self.stream.synchronize()
                    pos = ids.size + i
                    out[i] = self.stream.download(self.buffer.slice(seq_off + 4 * pos, 4)).view(np.int32)[0]
                    if track is not None:
                        trace.slice(track, "decode", ts, time.perf_counter_ns(), args={"position": pos - 1, "token": int(out[i])})
                    if on_token is not None:
                        on_token(i, int(out[i]))
            t2 = time.perf_counter_ns()
        return Generation(tuple(int(t) for t in ids), tuple(int(t) for t in out), (t1 - t0) / 1e9, (t2 - t1) / 1e9)

    def generate_text(self, prompt: str, max_new_tokens: int, **options: Any) -> TextGeneration:
        """:meth:`generate` on text: ``prompt`` encoded and the new tokens decoded with the
        checkpoint's tokenizer (:attr:`Gpt2Decoder.tokenizer`)."""
        ids = encode_prompt(self.decoder.tokenizer, prompt)
        gen = self.generate(ids, max_new_tokens, **options)
        return TextGeneration(prompt, self.decoder.tokenizer.decode(gen.tokens), gen)

    async def generate_async(self, prompt: Sequence[int], max_new_tokens: int) -> Generation:
        """:meth:`generate` for asyncio: the steps are launched, then awaited (the event
        loop runs other tasks -- other slots -- meanwhile)."""
        ids = self.check_request(prompt, max_new_tokens)
        n = int(max_new_tokens)
        while not self._lock.acquire(blocking=False):
            await asyncio.sleep(0.001)
        try:
            t0 = time.perf_counter_ns()
            self.start(ids)
            done = self.prefill()
            if done is not None:
                await _settled(done)
            self.stream.synchronize()  # complete already: reports a failure once
            t1 = time.perf_counter_ns()
            for _ in range(n):
                done = self.step()
            await _settled(done)
            self.stream.synchronize()
            out = self.tokens(ids.size, ids.size + n)
            t2 = time.perf_counter_ns()
        finally:
            self._lock.release()
        return Generation(tuple(int(t) for t in ids), tuple(int(t) for t in out), (t1 - t0) / 1e9, (t2 - t1) / 1e9)

    def close(self) -> None:
        """Free the slot's graphs and memory (after its work)."""
        try:
            self.stream.synchronize()
        finally:
            self.step_graph.close()
            self.prefill_graph.close()
            for graph in (self.chunk_graph, self.small_chunk_graph, self.short_step_graph, self.short_prefill_graph):
                if graph is not None:
                    graph.close()
            self.buffer.close()


class Gpt2Decoder:
    """A GPT-2 loaded on one device, with a pool of :class:`DecoderSlot` for requests.

    ``context`` (default n_positions) sizes each slot's KV cache; ``max_slots``
    bounds the pool (leasing waits for a free slot beyond it); ``prefill_chunk`` is
    the rows of a batched-prefill chunk (at most the context; 0 runs the prompt one
    position per decode-shaped step, as before batched prefill); ``fused`` records the
    fused decode step (:mod:`.fused_kernels`), else the step of separate kernels;
    ``short_steps`` (with ``fused``; off by default, see docs/model_gpt2.md: not yet
    faster) records a second fused step for the positions below
    ``kernels.ATTENTION_MIN_ROWS``, with each layer's attention in its QKV kernel (4
    kernels a layer instead of 5: the same results within F32 rounding), where the
    model's shape allows (:func:`attends_in_qkv`).
    """

    def __init__(self, weights: Gpt2Weights, device: Any, *, budget: MemoryBudget | None = None,
                 context: int | None = None, max_slots: int = 8, prefill_chunk: int = PREFILL_CHUNK,
                 fused: bool = True, short_steps: bool = False) -> None:
        cfg = weights.config
        context = cfg.n_positions if context is None else context
        if isinstance(context, bool) or not isinstance(context, int) or not 1 <= context <= cfg.n_positions:
            raise InvalidArgument(f"context: expected an int in 1..{cfg.n_positions} (n_positions), got {show(context)}")
        if isinstance(max_slots, bool) or not isinstance(max_slots, int) or max_slots < 1:
            raise InvalidArgument(f"max_slots: expected an int >= 1, got {show(max_slots)}")
        if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 0:
            raise InvalidArgument(f"prefill_chunk: expected an int >= 0, got {show(prefill_chunk)}")
        if not isinstance(fused, bool):
            raise InvalidArgument(f"fused: expected a bool, got {show(fused)}")
        if not isinstance(short_steps, bool):
            raise InvalidArgument(f"short_steps: expected a bool, got {show(short_steps)}")
        self.kernels = StepKernels.for_device(device.info)
        if short_steps:
            self.kernels = attrs.evolve(self.kernels, ln_linear_attend=FK.LN_LINEAR_ATTEND)
        self.weights = weights
        self.config = cfg
        self.device = device
        self.budget = budget
        self.context = context
        self.max_slots = max_slots
        self.prefill_chunk = prefill_chunk
        self.fused = fused
        #: whether slots record the short fused step (see the class docstring)
        self.short_steps = short_steps and fused and attends_in_qkv(self.kernels, cfg)
        self._slots: list[DecoderSlot] = []
        self._idle: list[DecoderSlot] = []
        self._cond = threading.Condition()
        self._closed = False
        self._tokenizer: Tokenizer | None = None

    @classmethod
    def load(cls, directory: str | os.PathLike[str], device: Any = None, *, budget: MemoryBudget | None = None,
             context: int | None = None, max_slots: int = 8, prefill_chunk: int = PREFILL_CHUNK,
             fused: bool = True, short_steps: bool = False) -> Gpt2Decoder:
        """Load a Hugging Face GPT-2 checkpoint onto ``device`` (default: the best one).

        ``directory`` is a checkpoint directory or a Hugging Face repo id (``"gpt2"``),
        resolved through :func:`hrx_models.resolve.resolve_checkpoint` (cache first; offline
        or without network a missing file fails at once, listing what is missing).
        ``budget`` is charged for the weights and every slot; ``context``, ``max_slots``,
        ``prefill_chunk``, ``fused`` and ``short_steps`` as for the constructor.
        """
        import hrx_core as hrx

        from ..resolve import is_repo_id, resolve_checkpoint

        if isinstance(directory, str) and not os.path.exists(directory) and is_repo_id(directory):
            directory = resolve_checkpoint(directory, tokenizer=None)  # its tokenizer too, where it has one
        device = hrx.device() if device is None else device
        stream = device.stream()
        try:
            weights = load_weights(Path(directory), stream, budget=budget)
        finally:
            stream.close()  # frees the loader's staging
        try:
            return cls(weights, device, budget=budget, context=context, max_slots=max_slots, prefill_chunk=prefill_chunk,
                       fused=fused, short_steps=short_steps)
        except BaseException:
            weights.close()
            raise

    def __repr__(self) -> str:
        c = self.config
        return f"<hrx_models.Gpt2Decoder {c.n_layer}x{c.n_embd} heads={c.n_head} V={c.vocab_size} on {self.device.name}>"

    @property
    def tokenizer(self) -> Tokenizer:
        """The checkpoint's tokenizer (loaded on first use from its directory); raises
        :class:`~hrx_models.tokenizer.MissingTokenizer` where the checkpoint has none."""
        if self._tokenizer is None:
            tok = Tokenizer.load(self.weights.source)
            if tok.vocab_size > self.config.vocab_size:
                raise ArtifactError(
                    f"{tok.source}: the tokenizer has {tok.vocab_size} tokens, more than the model's "
                    f"vocab_size {self.config.vocab_size}: it belongs to another model"
                )
            self._tokenizer = tok
        return self._tokenizer

    # -- slots ----------------------------------------------------------------------

    def new_slot(self) -> DecoderSlot:
        """A new slot (allocates its state and cache, records its graphs); not pooled."""
        return DecoderSlot(self, len(self._slots) + 1000)

    @contextlib.contextmanager
    def slot(self, timeout: float | None = None) -> Iterator[DecoderSlot]:
        """Lease a pooled slot (created on demand up to ``max_slots``)."""
        s = self.acquire(timeout)
        try:
            yield s
        finally:
            self.release(s)

    def acquire(self, timeout: float | None = None, *, block: bool = True) -> DecoderSlot:
        """Lease a pooled slot; waits up to ``timeout`` (None: indefinitely), or raises
        Timeout at once with ``block=False`` when all are leased."""
        timeout = check_timeout("timeout", timeout)
        if not isinstance(block, bool):
            raise InvalidArgument(f"block: expected a bool, got {show(block)}")
        if self._closed:
            raise InvalidArgument("decoder is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._idle and len(self._slots) >= self.max_slots:
                if not block:
                    raise Timeout(f"slot: all {self.max_slots} slots are leased")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise Timeout(f"slot: no slot of {self.max_slots} became free within {timeout} s")
                self._cond.wait(left)
            if self._idle:
                return self._idle.pop()
            index = len(self._slots)
            self._slots.append(None)  # type: ignore[arg-type]  # reserve the index
        try:
            s = DecoderSlot(self, index)
        except BaseException:
            with self._cond:
                self._slots.pop(index)
                self._cond.notify()
            raise
        with self._cond:
            self._slots[index] = s
        return s

    def release(self, s: DecoderSlot) -> None:
        """Give a leased slot back (once: a second release raises InvalidArgument)."""
        with self._cond:
            if not isinstance(s, DecoderSlot) or s.decoder is not self:
                raise InvalidArgument(f"s: expected a DecoderSlot of this decoder, got {type(s).__name__}")
            if s in self._idle:
                raise InvalidArgument(f"s: slot {s.index} is not leased (released twice?)")
            if s not in self._slots:
                raise InvalidArgument(f"s: slot {s.index} is not one of this decoder's pooled slots")
            self._idle.append(s)
            self._cond.notify()

    @contextlib.asynccontextmanager
    async def slot_async(self) -> AsyncIterator[DecoderSlot]:
        while True:
            try:
                s = self.acquire(block=False)
                break
            except Timeout:
                await asyncio.sleep(0.001)
        try:
            yield s
        finally:
            self.release(s)

    # -- requests -------------------------------------------------------------------

    def generate(self, prompt: Sequence[int], max_new_tokens: int, **options: Any) -> Generation:
        """Greedy decoding on a pooled slot (see :meth:`DecoderSlot.generate`)."""
        check_request(self.config, self.context, prompt, max_new_tokens)  # before a slot is made
        with self.slot() as s:
            return s.generate(prompt, max_new_tokens, **options)

    def generate_text(self, prompt: str, max_new_tokens: int, **options: Any) -> TextGeneration:
        """Greedy decoding of text on a pooled slot (see :meth:`DecoderSlot.generate_text`)."""
        ids = encode_prompt(self.tokenizer, prompt)
        check_request(self.config, self.context, ids, max_new_tokens)  # before a slot is made
        with self.slot() as s:
            return s.generate_text(prompt, max_new_tokens, **options)

    async def generate_async(self, prompt: Sequence[int], max_new_tokens: int) -> Generation:
        check_request(self.config, self.context, prompt, max_new_tokens)  # before a slot is made
        async with self.slot_async() as s:
            return await s.generate_async(prompt, max_new_tokens)

    def close(self) -> None:
        """Free every slot and the weights."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            slots, self._slots, self._idle = [s for s in self._slots if s is not None], [], []
        for s in slots:
            s.close()
        self.weights.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
