"""GPT-2 decode with each layer's MLP as one kernel and as two, interleaved in one process (cuda).

    python bench/tools/mlp_ab.py [--shapes gpt2,1b] [--tokens 128] [--rounds 7] [--prompt 16]
                                 [--variants two,plan,1:0,1:1,2:0,2:1,4:0,4:1,8:0,8:1]

Two decoders of the same random checkpoint: the fused step as shipped (the MLP is
``hrx_gpt2_ln_mlp``: both projections in one kernel, the second one's share added with
float reductions) and with ``StepKernels.fused_mlp=False`` (``ln_linear`` fc + GELU, then
``linear_residual`` proj). Greedy decode of ``--tokens`` tokens by each in alternating
rounds; tokens/s per round, the median, and how many greedy tokens the two agree on
(random weights put many steps near a tie, and the one-kernel MLP adds in no fixed
order, so a few may differ). A diagnostic for the default of ``fused_mlp``: it writes no
results file. ``--variants``: ``two`` (two kernels), ``plan`` (the shipped choice),
``R:P`` (R hidden units a warp, P = 1 to prefetch the second projection into L2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attrs
from hrx_models.gpt2 import SHAPES, Gpt2Decoder, write_random_checkpoint
from hrx_models.gpt2 import fused_kernels as FK

import hrx_core as hrx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="gpt2,1b")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--engine", default="cuda")
    ap.add_argument("--variants", default="two,plan")
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    for shape in args.shapes.split(","):
        config = SHAPES[shape]
        prompt = [(i * 7919 + 13) % config.vocab_size for i in range(args.prompt)]
        context = args.prompt + args.tokens + 1
        slots = {}
        decs = []
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = write_random_checkpoint(Path(tmp) / shape, config, seed=0, dtype="bf16")
            hidden = 4 * config.n_embd
            for variant in args.variants.split(","):
                dec = Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1)
                if variant == "two":
                    dec.kernels = attrs.evolve(dec.kernels, fused_mlp=False)
                    name = "two kernels"
                elif variant == "plan":
                    name = f"one, plan ({FK.mlp_rows(hidden)}:{int(FK.mlp_prefetch(config.n_embd, hidden))})"
                else:
                    rows, prefetch = (int(v) for v in variant.split(":"))
                    if hidden % (8 * rows):
                        dec.close()
                        continue
                    dec.kernels = attrs.evolve(dec.kernels, mlp_rows=rows, mlp_prefetch=bool(prefetch))
                    name = f"one, {rows}:{prefetch}"
                slot = dec.acquire()
                slot.generate(prompt, 4)  # records and warms the graphs
                decs.append(dec)
                slots[name] = slot
        rates: dict[str, list[float]] = {key: [] for key in slots}
        toks = {}
        for _ in range(args.rounds):
            for key, slot in slots.items():
                r = slot.generate(prompt, args.tokens)
                rates[key].append(r.tokens_per_s)
                toks[key] = list(r.tokens)
        first = next(iter(toks.values()))
        for key, rs in rates.items():
            same = sum(a == b for a, b in zip(first, toks[key]))
            print(f"{shape} MLP as {key:16s}: median {statistics.median(rs):8.1f} tokens/s "
                  f"({statistics.median([1e6 / r for r in rs]):7.1f} us/token), tokens agree {same}/{args.tokens}; "
                  "rounds " + " ".join(f"{r:.0f}" for r in rs), flush=True)
        for d in decs:
            d.close()


if __name__ == "__main__":
    main()
