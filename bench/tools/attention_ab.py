"""GPT-2 decode with the streamed (the decoder's) and the earlier decode attention, interleaved in one process (cuda).

    python bench/tools/attention_ab.py [--shapes gpt2,1b] [--prompts 16,960] [--tokens 63] [--rounds 7]
                                      [--row-lanes 16,8] [--source old.cu] [--bounds 4,6,8]

Decoders of the same random checkpoint: one with the earlier attention kernel
(``hrx_gpt2_attention``, swapped in through ``StepKernels.attention``), one with the
decoder's ``hrx_gpt2_attention_streamed`` (:mod:`hrx_models.gpt2.attention_streamed`),
and one per ``--row-lanes`` variant of the streamed kernel (lanes sharing a K/V row;
the kernel's own is 16), and one per ``--source`` file: a CUDA source of
``hrx_gpt2_attention_streamed`` to compare with the shipped one (an earlier revision's,
say: ``python -c "from hrx_models.gpt2 import attention_streamed as a;
print(a.ATTENTION_STREAMED_CUDA)" > old.cu`` in a checkout of it), and one per
``--bounds`` value N: the streamed kernel declared ``__launch_bounds__(256, N)`` (at
least N blocks an SM: what made the fused GEMVs faster, bench/tools/occupancy_ab.py).
For each prompt
length, greedy decode of ``--tokens`` tokens by each in alternating rounds: tokens/s
per round, the median, and how many greedy tokens each agrees on with the first
(random weights put steps near ties; the kernels add in different orders). A
diagnostic for the decoder's choice: it writes no results file. Kernel times per layer: ``python bench/tools/profile_model.py --prompt 16
[--attention earlier]`` (and ``--prompt 1000 --steps 8``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attrs
from ab import decoder_slots, interleaved  # bench/tools/ab.py
from hrx_models.gpt2 import SHAPES
from hrx_models.gpt2 import kernels as K
from hrx_models.gpt2.attention_streamed import ATTENTION_STREAMED, streamed_variant

import hrx_core as hrx
from hrx_core.kernel import Kernel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="gpt2,1b")
    ap.add_argument("--prompts", default="16,960")
    ap.add_argument("--tokens", type=int, default=63)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--engine", default="cuda")
    ap.add_argument("--row-lanes", default="", help="variants of the streamed kernel, e.g. 16,8")
    ap.add_argument("--source", action="append", default=[], help="a CUDA source of the streamed kernel (repeatable)")
    ap.add_argument("--bounds", default="", help="register budgets of the streamed kernel: minimum blocks an SM, e.g. 4,6,8")
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    prompts = [int(p) for p in args.prompts.split(",")]
    for shape in args.shapes.split(","):
        config = SHAPES[shape]
        context = min(config.n_positions, max(prompts) + args.tokens + 1)
        kernels = {"earlier": K.ATTENTION, "streamed": ATTENTION_STREAMED}
        kernels.update({f"l{n}": streamed_variant(int(n)) for n in filter(None, args.row_lanes.split(","))})
        for path in args.source:
            k = ATTENTION_STREAMED
            kernels[Path(path).stem] = Kernel(k.name, buffers=k.buffer_access, scalars=k.scalar_types,
                                              host=k.sources["host"], cuda=Path(path).read_text(), programmatic=True)
        for n in filter(None, args.bounds.split(",")):
            kernels[f"b{n}"] = bounded(ATTENTION_STREAMED, int(n))
        variants = {f"{name:18s}": with_attention(kernel) for name, kernel in kernels.items()}
        with decoder_slots(dev, shape, context, variants) as slots:
            for n in prompts:
                prompt = [(i * 7919 + 13) % config.vocab_size for i in range(n)]
                interleaved(slots, prompt, args.tokens, args.rounds, f"{shape} prompt {n:5d} attention")


def bounded(k: Kernel, blocks: int) -> Kernel:
    """``k`` declared ``__launch_bounds__(256, blocks)`` (same name: one variant a decoder)."""
    bounds = f"__launch_bounds__(256) {k.name}("
    src = k.sources["cuda"]
    if src.count(bounds) != 1 or blocks < 1:
        raise SystemExit(f"--bounds: {k.name} is not declared {bounds!r} once, or {blocks} < 1")
    return Kernel(k.name, buffers=k.buffer_access, scalars=k.scalar_types, host=k.sources["host"],
                  cuda=src.replace(bounds, f"__launch_bounds__(256, {blocks}) {k.name}("), programmatic=True)


def with_attention(kernel: Kernel):
    """A decoder's kernels with ``kernel`` as its decode attention."""
    def apply(dec) -> None:
        dec.kernels = attrs.evolve(dec.kernels, attention=kernel)
    return apply

if __name__ == "__main__":
    main()
