"""GPT-2 decode with and without programmatic dependent launch, interleaved in one process (cuda).

    python bench/tools/pdl_ab.py [--shapes gpt2,1b] [--tokens 128] [--rounds 7] [--early] [--late]

Two decoders of the same checkpoint: step graphs built with and without programmatic
edges (as HRX_CUDA_PDL=1 does); greedy decode of ``--tokens`` tokens by each in
alternating rounds, tokens/s per round and the median. With ``--early`` a second pair
runs a variant of the fused GEMVs that requests its weights before waiting for its
predecessors (the first step's loads into registers and L2 prefetches of the rest of
the warp's share). A diagnostic for the default of HRX_CUDA_PDL: it writes no results
file. Measured on the H200 (2026-12-01, 5 rounds): PDL on/off within 0.6% for GPT-2
small and 1.3B; the early-weights variant 0.5% faster for small and 9% slower for 1.3B
(1392 against 1279 us a token). ``--late`` adds the fused GEMVs triggering their
dependents after their main loop rather than at their start (with PDL; with
``--early`` also both together): measured on the H200 (2026-12-02, 5 rounds) at 271.0
against 272.7 us a token (PDL off) for small and 1262.8 against 1270.3 for 1.3B.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attrs
from ab import decode_args, decoder_slots, interleaved  # bench/tools/ab.py
from hrx_models.gpt2 import SHAPES
from hrx_models.gpt2 import fused_kernels as FK

import hrx_core as hrx
from hrx_core.kernel import Kernel


def early_weights(k: Kernel) -> Kernel:
    """The fused GEMV with its weights requested before its grid-dependency wait."""
    src = k.sources["cuda"]
    top = src.index(") {\n", src.index(k.name + "(")) + 4
    assert src[top:].startswith("    hrx_grid_dependencies();\n"), k.name
    body = src[:top] + src[top + len("    hrx_grid_dependencies();\n"):]
    prefetch = """
__device__ __forceinline__ void hrx_gemv_prefetch(const uint4* wr, unsigned int nvec, const HrxGemvWarp& r) {
    const unsigned int stride = 32u * r.ks;
    for (unsigned int i = r.lane + 32u * r.piece + 4u * stride; i < nvec; i += stride)
        asm volatile("prefetch.global.L2 [%0];" :: "l"(wr + i));
}
"""
    at = body.index("extern \"C\" __global__", body.index("struct HrxGemvWarp"))
    body = body[:at] + prefetch + body[at:]
    if k.name == "hrx_gpt2_ln_linear":
        old = "    if (r.active) first = hrx_gemv_first(wr, K >> 3, r);  // the weights stream during the prologue\n"
        new = "    if (r.active) { first = hrx_gemv_first(wr, K >> 3, r); hrx_gemv_prefetch(wr, K >> 3, r); }\n" \
              "    hrx_grid_dependencies();\n"
    else:
        old = ("    if (r.active) {\n        const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)r.out * K);\n"
               "        s = hrx_gemv_dot<false>(a, wr, K >> 3, r, hrx_gemv_first(wr, K >> 3, r));\n    }\n")
        new = ("    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)(r.active ? r.out : 0u) * K);\n"
               "    HrxGemvLoads first;\n"
               "    if (r.active) { first = hrx_gemv_first(wr, K >> 3, r); hrx_gemv_prefetch(wr, K >> 3, r); }\n"
               "    hrx_grid_dependencies();\n"
               "    if (r.active) s = hrx_gemv_dot<false>(a, wr, K >> 3, r, first);\n")
    assert body.count(old) == 1, k.name
    return Kernel(k.name, buffers=k.buffer_access, scalars=k.scalar_types, cuda=body.replace(old, new), programmatic=True)


TRIGGER = '    asm volatile("griddepcontrol.launch_dependents;" :::);\n'
COMBINE = "    s = hrx_gemv_combine(s, r, partial);\n"


def late_trigger(k: Kernel) -> Kernel:
    """The fused GEMV letting its dependents launch after its main loop (before the
    cross-warp combine and the epilogue) instead of right after its own wait: with
    programmatic edges a dependent's blocks are then scheduled during this kernel's
    tail, not beside its whole run. (The dependent's griddepcontrol.wait still waits
    for this grid to finish and its writes to be visible: only scheduling moves.)"""
    src = k.sources["cuda"]
    # (hrx_grid_dependencies is in the source twice, behind one include guard)
    assert src.count(TRIGGER) >= 1 and src.count(COMBINE) == 1, k.name
    body = src.replace(TRIGGER, "").replace(COMBINE, TRIGGER + COMBINE)
    return Kernel(k.name, buffers=k.buffer_access, scalars=k.scalar_types, cuda=body, programmatic=True)


def main() -> None:
    ap = decode_args(__doc__)
    ap.add_argument("--early", action="store_true", help="also the early-weights variant of the fused GEMVs")
    ap.add_argument("--late", action="store_true", help="also the fused GEMVs triggering their dependents after "
                    "their main loop (with PDL; with --early, also both together)")
    args = ap.parse_args()
    dev = hrx.device("cuda")
    variants = [("shipped", False), ("shipped", True)]
    if args.early:
        variants += [("early", False), ("early", True)]
    if args.late:
        variants += [("late", True)] + ([("late+early", True)] if args.early else [])
    for shape in args.shapes.split(","):
        config = SHAPES[shape]
        prompt = [(i * 7919 + 13) % config.vocab_size for i in range(args.prompt)]
        configure = {f"{variant:11s} pdl={int(pdl)}": variant_of(dev, variant, pdl) for variant, pdl in variants}
        with decoder_slots(dev, shape, args.prompt + args.tokens + 1, configure, warm=prompt) as slots:
            interleaved(slots, prompt, args.tokens, args.rounds, shape)


def variant_of(dev, variant: str, pdl: bool):
    """What a variant sets: the device's programmatic edges (read when a decoder's graphs
    are built, at its first launch) and the fused GEMVs' kernels."""
    def apply(dec) -> None:
        dev.programmatic_edges = pdl
        ln, lr = FK.LN_LINEAR, FK.LINEAR_RESIDUAL
        if "early" in variant:
            ln, lr = early_weights(ln), early_weights(lr)
        if "late" in variant:
            ln, lr = late_trigger(ln), late_trigger(lr)
        if variant != "shipped":
            dec.kernels = attrs.evolve(dec.kernels, ln_linear=ln, linear_residual=lr)
    return apply

if __name__ == "__main__":
    main()
