"""Bounded traces exported as Chrome/Perfetto trace-event JSON.

A :class:`TraceRecorder` keeps the most recent ``max_events`` events (slices,
instants, counters, flows) in a ring; metadata (process and thread names) is kept
apart and never dropped. :meth:`TraceRecorder.to_json` produces the JSON object
format of the Chrome trace-event specification, which ui.perfetto.dev opens:

* each *group* (``"lanes"``, ``"queues"``...) is one process row (pid), each
  *track* one thread row (tid) inside it, ordered by ``thread_sort_index``;
* a region is a complete slice (``ph: "X"``), a dependency the runtime inferred
  is a v1 flow (``ph: "s"`` bound to the source slice, ``ph: "f"`` with
  ``bp: "e"`` bound to the destination slice), tracked memory is a counter
  (``ph: "C"``).

:func:`validate_trace` checks a trace object against the rules Perfetto's JSON
importer relies on, so tests can prove an export opens cleanly.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from numbers import Real
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, overload

from ..errors import InvalidArgument, show
from .profile import _Deferred

__all__ = ["TraceRecorder", "validate_trace"]

# Thread ids start here so they never collide with the small process ids of groups
# (Perfetto treats tid == pid as a process's main thread).
_TID_BASE = 1_000_000


class _Track(NamedTuple):
    name: str
    group: str
    tid: int
    sort_index: int


class _Slice(NamedTuple):
    id: int
    track: int
    name: str
    start: int
    end: int
    category: str
    args: dict[str, Any] | None


class _Instant(NamedTuple):
    track: int
    name: str
    ts: int
    args: dict[str, Any] | None


class _Counter(NamedTuple):
    group: str
    name: str
    ts: int
    series: dict[str, float]


class _Flow(NamedTuple):
    id: int
    source: int
    dest: int
    name: str


def _us(ns: int) -> int | float:
    """``ns`` as microseconds that Perfetto reads back as exactly ``ns``.

    Perfetto converts a float ``ts`` with ``x * 1000`` (truncated in older
    importers, rounded in newer ones); a float like 4.35 would truncate to 4349 ns
    and could turn two nested slices into partially overlapping ones. Nudging to
    the next double up makes both conversions exact (for traces under ~50 days).
    """
    if ns % 1000 == 0:
        return ns // 1000
    us = ns / 1000
    if int(us * 1000) != ns:
        us = math.nextafter(us, math.inf)
    return us


def _check_int(argument: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{argument}: expected an int, got {show(value)}")
    return value


def _check_name(argument: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{argument}: expected a non-empty str, got {show(value)}")
    return value


def _check_number(argument: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise InvalidArgument(f"{argument}: expected a finite number, got {show(value)}")
    return value  # type: ignore[return-value]


def _check_args(args: object) -> dict[str, Any] | None:
    if args is None:
        return None
    if not isinstance(args, Mapping):
        raise InvalidArgument(f"args: expected a dict or None, got {show(args)}")
    return dict(args)


class TraceRecorder(_Deferred):
    """A thread-safe, bounded recorder of trace events.

    Timestamps are nanoseconds read from ``clock`` (``time.perf_counter_ns`` by
    default); the export makes them relative to the recorder's creation. When
    ``max_events`` events are held, recording another drops the oldest one and
    counts it in :attr:`dropped`. Track and group metadata is never dropped.
    """

    def __init__(self, max_events: int = 100_000, *, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
            raise InvalidArgument(f"max_events: expected an int >= 1, got {show(max_events)}")
        if not callable(clock):
            raise InvalidArgument(f"clock: expected a callable returning ns, got {show(clock)}")
        self.max_events = max_events
        self.clock = clock
        self.start_ns: int = clock()
        self._lock = threading.Lock()
        self._events: deque[_Slice | _Instant | _Counter | _Flow] = deque(maxlen=max_events)
        self._dropped = 0
        self._groups: dict[str, int] = {}  # group name -> pid
        self._tracks: list[_Track] = []
        self._track_ids: dict[tuple[str, str], int] = {}
        self._next_slice_id = 1
        self._next_flow_id = 1

    @property
    def dropped(self) -> int:
        """How many events the ring has dropped to stay within ``max_events``."""
        self._settle()
        return self._dropped

    def __len__(self) -> int:
        self._settle()
        return len(self._events)

    def now(self) -> int:
        """The recorder clock's current value in nanoseconds."""
        return self.clock()

    # -- tracks -------------------------------------------------------------------

    def track(self, name: str, group: str = "hrx", *, sort_index: int | None = None) -> int:
        """The id of track ``name`` in ``group``, created on first use.

        A group is one process row and a track one thread row in Perfetto. Tracks
        are ordered within their group by ``sort_index`` (default: creation order).
        The same (group, name) always returns the same id.
        """
        _check_name("name", name)
        _check_name("group", group)
        if sort_index is not None:
            _check_int("sort_index", sort_index)
        with self._lock:
            key = (group, name)
            if key in self._track_ids:
                return self._track_ids[key]
            self._group_pid(group)
            track_id = len(self._tracks)
            if sort_index is None:
                sort_index = sum(1 for t in self._tracks if t.group == group)
            self._tracks.append(_Track(name, group, _TID_BASE + track_id, sort_index))
            self._track_ids[key] = track_id
            return track_id

    def _group_pid(self, group: str) -> int:
        # Caller holds the lock.
        return self._groups.setdefault(group, len(self._groups) + 1)

    def _check_track(self, track: object) -> int:
        _check_int("track", track)
        if not 0 <= track < len(self._tracks):  # type: ignore[operator]
            raise InvalidArgument(f"track: no track with id {track!r} ({len(self._tracks)} tracks exist)")
        return track  # type: ignore[return-value]

    # -- events -------------------------------------------------------------------

    def _count_dropped(self, n: int) -> None:
        """Count ``n`` events an owner dropped before recording them (the runtime's rows
        past the ring's capacity, never built)."""
        with self._lock:
            self._dropped += n

    def _append(self, event: _Slice | _Instant | _Counter | _Flow) -> None:
        # Caller holds the lock.
        if len(self._events) == self.max_events:
            self._dropped += 1
        self._events.append(event)

    def slice(
        self,
        track: int,
        name: str,
        start_ns: int,
        end_ns: int,
        *,
        args: dict[str, Any] | None = None,
        category: str = "hrx",
    ) -> int:
        """Record a complete slice on ``track``; return its event id (for :meth:`flow`).

        Slices on one track should nest or be disjoint; if some partially overlap,
        the export moves them to an extra row (``"<track> (overlap N)"``) so the
        trace stays valid.
        """
        self._check_track(track)
        _check_name("name", name)
        _check_int("start_ns", start_ns)
        _check_int("end_ns", end_ns)
        if end_ns < start_ns:
            raise InvalidArgument(f"end_ns: {end_ns} is before start_ns {start_ns}")
        _check_name("category", category)
        args = _check_args(args)
        with self._lock:
            event_id = self._next_slice_id
            self._next_slice_id += 1
            self._append(_Slice(event_id, track, name, start_ns, end_ns, category, args))
        return event_id

    def _add_submissions(self, rows: Any, counter: str, series: str, value: float) -> None:
        """The runtime's slices of many submissions under one lock, values already
        checked: ``rows`` of (spans, flows, ts): spans (track, name, start_ns, end_ns,
        args); flows (from, to) as indexes into the spans; then a ``counter`` sample of
        ``series`` = ``value`` at ``ts`` in the default group."""
        with self._lock:
            self._group_pid("hrx")
            for spans, flows, ts in rows:
                first = self._next_slice_id
                for track, name, start, end, args in spans:
                    self._append(_Slice(self._next_slice_id, track, name, start, end, "hrx", args))
                    self._next_slice_id += 1
                for a, b in flows:
                    self._append(_Flow(self._next_flow_id, first + a, first + b, "dep"))
                    self._next_flow_id += 1
                self._append(_Counter("hrx", counter, ts, {series: value}))

    def flow(self, from_id: int, to_id: int, name: str = "dep") -> None:
        """Record a flow arrow from slice ``from_id`` to slice ``to_id``.

        A flow whose slices have left the ring is omitted from the export (and
        counted as ``unbound_flows`` in ``otherData``).
        """
        _check_name("name", name)
        for argument, value in (("from_id", from_id), ("to_id", to_id)):
            _check_int(argument, value)
            if not 0 < value < self._next_slice_id:
                raise InvalidArgument(f"{argument}: {value!r} is not an event id returned by slice()")
        with self._lock:
            flow_id = self._next_flow_id
            self._next_flow_id += 1
            self._append(_Flow(flow_id, from_id, to_id, name))

    @overload
    def counter(self, track_or_group: int | str, name: str, ts_ns: int, value: float, /) -> None: ...

    @overload
    def counter(self, name: str, ts_ns: int, /, **series: float) -> None: ...

    def counter(self, /, *args: Any, **series: float) -> None:
        """Record a counter sample.

        ``counter(track_or_group, name, ts_ns, value)`` records one value in the
        process row of a track id or a group name; ``counter(name, ts_ns, **series)``
        records one or more named series (e.g. ``live=..., peak=...``) in the
        default group ``"hrx"``. Perfetto shows each series as a counter track
        named ``"<name> <series>"``.
        """
        if len(args) == 4 and not series:
            target, name, ts_ns, value = args
            values = {"value": value}
            if isinstance(target, str):
                group = _check_name("track_or_group", target)
            else:
                group = self._tracks[self._check_track(target)].group
        elif len(args) == 2 and series:
            name, ts_ns = args
            values, group = series, "hrx"
        else:
            raise InvalidArgument(
                "counter: expected (track_or_group, name, ts_ns, value) or (name, ts_ns, **series), "
                f"got {len(args)} positional and {len(series)} keyword arguments"
            )
        _check_name("name", name)
        _check_int("ts_ns", ts_ns)
        clean = {_check_name("series", key): _check_number(key, v) for key, v in values.items()}
        with self._lock:
            self._group_pid(group)
            self._append(_Counter(group, name, ts_ns, clean))

    def instant(self, track: int, name: str, ts_ns: int, args: dict[str, Any] | None = None) -> None:
        """Record a thread-scoped instant event on ``track``."""
        self._check_track(track)
        _check_name("name", name)
        _check_int("ts_ns", ts_ns)
        args = _check_args(args)
        with self._lock:
            self._append(_Instant(track, name, ts_ns, args))

    # -- export -------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The trace as a Chrome trace-event JSON object (a fresh dict each call)."""
        self._settle()
        with self._lock:
            events = list(self._events)
            tracks = list(self._tracks)
            groups = dict(self._groups)
            dropped = self._dropped
        exporter = _Exporter(self.start_ns, tracks, groups)
        trace_events = exporter.export(events)
        return {
            "traceEvents": trace_events,
            "displayTimeUnit": "ns",
            "otherData": {
                "producer": "hrx_core.execution.trace",
                "max_events": self.max_events,
                "dropped_events": dropped,
                "unbound_flows": exporter.unbound_flows,
                "overlap_rows": exporter.overlap_rows,
            },
        }

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_json` to ``path`` (open it at ui.perfetto.dev); return the path.

        Slice and instant ``args`` that JSON cannot represent are written as ``str()``.
        """
        path = Path(path)
        data = self.to_json()
        with path.open("w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"), default=str)
        return path

    def __repr__(self) -> str:
        self._settle()
        return (
            f"<hrx.TraceRecorder {len(self._events)}/{self.max_events} events, "
            f"{len(self._tracks)} tracks, {self._dropped} dropped>"
        )


class _Exporter:
    """Turns a snapshot of recorded events into trace-event dicts."""

    def __init__(self, origin: int, tracks: list[_Track], groups: dict[str, int]) -> None:
        self.origin = origin
        self.tracks = tracks
        self.groups = groups
        self.unbound_flows = 0
        self.overlap_rows = 0
        self.extra_rows: dict[int, list[int]] = {}  # track id -> tids of its overflow rows
        self._next_tid = _TID_BASE + len(tracks)

    def _ts(self, ns: int) -> int | float:
        # Events from before the recorder started are clipped at its start, which
        # keeps nested slices nested.
        return _us(max(0, ns - self.origin))

    def export(self, events: list[_Slice | _Instant | _Counter | _Flow]) -> list[dict[str, Any]]:
        slices = {e.id: e for e in events if isinstance(e, _Slice)}
        rows = self._assign_rows(list(slices.values()))
        out = self._metadata()
        for e in events:
            if isinstance(e, _Slice):
                pid, tid = rows[e.id]
                event: dict[str, Any] = {
                    "ph": "X",
                    "name": e.name,
                    "cat": e.category,
                    "pid": pid,
                    "tid": tid,
                    "ts": self._ts(e.start),
                    "dur": _us(max(0, e.end - self.origin) - max(0, e.start - self.origin)),
                }
                if e.args:
                    event["args"] = e.args
                out.append(event)
            elif isinstance(e, _Instant):
                track = self.tracks[e.track]
                event = {
                    "ph": "i",
                    "s": "t",
                    "name": e.name,
                    "cat": "hrx",
                    "pid": self.groups[track.group],
                    "tid": track.tid,
                    "ts": self._ts(e.ts),
                }
                if e.args:
                    event["args"] = e.args
                out.append(event)
            elif isinstance(e, _Counter):
                out.append(
                    {
                        "ph": "C",
                        "name": e.name,
                        "cat": "hrx",
                        "pid": self.groups[e.group],
                        "tid": self.groups[e.group],
                        "ts": self._ts(e.ts),
                        "args": dict(e.series),
                    }
                )
        for e in events:
            if isinstance(e, _Flow):
                out.extend(self._flow(e, slices, rows))
        return out

    def _flow(self, flow: _Flow, slices: dict[int, _Slice], rows: dict[int, tuple[int, int]]) -> list[dict[str, Any]]:
        source, dest = slices.get(flow.source), slices.get(flow.dest)
        if source is None or dest is None:
            self.unbound_flows += 1
            return []
        # Perfetto binds a v1 flow event to the topmost slice open on its thread at
        # its timestamp, and draws the arrow from the end of the source slice to the
        # start of the destination. A point just after each slice's start is inside
        # it and not inside an earlier sibling, so both ends bind reliably.
        common = {"name": flow.name, "cat": source.category, "id": flow.id}
        (spid, stid), (dpid, dtid) = rows[source.id], rows[dest.id]
        return [
            {"ph": "s", **common, "pid": spid, "tid": stid, "ts": self._inside(source)},
            {"ph": "f", "bp": "e", **common, "pid": dpid, "tid": dtid, "ts": self._inside(dest)},
        ]

    def _inside(self, s: _Slice) -> int | float:
        start, end = max(0, s.start - self.origin), max(0, s.end - self.origin)
        return _us(start + min(1, end - start))

    def _assign_rows(self, slices: list[_Slice]) -> dict[int, tuple[int, int]]:
        """(pid, tid) per slice id; partially overlapping slices go to extra rows."""
        by_track: dict[int, list[_Slice]] = {}
        for s in slices:
            by_track.setdefault(s.track, []).append(s)
        rows: dict[int, tuple[int, int]] = {}
        for track_id, track_slices in by_track.items():
            track = self.tracks[track_id]
            pid = self.groups[track.group]
            stacks: list[list[int]] = []  # per row: the ends of the open slices
            tids = [track.tid]
            for s in sorted(track_slices, key=lambda s: (max(s.start, self.origin), -max(s.end, self.origin), s.id)):
                start, end = max(s.start, self.origin), max(s.end, self.origin)
                for row, stack in enumerate(stacks):
                    while stack and stack[-1] <= start:
                        stack.pop()
                    if not stack or end <= stack[-1]:
                        break
                else:
                    row = len(stacks)
                    stacks.append([])
                    if row > 0:
                        tids.append(self._next_tid)
                        self._next_tid += 1
                        self.overlap_rows += 1
                stacks[row].append(end)
                rows[s.id] = (pid, tids[row])
            if len(tids) > 1:
                self.extra_rows[track_id] = tids[1:]
        return rows

    def _metadata(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for group, pid in self.groups.items():
            # Process-level events use the main thread (tid == pid).
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": pid, "args": {"name": group}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": pid, "args": {"sort_index": pid}})
        for track_id, track in enumerate(self.tracks):
            pid = self.groups[track.group]
            names = [(track.tid, track.name)] + [
                (tid, f"{track.name} (overlap {n})") for n, tid in enumerate(self.extra_rows.get(track_id, []), 1)
            ]
            for n, (tid, name) in enumerate(names):
                out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
                # Extra rows sort right after their track's own row.
                out.append(
                    {
                        "ph": "M",
                        "name": "thread_sort_index",
                        "pid": pid,
                        "tid": tid,
                        "args": {"sort_index": track.sort_index * 1000 + n},
                    }
                )
        return out


# -- validation -----------------------------------------------------------------------

_PHASES = frozenset("BEXiICbneSTpFstfPNODMVvRc()=")
_METADATA = {
    "process_name": "name",
    "process_labels": "labels",
    "process_sort_index": "sort_index",
    "thread_name": "name",
    "thread_sort_index": "sort_index",
}
_NEEDS_TID = frozenset("BEXstf")


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _ns(us: float) -> int:
    # Perfetto's importer: integer µs * 1000, float µs rounded to the nearest ns.
    return us * 1000 if isinstance(us, int) else round(us * 1000)


def validate_trace(obj: object) -> None:
    """Raise ValueError (:class:`~hrx_core.errors.InvalidArgument`) unless ``obj`` is a
    valid trace.

    The rules are those of the Chrome trace-event format as Perfetto's JSON
    importer reads it: a dict with a ``traceEvents`` list; every event a dict with
    a known ``ph``; int ``pid`` (and ``tid`` where the event lives on a thread);
    numeric ``ts >= 0`` (metadata may omit it); ``X`` with numeric ``dur >= 0``;
    ``E`` closing an open ``B``; flow events with ``id`` and ``cat``, each ``t``/``f``
    following an ``s`` of the same (cat, name, id) and lying inside a slice of its
    thread so Perfetto can bind it; ``C`` with numeric ``args``; ``M`` with a known
    metadata name; slices on one thread nested or disjoint, never partially
    overlapping. The message names the event index and the rule broken.
    """
    if not isinstance(obj, dict):
        raise InvalidArgument(f"obj: a trace must be a dict with 'traceEvents', got {type(obj).__name__}")
    events = obj.get("traceEvents")
    if not isinstance(events, list):
        raise InvalidArgument(f"obj: 'traceEvents' must be a list, got {type(events).__name__}")
    intervals: dict[tuple[int, int], list[tuple[int, int, int]]] = {}  # thread -> (start, end, index)
    open_b: dict[tuple[int, int], list[tuple[int, int]]] = {}  # thread -> (start, index)
    flows: list[tuple[int, int]] = []  # (ts ns, index)
    for i, event in enumerate(events):
        _check_event(i, event)
    # B/E pair up per thread in timestamp order (Perfetto sorts before importing).
    for i in sorted(range(len(events)), key=lambda i: _ns(events[i].get("ts", 0))):
        event = events[i]
        ph = event["ph"]
        thread = (event.get("pid"), event.get("tid"))
        ts = _ns(event.get("ts", 0))
        if ph == "X":
            intervals.setdefault(thread, []).append((ts, ts + _ns(event["dur"]), i))
        elif ph == "B":
            open_b.setdefault(thread, []).append((ts, i))
        elif ph == "E":
            if not open_b.get(thread):
                raise InvalidArgument(f"traceEvents[{i}]: 'E' event with no open 'B' on pid/tid {thread}")
            start, _ = open_b[thread].pop()
            intervals.setdefault(thread, []).append((start, ts, i))
        elif ph in "stf":
            flows.append((ts, i))
    for thread_intervals in intervals.values():
        _check_nesting(thread_intervals)
    _check_flows(events, flows, intervals)


def _fail(i: int, rule: str) -> NoReturn:
    raise InvalidArgument(f"traceEvents[{i}]: {rule}")


def _check_event(i: int, event: object) -> None:
    if not isinstance(event, dict):
        _fail(i, f"an event must be a dict, got {type(event).__name__}")
    ph = event.get("ph")
    if ph is None:
        _fail(i, "missing 'ph'")
    if not isinstance(ph, str) or ph not in _PHASES:
        _fail(i, f"unknown phase 'ph'={ph!r}")
    assert isinstance(event, dict)
    if ph != "c" and (isinstance(event.get("pid"), bool) or not isinstance(event.get("pid"), int)):
        _fail(i, f"'{ph}' event needs an int 'pid', got {event.get('pid')!r}")
    needs_tid = (
        ph in _NEEDS_TID
        or (ph in "iI" and event.get("s", "t") == "t")
        or (ph == "M" and str(event.get("name", "")).startswith("thread_"))
    )
    if needs_tid and (isinstance(event.get("tid"), bool) or not isinstance(event.get("tid"), int)):
        _fail(i, f"'{ph}' event needs an int 'tid', got {event.get('tid')!r}")
    if ("ts" in event or ph != "M") and (not _is_number(event.get("ts")) or event["ts"] < 0):
        _fail(i, f"'{ph}' event needs a numeric 'ts' >= 0, got {event.get('ts')!r}")
    if "args" in event and not isinstance(event["args"], dict):
        _fail(i, f"'args' must be a dict, got {event['args']!r}")
    if ph != "E" and not isinstance(event.get("name"), str):
        _fail(i, f"'{ph}' event needs a str 'name', got {event.get('name')!r}")
    if ph == "X" and (not _is_number(event.get("dur")) or event["dur"] < 0):
        _fail(i, f"'X' event needs a numeric 'dur' >= 0, got {event.get('dur')!r}")
    elif ph in "stf":
        flow_id = event.get("id")
        if isinstance(flow_id, bool) or not (
            (isinstance(flow_id, int) and flow_id >= 0) or (isinstance(flow_id, str) and _is_hex(flow_id))
        ):
            _fail(i, f"flow event needs an 'id' (int >= 0 or hex string), got {show(flow_id)}")
        if not isinstance(event.get("cat"), str):
            _fail(i, f"flow event needs a str 'cat', got {event.get('cat')!r}")
    elif ph == "C":
        args = event.get("args")
        if not isinstance(args, dict) or not args:
            _fail(i, f"'C' event needs non-empty 'args', got {show(args)}")
        for key, value in args.items():
            if not _is_number(value):
                _fail(i, f"'C' event series {key!r} has non-numeric value {value!r}")
    elif ph == "M":
        _check_metadata(i, event)
    elif ph in "iI" and event.get("s", "t") not in ("g", "p", "t"):
        _fail(i, f"instant scope 's' must be 'g', 'p' or 't', got {event.get('s')!r}")


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _check_metadata(i: int, event: dict[str, Any]) -> None:
    name = event["name"]
    if name not in _METADATA:
        _fail(i, f"unknown metadata name {name!r} (known: {', '.join(_METADATA)})")
    value = event.get("args", {}).get(_METADATA[name])
    if name.endswith("sort_index"):
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(i, f"'{name}' needs an int args.sort_index, got {show(value)}")
    elif name.endswith("_name") and not isinstance(value, str):
        _fail(i, f"'{name}' needs a str args.name, got {show(value)}")


def _check_nesting(intervals: list[tuple[int, int, int]]) -> None:
    stack: list[tuple[int, int, int]] = []
    for start, end, i in sorted(intervals, key=lambda s: (s[0], -s[1], s[2])):
        while stack and stack[-1][1] <= start:
            stack.pop()
        if stack and end > stack[-1][1]:
            outer = stack[-1]
            _fail(
                i,
                f"slice [{start}, {end}] ns partially overlaps traceEvents[{outer[2]}] "
                f"[{outer[0]}, {outer[1]}] ns on the same thread (slices must nest)",
            )
        stack.append((start, end, i))


class _ThreadSpans:
    """Answers "does a slice enclose ts?" and "does a slice start at or after ts?"."""

    def __init__(self, spans: list[tuple[int, int, int]]) -> None:
        ordered = sorted(spans)
        self.starts = [start for start, _, _ in ordered]
        self.max_end: list[int] = []  # running max of ends, in start order
        for _, end, _ in ordered:
            self.max_end.append(max(end, self.max_end[-1]) if self.max_end else end)

    def encloses(self, ts: int) -> bool:
        k = bisect.bisect_right(self.starts, ts)
        return k > 0 and self.max_end[k - 1] >= ts

    def starts_at_or_after(self, ts: int) -> bool:
        return bool(self.starts) and self.starts[-1] >= ts


def _check_flows(
    events: list[dict[str, Any]],
    flows: list[tuple[int, int]],
    intervals: dict[tuple[int, int], list[tuple[int, int, int]]],
) -> None:
    threads = {thread: _ThreadSpans(spans) for thread, spans in intervals.items()}
    nothing = _ThreadSpans([])
    started: set[tuple[str, int, str]] = set()
    order = {"s": 0, "t": 1, "f": 2}
    for ts, i in sorted(flows, key=lambda f: (f[0], order[events[f[1]]["ph"]], f[1])):
        event = events[i]
        ph, thread = event["ph"], (event["pid"], event["tid"])
        # Perfetto keys v1 flows by (id, cat, name) and reads string ids as hex.
        flow_id = int(event["id"], 16) if isinstance(event["id"], str) else event["id"]
        key = (event["cat"], flow_id, event.get("name", ""))
        if ph == "s":
            started.add(key)
        elif key not in started:
            _fail(i, f"flow '{ph}' with cat/id/name {key!r} has no earlier matching 's'")
        elif ph == "f":
            started.discard(key)
        spans = threads.get(thread, nothing)
        if ph == "f" and event.get("bp") != "e":
            bound, where = spans.starts_at_or_after(ts), "a slice starting at or after it"
        else:
            bound, where = spans.encloses(ts), "a slice enclosing its ts"
        if not bound:
            _fail(i, f"flow '{ph}' at {ts} ns has no {where} on pid/tid {thread}, so it cannot bind")
