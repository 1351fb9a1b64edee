"""GPU time of the GPT-2 prefill GEMM's tilings at the projection shapes of GPT-2 small
and the 1.3B shape, for chunks of 128, 512 and 1024 rows, against torch's BF16 matmul.

    python bench/tools/gemm_tiles.py [--reps 30]

Each tiling (hrx_models.gpt2.prefill_kernels: the portable hrx_gpt2_gemm and the
tensor-core GEMM_TILINGS) runs as a prepared launch, timed by HRX timing events around
``--reps`` launches; its output is checked against the portable kernel's. Prints
microseconds and TFLOP/s per shape. A diagnostic for choosing the decoder's tiling per
shape (prefill_kernels.gemm_tiles_for), not a benchmark: it writes no results file.
"""

from __future__ import annotations

import argparse

import numpy as np
from hrx_models.gpt2 import prefill_kernels as PK
from ml_dtypes import bfloat16

import hrx_core as hrx

SHAPES = {"gpt2": [(768, 2304), (768, 768), (768, 3072), (3072, 768)],
          "1b": [(2048, 6144), (2048, 2048), (2048, 8192), (8192, 2048)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rows", default="128,512,1024")
    args = ap.parse_args()
    dev = hrx.device("cuda")
    s = dev.stream()
    rng = np.random.default_rng(0)
    try:
        import torch
    except ImportError:
        torch = None
    variants = [(None, "hrx_gpt2_gemm (portable)")] + [(t, t.name) for t in PK.GEMM_TILINGS]
    for model, shapes in SHAPES.items():
        for rows in map(int, args.rows.split(",")):
            for k, n in shapes:
                a = s.allocate_from((rng.standard_normal((rows, k)) * 0.5).astype(bfloat16).view(np.uint8).reshape(-1))
                w = s.allocate_from((rng.standard_normal((n, k)) * 0.05).astype(bfloat16).view(np.uint8).reshape(-1))
                st = s.allocate_from(np.array([0, rows + 1, 0, 0], np.uint32).view(np.uint8))
                y = s.allocate(rows * n * 4)
                flops = 2.0 * rows * k * n
                line = [f"{model} C={rows} K={k} N={n}:"]
                ref = None
                for tiles, name in variants:
                    if tiles is None:
                        kernel, grid, block = PK.GEMM, (-(-n // PK.GEMM_BN), -(-rows // PK.GEMM_BM)), PK.GEMM_THREADS
                    else:
                        kernel, grid, block = PK.GEMM_TILED[tiles], tiles.grid(n, rows), tiles.threads
                    launch = s.prepare(kernel, grid, [a, w, st, y], block=block, scalars=(k, n, rows))
                    for _ in range(3):
                        launch.launch()
                    e0 = s.record_event(timing=True)
                    for _ in range(args.reps):
                        launch.launch()
                    e1 = s.record_event(timing=True)
                    e1.synchronize()
                    us = e0.elapsed_time(e1) * 1e3 / args.reps
                    out = s.download(y).view(np.float32)
                    if ref is None:
                        ref = out.copy()
                        agree = ""
                    else:
                        diff = float(np.abs(out - ref).max())
                        agree = "" if diff <= 1e-3 * float(np.abs(ref).max()) else f" MISMATCH {diff:.3g}"
                    line.append(f"{name.replace('hrx_gpt2_gemm_', '')} {us:7.1f} us {flops / us / 1e6:5.0f} TF{agree}")
                    launch.close()
                if torch is not None:
                    ta = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
                    tw = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                    for _ in range(3):
                        ta @ tw.T
                    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    t0.record()
                    for _ in range(args.reps):
                        ta @ tw.T
                    t1.record()
                    t1.synchronize()
                    us = t0.elapsed_time(t1) * 1e3 / args.reps
                    line.append(f"torch {us:7.1f} us {flops / us / 1e6:5.0f} TF")
                print("\n    ".join(line), flush=True)
                for b in (a, w, st, y):
                    b.close()


if __name__ == "__main__":
    main()
