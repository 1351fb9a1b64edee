"""The execution runtime: lanes, tracked graphs, budgets, residency, plans, stats, traces.

    from hrx_core.execution import Runtime, RuntimeOptions
    rt = Runtime(hrx.device(), RuntimeOptions(max_submissions=8))
    g = rt.graph("step")
    up = g.upload(x, host_input)                   # upload lane
    g.compute("mlp", lambda r: r.dispatch(...))    # compute lane, ordered by declared access
    out = g.download(y)                            # download lane
    rt.submit(g).wait(); out.read()
"""

from __future__ import annotations

from typing import Any

from .graph import ComputeRegion, CopyRegion, DownloadRegion, Region, Scope, ScopedRegion, TrackedGraph, UploadRegion
from .lanes import LANES, Lane
from .runtime import Runtime, RuntimeOptions, Submission
from .session import NativeSession

_LAZY = {
    "ResidencyManager": ".residency",
    "ResidencyStats": ".residency",
    "UnitLease": ".residency",
    "Workspace": ".residency",
    "PlanCache": ".plan_cache",
    "PlanCacheStats": ".plan_cache",
    "PlanLease": ".plan_cache",
    "TraceRecorder": ".trace",
    "validate_trace": ".trace",
    "LatencyProfile": ".profile",
    "RuntimeStats": ".profile",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hrx_core.execution' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)


__all__ = [
    "LANES",
    "ComputeRegion",
    "CopyRegion",
    "DownloadRegion",
    "Lane",
    "NativeSession",
    "Region",
    "Runtime",
    "RuntimeOptions",
    "Scope",
    "ScopedRegion",
    "Submission",
    "TrackedGraph",
    "UploadRegion",
    *_LAZY,
]
