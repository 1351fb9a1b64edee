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
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import InvalidArgument

def _sleep0() -> None:
    time.sleep(0)


#: Let other threads have the interpreter and the CPU for a moment without sleeping.
#: ``os.sched_yield`` releases the GIL around a bare system call (about 0.5 us);
#: ``time.sleep(0)`` sleeps the kernel's timer slack on Linux -- 56 us measured on the
#: H100 host, 85 us on the CI machine. Platforms without sched_yield (Windows, where
#: sleep(0) yields at once) keep ``sleep(0)``.
yield_thread = getattr(os, "sched_yield", None) or _sleep0

_SPIN_CDEF = "int hrx_spin_u64(uintptr_t address, uint64_t value, double seconds);"
_SPIN_SOURCE = r"""
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HRX_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define HRX_RELAX() __asm__ __volatile__("yield")
#else
#define HRX_RELAX() ((void)0)
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <sched.h>
#define HRX_YIELD() sched_yield()
#else
#define HRX_YIELD() ((void)0)
#endif

static double hrx_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* 1 once the 64-bit counter at `address` reads `value` or more, 0 after `seconds`.
   Called through cffi, which releases the GIL for the call: other threads run while
   this one polls. Every 64 polls (a few microseconds) it yields the core to any
   thread waiting for one (sched_yield returns at once where none is), so a spinning
   waiter never starves the threads whose work it waits on. Readers of a counter
   written as two dwords, low first, never see it ahead of its final value (the high
   dword only grows). */
int hrx_spin_u64(uintptr_t address, uint64_t value, double seconds)
{
    const volatile uint64_t *p = (const volatile uint64_t *)address;
    if (*p >= value)
        return 1;
    const double end = hrx_now() + seconds;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (*p >= value)
                return 1;
            HRX_RELAX();
        }
        if (hrx_now() >= end)
            return *p >= value;
        HRX_YIELD();
    }
}
"""
_spin_fn: Any = None  # the compiled spin, False where there is none (see spin_u64)


def _spin_module() -> Any:
    from . import hotpath

    return hotpath.load("spin_wait", _SPIN_CDEF, _SPIN_SOURCE)


def _compiled_spin() -> Any:
    global _spin_fn
    if _spin_fn is None:
        module = _spin_module()
        _spin_fn = module.lib.hrx_spin_u64 if module.compiled else False
    return _spin_fn


def spin_doctor_row() -> tuple[str, str, str]:
    """The ``hrx doctor`` row of the waits' spin: ``("core", "wait spin", "compiled, ..."
    | "fallback (Python): why")`` (builds it on first use)."""
    from . import hotpath

    return hotpath.doctor_row("core", "wait spin", lambda: _spin_module().status)


def spin_u64(address: int, value: int, seconds: float, read: Callable[[], int]) -> bool:
    """Spin up to ``seconds`` until the 64-bit counter at host ``address`` reaches
    ``value``; True if it did. The step of every engine's timeline wait before it
    sleeps: work that ends within the spin is noticed at once. ``read()`` returns the
    counter; an ``address`` of 0 (a counter that is not C memory) is polled by it.

    Compiled (:mod:`hrx_core.hotpath`, built on first use): one C call polls the
    counter with the GIL released, so Python threads beside the waiter run freely.
    Without a compiled hot path (``HRX_HOT_PATH=0``, no compiler), a Python loop polls
    ``read()`` and yields between polls: with :data:`yield_thread` where this is the
    only Python thread, else with ``time.sleep(0)`` (a timer slack a poll, 50-85 us on
    Linux, but the GIL is left to the other threads, which a sched_yield loop would
    take back every microsecond: a pageable upload's copy threads ran 15% slower so)."""
    fn = _spin_fn if _spin_fn is not None else _compiled_spin()
    if fn is not False and address:
        return bool(fn(address, value, seconds))
    pause = yield_thread if threading.active_count() == 1 else _sleep0
    end = time.perf_counter() + seconds
    while True:
        if read() >= value:
            return True
        if time.perf_counter() >= end:
            return False
        pause()


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
