"""GPT-2 decode with and without QKV and attention as one kernel, interleaved in one process.

    python bench/tools/fuse_attention_ab.py [--shapes gpt2,1b] [--tokens 100] [--prompt 16] [--rounds 5]

Two decoders of one checkpoint: ``Gpt2Decoder(fuse_attention=True)`` (the default:
positions that attend at most SHORT_ROWS rows replay a graph whose ln_1 + QKV kernel
also attends) and ``fuse_attention=False``; greedy decode of ``--tokens`` tokens after a
``--prompt``-token prompt by each in alternating rounds, tokens/s per round and the
median (bench/tools/ab.py). With a prompt of SHORT_ROWS tokens or more both replay the
same graphs (a control). A diagnostic: it writes no results file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ab import interleaved  # bench/tools/ab.py
from hrx_models.gpt2 import SHAPES, Gpt2Decoder, write_random_checkpoint
from hrx_models.gpt2.decoder import SHORT_ROWS

import hrx_core as hrx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="gpt2,1b")
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--engine", default="cuda")
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    for shape in args.shapes.split(","):
        config = SHAPES[shape]
        prompt = [(i * 7919 + 13) % config.vocab_size for i in range(args.prompt)]
        context = args.prompt + args.tokens
        short = min(args.tokens, max(0, SHORT_ROWS - (args.prompt - 1)))
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = write_random_checkpoint(Path(tmp) / shape, config, seed=0, dtype="bf16")
            decs = [Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1, fuse_attention=f) for f in (True, False)]
        try:
            slots = {}
            for dec, label in zip(decs, ("fused attention", "separate")):
                slot = dec.acquire()
                slot.generate(prompt, 4)
                slots[f"{label:15s}"] = slot
            interleaved(slots, prompt, args.tokens, args.rounds,
                        f"{shape} prompt {args.prompt} ({short} of {args.tokens} steps short)")
        finally:
            for dec in decs:
                dec.close()


if __name__ == "__main__":
    main()
