"""The ``npu-host`` engine: the reference NPU engine, running NPU programs' host
builds on CPU worker threads with the NPU programming model's contract checks,
pending limits, column accounting and per-invocation state. It is a host reference
of the programming model, not NPU hardware."""

from .engine import NpuHostDevice, NpuHostEngine

__all__ = ["NpuHostDevice", "NpuHostEngine"]
