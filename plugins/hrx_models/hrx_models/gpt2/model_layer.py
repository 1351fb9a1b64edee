"""The GPT-2 decoder on the hrx_core.model layer: a frozen ModelDefinition and
prepared slots with two entry points.

    ctx = ModelContext(dev, RuntimeOptions(memory_budget=budget))
    gpt2 = Gpt2Definition.load("ckpt/", ctx)              # weights + kernels, frozen
    model = gpt2.prepare(slots=2, context=256)             # PreparedModel
    with model.acquire() as slot:
        tokens = gpt2.generate(slot, [464, 2068], 32)

The definition adopts the packed weight allocation of :func:`load_weights` as one
weight (``"weights"``, not charged twice) and loads the decoder's kernels. The slot
factory allocates one slot-private tensor of :func:`slot_layout` (state, tokens,
activations, KV cache, a batched-prefill chunk's activations) and records into tracked
graphs that share it: ``"chunk"`` (:func:`record_prefill_chunk`: up to ``prefill_chunk``
prompt positions through the layers as a matrix; absent with ``prefill_chunk=0``),
``"chunk_small"`` (the same for PREFILL_SMALL_CHUNK rows, where the chunk is larger:
a prompt's last positions up to that many go through it), ``"prefill"`` (the fused
step of one prompt position, no logits) and ``"step"`` (the fused step with tied
logits + greedy argmax), and with ``short_steps`` where the model's shape allows
(``attends_in_qkv``) ``"prefill_short"`` and ``"step_short"``, the same with each layer's attention in its
QKV kernel, which :meth:`Gpt2Definition.generate` submits for positions below
``kernels.ATTENTION_MIN_ROWS``. All take the input ``"head"`` -- the
state words and the prompt, uploaded with a request's first submission only -- and
``"step"`` outputs ``"logits"`` and ``"seq"``.
Position and tokens stay on the device between submissions, exactly as with
:class:`~hrx_models.gpt2.decoder.DecoderSlot`; each step is one runtime submission
(one CUDA graph per region on cuda).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from hrx_core.errors import InvalidArgument, show

from . import fused_kernels as FK
from .config import Gpt2Config
from .decoder import (
    PREFILL_CHUNK,
    PREFILL_SMALL_CHUNK,
    StepKernels,
    attends_in_qkv,
    check_request,
    has_small_chunk,
    head_words,
    prefill_launches,
    record_prefill_chunk,
    record_step,
    short_position,
    slot_layout,
)
from .loader import load_weights, weights_layout

WEIGHTS = "weights"


class Gpt2Definition:
    """A GPT-2 frozen on the model layer (``definition``), with its config and kernels."""

    def __init__(self, definition: Any, config: Gpt2Config, kernels: StepKernels, session: Any = None) -> None:
        self.definition = definition
        self.session = session
        self.config = config
        self.kernels = kernels
        self.wlayout = weights_layout(config)

    @classmethod
    def load(cls, directory: str | os.PathLike[str], context: Any, *, name: str = "gpt2",
             budget: Any = None, short_steps: bool = False) -> Gpt2Definition:
        """Load a Hugging Face GPT-2 checkpoint into ``context`` (a ModelContext) and freeze it.

        The weights are charged to ``budget`` (default: the context's) once.
        ``short_steps`` as for :class:`~hrx_models.gpt2.decoder.Gpt2Decoder`: the slots'
        ``"prefill_short"`` / ``"step_short"`` entries, submitted below
        ATTENTION_MIN_ROWS positions.
        """
        if not isinstance(short_steps, bool):
            raise InvalidArgument(f"short_steps: expected a bool, got {show(short_steps)}")
        session = context.session(name)
        try:
            charge_to = budget if budget is not None else context.budget
            with session.in_context(charge_to):
                kernels = StepKernels.for_device(context.device.info)
                if short_steps:
                    kernels = attrs.evolve(kernels, ln_linear_attend=FK.LN_LINEAR_ATTEND)
                loaded = {}
                for k in (kernels.linear, kernels.gather, kernels.embed_ln, kernels.residual_ln, kernels.attention, kernels.bias_gelu,
                          kernels.argmax, kernels.advance, kernels.embed, kernels.ln_linear, kernels.linear_residual,
                          *([kernels.ln_linear_attend] if short_steps else [])):
                    session.load_kernel(k)
                    loaded[k.name] = session.kernel(k.name)
                stream = context.device.stream()
                weights = load_weights(Path(directory), stream, budget=charge_to)
                gemv_loaded = {}
                try:
                    for k in kernels.fused_gemv_kernels(weights.config):  # register budgets (CUDA)
                        session.load_kernel(k)
                        gemv_loaded[k.name] = session.kernel(k.name)
                    session.adopt(WEIGHTS, weights.buffer)  # already charged to charge_to: not again
                finally:
                    weights.buffer.close()  # the session holds the allocation now
                    stream.close()
            definition = session.freeze(budget=charge_to)
        except BaseException:
            session.close()
            raise
        shared = StepKernels(loaded[kernels.linear.name], kernels.linear_warps, loaded[kernels.gather.name],
                             loaded[kernels.embed_ln.name],
                             loaded[kernels.residual_ln.name], loaded[kernels.attention.name],
                             loaded[kernels.bias_gelu.name], loaded[kernels.argmax.name], loaded[kernels.advance.name],
                             embed=loaded[kernels.embed.name], ln_linear=loaded[kernels.ln_linear.name],
                             linear_residual=loaded[kernels.linear_residual.name],
                             ln_linear_attend=loaded[kernels.ln_linear_attend.name] if short_steps else None,
                             tensor_cores=kernels.tensor_cores,
                             gemv_sms=kernels.gemv_sms, gemv_loaded=gemv_loaded)
        return cls(definition, weights.config, shared, session)

    def slot_factory(self, context_len: int, chunk: int = 0) -> Any:
        """The factory ``definition.prepare`` calls once per slot (``chunk`` rows of
        batched prefill; 0: none)."""
        from hrx_core.model import InferenceGraph

        cfg, kernels, wlayout = self.config, self.kernels, self.wlayout
        layout = slot_layout(cfg, context_len, chunk)
        seq_off = layout.entries["seq"][0]

        def factory(b: Any) -> dict[str, Any]:
            weights = b.weight(WEIGHTS).view
            mem = b.tensor((layout.nbytes,), np.uint8)
            views = layout.views(mem.buffer)

            def w(name: str) -> Any:
                offset = wlayout.entries[name][0]
                return weights.slice(offset, wlayout.nbytes_of(name))

            head = mem.reshape(layout.nbytes // 4, dtype=np.uint32).rows(0, seq_off // 4 + context_len)
            seq = mem.reshape(layout.nbytes // 4, dtype=np.int32).rows(seq_off // 4, context_len)
            logits = mem.reshape(layout.nbytes // 4, dtype=np.float32).rows(
                layout.entries["logits"][0] // 4, cfg.vocab_size)
            prefill = b.graph
            prefill.compute("prefill", lambda g: record_step(g, kernels, cfg, context_len, w, views, logits=False, fused=True))
            step = b.new_graph("step")
            step.compute("step", lambda g: record_step(g, kernels, cfg, context_len, w, views, logits=True, fused=True))
            entries = {
                "prefill": InferenceGraph(inputs={"head": head}, outputs={"seq": seq}, graph=prefill),
                "step": InferenceGraph(inputs={"head": head}, outputs={"logits": logits, "seq": seq}, graph=step),
            }
            if attends_in_qkv(kernels, cfg):  # the short steps (positions below ATTENTION_MIN_ROWS)
                for name, with_logits, outputs in (("prefill_short", False, {"seq": seq}),
                                                   ("step_short", True, {"logits": logits, "seq": seq})):
                    short = b.new_graph(name)
                    short.compute(name, lambda g, with_logits=with_logits: record_step(
                        g, kernels, cfg, context_len, w, views, logits=with_logits, fused=True, short=True))
                    entries[name] = InferenceGraph(inputs={"head": head}, outputs=outputs, graph=short)
            if chunk:
                rows = b.new_graph("chunk")
                rows.compute("chunk", lambda g: record_prefill_chunk(g, kernels, cfg, context_len, chunk, w, views))
                entries["chunk"] = InferenceGraph(inputs={"head": head}, outputs={"seq": seq}, graph=rows)
            if has_small_chunk(chunk):
                small = b.new_graph("chunk_small")
                small.compute("chunk_small", lambda g: record_prefill_chunk(g, kernels, cfg, context_len,
                                                                            PREFILL_SMALL_CHUNK, w, views))
                entries["chunk_small"] = InferenceGraph(inputs={"head": head}, outputs={"seq": seq}, graph=small)
            return entries

        return factory

    def prepare(self, slots: int = 1, *, context: int | None = None, prefill_chunk: int = PREFILL_CHUNK) -> Any:
        """A PreparedModel of ``slots`` slots, each with a KV cache of ``context``
        positions and the activations of a batched-prefill chunk of ``prefill_chunk`` rows
        (at most ``context``; 0: the prompt goes one position a submission)."""
        context = self.config.n_positions if context is None else context
        if isinstance(context, bool) or not isinstance(context, int) or not 1 <= context <= self.config.n_positions:
            raise InvalidArgument(f"context: expected an int in 1..{self.config.n_positions}, got {show(context)}")
        if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 0:
            raise InvalidArgument(f"prefill_chunk: expected an int >= 0, got {show(prefill_chunk)}")
        chunk = min(prefill_chunk, context)
        model = self.definition.prepare(self.slot_factory(context, chunk), slots=slots)
        model.gpt2_context = context
        model.gpt2_chunk = chunk
        return model

    def head(self, context_len: int, prompt: np.ndarray) -> np.ndarray:
        """The ``head`` input of a request: state words [0, len(prompt), 0, 0], padding, the prompt."""
        return head_words(slot_layout(self.config, context_len), np.asarray(prompt), context_len)

    def generate(self, slot: Any, prompt: Sequence[int], max_new_tokens: int) -> tuple[int, ...]:
        """Greedy decoding on a prepared ``slot``: the prompt's positions but the last in
        batched-prefill chunks (or one submission each without them), then one submission
        per token; the prompt uploaded with the first submission, the tokens read back once
        at the end."""
        context_len, chunk = slot.model.gpt2_context, slot.model.gpt2_chunk
        ids = check_request(self.config, context_len, prompt, max_new_tokens)
        inputs: dict[str, Any] | None = {"head": self.head(context_len, ids)}
        short = attends_in_qkv(self.kernels, self.config)

        def at(entry: str, pos: int) -> str:  # the short step's entry where the decoder's slot takes it
            return entry + "_short" if short and short_position(pos) else entry

        if chunk:
            entries = ["chunk" if rows == chunk else "chunk_small" for rows in prefill_launches(ids.size - 1, chunk)]
        else:
            entries = [at("prefill", pos) for pos in range(ids.size - 1)]
        for entry in entries:
            slot.submit(inputs, entry=entry)
            inputs = None
        first = ids.size - 1  # the position of the first step
        for i in range(int(max_new_tokens) - 1):
            slot.submit(inputs, entry=at("step", first + i))
            inputs = None
        seq = slot.run(inputs, entry=at("step", first + int(max_new_tokens) - 1), read=["seq"])["seq"]
        return tuple(int(t) for t in seq[ids.size : ids.size + int(max_new_tokens)])

    def close(self) -> None:
        self.definition.close()
        if self.session is not None:
            self.session.close()
