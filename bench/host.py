"""Host engine overheads and bandwidth, against numpy in the same run.

    python bench/host.py [--reps 7] [--gib 1]

Figures (ids host.*) go to bench/results/host-2core.json (or --out):
- dispatch overhead of an empty host kernel (eager stream.dispatch, and a prepared
  launch) per call, beside a plain Python call of the same function;
- graph replay overhead per node of a 100-node graph, beside eager dispatch per op;
- 1 GiB stream.copy and upload_blocking / download bandwidth against numpy.copyto.
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
from results_file import entry, host_file, host_machine, report, write  # noqa: E402

CMD = "python bench/host.py"


def empty() -> None:
    pass


EMPTY = hrx.Kernel("empty", buffers=0, host=empty)


def median_pair(fn_hrx, fn_peer, reps):
    """Alternate HRX and its peer; return medians of both."""
    a, b = [], []
    for _ in range(reps):
        a.append(fn_hrx())
        b.append(fn_peer())
    return statistics.median(a), statistics.median(b)


def bench_dispatch(s, reps, calls=20000):
    def eager():
        t = time.perf_counter()
        for _ in range(calls):
            s.dispatch(EMPTY, 1, [])
        s.synchronize()
        return (time.perf_counter() - t) / calls * 1e6

    prepared = s.prepare(EMPTY, 1, [])

    def prep():
        t = time.perf_counter()
        for _ in range(calls):
            prepared.launch()
        s.synchronize()
        return (time.perf_counter() - t) / calls * 1e6

    def raw():
        t = time.perf_counter()
        for _ in range(calls):
            empty()
        return (time.perf_counter() - t) / calls * 1e6

    eager()
    e, r = median_pair(eager, raw, reps)
    p, _ = median_pair(prep, raw, reps)
    return [
        entry("host.dispatch.empty", "eager stream.dispatch of an empty host kernel incl. execution on the worker, per call", "us", e,
              peer="plain Python call of the same function", peer_value=r, command=CMD),
        entry("host.dispatch.prepared", "prepared launch of an empty host kernel incl. execution, per call", "us", p,
              peer="plain Python call of the same function", peer_value=r, command=CMD),
    ]


def bench_graph(s, reps, nodes=100, launches=200):
    g = s.graph()
    prev = []
    for _ in range(nodes):
        prev = [g.dispatch(EMPTY, 1, [], deps=prev)]
    g.launch().wait()

    def replay():
        t = time.perf_counter()
        for _ in range(launches):
            g.launch()
        s.synchronize()
        return (time.perf_counter() - t) / (launches * nodes) * 1e6

    def eager():
        t = time.perf_counter()
        for _ in range(launches):
            for _ in range(nodes):
                s.dispatch(EMPTY, 1, [])
        s.synchronize()
        return (time.perf_counter() - t) / (launches * nodes) * 1e6

    r, e = median_pair(replay, eager, reps)
    return [entry("host.graph.replay_per_node", f"replay of a {nodes}-node chain of empty host kernels, host time per node", "us", r,
                  peer="eager stream.dispatch per op", peer_value=e, command=CMD)]


def bench_bandwidth(s, reps, nbytes):
    rng = np.random.default_rng(0)
    host_src = rng.integers(0, 256, nbytes, dtype=np.uint8)
    host_dst = np.empty_like(host_src)
    a = s.allocate_from(host_src)
    b = s.allocate(nbytes)
    s.copyto(b, a).wait()
    gb = nbytes / 1e9

    def numpy_copy():
        t = time.perf_counter()
        np.copyto(host_dst, host_src)
        return gb / (time.perf_counter() - t)

    def dev_copy():
        t = time.perf_counter()
        s.copyto(b, a).wait()
        return gb / (time.perf_counter() - t)

    def upload():
        t = time.perf_counter()
        s.upload_blocking(b, host_src)
        return gb / (time.perf_counter() - t)

    def upload_staged():
        t = time.perf_counter()
        s.upload(b, host_src).wait()
        return gb / (time.perf_counter() - t)

    def download():
        t = time.perf_counter()
        s.download(b, out=host_dst)
        return gb / (time.perf_counter() - t)

    numpy_copy(), upload(), upload_staged(), download()
    out = []
    for name, fn, what in (
        ("host.copy.1gib", dev_copy, "stream.copy of 1 GiB between device buffers"),
        ("host.upload.1gib", upload, "upload_blocking of 1 GiB from pageable numpy memory (the host queue reads it directly)"),
        ("host.upload_staged.1gib", upload_staged, "upload (returns once the data is captured) of 1 GiB, then wait: on an idle queue "
         "one copy on the calling thread (DeviceInfo.host_memory), else through 64 MiB staging chunks"),
        ("host.download.1gib", download, "download of 1 GiB into pageable numpy memory (the host queue writes it directly)"),
    ):
        h, p = median_pair(fn, numpy_copy, reps)
        goal = ">= 0.8" if name != "host.download.1gib" else None
        out.append(entry(name, what, "GB/s", h, peer="numpy.copyto of 1 GiB", peer_value=p, goal=goal, command=CMD))
    assert np.array_equal(s.download(b), host_src)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="results file (default: host-<cores>core.json)")
    ap.add_argument("--only", choices=["dispatch", "graph", "bandwidth"], default=None)
    args = ap.parse_args()
    dev = hrx.device("host")
    s = dev.stream()
    results = []
    if args.only in (None, "dispatch"):
        results += bench_dispatch(s, args.reps)
    if args.only in (None, "graph"):
        results += bench_graph(s, args.reps)
    if args.only in (None, "bandwidth"):
        results += bench_bandwidth(s, args.reps, int(args.gib * (1 << 30)))
    report(results)
    path = write(args.out or host_file(), host_machine(), results)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/host.py", main))
