"""GPT-2 decode with and without QKV and attention as one kernel, interleaved in one process.

    python bench/tools/fuse_attention_ab.py [--shapes gpt2,1b] [--tokens 100] [--prompt 16] [--rounds 5]
        [--variants "HRX_QKV_ATTN_MIN_BLOCKS=3;HRX_ATTN_MAX_CHUNK=4"]

Two decoders of one checkpoint: ``Gpt2Decoder(fuse_attention=True)`` (the default:
positions that attend at most SHORT_ROWS rows replay a graph whose ln_1 + QKV kernel
also attends) and ``fuse_attention=False``; greedy decode of ``--tokens`` tokens after a
``--prompt``-token prompt by each in alternating rounds, tokens/s per round and the
median (bench/tools/ab.py). With a prompt of SHORT_ROWS tokens or more both replay the
same graphs (a control). ``--variants``: more decoders whose fused kernel is compiled
with those defines (``;`` between variants, ``,`` between the defines of one); with
CuPy present the registers and static shared memory of each variant's kernel (and of
hrx_gpt2_ln_linear) are printed first. A diagnostic: it writes no results file.
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
from hrx_models.gpt2.decoder import SHORT_ROWS

import hrx_core as hrx
from hrx_core.kernel import Kernel


def variant(defines: str) -> Kernel:
    """FK.LN_QKV_ATTENTION compiled with ``defines`` ("NAME=VALUE,NAME=VALUE")."""
    head = "".join(f"#define {d.split('=')[0]} {d.split('=')[1]}\n" for d in defines.split(",") if d)
    k = FK.LN_QKV_ATTENTION
    return Kernel(k.name, buffers=k.buffer_access, scalars=k.scalar_types, host=k.sources["host"],
                  cuda=head + k.sources["cuda"], programmatic=k.programmatic)


def report_registers(kernels: dict[str, Kernel]) -> None:
    try:
        import cupy
    except ImportError:
        return
    for label, k in kernels.items():
        attrs_ = cupy.RawKernel(k.sources["cuda"], k.name).attributes
        print(f"{label:40s} {k.name}: {attrs_['num_regs']} registers, {attrs_['shared_size_bytes']} B static shared, "
              f"{attrs_['local_size_bytes']} B local", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="gpt2,1b")
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--engine", default="cuda")
    ap.add_argument("--variants", default="")
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    variants = {v: variant(v) for v in args.variants.split(";") if v}
    if args.engine == "cuda":
        report_registers({"ln_linear": FK.LN_LINEAR, "shipped": FK.LN_QKV_ATTENTION, **variants})
    for shape in args.shapes.split(","):
        config = SHAPES[shape]
        prompt = [(i * 7919 + 13) % config.vocab_size for i in range(args.prompt)]
        context = args.prompt + args.tokens
        short = min(args.tokens, max(0, SHORT_ROWS - (args.prompt - 1)))
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = write_random_checkpoint(Path(tmp) / shape, config, seed=0, dtype="bf16")
            decs = [Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1, fuse_attention=f)
                    for f in (True, False, *([True] * len(variants)))]
        try:
            slots = {}
            for dec, label, k in zip(decs, ("fused attention", "separate", *variants), (None, None, *variants.values())):
                if k is not None:  # (before the slot records its graphs)
                    dec.kernels = attrs.evolve(dec.kernels, ln_qkv_attention=k)
                slot = dec.acquire()
                slot.generate(prompt, 4)
                slots[f"{label:32s}"] = slot
            interleaved(slots, prompt, args.tokens, args.rounds,
                        f"{shape} prompt {args.prompt} ({short} of {args.tokens} steps short)")
        finally:
            for dec in decs:
                dec.close()


if __name__ == "__main__":
    main()
