"""Completion profiles and runtime statistics.

:class:`LatencyProfile` keeps host-observed latencies per region name and reports
percentiles; :class:`RuntimeStats` holds the runtime's counters (transfer bytes,
tracked memory, submissions, quarantine, per-lane busy time). Both are thread-safe
and bounded in memory.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from numbers import Real
from typing import Any

import numpy as np

from ..errors import InvalidArgument, show

__all__ = ["LatencyProfile", "RuntimeStats", "format_bytes", "format_seconds"]


class _Deferred:
    """Readers first fold in what an owner deferred: the runtime stamps region end
    times and adds them to its statistics, profiles and trace only when one of them is
    read (``_before_read``, set by the owner, is called before any read)."""

    _before_read: Callable[[], None] | None = None

    def _settle(self) -> None:
        hook = self._before_read
        if hook is not None:
            hook()


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in binary units: ``"512 B"``, ``"1.5 KiB"``, ``"2.0 GiB"``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_seconds(seconds: float) -> str:
    """``seconds`` with a readable unit: ``"850 ns"``, ``"12.3 us"``, ``"4.56 ms"``, ``"1.23 s"``."""
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


class _Series:
    """Exact count, sum and max of one region's latencies, plus a uniform reservoir.

    Once the reservoir is full, ``replace_at`` is the count whose value replaces a
    sample next and ``w`` the skip distribution's state (Li's Algorithm L): a value
    costs a comparison, and only a kept one draws random numbers.
    """

    __slots__ = ("count", "max", "replace_at", "samples", "total", "w")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.samples: list[float] = []
        self.replace_at = 0
        self.w = 1.0


def _open_unit(rand: random.Random) -> float:
    """A uniform draw in (0, 1)."""
    u = rand.random()
    while u == 0.0:
        u = rand.random()
    return u


def _skip(rand: random.Random, series: _Series, limit: int) -> None:
    """Shrink ``series.w`` by one kept sample and move ``replace_at`` past the values
    Algorithm L skips (geometric with success probability ``w``)."""
    w = series.w * math.exp(math.log(_open_unit(rand)) / limit)
    if w >= 1.0:  # (an underflow of log(u) / limit: the largest w below 1)
        w = math.nextafter(1.0, 0.0)
    series.w = w
    series.replace_at += math.floor(math.log(_open_unit(rand)) / math.log1p(-w)) + 1


class LatencyProfile(_Deferred):
    """Host-observed latency per region name, with percentiles.

    Each name keeps at most ``max_samples`` samples: a uniform reservoir over every
    value recorded (Li's Algorithm L: past the reservoir's size only the values it
    keeps draw random numbers), so percentiles are exact up to
    ``max_samples`` values and an unbiased estimate past it. ``count``, ``mean``
    and ``max`` are always exact.
    """

    def __init__(self, max_samples: int = 4096, *, seed: int = 0) -> None:
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1:
            raise InvalidArgument(f"max_samples: expected an int >= 1, got {show(max_samples)}")
        self.max_samples = max_samples
        self._series: dict[str, _Series] = {}
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def record(self, name: str, seconds: float) -> None:
        """Record one latency of ``seconds`` (>= 0) for region ``name``."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"name: expected a non-empty str, got {show(name)}")
        if isinstance(seconds, bool) or not isinstance(seconds, Real) or not math.isfinite(seconds) or seconds < 0:
            raise InvalidArgument(f"seconds: expected a finite number >= 0, got {show(seconds)}")
        self._record_many({name: [float(seconds)]})

    def _record_many(self, latencies: dict[str, list[float]]) -> None:
        """:meth:`record` for many values at once, under one lock (the runtime's own
        values: already finite and non-negative). A region's values are added up and
        their max taken in one call each; past the reservoir's size only the values
        Algorithm L keeps are visited (its skips jump over the rest)."""
        limit, rand = self.max_samples, self._random
        with self._lock:
            for name, values in latencies.items():
                series = self._series.get(name)
                if series is None:
                    series = self._series[name] = _Series()
                n = len(values)
                if not n:
                    continue
                base = series.count
                series.count = base + n
                series.total = sum(values, series.total)
                top = max(values)
                if top > series.max:
                    series.max = top
                samples = series.samples
                room = limit - len(samples)
                if room > 0:  # the reservoir fills first
                    samples.extend(values[:room])
                    if len(samples) == limit:  # full: the first skip
                        series.replace_at = limit
                        _skip(rand, series, limit)
                replace_at, end = series.replace_at, base + n
                while 0 < replace_at <= end:  # (0 while the reservoir fills: never a count)
                    samples[rand.randrange(limit)] = values[replace_at - base - 1]
                    _skip(rand, series, limit)
                    replace_at = series.replace_at

    @contextmanager
    def measure(self, name: str) -> Iterator[None]:
        """Record the wall time of the ``with`` block as one latency of ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.record(name, time.perf_counter() - start)

    def names(self) -> list[str]:
        """The region names recorded so far, in first-recorded order."""
        self._settle()
        with self._lock:
            return list(self._series)

    def percentiles(self, name: str) -> dict[str, float | int]:
        """``{"count", "mean", "p50", "p90", "p99", "max"}`` for ``name`` (seconds)."""
        self._settle()
        with self._lock:
            series = self._series.get(name)
            if series is None:
                raise InvalidArgument(f"name: no latencies recorded for {name!r}")
            count, total, peak = series.count, series.total, series.max
            samples = np.array(series.samples, dtype=np.float64)
        p50, p90, p99 = np.percentile(samples, [50, 90, 99])
        return {
            "count": count,
            "mean": total / count,
            "p50": float(p50),
            "p90": float(p90),
            "p99": float(p99),
            "max": peak,
        }

    def summary(self) -> dict[str, dict[str, float | int]]:
        """:meth:`percentiles` for every name."""
        return {name: self.percentiles(name) for name in self.names()}

    def clear(self) -> None:
        """Forget every recorded latency."""
        self._settle()
        with self._lock:
            self._series.clear()

    def __repr__(self) -> str:
        summary = self.summary()
        if not summary:
            return "<hrx.LatencyProfile: no regions>"
        width = max(6, *(len(name) for name in summary))
        columns = ("mean", "p50", "p90", "p99", "max")
        lines = [
            f"<hrx.LatencyProfile {len(summary)} regions",
            f"  {'region':<{width}} {'count':>8} " + " ".join(f"{c:>9}" for c in columns),
        ]
        for name, row in summary.items():
            cells = " ".join(f"{format_seconds(row[c]):>9}" for c in columns)
            lines.append(f"  {name:<{width}} {row['count']:>8} {cells}")
        return "\n".join(lines) + ">"


class RuntimeStats(_Deferred):
    """The runtime's counters, safe to update from any thread.

    Tracked bytes are extents HRX allocated (buffers, staging, pools), not process
    RSS. ``regions`` counts regions submitted; ``lane_regions`` counts regions
    whose busy time was recorded on each lane.
    """

    COUNTERS: tuple[str, ...] = (
        "upload_bytes",
        "download_bytes",
        "copy_bytes",
        "submissions",
        "regions",
        "live_tracked_bytes",
        "peak_tracked_bytes",
        "quarantined_owners",
        "quarantined_bytes",
    )
    # Kept in step by track_bytes(), so add() refuses them.
    _TRACKED = ("live_tracked_bytes", "peak_tracked_bytes")

    def __init__(self) -> None:
        # reentrant: a buffer finalizer (Python 3.12 runs the collector at any
        # bytecode boundary) may untrack memory while this thread holds the lock;
        # every update below is one in-place statement, so a nested one is never lost
        self._lock = threading.RLock()
        self._counters: dict[str, int] = dict.fromkeys(self.COUNTERS, 0)
        self._lane_busy: dict[str, float] = {}
        self._lane_regions: dict[str, int] = {}

    def add(self, name: str, value: int = 1) -> int:
        """Add ``value`` (may be negative) to counter ``name``; return the new value.

        A counter never goes below zero: such a call raises and changes nothing.
        """
        if name not in self.COUNTERS or name in self._TRACKED:
            allowed = ", ".join(c for c in self.COUNTERS if c not in self._TRACKED)
            hint = " (use track_bytes())" if name in self._TRACKED else ""
            raise InvalidArgument(f"name: {name!r} is not an addable counter{hint}; expected one of {allowed}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(f"value: expected an int, got {show(value)}")
        with self._lock:
            new = self._counters[name] + value
            if new < 0:
                raise InvalidArgument(f"value: adding {value} to {name} ({self._counters[name]}) would go below 0")
            self._counters[name] = new
            return new

    def add_many(self, **values: int) -> None:
        """Add several counters under one lock (all validated first; all or nothing)."""
        for name, value in values.items():
            if name not in self.COUNTERS or name in self._TRACKED:
                raise InvalidArgument(f"name: {name!r} is not an addable counter")
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgument(f"{name}: expected an int, got {show(value)}")
        with self._lock:
            counters = self._counters
            for name, value in values.items():
                if counters[name] + value < 0:
                    raise InvalidArgument(f"{name}: adding {value} to {counters[name]} would go below 0")
            for name, value in values.items():
                counters[name] += value

    def _add_counted(self, values: dict[str, int], times: int = 1) -> None:
        """:meth:`add_many` of ``values`` ``times`` times, for counters the runtime
        computed itself (a graph's submission counters: known names, non-negative
        ints), unchecked, one lock."""
        with self._lock:
            counters = self._counters
            for name, value in values.items():
                counters[name] += value * times

    def get(self, name: str) -> int:
        """The current value of counter ``name``."""
        self._settle()
        if name not in self._counters:
            raise InvalidArgument(f"name: unknown counter {name!r}; expected one of {', '.join(self.COUNTERS)}")
        return self._counters[name]

    def lane_busy(self, lane: str, seconds: float, *, regions: int = 1) -> None:
        """Add ``seconds`` of busy time and ``regions`` completed regions to ``lane``."""
        if not isinstance(lane, str) or not lane:
            raise InvalidArgument(f"lane: expected a non-empty str, got {show(lane)}")
        if isinstance(seconds, bool) or not isinstance(seconds, Real) or not math.isfinite(seconds) or seconds < 0:
            raise InvalidArgument(f"seconds: expected a finite number >= 0, got {show(seconds)}")
        if isinstance(regions, bool) or not isinstance(regions, int) or regions < 0:
            raise InvalidArgument(f"regions: expected an int >= 0, got {show(regions)}")
        self._lanes_busy({lane: [float(seconds), regions]})

    def _lanes_busy(self, busy: dict[str, list[Any]]) -> None:
        """:meth:`lane_busy` for several lanes at once: ``{lane: [seconds, regions]}``
        (the runtime's own values, not re-checked), under one lock."""
        with self._lock:
            for lane, (seconds, regions) in busy.items():
                self._lane_busy[lane] = self._lane_busy.get(lane, 0.0) + seconds
                self._lane_regions[lane] = self._lane_regions.get(lane, 0) + regions

    def track_bytes(self, delta: int) -> int:
        """Change live tracked bytes by ``delta``, raising the peak if passed; return live.

        Live bytes never go below zero: such a call raises and changes nothing.
        """
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise InvalidArgument(f"delta: expected an int, got {show(delta)}")
        with self._lock:
            counters = self._counters
            counters["live_tracked_bytes"] += delta
            live = counters["live_tracked_bytes"]
            if live < 0:
                counters["live_tracked_bytes"] -= delta
                raise InvalidArgument(f"delta: {delta} would take live_tracked_bytes ({live - delta}) below 0")
            if live > counters["peak_tracked_bytes"]:
                counters["peak_tracked_bytes"] = live
            return live

    def snapshot(self) -> dict[str, Any]:
        """An independent, JSON-serialisable copy of every counter.

        The counters at top level, plus ``lane_busy_seconds`` and ``lane_regions``
        (dicts keyed by lane name).
        """
        self._settle()
        with self._lock:
            snap: dict[str, Any] = dict(self._counters)
            snap["lane_busy_seconds"] = dict(self._lane_busy)
            snap["lane_regions"] = dict(self._lane_regions)
        return snap

    def __repr__(self) -> str:
        s = self.snapshot()
        lanes = ", ".join(
            f"{lane} {format_seconds(busy)} busy/{s['lane_regions'].get(lane, 0)} regions"
            for lane, busy in s["lane_busy_seconds"].items()
        )
        return "\n".join(
            [
                "<hrx.RuntimeStats",
                (
                    f"  transfers: upload {format_bytes(s['upload_bytes'])}, "
                    f"download {format_bytes(s['download_bytes'])}, copy {format_bytes(s['copy_bytes'])}"
                ),
                (
                    f"  tracked memory: live {format_bytes(s['live_tracked_bytes'])}, "
                    f"peak {format_bytes(s['peak_tracked_bytes'])}"
                ),
                f"  work: {s['submissions']} submissions, {s['regions']} regions",
                f"  lanes: {lanes or 'none'}",
                f"  quarantine: {s['quarantined_owners']} owners, {format_bytes(s['quarantined_bytes'])}>",
            ]
        )
