"""Where a recorded GEMV region's replays spend GPU time: the kernel timeline (CUPTI, via
torch.profiler) of a few back-to-back ``Runtime.submit`` calls of the GEMV sweep's region,
beside the same for torch's CUDA graph of the same linears and eager launches of both.

    python bench/tools/graph_timeline.py [--shapes 2048x16384,16384x16384] [--runs 4] [-v] [--wall]

Per shape and way of running: every kernel's start (us from the first) and duration,
then the totals -- busy time (the union of kernel intervals), summed kernel time, idle
gaps between kernels, and the span. Two summed-over-busy figures above 1.0 mean kernels
overlapped. A diagnostic for bench/tensor.py's ``tensor.cuda.sweep.graph.*`` figures,
not a benchmark: it writes no results file.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F
from hrx_tensor import TensorOps
from ml_dtypes import bfloat16
from tensor import SWEEP_ROTATE_BYTES, torch_linears_graph  # bench/tensor.py

import hrx_core as hrx
from hrx_core.execution import Runtime


def sweep_operands(ops, rt, k: int, n: int, name: str):
    """The GEMV sweep's operands for K x N (bench/tensor.py): torch weights rotated over
    SWEEP_ROTATE_BYTES and an input, HRX copies of them, the runtime region of every
    projection (submitted once) with its outputs, and torch's CUDA graph of the same
    linears with its rate function: (tw, tx, ws, x, region graph, outs, cg, rate)."""
    count = max(2, math.ceil(SWEEP_ROTATE_BYTES / (2 * k * n)))
    tw = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
    tx = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    ws = [ops.upload(t.view(torch.int16).cpu().numpy().view(bfloat16)) for t in tw]
    x = ops.upload(tx.view(torch.int16).cpu().numpy().view(bfloat16))
    g = rt.graph(name)
    outs: list = []
    g.compute("linears", lambda rg: outs.extend(ops.record_linear(rg, x, w) for w in ws))
    rt.submit(g).wait(timeout=60)
    cg, rate = torch_linears_graph(tx, tw)
    return tw, tx, ws, x, g, outs, cg, rate


def close_operands(ops, ws, x, g, outs, *graphs) -> None:
    for gr in (g, *graphs):
        gr.close()
    for t in (*outs, *ws, x):
        t.close()
    ops.stream.synchronize()
    torch.cuda.empty_cache()


def per_replay(fn, loops: int, sync) -> float:
    """Wall microseconds per call of ``loops`` back-to-back calls closed by ``sync``."""
    sync()
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    sync()
    return (time.perf_counter() - t0) / loops * 1e6


def timeline(fn, runs: int, sync) -> list[tuple[float, float, str]]:
    """(start us, duration us, name) of every GPU activity of ``runs`` calls of ``fn``
    (``sync`` waits for HRX's work, which may run in a context of its own)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        sync()
        torch.cuda.synchronize()
    out = []
    for ev in prof.events():
        if ev.device_type.name != "CUDA":
            continue
        start, end = ev.time_range.start, ev.time_range.end
        if end > start:
            out.append((float(start), float(end - start), ev.name))
    out.sort()
    return out


def gaps(events: list[tuple[float, float, str]], replays: int) -> str:
    """The idle time between consecutive kernels of ``replays`` back-to-back replays,
    split into gaps inside a replay and gaps from one replay to the next."""
    kernels = sorted(e for e in events if not e[2].startswith(("Memcpy", "Memset")))
    if not kernels or len(kernels) % replays:
        return f"{len(kernels)} kernels for {replays} replays: not split"
    per = len(kernels) // replays
    inside, between = [], []
    for i in range(len(kernels) - 1):
        s0, d0, _ = kernels[i]
        gap = kernels[i + 1][0] - (s0 + d0)
        (between if i % per == per - 1 else inside).append(gap)

    def show(v: list[float]) -> str:
        if not v:
            return "-"
        v = sorted(v)
        return f"{v[len(v) // 2]:6.2f} ({v[0]:.2f}-{v[-1]:.2f})"

    durations = sorted(d for _, d, _ in kernels)
    return (f"{per} kernels a replay (median {durations[len(durations) // 2]:.1f} us); inside a replay "
            f"{show(inside)}, between replays {show(between)}")


def report(label: str, events: list[tuple[float, float, str]], runs: int, verbose: bool) -> None:
    if not events:
        print(f"  {label}: no GPU activity seen")
        return
    t0 = events[0][0]
    busy = 0.0
    gaps = 0.0
    cur_s, cur_e = events[0][0], events[0][0] + events[0][1]
    for s, d, _ in events[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            gaps += s - cur_e
            cur_s, cur_e = s, s + d
        else:
            cur_e = max(cur_e, s + d)
    busy += cur_e - cur_s
    summed = sum(d for _, d, _ in events)
    span = cur_e - t0
    print(f"  {label}: per run: span {span / runs:7.1f} us, busy {busy / runs:7.1f}, kernels summed {summed / runs:7.1f}"
          f" ({summed / busy:.2f}x busy), idle gaps {gaps / runs:6.1f}; {len(events) / runs:.0f} activities a run")
    if verbose:
        for s, d, name in events:
            print(f"    {s - t0:9.1f} {d:8.1f}  {name[:90]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="2048x16384,16384x16384")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("-v", "--verbose", action="store_true", help="list every activity")
    ap.add_argument("--wall", action="store_true", help="also wall time per replay of the region's graph "
                    "(Graph.launch, which signals its completion; with one more signal; with raw signals instead), "
                    "of the same linears chained (also by raw cuGraphLaunch, no signal), of Runtime.submit and "
                    "of torch's graph")
    ap.add_argument("--loops", type=int, default=64, help="replays per --wall timing (default: %(default)s)")
    ap.add_argument("--gaps", action="store_true", help="with --wall: the idle time between kernels within a "
                    "replay and between replays, from the kernel timeline of 8 back-to-back replays of each graph")
    args = ap.parse_args()
    dev = hrx.device("cuda")
    ops = TensorOps(dev)
    rt = Runtime(dev)
    for shape in args.shapes.split(","):
        k, n = map(int, shape.split("x"))
        tw, tx, ws, x, g, outs, cg, _rate = sweep_operands(ops, rt, k, n, f"timeline {shape}")
        count = len(ws)
        last: list = []

        def hrx_graph(rt=rt, g=g, last=last):
            last[:] = [rt.submit(g)]

        def sync(last=last):
            if last:
                last.pop().wait(timeout=60)
            ops.stream.synchronize()

        def hrx_eager(x=x, ws=ws):
            for w in ws:
                ops.linear(x, w).close()

        def torch_eager(tx=tx, tw=tw):
            for w in tw:
                F.linear(tx, w)

        print(f"{shape} ({count} weights of {2 * k * n >> 20} MiB):")
        for label, fn in (("hrx graph", hrx_graph), ("torch graph", cg.replay), ("hrx eager", hrx_eager),
                          ("torch eager", torch_eager)):
            for _ in range(2):
                fn()
            sync()
            torch.cuda.synchronize()
            report(label, timeline(fn, args.runs, sync), args.runs, args.verbose)
        extra = []
        if args.wall:
            s = ops.stream
            par = s.access_graph()  # independent nodes (they run concurrently), as the region has them
            outs.extend(ops.record_linear(par, x, w) for w in ws)
            chain = s.graph()  # the same linears, each after the previous (as torch captures them)
            prev = None
            for w in ws:
                (a, kw), o, _ = ops._linear_record_args(x, w, None, "bf16", s)
                prev = chain.dispatch(*a, **kw, deps=[] if prev is None else [prev])
                outs.append(o)
            extra = [par, chain]

            def both():
                sync()
                torch.cuda.synchronize()

            # the completion signal's own cost, by the raw driver calls it could be made of
            # (a timeline counter: pinned host memory, which HRX's signal writes with a fence),
            # each after Graph.launch (which signals itself)
            nd = dev.native
            lib, ffi = nd.driver.lib, nd.driver.ffi
            stream = s.native_queue().stream
            spare = nd.create_timeline()
            dmem = dev.allocate(64)
            dptr = dmem.allocation.native.dptr
            event = ffi.new("CUevent *")
            lib.cuEventCreate(event, 2)  # CU_EVENT_DISABLE_TIMING
            write = nd.driver.write_value64
            ticks = iter(range(1, 1 << 62))

            refused: dict[str, int] = {}

            def raw_write(addr, flags, par=par):
                par.launch()
                code = write(stream, addr, next(ticks), flags)
                if code:  # e.g. CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER, which the _v2 call refuses
                    refused[f"cuStreamWriteValue64 flags={flags}"] = int(code)

            chain.launch().wait()  # instantiates it
            chain_exec = chain._native._exec
            ways = {
                "Graph.launch (one signal)": par.launch,
                "Graph.launch + an event": lambda par=par, s=s: (par.launch(), s.record_event()),
                "+ raw write, host, fence": lambda: raw_write(spare.dptr, 0),
                "+ raw write, host, no fence": lambda: raw_write(spare.dptr, 1),
                "+ raw write, device, fence": lambda: raw_write(dptr, 0),
                "+ raw cuEventRecord": lambda par=par: (par.launch(), lib.cuEventRecord(event[0], stream)),
                "Graph.launch, chain": chain.launch,
                "raw cuGraphLaunch, chain": lambda: lib.cuGraphLaunch(chain_exec, stream),
                "Runtime.submit": hrx_graph,
                "torch graph": cg.replay,
            }
            res: dict[str, list[float]] = {name: [] for name in ways}
            for fn in ways.values():
                per_replay(fn, 4, both)
            for _ in range(5):
                for name, fn in ways.items():
                    res[name].append(per_replay(fn, args.loops, both))
            print(f"  wall us per replay, {args.loops} back to back (median of 5):")
            for name, v in res.items():
                print(f"    {name:26s} {sorted(v)[2]:8.1f}")
            for call, code in refused.items():
                print(f"    (refused: {call} returned CUresult {code}; that variant wrote nothing)")
            if args.gaps:
                print("  idle us between kernels, 8 replays back to back (median; min-max):")
                for name in ("Graph.launch (one signal)", "raw cuGraphLaunch, chain", "torch graph"):
                    print(f"    {name:26s} {gaps(timeline(ways[name], 8, both), 8)}")
        if args.wall:
            lib.cuEventDestroy_v2(event[0])
            spare.close()
            dmem.close()
        close_operands(ops, ws, x, g, outs, *extra)
        del cg, _rate, tw, tx
    rt.close()


if __name__ == "__main__":
    main()
