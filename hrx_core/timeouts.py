"""Timeout arguments: one rule for every wait HRX offers.

A timeout is ``None`` (wait indefinitely) or a number of seconds >= 0. ``inf`` and
values beyond what the platform's waits accept (``threading.TIMEOUT_MAX``, a few
hundred years) mean "indefinitely" too; NaN, negatives, bools and non-numbers are
refused with InvalidArgument naming the argument. Waits slice long timeouts, so a
huge one never overflows a native time type.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

import numpy as np

from .errors import InvalidArgument

def _sleep0() -> None:
    time.sleep(0)


#: Let other threads have the interpreter and the CPU for a moment without sleeping:
#: the step of every spinning wait. ``os.sched_yield`` releases the GIL around a bare
#: system call (about 0.5 us); ``time.sleep(0)`` sleeps the kernel's timer slack on
#: Linux -- 56 us measured on the H100 host, 85 us on the CI machine -- so a spin made
#: of it polled every 50-85 us, adding half that to every wait on average. Platforms
#: without sched_yield (Windows, where sleep(0) yields at once) keep ``sleep(0)``.
yield_thread = getattr(os, "sched_yield", None) or _sleep0


#: Longest single native wait; longer waits loop (keeps C time types in range and
#: lets a waiting thread notice interrupts delivered by HRX, see completion.py).
SLICE_S = 0.05


def check_timeout(name: str, value: Any) -> float | None:
    """``value`` as seconds (float) or None (indefinitely); see the module docstring."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidArgument(f"{name}: expected seconds >= 0 or None, got {type(value).__name__}")
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0:
        raise InvalidArgument(f"{name}: expected seconds >= 0 or None, got {value!r}")
    if seconds >= threading.TIMEOUT_MAX:
        return None  # inf and absurdly long timeouts: indefinitely
    return seconds


def deadline(timeout: float | None) -> float | None:
    """The monotonic deadline of a checked timeout (None: none)."""
    return None if timeout is None else time.monotonic() + timeout


def remaining(deadline_s: float | None) -> float | None:
    """Seconds left until ``deadline_s`` (>= 0), or None without a deadline."""
    return None if deadline_s is None else max(0.0, deadline_s - time.monotonic())


__all__ = ["SLICE_S", "check_timeout", "deadline", "remaining"]
