"""What the examples share: picking the engine pair, medians, checks, the table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import hrx_core as hrx
from hrx_core.cli.args import count
from hrx_core.cli.table import table  # noqa: F401 - the examples' table (re-exported)

from .. import device as npu_device


def engines(gpu_engine: str | None = None, npu_engine: str | None = None) -> tuple[Any, Any]:
    """The best GPU-ish device (cuda on a GPU machine, else the host engine) and the
    best NPU device (npu-host unless another is named or xdna runs on hardware)."""
    gpu = hrx.device(gpu_engine)
    if gpu.info.kind == "npu":
        raise hrx.InvalidArgument(f"gpu_engine: {gpu.name} is an NPU; pass a GPU or host engine")
    return gpu, npu_device(npu_engine)


def engine_arguments(ap: Any, *, columns: bool = True) -> None:
    """The engine options every example (and ``hrx demo``) takes."""
    ap.add_argument("--gpu-engine", default=None, help="GPU-side engine (default: the best: cuda, else host)")
    ap.add_argument("--npu-engine", default=None, help="NPU engine (default: the best: xdna on a Strix Halo with libamdf, "
                    "else npu-host; xdna runs on the simulated Strix Halo when named with HRX_AMDF_PROVIDER=fake)")
    if columns:
        ap.add_argument("--columns", type=count("--columns", limit=1024), default=1, help="array columns of the NPU programs")


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn`` takes (host clock)."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1e3 if values else float("nan")


def new_native_objects(gpu: Any, npu: Any, before: dict[str, int] | None = None) -> dict[str, int]:
    """Native allocation and import counters of both devices (minus ``before``)."""
    now = {"gpu_allocations": gpu.stats.allocations, "npu_allocations": npu.stats.allocations,
           "npu_imports": int(npu.npu_stats().get("imports", 0))}
    if before is None:
        return now
    return {k: now[k] - before[k] for k in now}

