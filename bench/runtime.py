"""The execution runtime: replay cost and lane overlap, on the best engine present.

    python bench/runtime.py [--engine cuda|host] [--pairs 21]

Ids runtime.* go to bench/results/h200.json on cuda, host-2core.json on the host.
- replay of a 100-node tracked graph (one compute region) through Runtime.submit:
  host cost per submission with the GPU idle, against a raw cuGraphLaunch of the same
  CUDA graph (cuda only; on the host engine a plain figure), and the same with
  ``observe=True`` (the default: ends stamped when noticed) and ``observe="exact"``
  (completion callbacks) against ``observe=False``;
- resubmission of a one-region graph binding 64 allocations (32 dispatches, each
  reading one buffer and writing another), back to back: host cost per submission
  with the GPU idle, against the same runtime made to run its full hazard scan on
  every submission (``Runtime.fast_resubmit = False``); and the same 64 allocations
  split over a graph of four independent regions (``runtime.resubmit64x4``: each
  region skips its scan once the runtime re-dates its note, SubmitPlan.redatable);
- two independent branches in one graph -- a compute-bound kernel on the compute lane
  and a copy-bound upload on the upload lane, sized to take about as long -- measured
  alternately sequential (two submissions, one after the other) and parallel (one
  graph) over --pairs pairs: the achieved speedup against the ideal one (sequential
  sum / longest branch).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hrx_core as hrx  # noqa: E402
from hrx_core.execution import Runtime, RuntimeOptions  # noqa: E402
from results_file import entry, report, write_for  # noqa: E402

CMD = "python bench/runtime.py"

TOUCH_SRC = 'extern "C" __global__ void touch(unsigned int* p, unsigned int v) { if (threadIdx.x == 0 && v == 0xffffffffu) p[0] = v; }'
TOUCH = hrx.Kernel("touch", buffers=("read_write",), scalars=(np.uint32,), cuda=TOUCH_SRC,
                   host=lambda p, v: None)

SPIN_SRC = r"""
extern "C" __global__ void spin(unsigned int* out, unsigned long long cycles) {
    unsigned long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
    if (threadIdx.x == 0) out[blockIdx.x] = 1;
}
"""


def _spin_host(out: np.ndarray, cycles: np.uint64) -> None:
    # compute-bound numpy work that releases the GIL: ~cycles/1e9 seconds on one core
    x = np.linspace(0.0, 1.0, 1 << 16)
    deadline = time.perf_counter() + float(cycles) * 1e-9
    while time.perf_counter() < deadline:
        np.sin(x, out=x)
    out.view(np.uint32)[0] = 1


SPIN = hrx.Kernel("spin", buffers=("write",), scalars=(np.uint64,), cuda=SPIN_SRC, host=_spin_host)

PASS_SRC = 'extern "C" __global__ void pass_through(const unsigned int* a, unsigned int* b) { if (threadIdx.x == 0) b[0] = a[0]; }'
PASS = hrx.Kernel("pass_through", buffers=("read", "write"), cuda=PASS_SRC, host=lambda a, b: None)


def bench_resubmit(dev, reps: int, pairs: int = 32, n: int = 200, regions: int = 1) -> list[dict]:
    """Host cost of resubmitting a graph over 2 * ``pairs`` allocations (split over
    ``regions`` independent compute regions), with the resubmission fast path and with
    the full hazard scan, alternately."""
    rts, lanes = [], []
    each = pairs // regions
    for fast in (True, False):
        rt = Runtime(dev, RuntimeOptions(observe=False))
        rt.fast_resubmit = fast
        bufs = [rt.allocate(256) for _ in range(2 * pairs)]
        g = rt.graph("resubmit")
        for k in range(regions):
            mine = bufs[2 * each * k: 2 * each * (k + 1)]
            g.compute(f"pairs{k}", lambda r, mine=mine: [r.dispatch(PASS, 1, mine[2 * i: 2 * i + 2], block=32)
                                                        for i in range(each)])
        rt.submit(g).wait()
        rts.append((rt, g))
        lanes.append(rt.lane("compute"))

    def timed(rt, g, lane):
        def run():
            total = 0.0
            for _ in range(n):
                lane.stream.synchronize()
                t = time.perf_counter()
                rt.submit(g)
                total += time.perf_counter() - t
            rt.synchronize()
            return total / n * 1e6
        return run

    fast_fn, full_fn = (timed(rt, g, lane) for (rt, g), lane in zip(rts, lanes))
    fast_fn(), full_fn()
    samples: list[list[float]] = [[], []]
    for _ in range(reps):
        samples[0].append(fast_fn())
        samples[1].append(full_fn())
    fast, full = (statistics.median(x) for x in samples)
    shape = "a one-region graph" if regions == 1 else f"a graph of {regions} independent regions"
    print(f"resubmission of {shape} over {2 * pairs} allocations: {fast:.2f} us (full hazard scan {full:.2f} us)")
    suffix = ("" if regions == 1 else f"x{regions}") + ("" if dev.info.engine == "cuda" else ".host")
    out = [entry(f"runtime.resubmit{2 * pairs}{suffix}", f"Runtime.submit of {shape} binding {2 * pairs} allocations "
                 f"({pairs} dispatches), resubmitted back to back, host cost, GPU idle", "us", fast,
                 peer="the same with the full hazard scan on every submission", peer_value=full, command=CMD)]
    for rt, g in rts:
        g.close()
        rt.close()
    return out


def _replay_setup(dev, observe: bool, nodes: int, signals: str = "auto"):
    rt = Runtime(dev, RuntimeOptions(observe=observe, signals=signals))
    scratch = rt.allocate(256)
    g = rt.graph("replay100")
    region = g.compute("chain", lambda r: [r.dispatch(TOUCH, 1, [scratch], block=32, scalars=(i,)) for i in range(nodes)])
    rt.submit(g).wait()
    return rt, g, region


def bench_replay(dev, reps: int, nodes: int = 100, n: int = 200) -> list[dict]:
    rt, g, region = _replay_setup(dev, False, nodes)
    ort, og, _ = _replay_setup(dev, True, nodes)  # the default: ends stamped when noticed
    ert, eg, _ = _replay_setup(dev, "exact", nodes)  # ends stamped by completion callbacks
    srt, sg, _ = _replay_setup(dev, False, nodes, "each")  # a signal every submission
    lane, olane, elane, slane = rt.lane("compute"), ort.lane("compute"), ert.lane("compute"), srt.lane("compute")

    def per_submit(fn, lane=lane, rt=rt):
        # the round ends with the runtime settling its submissions (their work is done:
        # the lane was synchronized) and a read of the statistics, both timed: settling
        # and, with observation, folding the stamps in are part of what a submission
        # costs, spread over the round's submissions
        def run():
            total = 0.0
            for _ in range(n):
                lane.stream.synchronize()
                t = time.perf_counter()
                fn()
                total += time.perf_counter() - t
            lane.stream.synchronize()
            t = time.perf_counter()
            rt.synchronize()
            rt.stats.snapshot()
            total += time.perf_counter() - t
            return total / n * 1e6
        return run

    hrx_fn = per_submit(lambda: rt.submit(g))
    obs_fn = per_submit(lambda: ort.submit(og), olane, ort)
    exact_fn = per_submit(lambda: ert.submit(eg), elane, ert)
    each_fn = per_submit(lambda: srt.submit(sg), slane, srt)
    out = []
    if dev.info.engine == "cuda":
        native = region.device_graph._native
        lib = dev.native.driver.lib
        exec_, stream = native._exec, lane.stream.native_queue().stream
        raw_fn = per_submit(lambda: lib.cuGraphLaunch(exec_, stream))
        raw_fn(), hrx_fn(), obs_fn(), exact_fn(), each_fn()
        samples = [[], [], [], [], []]
        for _ in range(reps):
            samples[0].append(raw_fn())
            samples[1].append(hrx_fn())
            samples[2].append(obs_fn())
            samples[3].append(exact_fn())
            samples[4].append(each_fn())
        raw, h, o, e, each = (statistics.median(x) for x in samples)
        print(f"replay100 via runtime: hrx {h:.2f} us (observed {o:.2f}, exact {e:.2f}, a signal each {each:.2f} us), "
              f"raw cuGraphLaunch {raw:.2f} us")
        out.append(entry("runtime.replay100", f"Runtime.submit of a {nodes}-node tracked graph (one compute region, one CUDA graph), host cost, GPU idle", "us",
                         h, peer="raw cffi cuGraphLaunch of the same CUDA graph", peer_value=raw, goal="<= 1.2", command=CMD))
        suffix = ""
    else:
        hrx_fn(), obs_fn(), exact_fn(), each_fn()
        samples = [[], [], [], []]
        for _ in range(reps):
            samples[0].append(hrx_fn())
            samples[1].append(obs_fn())
            samples[2].append(exact_fn())
            samples[3].append(each_fn())
        h, o, e, each = (statistics.median(x) for x in samples)
        print(f"replay100 via runtime (host engine): {h:.2f} us (observed {o:.2f}, exact {e:.2f} us)")
        out.append(entry("runtime.replay100.host", f"Runtime.submit of a {nodes}-node tracked graph on the host engine, host cost (execution included)", "us",
                         h, command=CMD))
        suffix = ".host"
    out.append(entry(f"runtime.replay100.observed{suffix}", "the same submission with RuntimeOptions(observe=True), the default (profiles, lane busy time, traces; ends stamped when the runtime notices them; folding them into the statistics included)", "us",
                     o, peer="the same with observe=False", peer_value=h, command=CMD))
    out.append(entry(f"runtime.replay100.observed_exact{suffix}", "the same submission with RuntimeOptions(observe='exact') (ends stamped by completion callbacks on a notifier thread)", "us",
                     e, peer="the same with observe=False", peer_value=h, command=CMD))
    out.append(entry(f"runtime.replay100.signal_each{suffix}", "the same submission with RuntimeOptions(signals='each'): a "
                     "timeline signal every submission (the default, 'auto', signals lazily where failures are sticky: cuda)",
                     "us", each, peer="the same with the default signals", peer_value=h, command=CMD))
    for x in (g, og, eg, sg):
        x.close()
    for x in (rt, ort, ert, srt):
        x.close()
    return out


def bench_overlap(dev, pairs: int) -> list[dict]:
    rt = Runtime(dev, RuntimeOptions(observe=False))
    flag = rt.allocate(256)
    cuda = dev.info.engine == "cuda"
    nbytes = (1 << 30) if cuda else (256 << 20)
    dst = rt.allocate(nbytes)
    data = np.ones(nbytes, np.uint8)

    def graphs(cycles: int):
        a = rt.graph("compute-branch")
        a.compute("spin", lambda r: r.dispatch(SPIN, 1, [flag.slice(0, 4)], block=32, scalars=(cycles,)))
        b = rt.graph("copy-branch")
        b.upload(dst, data)
        p = rt.graph("both")
        p.compute("spin", lambda r: r.dispatch(SPIN, 1, [flag.slice(0, 4)], block=32, scalars=(cycles,)))
        p.upload(dst, data)
        return a, b, p

    def timed(fn):
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    # size the compute branch to take about as long as the copy branch
    probe_a, probe_b, probe_p = graphs(10_000_000)
    rt.submit(probe_b).wait()
    t_copy = statistics.median(timed(lambda: rt.submit(probe_b).wait()) for _ in range(3))
    t_spin = statistics.median(timed(lambda: rt.submit(probe_a).wait()) for _ in range(3))
    scale = t_copy / max(t_spin, 1e-6)
    cycles = int(10_000_000 * scale)
    for gr in (probe_a, probe_b, probe_p):
        gr.close()
    a, b, p = graphs(cycles)
    rt.submit(p).wait()
    seqs, pars, tas, tbs = [], [], [], []
    for _ in range(pairs):
        ta = timed(lambda: rt.submit(a).wait())
        tb = timed(lambda: rt.submit(b).wait())
        seqs.append(ta + tb)
        tas.append(ta)
        tbs.append(tb)
        pars.append(timed(lambda: rt.submit(p).wait()))
    seq, par = statistics.median(seqs), statistics.median(pars)
    ta, tb = statistics.median(tas), statistics.median(tbs)
    ideal = (ta + tb) / max(ta, tb)
    achieved = seq / par
    print(f"overlap: compute {ta * 1e3:.2f} ms, copy {tb * 1e3:.2f} ms, sequential {seq * 1e3:.2f} ms, "
          f"parallel {par * 1e3:.2f} ms, speedup {achieved:.3f} of ideal {ideal:.3f}")
    prefix = "runtime.overlap" if cuda else "runtime.overlap.host"
    for gr in (a, b, p):
        gr.close()
    rt.close()
    return [
        entry(prefix, f"two independent branches in one graph (compute kernel {ta * 1e3:.1f} ms, upload {tb * 1e3:.1f} ms), "
              f"speedup of parallel over sequential, median of {pairs} alternating pairs", "x", achieved,
              peer="ideal speedup (sequential sum / longest branch)", peer_value=ideal, goal=">= 0.9", command=CMD),
        entry(prefix + ".parallel_ms", "the same: parallel time", "ms", par * 1e3, command=CMD),
        entry(prefix + ".sequential_ms", "the same: sequential time", "ms", seq * 1e3, command=CMD),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default=None)
    ap.add_argument("--pairs", type=int, default=21)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    results = (bench_replay(dev, args.reps) + bench_resubmit(dev, args.reps) + bench_resubmit(dev, args.reps, regions=4)
               + bench_overlap(dev, args.pairs))
    report(results)
    path = write_for(dev, results, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/runtime.py", main))
