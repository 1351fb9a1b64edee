"""Bandwidth and latency of GPU/NPU exchange through shared memory, by size.

    python examples/shared_bench.py [--max-bytes 67108864] [--reps 9]

For each size: the GPU copies a device buffer into shared ``ping`` (copy lane), the
NPU transforms ``ping`` into shared ``pong`` through its aliases, and the GPU copies
``pong`` into a device buffer -- one tracked graph, no host round trip between the
stages except the runtime's cross-device completion checks. Reports the median
round trip (the latency at the smallest size) and the exchange bandwidth: the
bytes moved GPU -> NPU and NPU -> GPU over the round trip. Outputs are checked.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import numpy as np

from hrx_core.errors import Unsupported
from hrx_core.execution import Runtime, RuntimeOptions, TrackedGraph
from hrx_core.placement import Fabric

from ..programs import XOR_KEY, load_xor_copy
from .common import engine_arguments, engines, table, timed


def sizes_up_to(max_bytes: int) -> list[int]:
    out, n = [], 4096
    while n <= max_bytes:
        out.append(n)
        n *= 4
    return out or [max_bytes]


def run(max_bytes: int = 64 << 20, reps: int = 9, *, gpu_engine: str | None = None, npu_engine: str | None = None,
        columns: int = 1, log: Any = None) -> dict[str, Any]:
    gpu, npu = engines(gpu_engine, npu_engine)
    fabric = Fabric()
    profiles = fabric.allocation_profiles([gpu, npu], coherent=True)
    if not profiles:
        raise Unsupported(f"no coherent memory reaches both {gpu.name} and {npu.name}")
    rows, out = [], []
    rng = np.random.default_rng(2)
    with Runtime(gpu, RuntimeOptions(observe=False), npu=npu) as rt:

        def round_trip(g: TrackedGraph) -> float:
            return timed(lambda: rt.submit(g).wait())

        for size in sizes_up_to(max_bytes):
            prog = load_xor_copy(npu, size, columns=columns)
            src, dst = rt.allocate(size), rt.allocate(size)
            data = rng.integers(0, 256, size, dtype=np.uint8)
            gpu.stream().upload_blocking(src, data)
            with profiles[0].allocate(size, fabric=fabric) as ping, profiles[0].allocate(size, fabric=fabric) as pong:
                g = rt.graph(f"exchange {size}")
                g.copyto(ping.on(gpu), src)
                inv = prog.invocation([ping.on(npu), pong.on(npu)])
                g.compute("npu", inv.record, lane="npu")
                g.copyto(dst, pong.on(gpu))
                rt.submit(g).wait()
                ok = np.array_equal(gpu.stream().download(dst), data ^ np.uint8(XOR_KEY))
                t = statistics.median(round_trip(g) for _ in range(reps))
                g.close()
            prog.close()
            src.close()
            dst.close()
            gbs = 2 * size / t / 1e9
            out.append({"bytes": size, "roundtrip_ms": t * 1e3, "exchange_gbps": gbs, "ok": bool(ok)})
            rows.append([f"{size:,}", f"{t * 1e3:.3f}", f"{gbs:.2f}", "ok" if ok else "MISMATCH"])
    result = {"example": "shared_bench", "gpu": gpu.name, "npu": npu.name, "sizes": out,
              "latency_ms": out[0]["roundtrip_ms"], "ok": all(r["ok"] for r in out)}
    if log is not None:
        log(f"shared_bench {gpu.name} <-> {npu.name} (profile {dict(profiles[0].access)}), median of {reps}")
        log(table(rows, ["bytes", "round trip ms", "exchange GB/s", "check"]))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--reps", type=int, default=9)
    engine_arguments(ap)
    args = ap.parse_args(argv)
    r = run(args.max_bytes, args.reps, gpu_engine=args.gpu_engine, npu_engine=args.npu_engine, columns=args.columns, log=print)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
