"""GPT-2 decode with and without the fused GEMVs' L2 prefetch of the next GEMV's weights,
interleaved in one process (cuda).

    python bench/tools/prefetch_ab.py [--shapes gpt2,1b] [--tokens 128] [--rounds 5] [--caps 8,16,32]

Decoders of one checkpoint sharing its weights: ``Gpt2Decoder(prefetch=False)``, the
shipped prefetch (sm_90: bulk ``cp.async.bulk.prefetch.L2``) at each window cap in MiB
(``fused_kernels.PREFETCH_BYTES``, read when a slot records its graphs), and the same at
the shipped cap with every thread prefetching 128-byte lines (``prefetch.global.L2``,
the sm_80 path). Greedy decode of ``--tokens`` tokens by each in alternating rounds:
tokens/s per round and the median (bench/tools/ab.py). A diagnostic for the default of
``hrx_models.gpt2.decoder.PREFETCH``: it writes no results file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attrs
from ab import interleaved  # bench/tools/ab.py
from hrx_models.gpt2 import SHAPES, Gpt2Decoder, write_random_checkpoint
from hrx_models.gpt2 import fused_kernels as FK
from hrx_models.gpt2.loader import load_weights

import hrx_core as hrx
from hrx_core.kernel import Kernel


def lines_variant(k: Kernel) -> Kernel:
    """The fused GEMV with the sm_80 prefetch (every thread 128-byte lines) on sm_90 too."""
    src = "#define HRX_PREFETCH_LINES 1\n" + k.sources["cuda"]
    return Kernel(k.name, buffers=k.buffer_access, scalars=k.scalar_types, cuda=src, programmatic=k.programmatic)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="gpt2,1b")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--caps", default="8,16,32", help="window caps (MiB) of the bulk prefetch to compare")
    ap.add_argument("--engine", default="cuda", help="(another engine runs it as a smoke test, without the lines variant)")
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    shipped_cap = FK.PREFETCH_BYTES
    for shape in args.shapes.split(","):
        config = SHAPES[shape]
        prompt = [(i * 7919 + 13) % config.vocab_size for i in range(args.prompt)]
        context = args.prompt + args.tokens + 1
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = write_random_checkpoint(Path(tmp) / shape, config, seed=0, dtype="bf16")
            stream = dev.stream()
            weights = load_weights(ckpt, stream)
            stream.close()
        variants = [("off", False, shipped_cap, False)]
        variants += [(f"bulk {int(c)}MiB", True, int(c) << 20, False) for c in args.caps.split(",")]
        if args.engine == "cuda":
            variants += [(f"lines {shipped_cap >> 20}MiB", True, shipped_cap, True)]
        slots, decs = {}, []
        try:
            for label, prefetch, cap, lines in variants:
                FK.PREFETCH_BYTES = cap  # read when the slot records its graphs (acquire)
                dec = Gpt2Decoder(weights, dev, context=context, max_slots=1, prefetch=prefetch)
                if lines:
                    dec.kernels = attrs.evolve(dec.kernels, ln_linear=lines_variant(FK.LN_LINEAR),
                                               linear_residual=lines_variant(FK.LINEAR_RESIDUAL))
                slot = dec.acquire()
                slot.generate(prompt, 4)
                decs.append(dec)
                slots[f"{label:14s}"] = slot
            FK.PREFETCH_BYTES = shipped_cap
            interleaved(slots, prompt, args.tokens, args.rounds, shape)
        finally:
            for d in decs:  # each closes its slots and then the shared weights (a second close is a no-op)
                d.close()
            weights.close()


if __name__ == "__main__":
    main()
