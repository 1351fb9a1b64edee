"""GPT-2 decode with the fused GEMVs at other register budgets, interleaved in one process (cuda).

    python bench/tools/occupancy_ab.py [--shapes gpt2,1b] [--tokens 128] [--rounds 5] [--variants ...]

The fused decode GEMVs (``hrx_gpt2_ln_linear``, ``hrx_gpt2_linear_residual``) stream
their weights with one warp a row; how many blocks an SM holds is set by their
registers (``ln_linear``: 64 a thread, so 4 blocks of 256 threads an SM). Most of
``ln_linear``'s registers hold the layer norm's input: ``HRX_MAX_EMBD / 1024`` float4
a thread (8 at the shipped MAX_EMBD of 8192) whatever the model's width. Variants:

* ``shipped``: the decoder's kernels;
* ``narrow``: ``ln_linear`` compiled for the model's width rounded up to 1024
  (``HRX_MAX_EMBD``), so it keeps only the vectors it uses;
* ``+lbN``: both kernels declared ``__launch_bounds__(256, N)`` (at least N blocks an
  SM: the compiler caps registers at 65536 / (256 N));
* ``+uN``: both kernels with HRX_GEMV_UNROLL = N (loads in flight a lane; 4 shipped).

Variants join parts with ``+``, e.g. ``narrow+lb6+u2``; ``A/B`` gives ``ln_linear``
the parts of A and ``linear_residual`` those of B (``narrow+lb6/lb8+u2``).

Each variant is its own decoder of the same random checkpoint; greedy decode of
``--tokens`` tokens by each in alternating rounds (bench/tools/ab.py), with the
registers and spills of each variant's kernels (CuPy) where CuPy is installed. A
diagnostic for issue 18: it writes no results file.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attrs
from ab import interleaved  # bench/tools/ab.py
from hrx_models.gpt2 import SHAPES, Gpt2Decoder, write_random_checkpoint
from hrx_models.gpt2 import fused_kernels as FK

import hrx_core as hrx
from hrx_core.kernel import Kernel

BOUNDS = "__launch_bounds__(256) hrx_gpt2_"


def variant_kernel(k: Kernel, width: int | None, blocks: int | None, unroll: int | None = None) -> Kernel:
    """``k`` with HRX_MAX_EMBD set to ``width`` (ln_linear), ``blocks`` as its launch
    bounds' minimum blocks an SM and/or HRX_GEMV_UNROLL set to ``unroll``."""
    src = k.sources["cuda"]
    if width is not None and k.name == "hrx_gpt2_ln_linear":
        src, n = re.subn(r"#define HRX_MAX_EMBD \d+u", f"#define HRX_MAX_EMBD {width}u", src)
        assert n == 1, k.name
    if blocks is not None:
        assert src.count(BOUNDS) == 1, k.name
        src = src.replace(BOUNDS, f"__launch_bounds__(256, {blocks}) hrx_gpt2_")
    if unroll is not None:
        src = f"#define HRX_GEMV_UNROLL {unroll}\n" + src
    return Kernel(k.name, buffers=k.buffer_access, scalars=k.scalar_types, cuda=src, programmatic=True)


def parse(name: str, n_embd: int) -> tuple[int | None, int | None, int | None]:
    """(HRX_MAX_EMBD, minimum blocks, unroll) of a variant name: ``shipped`` or
    ``+``-joined parts ``narrow``, ``lbN``, ``uN``."""
    width = blocks = unroll = None
    if name == "shipped":
        return width, blocks, unroll
    for part in name.split("+"):
        if part == "narrow":
            width = -(-n_embd // 1024) * 1024
        elif re.fullmatch(r"lb\d", part):
            blocks = int(part[2:])
        elif re.fullmatch(r"u(2|4|8|16)", part):
            unroll = int(part[1:])
        else:
            raise SystemExit(f"unknown variant {name!r}")
    return width, blocks, unroll


def registers(k: Kernel) -> str:
    """``regs/spill bytes`` of the kernel compiled by CuPy's NVRTC, or why not."""
    try:
        import cupy as cp

        fn = cp.RawKernel(k.sources["cuda"], k.name, options=("-std=c++17",))
        a = fn.attributes
        return f"{a['num_regs']} regs, {a['local_size_bytes']} B local"
    except Exception as exc:  # noqa: BLE001 - a diagnostic
        return f"(registers unknown: {type(exc).__name__})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="gpt2,1b")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--variants", default="shipped,narrow,narrow+lb5,narrow+lb6,narrow+lb8")
    args = ap.parse_args()
    dev = hrx.device("cuda")
    for shape in args.shapes.split(","):
        config = SHAPES[shape]
        prompt = [(i * 7919 + 13) % config.vocab_size for i in range(args.prompt)]
        context = args.prompt + args.tokens + 1
        slots = {}
        decs = []
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = write_random_checkpoint(Path(tmp) / shape, config, seed=0, dtype="bf16")
            for name in args.variants.split(","):
                ln_name, _, lr_name = name.partition("/")
                ln = variant_kernel(FK.LN_LINEAR, *parse(ln_name, config.n_embd))
                lr = variant_kernel(FK.LINEAR_RESIDUAL, *parse(lr_name or ln_name, config.n_embd))
                print(f"{shape} {name}: ln_linear {registers(ln)}; linear_residual {registers(lr)}", flush=True)
                dec = Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1)
                if name != "shipped":
                    dec.kernels = attrs.evolve(dec.kernels, ln_linear=ln, linear_residual=lr)
                slot = dec.acquire()
                slot.generate(prompt, 4)
                decs.append(dec)
                slots[f"{name:18s}"] = slot
        interleaved(slots, prompt, args.tokens, args.rounds, shape)
        for d in decs:
            d.close()


if __name__ == "__main__":
    main()
