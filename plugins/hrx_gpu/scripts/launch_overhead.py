"""Launch overhead of the cuda engine: raw cffi cuLaunchKernel vs prepared vs dispatch.

Prints one JSON object: per-launch microseconds (median of interleaved rounds) and
the ratios to the raw call. Run on a GPU machine: ``python scripts/launch_overhead.py``.
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np
from hrx_core.engine import Access, Artifact, BufferArg, GraphNode

from hrx_gpu.cuda.compilers import compile_cuda
from hrx_gpu.cuda.engine import CudaEngine

SOURCE = 'extern "C" __global__ void empty(unsigned int* x, unsigned int n) { if (n == 0xffffffffu) x[0] = n; }'
ROUNDS = 9
LAUNCHES = 2000


def main() -> None:
    device = CudaEngine().open_device(0)
    code, _ = compile_cuda(SOURCE, "empty", device.compile_options("cuda"))
    exe = device.load_executable(Artifact(target="cuda", entry="empty", code=code, key="empty"))
    queue = device.create_queue("compute", 0)
    timeline = device.create_timeline()
    buf = device.allocate(256)
    args = [BufferArg(buf, 0, 256, Access.READ_WRITE), np.uint32(1)]
    grid, block = (1, 1, 1), (32, 1, 1)
    prepared = device.prepare_dispatch(exe, grid, block, args)
    graph = device.build_graph(
        [GraphNode("dispatch", (), {"executable": exe, "grid": grid, "block": block, "args": args})]
    )

    driver = device.driver
    ffi, lib = driver.ffi, driver.lib
    holders = [ffi.new("unsigned long long *", buf.dptr), ffi.new("unsigned int *", 1)]
    params = ffi.new("void *[]", holders)
    func, stream, null = exe.function, queue.stream, ffi.NULL
    launch = lib.cuLaunchKernel

    def raw() -> None:
        for _ in range(LAUNCHES):
            launch(func, 1, 1, 1, 32, 1, 1, 0, stream, params, null)

    def prep() -> None:
        p = prepared.launch
        for _ in range(LAUNCHES):
            p(queue)

    def disp() -> None:
        d = queue.dispatch
        for _ in range(LAUNCHES):
            d(exe, grid, block, args)

    def graphs() -> None:
        g = graph.launch
        for _ in range(LAUNCHES):
            g(queue)

    value = 0

    def sync() -> None:
        nonlocal value
        value += 1
        queue.signal(timeline, value)
        timeline.wait(value, 60)

    methods = {"raw_cffi": raw, "prepared": prep, "dispatch": disp, "graph_launch": graphs}
    samples: dict[str, list[float]] = {k: [] for k in methods}
    for fn in methods.values():  # warm-up
        fn()
        sync()
    for _ in range(ROUNDS):
        for name, fn in methods.items():
            sync()
            t0 = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - t0) / LAUNCHES * 1e6)
    sync()
    result = {f"{k}_us": round(statistics.median(v), 3) for k, v in samples.items()}
    raw_us = result["raw_cffi_us"]
    result.update({f"{k}_ratio": round(result[f"{k}_us"] / raw_us, 3) for k in methods if k != "raw_cffi"})
    result["launches_per_round"] = LAUNCHES
    result["rounds"] = ROUNDS
    print(json.dumps(result))
    graph.close()
    device.close()


if __name__ == "__main__":
    main()
