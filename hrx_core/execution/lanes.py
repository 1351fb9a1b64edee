"""Lanes: one stream per kind of work, so independent kinds overlap.

A runtime has an ``upload``, a ``compute`` and a ``download`` lane on its device, and
an ``npu`` lane when it is given an NPU device. Each lane is one stream, so a lane
runs one region at a time (regions of independent graphs included) while different
lanes run concurrently. A :class:`NativeSession` reserves a lane
for the calling thread (Runtime._reserve_lane).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..device import Device
    from ..stream import Stream

LANES = ("upload", "compute", "download", "npu")


class Lane:
    """A named stream of a runtime."""

    # last_end, which hrx_core.fastpath's fold reads and writes for every region, as a
    # slot (reached at its offset); the rest live in __dict__
    __slots__ = ("last_end", "__dict__", "__weakref__")

    def __init__(self, name: str, device: Device, stream: Stream) -> None:
        self.name = name
        self.device = device
        self.stream = stream
        # Serializes encoding on the lane (taken after the runtime's submit lock).
        self.lock = threading.RLock()
        self.last_end = 0.0  # host-observed end of the lane's latest region (seconds)
        #: submissions on this lane are signalled lazily (RuntimeOptions.signals)
        self.lazy_signals = False
        self.closed = False

    @property
    def queue(self) -> str:
        return self.stream.queue

    def __repr__(self) -> str:
        return f"<hrx.execution.Lane {self.name} on {self.stream.queue}>"
