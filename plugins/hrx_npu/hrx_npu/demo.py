"""``hrx demo``: the GPU+NPU examples on the best engines present, as one table.

cuda + npu-host on a GPU machine, host + npu-host elsewhere; ``--npu-engine xdna`` (with
``--gpu-engine amdgpu`` on a Strix Halo, or on the simulated one with
``HRX_AMDF_PROVIDER=fake``) runs the NPU side on the xdna engine. Runs gpu_npu_parallel
(writing its Perfetto trace), gemm_pipeline and resident_exchange, prints their
timings and checks, and exits 1 if any output or replay check failed.
"""

from __future__ import annotations

import argparse
from typing import Any

from hrx_core import progress
from hrx_core.cli import CliCommand
from hrx_core.cli.args import check_host_memory, count, output_file

from .examples import gemm_pipeline, gpu_npu_parallel, resident_exchange
from .examples.common import engine_arguments, table

QUICK = {"n": 1 << 18, "m": 256, "samples": 5, "requests": 3, "rounds": 3}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", type=output_file("--trace"), default=None,
                        help="Perfetto trace of gpu_npu_parallel (default: demo/trace.json in the HRX cache "
                             "directory, $HRX_CACHE_DIR or ~/.cache/hrx; '' for none)")
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds, for CI)")
    parser.add_argument("--n", type=count("--n", minimum=256, limit=1 << 32), default=None,
                        help="GPU elements of gpu_npu_parallel (default 16777216)")
    parser.add_argument("--m", type=count("--m", limit=1 << 24), default=None, help="NPU matrices (default 1024)")
    parser.add_argument("--samples", type=count("--samples", limit=10_000), default=None,
                        help="sequential/parallel pairs (default 21)")
    parser.add_argument("--requests", type=count("--requests", limit=256), default=None,
                        help="concurrent gemm_pipeline requests (default 4)")
    parser.add_argument("--rounds", type=count("--rounds", limit=10_000), default=None, help="gemm_pipeline rounds (default 5)")
    engine_arguments(parser)


def default_trace_path() -> str:
    """Where ``hrx demo`` writes its trace unless told: the HRX cache directory (never
    the working tree)."""
    from hrx_core.compiler import cache_dir

    folder = cache_dir() / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / "trace.json")


def _pick(args: argparse.Namespace, name: str, default: int) -> int:
    value = getattr(args, name)
    if value is not None:
        return int(value)
    return QUICK[name] if args.quick else default


def run(args: argparse.Namespace) -> int:
    n, m = _pick(args, "n", gpu_npu_parallel.DEFAULTS[0]), _pick(args, "m", gpu_npu_parallel.DEFAULTS[1])
    samples = _pick(args, "samples", gpu_npu_parallel.DEFAULTS[2])
    requests = _pick(args, "requests", 4)
    # host buffers of both examples: the GPU vectors (a few copies of 4 N bytes) and
    # the requests' matrices (M x 64 BF16 inputs and FP32 outputs each)
    check_host_memory("--n/--m/--requests", 16 * n + m * 64 * 8 * (requests + 2))
    engines = {"gpu_engine": args.gpu_engine, "npu_engine": args.npu_engine, "columns": args.columns}
    print(f"hrx demo: gpu_npu_parallel N={n} M={m} x{samples} pairs, then gemm_pipeline ...", flush=True)
    rounds = _pick(args, "rounds", 5)
    trace = default_trace_path() if args.trace is None else args.trace or None
    with progress.bar(total=samples + rounds, desc="hrx demo", unit="sample") as bar:
        par = gpu_npu_parallel.run(n, m, samples, trace, **engines, tick=bar.update)
        gem = gemm_pipeline.run(m, requests, rounds, **engines, tick=bar.update)
    res = resident_exchange.run(8 if args.quick else 64, **engines)
    print(render(par, gem, res))
    return 0 if par["ok"] and gem["ok"] and res["ok"] else 1


def _checks(r: dict[str, Any]) -> str:
    created = sum(r["new_native_objects"].values())
    ok = r["checks_failed"] == 0 and created == 0
    return (f"{'ok' if ok else 'FAILED'}: {r['checks_passed']} exact, {r['checks_failed']} wrong, "
            f"{created} new native objects in replays")


def render(par: dict[str, Any], gem: dict[str, Any], res: dict[str, Any] | None = None) -> str:
    rows = [
        ["gpu_npu_parallel", f"sequential {par['sequential_ms']:.3f}", f"parallel {par['parallel_ms']:.3f}",
         f"{par['speedup']:.2f}x (ideal {par['ideal_speedup']:.2f}x, {par['overlap_efficiency']:.0%})",
         _checks(par).partition(":")[0]],
        ["  branches", f"gpu {par['gpu_branch_ms']:.3f}", f"npu {par['npu_branch_ms']:.3f}", "", ""],
        ["gemm_pipeline", f"one at a time {gem['serial_ms']:.3f}", f"concurrent {gem['concurrent_ms']:.3f}",
         f"{gem['speedup']:.2f}x ({gem['requests']} requests)", _checks(gem).partition(":")[0]],
    ]
    res_checks = ""
    if res is not None:
        res_checks = (f"{'ok' if res['ok'] else 'FAILED'}: {res['checks_passed']} exact, {res['checks_failed']} wrong, "
                      f"participants {res['states']['gpu']}/{res['states']['npu']}")
        rows.append(["resident_exchange", f"graph {res['graph_roundtrip_ms']:.3f}", f"resident {res['resident_roundtrip_ms']:.3f}",
                     f"{res['speedup']:.2f}x per round trip", res_checks.partition(":")[0]])
    lines = [
        f"GPU side: {par['gpu']}",
        f"NPU side: {par['npu']}",
        f"  ({par['npu_note']})",
        "",
        table(rows, ["example", "ms (median)", "ms (median)", "speedup", "checks"]),
        "",
        f"gpu_npu_parallel checks {_checks(par)}",
        f"gemm_pipeline checks {_checks(gem)}",
    ]
    if res_checks:
        lines.append(f"resident_exchange checks {res_checks}")
    if par["trace"]:
        lines += ["", f"trace: {par['trace']} (open in https://ui.perfetto.dev)"]
    return "\n".join(lines)


DEMO = CliCommand("demo", "run the GPU+NPU examples (gpu_npu_parallel, gemm_pipeline, resident_exchange) on the best engines, with checks and a trace",
                  configure, run)
