"""The built-in host engine: runs everywhere, the reference for semantics.

Native queues are worker threads, timelines are counters with condition variables,
buffers are aligned numpy memory and kernels are Python callables over numpy views
of the bound ranges (numpy releases the GIL for large work).
"""

from .engine import HostDevice, HostEngine, HostFaults

__all__ = ["HostEngine", "HostDevice", "HostFaults"]
