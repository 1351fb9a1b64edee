"""Two independent branches in one graph: a GPU integer-vector transform over N
elements and batched NPU 8x8 BF16 matrix multiplication with FP32 outputs over M
matrices.

    python examples/gpu_npu_parallel.py [N M SAMPLES [trace.json]]   # 16777216 1024 21

Every replay gets new inputs and its outputs are checked against the CPU. Replays
alternate sequential execution (the same graph with an explicit GPU -> NPU
dependency) and parallel execution (independent branches), with each branch alone
timed under the same conditions for the ideal speedup (sum of the branches over the
longest). Timings cover
submission to completion only: compilation, initial upload, input changes and
readback are outside them. After a warm-up, replays must create no native
allocations or imports. The Runtime's Perfetto trace is written at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import ml_dtypes
import numpy as np

from hrx_core.execution import Runtime, RuntimeOptions, validate_trace

from ..programs import load_matmul8x8, matmul8x8_reference
from .common import engine_arguments, engines, median_ms, new_native_objects, timed
from .kernels import BLOCK, INT_TRANSFORM, grid_for, int_transform_reference
from hrx_core.errors import show

DEFAULTS = (16_777_216, 1024, 21)
MODES = ("sequential", "parallel", "gpu", "npu")


def run(
    n: int = DEFAULTS[0],
    m: int = DEFAULTS[1],
    samples: int = DEFAULTS[2],
    trace: str | None = None,
    *,
    gpu_engine: str | None = None,
    npu_engine: str | None = None,
    columns: int = 1,
    seed: int = 0,
    log: Any = None,
    tick: Any = None,
) -> dict[str, Any]:
    """Run the example; returns timings (ms), speedups and checks. ``tick()`` (if given)
    is called after each timed sample, e.g. a progress bar's ``update``."""
    for name, value in (("n", n), ("m", m), ("samples", samples)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {show(value)}")
    gpu, npu = engines(gpu_engine, npu_engine)
    rng = np.random.default_rng(seed)
    rt = Runtime(gpu, RuntimeOptions(max_submissions=4), npu=npu)
    prog = load_matmul8x8(npu, m, columns=min(columns, npu.columns))  # compiled (cached) and loaded: untimed
    gs, ns = gpu.stream(), npu.stream()

    x = rt.allocate(4 * n)
    y = rt.allocate(4 * n)
    a, b, c = npu.allocate(128 * m), npu.allocate(128 * m), npu.allocate(256 * m)
    inv = prog.invocation([a, b, c])
    x_base = rng.integers(0, 2**32, n, dtype=np.uint32)

    def gpu_branch(r: Any) -> None:
        r.dispatch(INT_TRANSFORM, grid_for(n), [x.binding().read(), y.binding().write()], block=BLOCK, scalars=(n,))

    graphs = {}
    for mode in MODES:
        g = rt.graph(f"gpu_npu_{mode}")
        if mode in ("parallel", "npu"):
            # independent branches: the NPU region is issued first -- handing it to its
            # worker is cheap, and it would otherwise start only after the GPU region's
            # (costlier) launch has been encoded on this thread
            g.compute("npu matmul8x8 bf16", inv.record, lane="npu")
        gr = g.compute("gpu int transform", gpu_branch) if mode != "npu" else None
        if mode == "sequential":
            assert gr is not None  # the GPU region is recorded in every mode but "npu"
            g.compute("npu matmul8x8 bf16", inv.record, lane="npu", after=[gr])
        graphs[mode] = g

    replays = 0
    state: dict[str, np.ndarray] = {}  # the inputs of the latest replay: x, a, b

    def new_inputs() -> None:  # untimed: host data changes and uploads
        nonlocal replays
        replays += 1
        xs = x_base + np.uint32(replays)
        av = rng.standard_normal(64 * m).astype(ml_dtypes.bfloat16).view(np.uint16)
        bv = rng.standard_normal(64 * m).astype(ml_dtypes.bfloat16).view(np.uint16)
        gs.upload_blocking(x, xs)
        ns.upload_blocking(a, av)
        ns.upload_blocking(b, bv)
        state.update(x=xs, a=av, b=bv)

    checks = {"gpu": 0, "npu": 0, "failed": 0}

    def check(mode: str) -> None:  # untimed readback of what the replay computed, against the CPU
        if mode != "npu":
            ok = np.array_equal(gs.download(y).view(np.uint32), int_transform_reference(state["x"]))
            checks["gpu"] += ok
            checks["failed"] += not ok
        if mode != "gpu":
            ok = np.array_equal(ns.download(c).view(np.float32).reshape(-1, 8, 8), matmul8x8_reference(state["a"], state["b"]))
            checks["npu"] += ok
            checks["failed"] += not ok

    def replay(mode: str) -> float:
        return timed(lambda: rt.submit(graphs[mode]).wait())

    def sample(mode: str) -> float:
        new_inputs()
        t = replay(mode)
        check(mode)
        return t

    # warm-up: first submissions, staging for uploads and readback
    for mode in MODES:
        sample(mode)
    before = new_native_objects(gpu, npu)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for i in range(samples):
        # alternate the order; the branches alone, timed under the same conditions, give the ideal
        for mode in (MODES if i % 2 == 0 else MODES[::-1]):
            times[mode].append(sample(mode))
        if tick is not None:
            tick()
    created = new_native_objects(gpu, npu, before)
    if trace:
        rt.write_trace(trace)
        with open(trace) as f:
            validate_trace(json.load(f))

    seq, par = median_ms(times["sequential"]), median_ms(times["parallel"])
    tg, tn = median_ms(times["gpu"]), median_ms(times["npu"])
    ideal = (tg + tn) / max(tg, tn)
    speedup = seq / par
    result = {
        "example": "gpu_npu_parallel",
        "gpu": f"{gpu.name} ({gpu.info.name})",
        "npu": f"{npu.name} ({prog.target}, {prog.columns} columns)", "npu_note": npu.note,
        "n": n, "m": m, "samples": samples,
        "sequential_ms": seq, "parallel_ms": par, "gpu_branch_ms": tg, "npu_branch_ms": tn,
        "speedup": speedup, "ideal_speedup": ideal, "overlap_efficiency": speedup / ideal,
        "checks_passed": checks["gpu"] + checks["npu"], "checks_failed": checks["failed"],
        "new_native_objects": created, "trace": trace,
        "ok": checks["failed"] == 0 and not any(created.values()),
    }
    for g in graphs.values():
        g.close()
    prog.close()
    rt.close()
    for buf in (x, y, a, b, c):
        buf.close()
    if log is not None:
        log(summary(result))
    return result


def summary(r: dict[str, Any]) -> str:
    return (
        f"gpu_npu_parallel on {r['gpu']} + {r['npu']}: N={r['n']} M={r['m']}, {r['samples']} pairs\n"
        f"  sequential {r['sequential_ms']:.3f} ms, parallel {r['parallel_ms']:.3f} ms "
        f"(speedup {r['speedup']:.2f}x of ideal {r['ideal_speedup']:.2f}x = {r['overlap_efficiency']:.2f}); "
        f"branches: gpu {r['gpu_branch_ms']:.3f} ms, npu {r['npu_branch_ms']:.3f} ms\n"
        f"  checks: {r['checks_passed']} outputs exact, {r['checks_failed']} mismatches; "
        f"new native objects during replays: {r['new_native_objects']}"
        + (f"; trace {r['trace']}" if r["trace"] else "")
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", nargs="?", type=int, default=DEFAULTS[0], help="GPU element count")
    ap.add_argument("m", nargs="?", type=int, default=DEFAULTS[1], help="NPU matrix count")
    ap.add_argument("samples", nargs="?", type=int, default=DEFAULTS[2], help="sequential/parallel pairs")
    ap.add_argument("trace", nargs="?", default=None, help="Perfetto trace path")
    engine_arguments(ap)
    args = ap.parse_args(argv)
    r = run(args.n, args.m, args.samples, args.trace, gpu_engine=args.gpu_engine, npu_engine=args.npu_engine,
            columns=args.columns, log=print)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
