"""Registers and spills of the GPT-2 decode step's CUDA kernels, from ptxas, without a GPU.

    pip install nvidia-cuda-nvrtc-cu12      # (or HRX_NVRTC=/path/to/libnvrtc.so.12)
    python bench/tools/kernel_spills.py [--shapes gpt2,1b] [--arch sm_90] [--short]

Compiles, with NVRTC and ``--ptxas-options=-v``, every kernel the fused decode step of
each shape dispatches on a device of 132 multiprocessors (StepKernels.fused_gemv_kernels:
the GEMVs at the register budgets the plan picks; with ``--short`` the short step's
``ln_linear_attend`` too; the split attention) and prints ptxas's registers, stack frame
and spill bytes a thread. Spill bytes are static (every code path of the kernel, run or
not). A diagnostic for issue 18: it writes no results file.

What it showed (NVRTC 12.9, sm_90, 2026-12-07): the short step's first
``ln_linear_attend`` (the split kernel's tail: 16 lanes a K/V row, chunks of up to 8
steps) spilled 1,572 bytes of stores and 2,188 of loads a thread under the 40-register
budget of GPT-2 small's QKV GEMV -- the split attention itself uses 118 registers --
which fits its measured 0.82x against the full step; the tail at 32 lanes in chunks of 2
spilled 216 / 248 with all three head-dim tails compiled, and none with only head_dim
64's (``specialize(head_dim=)``); 1.3B's (head_dim 128, 32 registers) 80 / 116.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def ptxas_lines(nvrtc, kernel, arch: str) -> str:
    """ptxas's register and spill lines of ``kernel``'s CUDA source for ``arch``, one line."""
    _code, log, _ = nvrtc.compile(kernel.sources["cuda"], kernel.entry,
                                  [f"--gpu-architecture={arch}", "--ptxas-options=-v"])
    spill = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    regs = re.search(r"Used (\d+) registers", log)
    if not (spill and regs):
        return f"(no ptxas report: {log[:200]!r})"
    frame, stores, loads = spill.groups()
    return f"{regs.group(1):>3} registers, {frame:>4} B stack, {stores:>5} B spill stores, {loads:>5} B spill loads"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="gpt2,1b")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--sms", type=int, default=132, help="multiprocessors the budget plan assumes (H100/H200: 132)")
    p.add_argument("--short", action="store_true", help="the short step's ln_linear_attend as well")
    args = p.parse_args()

    import attrs
    from hrx_gpu.cuda import _nvrtc
    from hrx_models.gpt2 import SHAPES
    from hrx_models.gpt2 import fused_kernels as FK
    from hrx_models.gpt2.decoder import StepKernels

    try:
        nvrtc = _nvrtc.load()
    except Exception as exc:  # noqa: BLE001 - a diagnostic: say what is missing
        print(f"no NVRTC: {exc} (pip install nvidia-cuda-nvrtc-cu12, or HRX_NVRTC=<libnvrtc.so>)", file=sys.stderr)
        return 2
    print(f"NVRTC {nvrtc.version[0]}.{nvrtc.version[1]} ({nvrtc.path}), {args.arch}")
    kernels = StepKernels.for_device(SimpleNamespace(engine="cuda", properties={
        "compute_capability": "9.0", "multiprocessors": args.sms}))
    if args.short:
        kernels = attrs.evolve(kernels, ln_linear_attend=FK.LN_LINEAR_ATTEND)
    for shape in args.shapes.split(","):
        cfg = SHAPES[shape]
        print(f"{shape} (n_embd {cfg.n_embd}, head_dim {cfg.head_dim}):")
        for k in [*kernels.fused_gemv_kernels(cfg), kernels.attention]:
            print(f"  {k.name:42s} {ptxas_lines(nvrtc, k, args.arch)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
