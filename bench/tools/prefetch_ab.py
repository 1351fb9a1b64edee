"""GPT-2 decode with and without the next GEMV's weights handed to L2, interleaved (cuda).

    python bench/tools/prefetch_ab.py [--shapes gpt2,1b] [--tokens 128] [--rounds 7]
                                      [--caps 4,16,64] [--at start,end]

Decoders of the same random BF16 checkpoint: the default step, and steps whose fused
GEMVs each prefetch (``prefetch.global.L2``, every thread of the grid a 128-byte line at
a time) up to ``--caps`` MiB of the weights the next GEMV reads, at the kernel's start or
after its GEMV (``StepKernels.prefetch_bytes`` / ``prefetch_at``; fused_kernels.prefetching).
Greedy decode of ``--tokens`` tokens by each in alternating rounds; per variant the
median tokens/s and us a token, and whether its greedy tokens agree with the default's
(they must: the prefetch changes no result). The question: does weight streaming that
overlaps a kernel boundary (and the attention kernel, for the projection after it) shorten
the step? A diagnostic for the default of ``prefetch_bytes``: it writes no results file.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attrs
from ab import decode_args, decoder_slots, interleaved  # bench/tools/ab.py
from hrx_models.gpt2 import SHAPES

import hrx_core as hrx


def main() -> None:
    ap = decode_args(__doc__)
    ap.add_argument("--caps", default="4,16,64", help="MiB prefetched a GEMV at most, comma-separated")
    ap.add_argument("--at", default="start,end", help="where: start, end or both (comma-separated)")
    ap.add_argument("--engine", default="cuda", help="the device's engine (host: a check of the tool, no prefetch)")
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    where = {"start": 0, "end": 1}
    variants: dict[str, tuple[int, int]] = {"default": (0, 1)}
    for at in args.at.split(","):
        for cap in args.caps.split(","):
            variants[f"pf {at:5s} {int(cap):3d} MiB"] = (int(cap) << 20, where[at])
    for shape in args.shapes.split(","):
        config = SHAPES[shape]
        prompt = [(i * 7919 + 13) % config.vocab_size for i in range(args.prompt)]

        def configure(nbytes: int, at: int):
            def apply(dec) -> None:
                dec.kernels = attrs.evolve(dec.kernels, prefetch_bytes=nbytes, prefetch_at=at)
            return apply

        labels = {label: configure(*v) for label, v in variants.items()}
        with decoder_slots(dev, shape, args.prompt + args.tokens + 1, labels, warm=prompt) as slots:
            interleaved(slots, prompt, args.tokens, args.rounds, shape)


if __name__ == "__main__":
    main()
