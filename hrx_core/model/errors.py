"""Errors of the model layer (all are hrx_core.errors types)."""

from __future__ import annotations

from ..errors import Overlap, QueueFull


class SlotBusy(QueueFull):
    """An inference slot cannot be submitted again yet: a consumer still holds a
    view of its outputs (close the DeviceTensors), another thread is submitting it,
    or no idle slot was free within the timeout."""


class SlotConflict(Overlap):
    """Independent inference slots would share writable memory (I/O or scratch), or
    a slot graph writes the model's immutable weights."""


__all__ = ["SlotBusy", "SlotConflict"]
