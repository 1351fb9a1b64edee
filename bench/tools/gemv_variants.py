"""GPU time of hrx_tensor's GEMV kernel per launch shape, beside torch's F.linear (cuda).

    python bench/tools/gemv_variants.py [--shapes 2048x8192,4096x4096] [--reps 200]

For each K x N shape (BF16 weights [N, K], one input row) and each launch variant --
warps per block (4 or 8) times warps per output row (ks: 1, 2, 4, 8; at most the warps), times the 16-byte
loads a lane keeps in flight (``--unroll``, HRX_GEMV_UNROLL; 4 is the shipped kernel; ``2b8``: two, and
``__launch_bounds__(256, 8)``, at least eight blocks an SM) -- the GPU time per
kernel from CUDA events around ``--reps`` back-to-back prepared launches over weights
rotated through 768 MiB (none served from L2), and torch's F.linear the same way. The
variant the plan picks (``linear_launch``, or on Hopper ``linear_bulk_launch``) is marked;
the D2D copy bandwidth of the same run (torch, 512 MiB) is printed first. ``--bulk``
adds the bulk-copy kernel (``hrx_tensor_linear_bulk``) in stages:chunk:threads:blocks-per-SM
configurations, each checked against the warp kernel's output on random data. A diagnostic for issue 18's
profile: it writes no results file.
"""

from __future__ import annotations

import argparse
import re
import sys

import numpy as np
from hrx_tensor import TensorOps
from hrx_tensor.kernels import (
    BULK_BY_THREADS,
    LINEAR,
    LINEAR_BULK,
    LINEAR_BULK_CHUNK,
    LINEAR_BULK_STAGES,
    linear_bulk_chunk,
    linear_bulk_launch,
    linear_bulk_source,
    linear_launch,
)
from ml_dtypes import bfloat16

import hrx_core as hrx
from hrx_core.kernel import Kernel

# A candidate: a persistent grid whose blocks loop over rows (block-uniform steps of
# gridDim.x * rows per block), the next row's first loads issued before the current
# row's partials are combined -- no block ramp/tail per row, no wave quantization.
ROWS_CUDA = r"""
extern "C" __global__ void __launch_bounds__(256)
hrx_gemv_rows(const uint4* __restrict__ x, const unsigned short* __restrict__ w, unsigned char* __restrict__ y,
              unsigned int K, unsigned int N, unsigned int ksplit) {
    __shared__ float partial[32];
    HrxGemvWarp r = hrx_gemv_warp(ksplit, N);
    const unsigned int per_block = (blockDim.x >> 5) / r.ks, step = gridDim.x * per_block;
    const unsigned int nvec = K >> 3, sub = r.warp / r.ks;
    unsigned int base = blockIdx.x * per_block;
    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)(base + sub < N ? base + sub : 0u) * K);
    HrxGemvLoads first = hrx_gemv_first(wr, nvec, r);
    for (; base < N; base += step) {
        const unsigned int row = base + sub;
        r.active = sub < per_block && row < N;
        float s = r.active ? hrx_gemv_dot<false>(x, wr, nvec, r, first) : 0.f;
        const unsigned int next = base + step + sub;
        if (next < N) {  // the next row's first step in flight during the combine
            wr = reinterpret_cast<const uint4*>(w + (size_t)next * K);
            first = hrx_gemv_first(wr, nvec, r);
        }
        s = hrx_gemv_combine(s, r, partial);
        if (r.active && r.piece == 0u && r.lane == 0) reinterpret_cast<float*>(y)[row] = s;
        if (r.ks > 1u) __syncthreads();  // partial is reused by the next row
    }
}
"""

DEFAULT_SHAPES = "2048x8192,1536x16384,4096x4096,8192x4096,2048x2048,8192x8192,16384x8192"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="K x N pairs, comma-separated (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=200, help="launches per timing (default: %(default)s)")
    ap.add_argument("--unroll", default="4", help="HRX_GEMV_UNROLL values, comma-separated, each optionally with a "
                    "register budget: 2b8 = two loads, __launch_bounds__(256, 8) (default: %(default)s)")
    ap.add_argument("--rows", default="", help="also the row-looping candidate with these blocks per SM, comma-separated")
    ap.add_argument("--bulk", default="", help="also the bulk-copy candidate: stages:chunk:threads:blocks_per_sm "
                    "configurations of hrx_tensor_linear_bulk, comma-separated (shipped: 2:8192:128:8, 2:8192:256:8)")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    dev = hrx.device("cuda")
    TensorOps.use_bulk_linear = False  # ops.linear is the warp kernel: the bulk rows' reference
    ops = TensorOps(dev)
    s = ops.stream
    kernels = {}
    for u in args.unroll.split(","):
        m = re.fullmatch(r"(2|4|8|16)(?:b(\d))?", u)
        if not m:
            ap.error(f"--unroll: {u!r} is not an unroll (2, 4, 8, 16) with an optional b<blocks an SM>")
        src = f"#define HRX_GEMV_UNROLL {m.group(1)}\n" + LINEAR.sources["cuda"]
        if m.group(2):  # a register budget: at least that many blocks an SM
            bounds = "__launch_bounds__(256)\nhrx_tensor_linear("
            assert src.count(bounds) == 1
            src = src.replace(bounds, f"__launch_bounds__(256, {m.group(2)})\nhrx_tensor_linear(")
        kernels[u] = ops._kernels[LINEAR.name] if u == "4" else Kernel(
            LINEAR.name, buffers=LINEAR.buffer_access, scalars=LINEAR.scalar_types, cuda=src,
            programmatic=LINEAR.programmatic)
    rows_kernel = Kernel("hrx_gemv_rows", buffers=("read", "read", "write"), scalars=(np.uint32,) * 3,
                         cuda=LINEAR.sources["cuda"] + ROWS_CUDA)
    bulk_kernels = {}
    for cfg in (c for c in args.bulk.split(",") if c):
        stages, chunk, threads, per_sm = (int(v) for v in cfg.split(":"))
        shipped = BULK_BY_THREADS.get(threads) if (stages, chunk) == (LINEAR_BULK_STAGES, LINEAR_BULK_CHUNK) else None
        kern = shipped or Kernel(LINEAR_BULK.name, buffers=LINEAR_BULK.buffer_access, scalars=LINEAR_BULK.scalar_types,
                                 cuda=linear_bulk_source(threads, stages, chunk), programmatic=True)
        bulk_kernels[cfg] = (kern, chunk, threads, per_sm)
    ext = torch.cuda.ExternalStream(s.native_queue().native_handle())
    cur = torch.cuda.current_stream()

    def timed(run, stream) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        run(20)
        start.record(stream)
        run(args.reps)
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / args.reps

    pair = [torch.empty(256 << 20, device="cuda", dtype=torch.bfloat16) for _ in range(2)]

    def copy_run(reps: int, pair=pair) -> None:
        for _ in range(reps):
            pair[1].copy_(pair[0])

    reps, args.reps = args.reps, 20
    c = min(timed(copy_run, cur) for _ in range(3))
    args.reps = reps
    print(f"D2D copy of 512 MiB: {c:.1f} us, {2 * pair[0].numel() * 2 / c / 1e6:.2f} TB/s (read + write)")
    pair.clear()
    for shape in args.shapes.split(","):
        k, n = (int(v) for v in shape.split("x"))
        wbytes = k * n * 2
        count = max(2, (768 << 20) // wbytes)
        ws = [dev.allocate(wbytes) for _ in range(count)]
        x, out = dev.allocate(k * 2), dev.allocate(n * 4)
        for b in (*ws, x):
            s.fill(b, 0)
        tw = [torch.zeros(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
        tx = torch.zeros(1, k, device="cuda", dtype=torch.bfloat16)

        def torch_run(reps: int, tx=tx, tw=tw, count=count) -> None:
            for i in range(reps):
                F.linear(tx, tw[i % count])

        t = min(timed(torch_run, cur) for _ in range(3))
        planned = linear_launch(k, n) if linear_bulk_launch(k, n, dev.info.properties.get("multiprocessors", 132)) is None \
            else None
        rows = []
        for (u, kern), warps, ks in ((kv, w, ks) for kv in kernels.items() for w in (4, 8) for ks in (1, 2, 4, 8) if ks <= w):
            grid, block = -(-n // (warps // ks)), warps * 32
            scalars = (np.uint32(k), np.uint32(n), np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(ks))
            launches = [s.prepare(kern, grid, [x, w, w, w, out], block=block, scalars=scalars) for w in ws]

            def hrx_run(reps: int, launches=launches, count=count) -> None:
                for i in range(reps):
                    launches[i % count].launch()

            h = min(timed(hrx_run, ext) for _ in range(3))
            mark = " <- plan" if (grid, block, ks) == planned and u == "4" else ""
            rows.append(f"  unroll {u:>4s} warps {warps} ks {ks}: {h:7.2f} us {wbytes / h / 1e6:5.2f} TB/s  "
                        f"{t / h:5.2f}x torch{mark}")
            for p in launches:
                p.close()
        sms = dev.info.properties.get("multiprocessors", 132)
        for per_sm, ks in ((int(v), ks) for v in args.rows.split(",") if v for ks in (1, 2, 4)):
            grid = min(-(-n // (8 // ks)), sms * per_sm)
            launches = [s.prepare(rows_kernel, grid, [x, w, out], block=256,
                                  scalars=(np.uint32(k), np.uint32(n), np.uint32(ks))) for w in ws]

            def rows_run(reps: int, launches=launches, count=count) -> None:
                for i in range(reps):
                    launches[i % count].launch()

            h = min(timed(rows_run, ext) for _ in range(3))
            rows.append(f"  rows {per_sm:2d}/SM ks {ks}:        {h:7.2f} us {wbytes / h / 1e6:5.2f} TB/s  {t / h:5.2f}x torch")
            for p in launches:
                p.close()
        if bulk_kernels:
            rng = np.random.default_rng(0)
            xr = ops.upload(rng.standard_normal((1, k), np.float32).astype(bfloat16))
            wr = ops.upload(rng.standard_normal((n, k), np.float32).astype(bfloat16))
            want = ops.linear(xr, wr, out_dtype="f32")
            want_np = s.download(want.buffer).view(np.float32)
            want.close()
        sms = dev.info.properties.get("multiprocessors", 132)
        bulk_plan = linear_bulk_launch(k, n, sms)
        for cfg, (kern, limit, threads, per_sm) in bulk_kernels.items():
            chunk, grid = linear_bulk_chunk(k, limit), min(n, sms * per_sm)
            scalars = (np.uint32(k), np.uint32(n), np.uint32(0), np.uint32(0), np.uint32(1), np.uint32(chunk))
            s.dispatch(kern, grid, [xr.buffer, wr.buffer, wr.buffer, wr.buffer, out], block=threads, scalars=scalars)
            got = s.download(out).view(np.float32)[:n]
            err = float(np.max(np.abs(got - want_np)) / (np.max(np.abs(want_np)) + 1e-9))
            launches = [s.prepare(kern, grid, [x, w, w, w, out], block=threads, scalars=scalars) for w in ws]
            mark = " <- plan" if kern is BULK_BY_THREADS.get(threads) and bulk_plan == (grid, threads, chunk) else ""
            def bulk_run(reps: int, launches=launches, count=count) -> None:
                for i in range(reps):
                    launches[i % count].launch()

            h = min(timed(bulk_run, ext) for _ in range(3))
            rows.append(f"  bulk {cfg}: {h:7.2f} us {wbytes / h / 1e6:5.2f} TB/s  {t / h:5.2f}x torch"
                        f"  (chunk {chunk}; max rel. error vs the warp kernel {err:.1e}){mark}")
            for p in launches:
                p.close()
        if bulk_kernels:
            xr.close()
            wr.close()
        print(f"{k}x{n} ({wbytes >> 20} MiB): torch {t:.2f} us ({wbytes / t / 1e6:.2f} TB/s)")
        print("\n".join(rows))
        for b in (*ws, x, out):
            b.close()
        tw.clear()  # free the torch weights before the next shape
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/tools/gemv_variants.py", main))
