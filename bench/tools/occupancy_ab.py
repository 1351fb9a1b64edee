"""GPT-2 decode with the fused GEMVs at other register budgets, interleaved in one process (cuda).

    python bench/tools/occupancy_ab.py [--shapes gpt2,1b] [--tokens 128] [--rounds 5] [--variants plan,generic,b6,b8]

The fused decode GEMVs (``hrx_gpt2_ln_linear``, ``hrx_gpt2_linear_residual``) stream
their weights with one warp a row (or a share of one); how many blocks an SM holds is
set by their registers. On CUDA the decoder dispatches each GEMV specialized for one of
two budgets (hrx_models.gpt2.fused_kernels: ``specialize``, ``fused_gemv_blocks``):
six blocks an SM with four loads in flight a lane, or eight with two. Variants:

* ``plan``: the decoder as shipped (each GEMV's budget chosen from its grid);
* ``generic``: the unspecialized kernels (``ln_linear`` compiled for any width up to
  MAX_EMBD: 64 registers, four blocks an SM);
* ``b6``, ``b8``: every fused GEMV at that budget; ``bX/bY``: ``ln_linear`` at X and
  ``linear_residual`` at Y.

Each variant is its own decoder of the same random checkpoint; greedy decode of
``--tokens`` tokens by each in alternating rounds (bench/tools/ab.py), with the
registers and local (spill) bytes of each budget's kernels (CuPy) where CuPy is
installed. A diagnostic for issue 18: it writes no results file. Measured on the H200
(2026-12-02, 5 rounds of 128 tokens), us a token for generic / b6 / b8: GPT-2 small
272.6 / 238.0 / 246.3, gpt2-medium 722.6 / 609.6 / 550.2, 1.3B 1261.4 / 1200.7 /
1133.7; a first plan (six blocks wherever both budgets needed as many waves) ran
238.3, 559.6 and 1142.7, and the plan now ships eight there unless a lane's share of
a row takes more steps with two loads (fused_kernels.fused_gemv_blocks).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attrs
from ab import decode_args, decoder_slots, interleaved  # bench/tools/ab.py
from hrx_models.gpt2 import SHAPES
from hrx_models.gpt2 import fused_kernels as FK

import hrx_core as hrx
from hrx_core.kernel import Kernel


def budgets(name: str) -> tuple[int, int] | None:
    """(ln_linear's, linear_residual's) budget of a forced variant, None for plan/generic."""
    if name in ("plan", "generic"):
        return None
    m = re.fullmatch(r"b(\d)(?:/b(\d))?", name)
    if not m or int(m.group(1)) not in FK.FUSED_GEMV_BUDGETS \
            or (m.group(2) and int(m.group(2)) not in FK.FUSED_GEMV_BUDGETS):
        raise SystemExit(f"unknown variant {name!r}: plan, generic, bX or bX/bY with X, Y in "
                         f"{sorted(FK.FUSED_GEMV_BUDGETS)}")
    return int(m.group(1)), int(m.group(2) or m.group(1))


def registers(k: Kernel) -> str:
    """``regs, local bytes`` of the kernel compiled by CuPy's NVRTC, or why not."""
    try:
        import cupy as cp

        fn = cp.RawKernel(k.sources["cuda"], k.name, options=("-std=c++17",))
        a = fn.attributes
        return f"{a['num_regs']} regs, {a['local_size_bytes']} B local"
    except Exception as exc:  # noqa: BLE001 - a diagnostic
        return f"(registers unknown: {type(exc).__name__})"


def main() -> None:
    ap = decode_args(__doc__, rounds=5)
    ap.add_argument("--variants", default="plan,generic,b6,b8")
    args = ap.parse_args()
    names = args.variants.split(",")
    for name in names:
        budgets(name)  # refuse unknown names before loading anything
    dev = hrx.device("cuda")
    for shape in args.shapes.split(","):
        config = SHAPES[shape]
        d = config.n_embd
        for blocks in FK.FUSED_GEMV_BUDGETS:
            print(f"{shape} budget {blocks}: ln_linear {registers(FK.specialize(FK.LN_LINEAR, blocks=blocks, width=d))}; "
                  f"linear_residual {registers(FK.specialize(FK.LINEAR_RESIDUAL, blocks=blocks))}", flush=True)
        print(f"{shape} generic: ln_linear {registers(FK.LN_LINEAR)}; linear_residual {registers(FK.LINEAR_RESIDUAL)}")
        prompt = [(i * 7919 + 13) % config.vocab_size for i in range(args.prompt)]
        variants = {f"{name:8s}": configure(name, d) for name in names}
        with decoder_slots(dev, shape, args.prompt + args.tokens + 1, variants, warm=prompt) as slots:
            interleaved(slots, prompt, args.tokens, args.rounds, shape)


def configure(name: str, width: int):
    """What variant ``name`` sets on a decoder of n_embd ``width``."""
    forced = budgets(name)

    def apply(dec) -> None:
        if name == "plan" and not dec.kernels.gemv_sms:
            print("the plan specializes nothing on this device (no multiprocessor count)")
        if name == "generic":
            dec.kernels = attrs.evolve(dec.kernels, gemv_sms=0)
        elif forced is not None:
            dec.kernels = attrs.evolve(dec.kernels, gemv_sms=0,
                                       ln_linear=FK.specialize(FK.LN_LINEAR, blocks=forced[0], width=width),
                                       linear_residual=FK.specialize(FK.LINEAR_RESIDUAL, blocks=forced[1]))
    return apply


if __name__ == "__main__":
    main()
