"""The execution runtime: submits tracked graphs to lanes, ordered by buffer hazards.

``Runtime(device, RuntimeOptions(...))`` owns one stream per lane. ``submit(graph)``
encodes each region on its lane after the regions it depends on -- earlier regions
of the same graph, and regions of any graph still in flight whose declared access
conflicts (byte ranges per allocation). Dependencies between lanes of one device are
timeline waits on the GPU; a region whose dependency lives on another device (an NPU
beside a GPU) waits for it on the host (a host completion check). At most
``max_submissions`` submissions are in flight; beyond that ``submit`` blocks, or
raises QueueFull with ``block=False``.

Failures: a submission whose work failed, or whose wait timed out, quarantines the
allocations it used. They keep their memory and budget charge, pools do not reuse
them, and ``stats`` counts them, until they are proven idle (all their work has
retired); then they are released. ``close()`` that cannot drain quarantines too.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

from ..budget import MemoryBudget
from ..buffer import Allocation, Buffer, check_int
from ..completion import Event
from ..errors import HRXError, InvalidArgument, QueueFull, Timeout, Unsupported, show, strict_init
from ..timeouts import check_timeout, remaining
from .failures import event_failure, own_failure, pending_failure, raise_event_failure
from .graph import ReadRange, Region, RegionInfo, SubmitPlan, TrackedGraph, _RecordedRegion
from .lanes import LANES, Lane

log = logging.getLogger("hrx.runtime")

if TYPE_CHECKING:
    from ..device import Device, QueueSlot


def _family(value: str, name: str) -> str:
    if not isinstance(value, str) or value not in ("compute", "copy"):
        raise InvalidArgument(f"{name}: expected 'compute' or 'copy', got {show(value)}")
    return value


@strict_init
@attrs.frozen
class RuntimeOptions:
    """Options of a :class:`Runtime`.

    ``compute_engine``: queue family of the compute lane. ``copy_engine``: where
    copy-only regions (``graph.copy``/``graph.fill``) run -- ``"copy"``: the DMA copy
    engines (the upload lane's copy queue); ``"compute"``: the compute lane.
    ``memory_budget``: charged for everything the runtime allocates (buffers, staging)
    before allocating. ``observe``: record per-region completion times (profiles,
    lane busy time, traces): ``True`` (the default) stamps a region's end when the
    runtime notices it finished -- at its next submit, wait, refresh, synchronize or
    read of the statistics -- at no cost beyond those calls, so an end is never early
    but may be late by however long the host was busy elsewhere; ``"exact"`` stamps
    it from a completion callback (a notifier thread) as soon as the work finishes,
    which costs each submission a callback and the submitting thread the notifier's
    share of the GIL; ``False`` records nothing. ``signals``: how a submission's
    completion is signalled on its lane -- ``"each"``: a signal (a native call) every
    submission, so every submission has its own timeline value; ``"lazy"``: as a
    stream signals its work, once every few operations or when something waits on,
    polls or orders after it -- consecutive submissions may then share one value, and
    a failure is reported by every submission that shares its value; ``"auto"`` (the
    default): lazy on a device whose failures are sticky
    (``DeviceInfo.sticky_failures``: CUDA), where work after a failure fails anyway,
    each elsewhere. With lazy signals, observation stamps an end once a signal covering
    it was reached (later, never earlier).
    """

    max_submissions: int = 64
    compute_engine: str = attrs.field(default="compute", validator=lambda i, a, v: _family(v, a.name))
    copy_engine: str = attrs.field(default="copy", validator=lambda i, a, v: _family(v, a.name))
    memory_budget: MemoryBudget | None = None
    observe: bool | str = True
    trace_events: int = 100_000
    signals: str = "auto"

    def __attrs_post_init__(self) -> None:
        if isinstance(self.max_submissions, bool) or not isinstance(self.max_submissions, int) or self.max_submissions < 1:
            raise InvalidArgument(f"max_submissions: expected an int >= 1, got {show(self.max_submissions)}")
        if self.memory_budget is not None and not isinstance(self.memory_budget, MemoryBudget):
            raise InvalidArgument(f"memory_budget: expected a MemoryBudget, got {type(self.memory_budget).__name__}")
        if not isinstance(self.observe, bool) and self.observe != "exact":
            raise InvalidArgument(f"observe: expected True, False or 'exact', got {show(self.observe)}")
        check_int("trace_events", self.trace_events, minimum=1)
        if self.signals not in ("auto", "each", "lazy"):
            raise InvalidArgument(f"signals: expected 'auto', 'each' or 'lazy', got {show(self.signals)}")


#: Observed submissions waiting to be folded in before a fold happens unasked.
_FOLD_AFTER = 1024
#: observe=True: how many unstamped submissions past the oldest one a notice checks.
_NOTICE_SCAN = 16


def _stamp(ends: list[float], i: int) -> Callable[[Any], None]:
    def done(_: Any) -> None:
        ends[i] = time.perf_counter()

    return done


class Submission:
    """The completion handle of one submitted graph: wait, poll or await it."""

    # the attributes hrx_core.fastpath reads and writes on every resubmission, as slots:
    # it reaches them at their offsets; the rest live in __dict__
    __slots__ = ("runtime", "graph", "events", "owners", "submitted", "sequence", "_settled", "__weakref__")

    def __init__(self, runtime: Runtime, graph: TrackedGraph, events: list[Event], owners: Sequence[Allocation], submitted: float) -> None:
        # (hrx_core.fastpath's Submitter sets these fields without calling __init__:
        # change both; tests/test_submit_fastpath.py compares them)
        self.runtime = runtime
        self.graph = graph
        self.events = events
        self.owners = owners
        self.submitted = submitted
        #: order of submission within the runtime (hazards follow it)
        self.sequence = 0
        self._settled = False

    def __repr__(self) -> str:
        if self.graph is None:  # (a settled one hrx_core.fastpath keeps to fill in again: gc reaches it)
            return "<hrx.execution.Submission: settled, kept for reuse>"
        state = "complete" if self.is_complete else "pending"
        return f"<hrx.execution.Submission {self.graph.name!r} {len(self.events)} regions {state}>"

    @property
    def is_complete(self) -> bool:
        for e in self.events:  # (a loop, not all() over a generator: this runs per submission)
            if not e.completion.is_complete:
                return False
        return True

    def refresh(self) -> bool:
        """Poll; settle (release owners, or quarantine them on failure) when done."""
        for e in self.events:
            if not e.completion.refresh_quiet():
                return False
        self._settle()
        return True

    @property
    def failure(self) -> BaseException | None:
        """Once complete: the first failure of its regions -- their own, or of work whose
        output they read -- else None."""
        for e in self.events:
            f = event_failure(e)
            if f is not None:
                return f
        return None

    def wait(self, timeout: float | None = None) -> None:
        """Block until every region finished. Raises the first failure (of a region, or
        of work a region read from; its owners are quarantined) or Timeout (the work
        and its storage stay alive, quarantined until proven idle)."""
        timeout = check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for e in self.events:
                e.completion.wait_quiet(remaining(deadline))
        except Timeout:
            self.runtime._quarantine(self.owners, "timeout")
            raise
        self._settle()
        self._raise_failures()

    def _raise_failures(self) -> None:
        """Once complete: raise (and deliver) the first failure of its regions, named."""
        for e, region in zip(self.events, self.graph.regions):
            if event_failure(e) is not None:  # (cached on the event: the name is made only for a failure)
                raise_event_failure(e, f"{self.graph.name}/{region.name}")

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait_async().__await__()

    async def _wait_async(self) -> None:
        for e in self.events:
            await _await_quietly(e)
        self.wait(0)

    def _settle(self) -> None:
        runtime = self.runtime
        runtime._notice()
        with runtime._settle_lock:  # one lock for every submission: settling is brief
            if self._settled:
                return
            self._settled = True
        runtime._quarantine_failed((self,))
        runtime._retired((self,))


async def _await_quietly(event: Event) -> None:
    completion = event.completion
    if completion.refresh_quiet():
        return
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def done(_: Any) -> None:
        loop.call_soon_threadsafe(lambda: None if future.done() else future.set_result(None))

    completion.add_done_callback(done)
    await future


class _Inflight:
    """Accesses of submitted regions, for cross-graph hazards and failure propagation.

    Entries of regions not yet finished order later conflicting regions. Entries that
    finished are dropped -- except writes of failed work whose failure was not yet
    delivered: their bytes are poisoned, and a later region reading them inherits the
    failure (a successful write covering them replaces them)."""

    # the attributes hrx_core.fastpath reads and writes on every resubmission, as slots:
    # it reaches them at their offsets; the rest live in __dict__
    __slots__ = ("generation", "__dict__")

    def __init__(self) -> None:
        # per allocation, its entries: [start, end, writes, event] (lists: a resubmission
        # names its new event in place, see replace)
        self._entries: dict[int, list[list[Any]]] = {}
        #: bumped by every change of the entries but :meth:`replace` (see :class:`_Resubmit`)
        self.generation = 0

    def conflicts(self, accesses: Sequence[tuple[Allocation, int, int, bool]],
                  reads: Sequence[ReadRange]) -> tuple[list[Event], list[Event]]:
        """(events to wait for, events whose output the region reads)."""
        self.generation += 1
        waits: dict[int, Event] = {}
        sources: dict[int, Event] = {}
        # whether an event finished, and whether it carries a failure not delivered yet
        # (asked of finished writes only), each read once per call: the entries of one
        # region's accesses (often dozens of allocations) share its event
        finished: dict[int, bool] = {}
        poisoned: dict[int, bool] = {}
        all_entries = self._entries
        for alloc, start, end, writes in accesses:
            entries = all_entries.get(id(alloc))
            if not entries:
                continue
            mine: list[tuple[int, int]] | None = None  # this region's reads of alloc, when needed
            keep = []
            for entry in entries:
                s, e, w, ev = entry
                done = finished.get(id(ev))
                if done is None:
                    done = finished[id(ev)] = ev.completion.done_now()
                if done:
                    if not w:
                        continue  # a finished read: forget it
                    bad = poisoned.get(id(ev))
                    if bad is None:
                        bad = poisoned[id(ev)] = pending_failure(ev) is not None
                    if not bad:
                        continue  # finished cleanly (or its failure was delivered): forget it
                keep.append(entry)
                if not (s < end and start < e):
                    continue
                if not done and (writes or w):
                    waits[id(ev)] = ev
                if w:
                    if mine is None:
                        mine = [(rs, re) for a, rs, re in reads if a is alloc and rs < end and start < re]
                    if any(rs < e and s < re for rs, re in mine):
                        sources[id(ev)] = ev
            if len(keep) != len(entries):
                if keep:
                    all_entries[id(alloc)] = keep
                else:
                    del all_entries[id(alloc)]
        return list(waits.values()), list(sources.values())

    def record(self, accesses: Sequence[tuple[Allocation, int, int, bool]], event: Event,
               places: bool = False) -> tuple[list[tuple[list[Any], int]], list[tuple[int, int, int, bool]]] | None:
        """Enter a region's accesses; with ``places``, returns where its entries stand
        -- (list, index) each, in the order of ``accesses`` -- and what identifies each
        of them (allocation key, start, end, writes), for :meth:`relocate`."""
        self.generation += 1
        slot = event.completion.slot
        added = []
        for alloc, start, end, writes in accesses:
            entries = self._entries.setdefault(id(alloc), [])
            if writes:
                # the write waited for every access it covers: it stands for them
                entries[:] = [x for x in entries if not (start <= x[0] and x[1] <= end)]
            elif entries:
                # one queue runs in order: a later read of the same range on the same
                # queue finishes after an earlier one, so the earlier entry is redundant
                # (keeps the list bounded when many submissions read one input)
                entries[:] = [x for x in entries
                              if x[2] or x[0] != start or x[1] != end or x[3].completion.slot is not slot]
            entry: list[Any] = [start, end, writes, event]
            entries.append(entry)
            if places:
                added.append((entries, entry, id(alloc), start, end, writes))
        if not places:
            return None
        # a later access of the region may have moved an earlier one's entry, or removed
        # it (a write covering a read of the same region)
        out: list[tuple[list[Any], int]] = []
        marks = []
        for entries, entry, key, start, end, writes in added:
            for i, x in enumerate(entries):
                if x is entry:
                    out.append((entries, i))
                    marks.append((key, start, end, writes))
                    break
        return out, marks

    def replace(self, places: Sequence[tuple[list[Any], int]], event: Event) -> None:
        """A resubmitted region's entries name ``event`` in place of its previous one's
        (hrx_core.fastpath's Submitter does the same in C: change both)."""
        for entries, i in places:
            entries[i][3] = event

    def relocate(self, marks: Sequence[tuple[int, int, int, bool]], event: Event) -> list[tuple[list[Any], int]] | None:
        """Where the entries :meth:`record` entered for ``event`` (``marks``) stand now,
        as ``places``; None if one of them is gone (another region's record or scan
        moved or dropped it: the next submission must scan again)."""
        entries_of = self._entries
        out = []
        for key, start, end, writes in marks:
            entries = entries_of.get(key)
            if entries is None:
                return None
            for i, x in enumerate(entries):
                if x[3] is event and x[0] == start and x[1] == end and x[2] == writes:
                    out.append((entries, i))
                    break
            else:
                return None
        return out


def _fast_submit_wanted(graph: TrackedGraph, plan: SubmitPlan) -> bool:
    """Whether a compiled resubmission could serve ``graph``'s next submission: one
    region (the compiled path encodes one; graphs of several resubmit through the
    Python path, skipping their scans where their notes are current), whose note to
    skip the hazard scan is current, and a current plan."""
    if graph._submit_plan is not plan or graph._closed or len(graph.regions) != 1:
        return False
    again = graph.regions[0].resubmit
    return again is not None and again.generation == graph.runtime._inflight.generation


class _Resubmit(NamedTuple):
    """What lets a region's next submission skip the hazard scan (:meth:`Runtime._encode`).

    Recorded when a region without dependencies was submitted and read no output of
    other unfinished or failed work (the output of its own previous submission may
    be). While nothing else changes the runtime's access entries (``generation``) and
    its lane's queue is the same (``slot``), the scan it would make finds only what the
    previous submission found: that submission's own entries (same queue: ordered
    behind it), and other work it already waited for (ordered behind it too, through
    the same queue) -- nothing to wait for, and no failure to inherit but its own
    previous submission's, where it reads what it writes and that one did not finish
    cleanly. Entering its accesses would replace its previous entries one for one, so
    the entries are rewritten in place (``places``).

    In a graph of several regions each region's record moves the generation, which
    would stale the notes of the regions before it. Where the regions after a region
    cannot change what its scan finds (:attr:`SubmitPlan.redatable`: none of them
    writes what it reads, and none on another lane touches what it writes or is
    written by it), the submission re-dates its note to the generation it ends at
    (:meth:`Runtime._redate`), so that a graph of independent regions -- a GPU branch
    beside an NPU branch -- is resubmitted without scans too."""

    generation: int
    slot: Any
    places: list[tuple[list[Any], int]]
    #: what identifies each entry (:meth:`_Inflight.relocate`)
    marks: list[tuple[int, int, int, bool]]


class Runtime:
    """Lanes, hazard-ordered submission, budgets, quarantine, statistics and traces."""

    # the attributes hrx_core.fastpath reads and writes on every resubmission, as slots:
    # it reaches them at their offsets; the rest live in __dict__
    __slots__ = ("closed", "_room_taken", "_sequence", "_quarantined", "_releasing", "_reservations", "_pending",
                 "_unstamped", "fast_resubmit", "_space_waiters", "__dict__", "__weakref__")

    #: Let a region resubmitted with nothing else submitted in between skip the hazard
    #: scan (see :class:`_Resubmit`); tests switch it off to compare with the full path.
    fast_resubmit: bool

    def __init__(self, device: Device, options: RuntimeOptions | None = None, *, npu: Device | None = None) -> None:
        from ..device import Device as DeviceType
        from .profile import LatencyProfile, RuntimeStats

        if not isinstance(device, DeviceType):
            raise InvalidArgument(f"device: expected an hrx Device, got {type(device).__name__}")
        if npu is not None and not isinstance(npu, DeviceType):
            raise InvalidArgument(f"npu: expected an hrx Device or None, got {type(npu).__name__}")
        options = RuntimeOptions() if options is None else options
        if not isinstance(options, RuntimeOptions):
            raise InvalidArgument(f"options: expected RuntimeOptions, got {type(options).__name__}")
        self.fast_resubmit = True
        self.device = device
        self.options = options
        budget = options.memory_budget
        copy_family = "copy" if device.info.family("copy") is not None else options.compute_engine

        def stream(dev: Device, family: str) -> Any:
            return dev.stream(family).with_memory_budget(budget)

        self.lanes: dict[str, Lane] = {
            "upload": Lane("upload", device, stream(device, copy_family)),
            "compute": Lane("compute", device, stream(device, options.compute_engine)),
            "download": Lane("download", device, stream(device, copy_family)),
        }
        if npu is not None:
            family = "npu" if npu.info.family("npu") is not None else "compute"
            self.lanes["npu"] = Lane("npu", npu, stream(npu, family))
        self.copy_lane = "upload" if options.copy_engine == "copy" else "compute"
        for lane in self.lanes.values():
            lane.lazy_signals = options.signals == "lazy" or (options.signals == "auto" and lane.device.info.sticky_failures)
        self.stats = RuntimeStats()
        self.profile = LatencyProfile()
        self.trace: Any = None
        if options.observe:
            from .trace import TraceRecorder

            self.trace = TraceRecorder(max_events=options.trace_events)
            self._tracks = {
                name: self.trace.track(f"{name} ({lane.queue})", group="lanes") for name, lane in self.lanes.items()
            }
        # Lock order: _submit_lock, then a lane's lock, then _space / _quarantine_lock
        # (leaf locks). Nothing waits for work while holding _space or _quarantine_lock.
        self._submit_lock = threading.RLock()
        # NativeSessions reserve lanes through it: lane name -> [thread ident, depth]
        self._reservations: dict[str, list[int]] = {}
        self._lanes_free = threading.Condition(self._submit_lock)
        self._inflight = _Inflight()
        self._pending: collections.deque[Submission] = collections.deque()
        self._space_waiters = 0  # threads in _space.wait (a retirement notifies only them)
        self._room_taken = 0  # submissions past _make_room that are not in _pending yet
        # room (max_submissions): the hot paths take the lock itself, waits and
        # notifications go through the condition over it
        self._space_lock = threading.Lock()
        self._settle_lock = threading.Lock()  # Submission._settle: settled exactly once
        self._space = threading.Condition(self._space_lock)
        self._quarantine_lock = threading.Lock()
        # held while quarantined owners are released (by any thread), so a caller that
        # finds the quarantine empty waits for releases in progress elsewhere
        self._release_lock = threading.RLock()
        self._releasing = 0
        # id(allocation) -> [allocation, fences, reason]: one entry per allocation however
        # often it is quarantined (its fences are the newest)
        self._quarantined: dict[int, list[Any]] = {}
        self._idle_watch = False  # a _prove_idle_later watch is armed
        self._sequence = 0
        self._trace_lock = threading.Lock()
        self._trace_lane_end: dict[str, float] = {}
        # folded submissions whose trace rows are built only when the trace is read:
        # (submission, tracked bytes at its fold, events it makes), oldest first; rows past
        # the ring's capacity are never built (they would only be dropped)
        self._trace_pending: collections.deque[tuple[tuple[Sequence[RegionInfo], list[float], float, Any], int, int]] = \
            collections.deque()
        self._trace_pending_events = 0
        # submissions observed (observe=True) whose stamps are not folded in yet
        self._observed: collections.deque[tuple[Sequence[RegionInfo], list[float], float, list[Event]]] = collections.deque()
        # observe=True: the observed submissions not fully stamped yet (oldest first)
        self._unstamped: collections.deque[tuple[Sequence[RegionInfo], list[float], float, list[Event]]] = collections.deque()
        self._exact = options.observe == "exact"
        #: distinct queues of the lanes (a notice stops once each has unfinished work)
        self._queues = len({id(lane.stream.slot) for lane in self.lanes.values()})
        self._fold_lock = threading.RLock()  # a fold reads statistics, which asks for a fold
        self._folding = False
        #: hrx_core.fastpath's fold_ready, trace_defer and fold_take (looked up at the
        #: first fold; (None, None, None): the Python loops)
        self._fold_fns: tuple[Any, Any, Any] | None = None
        # submissions' counters (a graph's counters dict each), added when the
        # statistics are read rather than under their lock on every submission
        # each submission's counters, or (compiled resubmissions) a run of them: (counters, Tally)
        self._uncounted: collections.deque[dict[str, int] | tuple[dict[str, int], Any]] = collections.deque()
        self.stats._before_read = self._before_stats_read
        if options.observe:
            self.profile._before_read = self._fold_observed
            self.trace._before_read = self._build_trace
        self.closed = False

    def __repr__(self) -> str:
        lanes = ", ".join(f"{n}={lane.queue}" for n, lane in self.lanes.items())
        return f"<hrx.execution.Runtime on {self.device.name}: {lanes}; {len(self._pending)} in flight>"

    # -- lanes and memory ---------------------------------------------------------

    def lane(self, name: str) -> Lane:
        if not isinstance(name, str):
            raise InvalidArgument(f"lane: expected a lane name ({', '.join(self.lanes)}), got {type(name).__name__}")
        lane = self.lanes.get(name)
        if lane is None:
            if name in LANES:
                raise Unsupported(f"lane {name!r}: this runtime has no {name} device (pass npu= to Runtime)")
            raise InvalidArgument(f"lane: expected one of {', '.join(self.lanes)}, got {show(name)}")
        return lane

    @property
    def memory_budget(self) -> MemoryBudget | None:
        return self.options.memory_budget

    def allocate(self, nbytes: int, *, shared: bool = False) -> Buffer:
        """A tracked buffer charged to the runtime's budget before allocating."""
        if self.closed:
            raise InvalidArgument("runtime is closed")
        if not isinstance(shared, bool):
            raise InvalidArgument(f"shared: expected a bool, got {show(shared)}")
        budget = self.options.memory_budget
        buf = self.device.allocate_shared(nbytes, budget=budget) if shared else self.device.allocate(nbytes, budget=budget)
        self._track(buf)
        return buf

    def allocate_staging(self, nbytes: int) -> Buffer:
        """Host-visible staging for graph uploads and downloads (charged, tracked)."""
        return self.allocate(nbytes, shared=True)

    def _track(self, buffer: Buffer) -> None:
        alloc = buffer._alloc
        self.stats.track_bytes(alloc.nbytes)
        alloc.on_free.append(self._untrack)

    def _untrack(self, alloc: Allocation) -> None:
        self.stats.track_bytes(-alloc.nbytes)

    def live_tracked_bytes(self) -> int:
        return int(self.stats.snapshot()["live_tracked_bytes"])

    # -- graphs and submission ----------------------------------------------------

    def graph(self, name: str = "graph") -> TrackedGraph:
        if self.closed:
            raise InvalidArgument("runtime is closed")
        return TrackedGraph(self, name)

    def submit(self, graph: TrackedGraph, *, block: bool = True, timeout: float | None = None) -> Submission:
        """Submit every region of ``graph``; returns a :class:`Submission`.

        Waits for room (``max_submissions``) and for lanes a NativeSession of another
        thread reserved; ``block=False`` raises QueueFull instead, ``timeout`` bounds
        the wait (then Timeout). A refused submission encodes nothing."""
        if block is True and timeout is None and isinstance(graph, TrackedGraph):
            fast = graph._fast_submit  # the compiled resubmission (see _make_fast_submit)
            if fast and graph.runtime is self:
                submission: Submission | None = fast(graph)
                if submission is not None:
                    return submission
        return self._submit_py(graph, block=block, timeout=timeout)

    def _submit_py(self, graph: TrackedGraph, *, block: bool = True, timeout: float | None = None) -> Submission:
        """:meth:`submit` after its compiled resubmission did nothing (or there is none)."""
        if not isinstance(graph, TrackedGraph) or graph.runtime is not self:
            raise InvalidArgument(f"graph: expected a TrackedGraph of this runtime, got {show(graph)}")
        if not isinstance(block, bool):
            raise InvalidArgument(f"block: expected a bool, got {show(block)}")
        if timeout is not None:
            timeout = check_timeout("timeout", timeout)
        if graph._closed:
            raise InvalidArgument("graph: is closed")
        if self.closed:
            raise InvalidArgument("runtime is closed")
        if not graph.regions:
            raise InvalidArgument(f"graph {graph.name!r} has no regions")
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._unstamped:
            self._notice()
        plan = graph._submit_plan or graph.submit_plan()
        lanes = plan.lanes
        space = self._space_lock
        while True:
            with space:  # room at hand (the usual case), else _make_room settles or waits
                room = len(self._pending) + self._room_taken < self.options.max_submissions
                if room:
                    self._room_taken += 1
            if not room:
                self._make_room(block, deadline, timeout)
            try:
                with self._submit_lock:
                    if self._reservations and self._reserved_elsewhere(lanes):
                        self._give_room_back()
                        self._wait_for_lanes(lanes, block, deadline, timeout)
                        continue  # room may be gone meanwhile: take it again
                    submission = self._submit_locked(graph, plan)
            except BaseException:
                self._give_room_back()
                raise
            break
        if self.options.observe:
            self._observe(plan.infos, submission.events, submission.submitted)
        if self._quarantined or self._releasing:
            self._prove_idle()
        if graph._fast_submit is None and _fast_submit_wanted(graph, plan):
            self._make_fast_submit(graph, plan)
        return submission

    def _make_fast_submit(self, graph: TrackedGraph, plan: SubmitPlan) -> None:
        """The compiled resubmission of ``graph`` (:class:`hrx_core.fastpath.Submitter`):
        for a one-region graph that may skip the hazard scan next time, it makes what
        :meth:`submit` makes -- the same checks, event, Submission, room, counters and
        observation -- in one C call, and leaves every other case (no room, a reserved
        lane, a stale note, a new plan, a closed graph) to the Python path."""
        from .. import fastpath

        mod = fastpath.module()
        if not mod.compiled:
            graph._fast_submit = False
            return
        fastpath.bind_entry(Runtime, "submit", Runtime._submit_py, "runtime_submit", mod.lib)
        regions = tuple(
            (r, self.lanes[r.lane], self.lanes[r.lane].lazy_signals, r.reads_own_writes,
             type(r).encode_signaled is _RecordedRegion.encode_signaled)
            for r in graph.regions
        )
        observe = self.options.observe
        graph._fast_submit = mod.lib.Submitter(
            self, plan, regions, Submission, Event, time.perf_counter,
            0 if not observe else (2 if observe == "exact" else 1),  # (1: it observes and notices in C)
            self.options.max_submissions, _FOLD_AFTER, _Resubmit, _NOTICE_SCAN,
        )

    def _submit_locked(self, graph: TrackedGraph, plan: SubmitPlan) -> Submission:
        submitted = time.perf_counter()
        events: list[Event] = []
        try:
            for region in graph.regions:
                events.append(self._encode(region, events))
        except BaseException as exc:
            # Regions already accepted still run: their owners wait in quarantine.
            if events:
                accepted = {id(a): a for r in graph.regions[:len(events) + 1] for a, *_ in r.accesses}
                self._quarantine(list(accepted.values()), f"failed submission: {exc!r}")
            raise
        if len(events) > 1 and self.fast_resubmit:
            self._redate(graph, plan.redatable)
        submission = Submission(self, graph, events, plan.owners, submitted)
        submission.sequence = self._sequence
        self._sequence += 1
        with self._space_lock:
            self._room_taken -= 1
            self._pending.append(submission)
        uncounted = self._uncounted
        uncounted.append(plan.counters)  # (deque appends are atomic: no lock here)
        if len(uncounted) > _FOLD_AFTER:  # bounded when nobody reads the statistics
            self._add_uncounted()
        return submission

    def _add_uncounted(self) -> None:
        """Add the counters of submissions made since the last call to the statistics
        (each once: pops are atomic, so concurrent callers split them)."""
        uncounted = self._uncounted
        stats = self.stats
        last: dict[str, int] | None = None
        times = 0
        while uncounted:
            try:
                item = uncounted.popleft()
            except IndexError:  # another caller took the last one
                break
            if isinstance(item, tuple):  # a run the compiled resubmission counted: (counters, Tally)
                counters, n = item[0], item[1].value
            else:
                counters, n = item, 1
            if counters is last:  # a graph resubmitted: its (shared) counters once, times n
                times += n
                continue
            if last is not None:
                stats._add_counted(last, times)
            last, times = counters, n
        if last is not None:
            stats._add_counted(last, times)

    def _before_stats_read(self) -> None:
        """What a read of the statistics sees first: every submission's counters, then
        (observe) the observed submissions folded in."""
        self._add_uncounted()
        if self.options.observe:
            self._fold_observed()

    # -- room (max_submissions) ----------------------------------------------------------

    def _make_room(self, block: bool, deadline: float | None, timeout: float | None) -> None:
        """Take one of the ``max_submissions`` places (counted under ``_space``, so
        concurrent submitters never overshoot the limit)."""
        limit = self.options.max_submissions
        while True:
            # settle what finished (it releases or quarantines owners), oldest first: a
            # lane finishes in submission order, so with one queue the finished ones are
            # a prefix and the first unfinished one ends the search (one timeline read);
            # with several queues a later submission may be done before the head
            while True:
                with self._space_lock:
                    if len(self._pending) + self._room_taken < limit:
                        self._room_taken += 1
                        return
                    head = self._pending[0] if self._pending else None
                if head is None or not head.is_complete:
                    break
                self._settle_finished()
            if self._queues > 1:
                with self._space_lock:
                    pending = list(self._pending)
                for s in pending:
                    if s.is_complete:
                        s.refresh()
            with self._space:
                if len(self._pending) + self._room_taken < limit:
                    self._room_taken += 1
                    return
                oldest = self._pending[0] if self._pending else None
                if not block:
                    raise QueueFull(f"max_submissions: {limit} submissions are in flight")
                left = remaining(deadline)
                if left is not None and left <= 0:
                    raise Timeout(f"max_submissions: no room within {timeout} s ({limit} in flight)")
                if oldest is None:  # every place is taken by a submission being encoded now
                    self._space_waiters += 1
                    try:
                        self._space.wait(0.01 if left is None else min(left, 0.01))
                    finally:
                        self._space_waiters -= 1
                    continue
            try:  # wait for the oldest without settling it: its failure is its owner's
                for e in oldest.events:
                    e.completion.wait_quiet(remaining(deadline))
            except Timeout:
                raise Timeout(f"max_submissions: no room within {timeout} s ({limit} in flight)") from None

    def _settle_finished(self) -> None:
        """Settle the finished prefix of the pending submissions at once (the head is
        finished): what :meth:`Submission.refresh` does for each, with one timeline
        read and one retirement per queue and one notice for all of them."""
        reached: dict[int, int] = {}
        slots: list[QueueSlot] = []
        batch: list[Submission] = []
        with self._space_lock:
            for sub in self._pending:
                for e in sub.events:
                    c = e.completion
                    slot = c.slot
                    top = reached.get(id(slot))
                    if top is None:
                        # work not signalled yet counts as unfinished (the head's check
                        # emitted a signal covering what was encoded before it)
                        timeline = slot._timeline or slot.timeline
                        top = reached[id(slot)] = min(slot.signaled, timeline.completed())
                        slots.append(slot)
                    if c.value > top:
                        break
                else:
                    batch.append(sub)
                    continue
                break
        for slot in slots:
            if slot.retained:
                slot.retire()
        self._notice()
        with self._settle_lock:
            fresh = [sub for sub in batch if not sub._settled]
            for sub in fresh:
                sub._settled = True
        if not fresh:
            return
        if any((slot._timeline or slot.timeline).has_errors() for slot in slots):
            self._quarantine_failed(fresh)
        self._retired(fresh)

    def _quarantine_failed(self, settled: Sequence[Submission]) -> None:
        """Settled submissions with a region that failed itself: their owners wait in
        quarantine until proven idle (its device work may be uncertain; inherited
        failures ran normally on stale inputs)."""
        for sub in settled:
            for e in sub.events:
                failure = own_failure(e)
                if failure is not None:
                    self._quarantine(sub.owners, f"failed: {failure!r}")
                    break

    def _give_room_back(self) -> None:
        with self._space:
            if self._room_taken > 0:
                self._room_taken -= 1
            self._space.notify_all()

    # -- lane reservations (NativeSession) --------------------------------------------------

    def _reserved_elsewhere(self, lanes: AbstractSet[str]) -> bool:
        me = threading.get_ident()
        return any((r := self._reservations.get(name)) is not None and r[0] != me for name in lanes)

    def _wait_for_lanes(self, lanes: AbstractSet[str], block: bool, deadline: float | None, timeout: float | None) -> None:
        """Wait (the submit lock released meanwhile) until no other thread reserves ``lanes``."""
        if not block:
            raise QueueFull(f"lanes {sorted(lanes)}: reserved by a native session of another thread")
        while self._reserved_elsewhere(lanes):
            left = remaining(deadline)
            if left is not None and left <= 0:
                raise Timeout(f"lanes {sorted(lanes)}: still reserved by a native session after {timeout} s")
            self._lanes_free.wait(left)

    def _reserve_lane(self, name: str, timeout: float | None = None) -> None:
        """Reserve lane ``name`` for the calling thread (reentrant). Taken under the submit
        lock, so it begins between submissions and never inverts the lock order."""
        me = threading.get_ident()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lanes_free:
            while (r := self._reservations.get(name)) is not None and r[0] != me:
                left = remaining(deadline)
                if left is not None and left <= 0:
                    raise Timeout(f"lane {name!r}: reserved by another native session for more than {timeout} s")
                self._lanes_free.wait(left)
            if r is None:
                self._reservations[name] = [me, 1]
            else:
                r[1] += 1

    def _release_lane(self, name: str) -> None:
        with self._lanes_free:
            r = self._reservations.get(name)
            if r is None or r[0] != threading.get_ident():
                return
            r[1] -= 1
            if r[1] == 0:
                del self._reservations[name]
                self._lanes_free.notify_all()

    def _encode(self, region: Region, events: list[Event]) -> Event:
        lane = self.lanes[region.lane]
        inflight = self._inflight
        again = region.resubmit
        previous = region.last
        if (again is not None and again.generation == inflight.generation and again.slot is lane.stream.slot
                and self.fast_resubmit):
            stream = lane.stream
            with lane.lock:
                event = Event(region.encode_signaled(lane, lane.lazy_signals))
                stream._forget_failures()
            if region.reads_own_writes and previous is not None and self._inherits_previous(previous):
                event.upstream = (previous,)
            region.last = event
            inflight.replace(again.places, event)
            return event
        region.resubmit = None
        live, read_from = inflight.conflicts(region.accesses, region.reads)
        waits = [events[d] for d in region.deps] + live if region.deps else live
        stream = lane.stream
        with lane.lock:
            own = stream.slot
            for ev in waits:
                slot = ev.completion.slot
                if slot is own:
                    continue  # one FIFO queue: already ordered
                if slot.device is lane.device:
                    stream.wait_event(ev)
                else:
                    ev.completion.wait_quiet()  # another engine: a host completion check
            event = Event(region.encode_signaled(lane, lane.lazy_signals))
            stream._forget_failures()  # a region's failures are reported by its Submission
        if region.data_deps or read_from:
            event.upstream = tuple([events[d] for d in region.data_deps] + read_from)
        region.last = event
        if self.fast_resubmit and not region.deps and all(ev is previous for ev in read_from):
            entered = inflight.record(region.accesses, event, True)
            assert entered is not None
            region.resubmit = _Resubmit(inflight.generation, own, *entered)
        else:
            inflight.record(region.accesses, event)
        return event

    def _redate(self, graph: TrackedGraph, redatable: Sequence[bool]) -> None:
        """After a submission of several regions (under the submit lock): each region's
        note to skip its next scan, taken when it was entered (or kept from before),
        is re-dated to the generation the submission ended at where the later regions'
        records cannot have changed what its scan would find (the plan's
        ``redatable``) and its entries still stand (found again: a later region's scan
        or record may have moved or dropped them); else it is dropped."""
        inflight = self._inflight
        generation = inflight.generation
        for region, ok in zip(graph.regions, redatable):
            again = region.resubmit
            if again is None or again.generation == generation:
                continue
            last = region.last
            places = inflight.relocate(again.marks, last) if ok and last is not None else None
            region.resubmit = None if places is None else _Resubmit(generation, again.slot, places, again.marks)

    @staticmethod
    def _inherits_previous(previous: Event) -> bool:
        """A resubmitted region that reads what it writes: does its new event carry the
        previous submission's failure? What the skipped scan would find -- the output
        it reads, unless that finished cleanly (nothing upstream of it, no verdict yet
        and no failure recorded on its queue at all; else no failure pending for it).
        hrx_core.fastpath's Submitter answers the first two cases in C: change both."""
        c = previous.completion
        return not c.done_now() or (
            (bool(previous.upstream) or previous.resolved is not None
             or (c.slot._timeline or c.slot.timeline).has_errors())
            and pending_failure(previous) is not None)

    def _observe(self, regions: Sequence[RegionInfo], events: list[Event], submitted: float) -> None:
        """Keep the submission for its regions' end times: stamped when the runtime
        notices them (observe=True, :meth:`_notice`) or from completion callbacks
        (observe="exact"). Lane busy time, latency profiles and trace slices are added
        from the stamps when one of them is read (:meth:`_fold_observed`), or once
        many are waiting."""
        ends = [0.0] * len(regions)
        # (observe=True: a list of the Events of its own, which _notice empties once the
        # ends are stamped -- a settled submission whose Event nothing else holds is
        # then kept for reuse by hrx_core.fastpath's Submitter)
        item = (regions, ends, submitted, events if self._exact else list(events))
        with self._fold_lock:
            self._observed.append(item)
            if not self._exact:
                self._unstamped.append(item)
        if self._exact:
            for i, event in enumerate(events):
                event.completion.add_done_callback(_stamp(ends, i))
        if len(self._observed) > _FOLD_AFTER:
            self._fold_observed()

    def _notice(self) -> None:
        """observe=True: stamp the ends of regions that finished since the last notice
        (timeline reads; no driver call), oldest submissions first. hrx_core.fastpath's
        Submitter does the same in C (``notice``; and ``observe_noticed`` what
        :meth:`_observe` does): change both."""
        unstamped = self._unstamped
        if not unstamped:
            return
        now = time.perf_counter()
        with self._fold_lock:
            # a queue finishes its work in order: past a region of a queue that is not
            # done, no later region of that queue is checked (one timeline read a queue)
            blocked: set[Any] = set()
            scanned = 0
            for _, ends, _, events in unstamped:
                for i, event in enumerate(events):
                    if ends[i]:
                        continue
                    completion = event.completion
                    slot = completion.slot
                    if slot in blocked:
                        continue
                    if completion.done_now():
                        ends[i] = now
                    else:
                        blocked.add(slot)
                scanned += 1
                if scanned > _NOTICE_SCAN or len(blocked) >= self._queues:
                    break
            while unstamped and 0.0 not in unstamped[0][1]:
                unstamped.popleft()[3].clear()  # (_observe's own list: nothing reads the Events once stamped)

    def _fold_observed(self) -> None:
        """Add every fully stamped submission to the statistics, profiles and trace, in
        submission order (a lane's regions finish in order, so per lane this is the
        order they finished in); submissions still running wait for a later fold."""
        if not self._observed:
            return
        self._notice()
        with self._fold_lock:
            if self._folding:
                return  # a fold in progress reads the statistics itself
            self._folding = True
            try:
                waiting = self._observed
                if self._exact:
                    now = time.perf_counter()
                    for item in waiting:
                        ends = item[1]
                        if 0.0 in ends:
                            # finished work whose callback the notifier has not run yet (it
                            # would stamp later): stamped now, so what a synchronize waited
                            # for is in the statistics read after it (never early)
                            for i, event in enumerate(item[3]):
                                if not ends[i] and event.completion.done_now():
                                    ends[i] = now
                take = (self._fold_fns or self._compiled_fold())[2]
                ready = None if take is None else take(waiting)  # (fastpath's fold_take: the same)
                if ready is None:
                    items = list(waiting)
                    waiting.clear()
                    ready = [item for item in items if 0.0 not in item[1]]
                    if len(ready) < len(items):  # still running: kept, in order, for a later fold
                        waiting.extendleft(reversed([item for item in items if 0.0 in item[1]]))
                if ready:
                    self._fold(ready)
            finally:
                self._folding = False

    def _fold(self, items: list[tuple[Sequence[RegionInfo], list[float], float, Any]]) -> None:
        """Add stamped submissions (in submission order) to the lanes' busy time, the
        latency profile and the trace: one lock each per fold, not per region (the
        values are the runtime's own -- finite, non-negative -- so nothing is re-checked)."""
        lanes = self.lanes
        busy: dict[str, list[Any]] = {}
        latencies: dict[str, list[float]] = {}
        fold_ready, trace_defer, _ = self._fold_fns or self._compiled_fold()
        if fold_ready is None or not fold_ready(items, lanes, busy, latencies):  # (False: left to this loop)
            last: Any = None
            rows: list[tuple[Any, list[Any], list[float]]] = []
            for regions, ends, submitted, _ in items:  # (fastpath's fold_ready does the same: change both)
                if regions is not last:  # (a graph's submissions share its plan's infos: looked up once a run)
                    last = regions
                    rows = [(lanes[r.lane], busy.setdefault(r.lane, [0.0, 0]), latencies.setdefault(r.name, []))
                            for r in regions]
                for i, (lane, b, lat) in enumerate(rows):
                    end = ends[i]
                    lane_end = lane.last_end
                    start = lane_end if lane_end > submitted else submitted  # max(submitted, lane.last_end)
                    if end > lane_end:
                        lane.last_end = end
                    d = end - start
                    b[0] += d if d > 0.0 else 0.0
                    b[1] += 1
                    d = end - submitted
                    lat.append(d if d > 0.0 else 0.0)
        self.stats._lanes_busy(busy)
        self.profile._record_many(latencies)
        if self.trace is not None:
            self._defer_trace(items, trace_defer)

    def _compiled_fold(self) -> tuple[Any, Any, Any]:
        """hrx_core.fastpath's fold_ready, trace_defer and fold_take, or (None, None,
        None) where the compiled module is not built (the Python loops fold)."""
        from .. import fastpath

        mod = fastpath.module()
        self._fold_fns = (mod.lib.fold_ready, mod.lib.trace_defer, mod.lib.fold_take) if mod.compiled else (None, None, None)
        return self._fold_fns

    def _defer_trace(self, items: list[tuple[Sequence[RegionInfo], list[float], float, Any]], trace_defer: Any) -> None:
        """Keep folded submissions for the trace, whose rows are built when it is read
        (:meth:`_build_trace`). Past the ring's capacity the oldest are dropped unbuilt --
        the rows built after them would push theirs out of the ring anyway -- and counted
        in the trace's ``dropped``. ``trace_defer``: hrx_core.fastpath's, or None (these
        loops alone)."""
        live = self.stats._counters["live_tracked_bytes"]  # a plain read: no fold from inside one
        limit = self.trace.max_events
        with self._trace_lock:
            pending = self._trace_pending
            lane_end = self._trace_lane_end
            done = None if trace_defer is None else trace_defer(items, pending, live, self._trace_pending_events, limit, lane_end)
            if done is not None:  # (None: left to these loops; else the dropping may go on below)
                total, dropped = done
            else:
                total = self._trace_pending_events
                dropped = 0
                last: Any = None
                events = 0
                for item in items:  # one slice a region, one flow a dependency, one memory sample
                    regions, ends, submitted, _ = item
                    if regions is not last:  # (counted once a run of one graph's submissions)
                        last = regions
                        events = len(regions) + 1 + sum(len(region.deps) for region in regions)
                    # not its Events: nothing to keep alive (the item itself where its list of them is
                    # empty: observe=True's once stamped)
                    kept = item if not item[3] else (regions, ends, submitted, None)
                    pending.append((kept, live, events))
                    total += events
            # (fastpath's trace_defer does the same: change both)
            while len(pending) > 1 and total - pending[0][2] >= limit:
                (regions, ends, _, _), _, n = pending.popleft()
                total -= n
                dropped += n
                for i, region in enumerate(regions):  # where the dropped slices ended, as if built
                    if ends[i] > lane_end.get(region.lane, 0.0):
                        lane_end[region.lane] = ends[i]
            self._trace_pending_events = total
            if dropped:
                self.trace._count_dropped(dropped)

    def _build_trace(self) -> None:
        """Before the trace is read: fold what finished, then build the kept submissions'
        rows in submission order (one memory sample value per fold they came from)."""
        self._fold_observed()
        with self._trace_lock:
            pending = self._trace_pending
            while pending:
                live = pending[0][1]
                batch: list[tuple[Sequence[RegionInfo], list[float], float, Any]] = []
                while pending and pending[0][1] == live:
                    item, _, n = pending.popleft()
                    self._trace_pending_events -= n
                    batch.append(item)
                self._trace_submissions(batch, live)

    def _trace_submissions(self, items: Sequence[tuple[Sequence[RegionInfo], list[float], float, Any]], live: int) -> None:
        """One slice per region (on its lane's track), a flow per dependency and a
        tracked-memory sample per submission (``live`` bytes), appended to the trace in one
        go. The caller holds ``_trace_lock``."""
        rows = []
        lane_end = self._trace_lane_end
        for regions, ends, submitted, _ in items:
            spans = []
            for i, region in enumerate(regions):
                # a region starts when its lane and its dependencies let it (host-observed);
                # slices on one lane never partially overlap (Perfetto nests per track)
                start = submitted
                for d in region.deps:
                    if ends[d] > start:
                        start = ends[d]
                last = lane_end.get(region.lane, 0.0)
                start = min(max(start, last), ends[i])
                if ends[i] > last:
                    lane_end[region.lane] = ends[i]
                spans.append((self._tracks[region.lane], region.name, int(start * 1e9), int(ends[i] * 1e9),
                              {"graph": region.graph, "queue": self.lanes[region.lane].queue, "deps": list(region.deps)}))
            flows = [(d, i) for i, region in enumerate(regions) for d in region.deps]
            rows.append((spans, flows, int(max(ends) * 1e9)))
        self.trace._add_submissions(rows, "tracked memory", "bytes", live)

    def _retired(self, settled: Sequence[Submission]) -> None:
        """Drop settled submissions from the pending ones (room for new ones)."""
        with self._space_lock:
            pending = self._pending
            for submission in settled:
                if pending and pending[0] is submission:  # usually: settled oldest first
                    pending.popleft()
                elif submission in pending:
                    pending.remove(submission)
            if self._space_waiters:
                self._space.notify_all()

    # -- quarantine ---------------------------------------------------------------

    def _quarantine(self, owners: Sequence[Allocation], reason: str) -> None:
        """Hold ``owners`` (memory and charges) until their pending work is proven finished.

        An allocation is held once however often it is quarantined: a later quarantine
        only moves its fences to the lanes' newest work (which covers the older)."""
        fences = [lane.stream.slot.completion() for lane in self.lanes.values()]
        added = nbytes = 0
        with self._quarantine_lock:
            for alloc in owners:
                entry = self._quarantined.get(id(alloc))
                if entry is not None:
                    entry[1], entry[2] = fences, reason
                    continue
                try:
                    alloc.retain()
                except HRXError:
                    continue  # already freed: nothing to hold
                alloc.quarantined += 1
                self._quarantined[id(alloc)] = [alloc, fences, reason]
                added += 1
                nbytes += alloc.nbytes
        if added:
            self.stats.add("quarantined_owners", added)
            self.stats.add("quarantined_bytes", nbytes)
            log.warning("quarantined %d allocation(s), %d bytes, until their queued work is proven finished: %s",
                        added, nbytes, reason)
        self._prove_idle_later()

    def _prove_idle(self) -> int:
        """Release quarantined owners whose work has provably retired; return how many.
        Returns only once releases another thread started have finished too (their
        memory freed and charges returned)."""
        if not self._quarantined and not self._releasing:
            return 0
        with self._release_lock:
            self._releasing += 1
            try:
                return self._prove_idle_locked()
            finally:
                self._releasing -= 1

    def _prove_idle_locked(self) -> int:
        with self._quarantine_lock:
            entries = list(self._quarantined.values())
        released: list[Allocation] = []
        for alloc, fences, _ in entries:
            # poll the owner's own pending work too: busy() reads only what the
            # timelines last reported, which a wait on another completion leaves stale
            if all(f.refresh_quiet() for f in fences) and all(c.refresh_quiet() for c, *_ in alloc.pending_uses()) \
                    and not alloc.busy():
                released.append(alloc)
        with self._quarantine_lock:
            released = [a for a in released if self._quarantined.pop(id(a), None) is not None]
        for alloc in released:
            alloc.quarantined -= 1
            self.stats.add("quarantined_owners", -1)
            self.stats.add("quarantined_bytes", -alloc.nbytes)
            alloc.release()
        return len(released)

    def _prove_idle_later(self) -> None:
        """Release what is quarantined once the lanes' current work (and the owners'
        pending work) completes, without waiting for another call into the runtime:
        completion callbacks re-check until nothing is left (one watch at a time)."""
        with self._quarantine_lock:
            entries = list(self._quarantined.values())
            if not entries or self._idle_watch:
                return
            self._idle_watch = True
        fences = {id(c): c for _, fs, _ in entries for c in fs}
        for alloc, _, _ in entries:
            for c, *_ in alloc.pending_uses():
                fences[id(c)] = c
        left = [len(fences)]
        lock = threading.Lock()

        def done(_: Any) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                with self._quarantine_lock:
                    self._idle_watch = False
                self._prove_idle()
                if self.closed:
                    self._close_lanes()
                self._prove_idle_later()

        for c in fences.values():
            c.add_done_callback(done)

    @property
    def quarantined(self) -> list[tuple[int, str]]:
        """(bytes, reason) of every quarantined owner."""
        with self._quarantine_lock:
            return [(alloc.nbytes, reason) for alloc, _, reason in self._quarantined.values()]

    # -- synchronization and teardown --------------------------------------------

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for every submission (``timeout`` in total); raise the first failure seen."""
        timeout = check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._space:
            pending = list(self._pending)
        if len(pending) > 1:
            self._settle_all(pending, deadline)
        first: BaseException | None = None
        for s in pending:
            try:
                if s._settled:  # (what s.wait does to a settled submission: its failures)
                    s._raise_failures()
                else:
                    s.wait(remaining(deadline))
            except Timeout:
                raise
            except HRXError as exc:
                first = first or exc
        self._prove_idle()
        # what the device's queues hold for finished work (memory freed while in use:
        # quarantined owners just released, say) is released now, not at a queue's next
        # retirement, and releases another thread (a completion callback's) popped are
        # waited for: budgets and statistics are settled when this returns
        self.device._settle(remaining(deadline))
        if first is not None:
            raise first

    def _settle_all(self, pending: Sequence[Submission], deadline: float | None) -> None:
        """:meth:`synchronize`'s wait for several submissions at once: one wait a queue
        (for the newest of their values on it: a queue's timeline reaches its values in
        order), then one batch settle of the finished prefix (:meth:`_settle_finished`,
        or its C twin where the newest submission's graph has a compiled resubmission).
        A timeout here settles nothing: the caller's per-submission waits then settle
        what finished and raise Timeout at the first that did not, as they always did."""
        newest: dict[int, Any] = {}
        for s in pending:
            for e in s.events:
                c = e.completion
                top = newest.get(id(c.slot))
                if top is None or c.value > top.value:
                    newest[id(c.slot)] = c
        try:
            for c in newest.values():
                c.wait_quiet(remaining(deadline))
        except Timeout:
            return
        fast = pending[-1].graph._fast_submit
        if fast:  # (a compiled resubmission's settling in C: the whole queue, not only its graph's)
            fast.settle()
            return
        with self._space_lock:
            head = self._pending[0] if self._pending else None
        if head is not None and head.is_complete:
            self._settle_finished()

    def close(self, timeout: float | None = 30.0) -> None:
        """Drain and release the lanes. Work that cannot be drained in ``timeout``
        quarantines its owners (they stay allocated) and Timeout is raised; they and the
        lanes are released once that work completes (completion callbacks)."""
        timeout = check_timeout("timeout", timeout)
        if self.closed:
            return
        self.closed = True
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._space:
            pending = list(self._pending)
        failed: BaseException | None = None
        for s in pending:
            try:
                s.wait(remaining(deadline))
            except Timeout as exc:
                failed = failed or exc
            except HRXError:
                pass
        self._prove_idle()
        if failed is not None:
            self._prove_idle_later()
            raise failed
        self._close_lanes()
        self._prove_idle()
        self._prove_idle_later()

    def _close_lanes(self) -> None:
        for lane in self.lanes.values():
            if lane.closed:
                continue
            lane.closed = True
            try:
                lane.stream.close()
            except HRXError:
                pass

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def native_session(self, name: str = "native") -> Any:
        """A :class:`NativeSession` reserving the compute lane (use with ``with``)."""
        from .session import NativeSession

        return NativeSession(self, name)

    def write_trace(self, path: str) -> None:
        """Write the bounded Chrome/Perfetto trace of observed regions."""
        if self.trace is None:
            raise InvalidArgument("trace: this runtime was created with observe=False")
        self.trace.write(path)
