"""Tracked graphs: regions on lanes, ordered by declared buffer access.

A tracked graph is a list of regions. Each region runs on one lane (upload, compute,
download, npu) and declares the byte ranges it reads and writes; the runtime orders a
region after every earlier region -- of this graph, or of any graph still in flight
-- whose access conflicts with it. Regions record their device work once (as access
graphs on their lane's stream, so the cuda engine replays each as one CUDA graph) and
every submission replays them.

Host data enters and leaves through staging owned by the graph: ``upload`` regions
copy from a shared (pinned) buffer that :meth:`UploadRegion.write` refills between
submissions, and ``download`` regions land in one that :meth:`DownloadRegion.read`
maps after completion. Device-only pipelines allocate no staging.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import transfer
from ..buffer import Allocation, Binding, Buffer, View, as_binding
from ..engine import Access
from ..errors import InvalidArgument, OutOfBounds, show
from ..graph import Graph as DeviceGraph
from ..hazards import HazardTracker
from ..placement import backing_of

if TYPE_CHECKING:
    from ..completion import Completion, Event
    from ..model.tensor import DeviceTensor
    from .lanes import Lane
    from .runtime import Runtime

#: (allocation, start, end, writes)
RegionAccess = tuple[Allocation, int, int, bool]
#: (allocation, start, end) a region reads
ReadRange = tuple[Allocation, int, int]


def merge_reads(ranges: Any) -> list[ReadRange]:
    """Union of read ranges per allocation."""
    return [(a, s, e) for a, s, e, _ in merge_accesses((a, s, e, False) for a, s, e in ranges)]


def overlaps(writes: Sequence[RegionAccess], reads: Sequence[ReadRange]) -> bool:
    """True if a write of ``writes`` overlaps a range of ``reads``."""
    return any(
        w and a is b and s < re and rs < e
        for a, s, e, w in writes
        for b, rs, re in reads
    )


def conflict(a: Sequence[RegionAccess], b: Sequence[RegionAccess]) -> bool:
    """True if an access of ``a`` and one of ``b`` overlap and either writes."""
    return any(
        x is y and s < f and t < e and (w or v)
        for x, s, e, w in a
        for y, t, f, v in b
    )


def redatable(regions: Sequence[Region]) -> tuple[bool, ...]:
    """Per region of a graph (in submission order): True if it has no dependencies and
    no region after it writes what it reads or, on another lane, conflicts with it.
    Then the entries those regions make leave what its hazard scan finds as it was
    (what the runtime's note to skip that scan relies on: the later regions' scans
    only drop finished entries; a later region on its own queue is ordered behind it
    anyway, and one whose writes it reads would be a failure source)."""
    return tuple(
        not r.deps and not any(
            overlaps(later.accesses, r.reads) or (later.lane != r.lane and conflict(r.accesses, later.accesses))
            for later in regions[i + 1:]
        )
        for i, r in enumerate(regions)
    )


def merge_accesses(accesses: Any) -> list[RegionAccess]:
    """Union of byte ranges per allocation and kind (reads, writes): a region of many
    nodes over the same bytes declares them once, so hazard checks stay cheap."""
    groups: dict[tuple[int, bool], tuple[Allocation, list[tuple[int, int]]]] = {}
    for alloc, start, end, writes in accesses:
        groups.setdefault((id(alloc), writes), (alloc, []))[1].append((start, end))
    out: list[RegionAccess] = []
    for (_, writes), (alloc, spans) in groups.items():
        spans.sort()
        cur_start, cur_end = spans[0]
        for start, end in spans[1:]:
            if start <= cur_end:
                cur_end = max(cur_end, end)
            else:
                out.append((alloc, cur_start, cur_end, writes))
                cur_start, cur_end = start, end
        out.append((alloc, cur_start, cur_end, writes))
    return out


class Region:
    """One unit of work on one lane with declared access."""

    # the attributes hrx_core.fastpath reads and writes on every resubmission, as slots:
    # it reaches them at their offsets; the rest live in __dict__
    __slots__ = ("graph", "last", "resubmit", "reads_own_writes", "device_graph", "__dict__", "__weakref__")

    kind = "region"

    def __init__(self, graph: TrackedGraph, name: str, lane: str) -> None:
        self.graph = graph
        self.name = name
        self.lane = lane
        self.index = -1
        self.deps: tuple[int, ...] = ()
        #: earlier regions of the graph whose writes this region reads (failures flow along them)
        self.data_deps: tuple[int, ...] = ()
        self.accesses: list[RegionAccess] = []
        #: byte ranges this region reads (declared read or read_write)
        self.reads: list[ReadRange] = []
        self.last: Event | None = None  # event of the latest submission
        #: bytes this region moves (uploads, downloads, copies) for the runtime's stats
        self.transfer_bytes = 0
        #: the runtime's note that the next submission may skip the hazard scan
        self.resubmit: Any = None
        #: whether the region reads bytes it also writes (set when added to its graph)
        self.reads_own_writes = True

    def encode(self, lane: Lane) -> None:
        """Encode this region's work on ``lane`` (the runtime holds the lane)."""
        raise NotImplementedError

    def encode_signaled(self, lane: Lane, lazy: bool = False) -> Completion:
        """:meth:`encode`, then a signal covering it; returns its completion (the
        runtime holds the lane). Regions that replay a recorded graph do both under
        one hold of the queue's lock. ``lazy``: no signal now -- the completion's value
        is signalled as a stream's work is (every few operations, or once something
        waits on, polls or orders after it)."""
        self.encode(lane)
        return lane.stream.completion() if lazy else lane.stream._event().completion

    def close(self) -> None:
        """Release what the region owns."""

    def __repr__(self) -> str:
        return f"<hrx.execution.{type(self).__name__} #{self.index} {self.name!r} on {self.lane} deps={list(self.deps)}>"


class _RecordedRegion(Region):
    """A region whose device work is a recorded access graph on the lane's stream."""

    def __init__(self, graph: TrackedGraph, name: str, lane: str, device_graph: DeviceGraph) -> None:
        super().__init__(graph, name, lane)
        self.device_graph = device_graph
        self.transfer_bytes = sum(n.refs[0][2] for n in device_graph.nodes if n.kind == "copy")
        # an alias (placement.Fabric.adopt) and its original are one allocation here
        self.accesses = merge_accesses(
            (backing_of(buffer._alloc), buffer._base + off, buffer._base + off + n, access.writes)
            for node in device_graph.nodes
            for buffer, off, n, access in node.refs
        )
        self.reads = merge_reads(
            (backing_of(buffer._alloc), buffer._base + off, buffer._base + off + n)
            for node in device_graph.nodes
            for buffer, off, n, access in node.refs
            if access & Access.READ
        )

    def encode(self, lane: Lane) -> None:
        self.device_graph.launch(lane.stream)

    def encode_signaled(self, lane: Lane, lazy: bool = False) -> Completion:
        graph = self.device_graph
        if lazy:
            fast = graph._fast
            if fast is not None and lane.stream is graph.stream:
                completion: Completion | None = fast(graph)  # the compiled replay; None: it did nothing
                if completion is not None:
                    return completion
            return graph._launch_signaled_py(lane.stream, True)
        return graph._launch_signaled(lane.stream, lazy=False)

    def close(self) -> None:
        self.device_graph.close()


class ComputeRegion(_RecordedRegion):
    kind = "compute"


class CopyRegion(_RecordedRegion):
    kind = "copy"


class UploadRegion(_RecordedRegion):
    """Copies the graph-owned staging buffer to ``dst`` on the upload lane."""

    kind = "upload"

    def __init__(self, graph: TrackedGraph, name: str, lane: str, device_graph: DeviceGraph, staging: Buffer) -> None:
        super().__init__(graph, name, lane, device_graph)
        self.staging = staging

    def write(self, data: Any) -> None:
        """Refill the staging buffer for the next submission (waits for the last one)."""
        src = transfer.host_bytes("data", data)
        if src.nbytes != self.staging.nbytes:
            raise InvalidArgument(f"data: has {src.nbytes} bytes, the upload region moves {self.staging.nbytes}")
        if self.last is not None:
            self.last.completion.wait_quiet()  # its failure is its submission's to report
        with self.staging.map("write") as host:
            host[:] = src

    def close(self) -> None:
        super().close()
        self.staging.close()


class DownloadRegion(_RecordedRegion):
    """Copies ``src`` into a graph-owned staging buffer on the download lane."""

    kind = "download"

    def __init__(self, graph: TrackedGraph, name: str, lane: str, device_graph: DeviceGraph, staging: Buffer) -> None:
        super().__init__(graph, name, lane, device_graph)
        self.staging = staging

    def read(self, dtype: Any = np.uint8, *, timeout: float | None = None) -> np.ndarray:
        """A copy of the downloaded bytes, after the latest submission completed.

        Raises if the download, or any work whose output it copies, failed: the bytes
        are then stale or uninitialised (see :mod:`hrx_core.execution.failures`)."""
        from ..model.tensor import as_dtype
        from .failures import raise_event_failure

        dt = as_dtype("dtype", dtype)
        if self.staging.nbytes % dt.itemsize:
            raise InvalidArgument(f"dtype: {self.staging.nbytes} bytes are not a whole number of {dt} elements")
        last = self.last
        if last is None:
            raise InvalidArgument(f"download region {self.name!r} has not been submitted")
        last.completion.wait_quiet(timeout)
        raise_event_failure(last, f"download region {self.name!r}")
        with self.staging.map("read") as host:
            return host.copy().view(dt)

    def close(self) -> None:
        super().close()
        self.staging.close()


class ScopedRegion(Region):
    """Native client code (PyTorch, CuPy...) on a lane's native stream, with declared access."""

    kind = "scoped"

    def __init__(self, graph: TrackedGraph, name: str, lane: str, fn: Callable[[Scope], Any], bindings: Sequence[Binding]) -> None:
        super().__init__(graph, name, lane)
        self.fn = fn
        self.bindings = list(bindings)
        for b in self.bindings:
            v = b.view
            self.accesses.append((backing_of(v.buffer._alloc), v.start, v.end, b.access.writes))
            if b.access & Access.READ:
                self.reads.append((backing_of(v.buffer._alloc), v.start, v.end))
            v.buffer._alloc.retain()

    def encode(self, lane: Lane) -> None:
        self.fn(Scope(lane))
        # The client's work is on the stream now; keep the bound memory until it retires.
        lane.stream._mark([b.view.buffer._alloc.retain() for b in self.bindings])

    def close(self) -> None:
        allocs, self.bindings = [b.view.buffer._alloc for b in self.bindings], []
        for a in allocs:
            a.release()


class Scope:
    """What a scoped region's function gets: the lane's stream and its native queue."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.stream = lane.stream
        self.native = lane.stream.native_queue()

    @property
    def handle(self) -> int | None:
        """The native stream handle (a ``CUstream`` address on cuda), if the engine has one."""
        handle = getattr(self.native, "native_handle", None)
        return handle() if callable(handle) else handle


class RegionInfo(NamedTuple):
    """What the runtime's observation keeps of a submitted region."""

    name: str
    lane: str
    deps: tuple[int, ...]
    graph: str


class SubmitPlan(NamedTuple):
    """What every submission of a graph needs: the lanes it uses, the allocations it
    holds while in flight (each once; shared by every submission, so a tuple), the
    statistics counters one submission adds, and what observation keeps of each
    region (no region, and so no memory, outlives its graph)."""

    lanes: frozenset[str]
    owners: tuple[Any, ...]
    counters: dict[str, int]
    infos: tuple[RegionInfo, ...]
    #: per region: whether the regions after it leave what its hazard scan finds
    #: unchanged (see :func:`redatable`), so its note to skip that scan survives them
    redatable: tuple[bool, ...]


class TrackedGraph:
    """Regions recorded once and submitted to a :class:`Runtime` many times."""

    # the attributes hrx_core.fastpath reads and writes on every resubmission, as slots:
    # it reaches them at their offsets; the rest live in __dict__
    __slots__ = ("runtime", "_closed", "_submit_plan", "_fast_submit", "__dict__", "__weakref__")

    def __init__(self, runtime: Runtime, name: str) -> None:
        self.runtime = runtime
        self.name = name
        self.regions: list[Region] = []
        self._hazards = HazardTracker()
        self._totals: dict[str, int] | None = None
        # (lanes, owners, counters) of one submission, cached until a region is added
        self._submit_plan: SubmitPlan | None = None
        #: the runtime's compiled resubmission of this graph (None: not made yet; False:
        #: none can be built here); it checks the plan it was made for on every call
        self._fast_submit: Any = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<hrx.execution.TrackedGraph {self.name!r}, {len(self.regions)} regions>"

    # -- recording --------------------------------------------------------------

    def _check(self, name: Any = "region", after: Any = ()) -> None:
        """Refuse a closed graph, a bad region name or ``after`` list before anything
        is recorded or allocated."""
        if self._closed:
            raise InvalidArgument("graph is closed")
        if not isinstance(name, str) or not name or "\x00" in name:
            raise InvalidArgument(f"name: expected a nonempty str, got {show(name)}")
        if isinstance(after, (Region, str)) or not isinstance(after, Sequence):
            raise InvalidArgument(f"after: expected a list of regions of this graph, got {type(after).__name__}")
        for i, r in enumerate(after):
            if not isinstance(r, Region) or r.graph is not self:
                raise InvalidArgument(f"after[{i}]: not a region of this graph")

    def _add(self, region: Region, after: Sequence[Region]) -> Region:
        explicit = []
        for i, r in enumerate(after):
            if not isinstance(r, Region) or r.graph is not self:
                raise InvalidArgument(f"after[{i}]: not a region of this graph")
            explicit.append(r.index)
        region.index = len(self.regions)
        inferred = self._hazards.add(region.index, [(id(a), s, e, w) for a, s, e, w in region.accesses])
        region.deps = tuple(sorted(inferred | set(explicit)))
        region.data_deps = tuple(d for d in region.deps if overlaps(self.regions[d].accesses, region.reads))
        region.reads_own_writes = overlaps(region.accesses, region.reads)
        self.regions.append(region)
        self._totals = None
        self._submit_plan = None
        self._fast_submit = None
        return region

    def submit_plan(self) -> SubmitPlan:
        """What every submission of this graph needs, computed once (until a region is
        added): see :class:`SubmitPlan`."""
        plan = self._submit_plan
        if plan is None:
            owners: dict[int, Any] = {}
            for region in self.regions:
                for alloc, *_ in region.accesses:
                    owners[id(alloc)] = alloc
            plan = self._submit_plan = SubmitPlan(
                lanes=frozenset(r.lane for r in self.regions),
                owners=tuple(owners.values()),
                counters={"submissions": 1, "regions": len(self.regions), **self.transfer_totals()},
                infos=tuple(RegionInfo(r.name, r.lane, tuple(r.deps), self.name) for r in self.regions),
                redatable=redatable(self.regions),
            )
        return plan

    def transfer_totals(self) -> dict[str, int]:
        """Bytes one submission moves, by statistics counter (cached per graph)."""
        if self._totals is None:
            totals: dict[str, int] = {}
            for r in self.regions:
                if r.transfer_bytes:
                    key = {"upload": "upload_bytes", "download": "download_bytes"}.get(r.kind, "copy_bytes")
                    totals[key] = totals.get(key, 0) + r.transfer_bytes
            self._totals = totals
        return self._totals

    def _check_device(self, name: str, binding: Binding, lane: str) -> None:
        """Refuse a buffer of another device than ``lane``'s before staging is allocated."""
        device = self._lane(lane).device
        if binding.view.buffer.device is not device:
            raise InvalidArgument(f"{name}: buffer belongs to {binding.view.buffer.device.name}, not {device.name}")

    def _lane(self, name: str) -> Lane:
        return self.runtime.lane(name)

    def _record(self, lane_name: str, fn: Callable[[DeviceGraph], Any]) -> DeviceGraph:
        lane = self._lane(lane_name)
        device_graph = lane.stream.owned_graph()
        try:
            fn(device_graph)
        except BaseException:
            device_graph.close()
            raise
        if not device_graph.nodes:
            device_graph.close()
            raise InvalidArgument("region records no work")
        try:
            device_graph.prepare()  # the native graph is built while recording, not at the first submission
        except BaseException:
            device_graph.close()
            raise
        return device_graph

    def compute(
        self, name: str, record: Callable[[DeviceGraph], Any], *, lane: str = "compute", after: Sequence[Region] = ()
    ) -> ComputeRegion:
        """A compute region: ``record(g)`` records dispatches, copies and fills on ``g``
        (an access graph); its bindings' declared access orders it with other regions.
        ``lane="npu"`` puts it on the runtime's NPU device instead."""
        self._check(name, after)
        if not callable(record):
            raise InvalidArgument(f"record: expected a callable, got {type(record).__name__}")
        if not isinstance(lane, str) or lane not in ("compute", "npu"):
            raise InvalidArgument(f"lane: compute regions run on 'compute' or 'npu', got {show(lane)}")
        return self._add(ComputeRegion(self, name, lane, self._record(lane, record)), after)  # type: ignore[return-value]

    def copy(self, src: Buffer | View | Binding, dst: Buffer | View | Binding, *, name: str = "copy", after: Sequence[Region] = ()) -> CopyRegion:
        """Deprecated: ``copyto(dst, src)`` -- destination first, like every other transfer."""
        transfer.deprecated_copy("InferenceGraph")
        return self.copyto(dst, src, name=name, after=after)

    def copyto(self, dst: Buffer | View | Binding, src: Buffer | View | Binding, *, name: str = "copy",
               after: Sequence[Region] = ()) -> CopyRegion:
        """A copy-only region (``src`` into ``dst``, destination first): on the copy
        engine (RuntimeOptions.copy_engine)."""
        self._check(name, after)
        lane = self.runtime.copy_lane
        return self._add(CopyRegion(self, name, lane, self._record(lane, lambda g: g.copyto(dst, src))), after)  # type: ignore[return-value]

    def fill(self, dst: Buffer | View | Binding | DeviceTensor, value: Any = None, *, dtype: Any = None,
             pattern: Any = None, name: str = "fill", after: Sequence[Region] = ()) -> CopyRegion:
        """A fill-only region (arguments as :meth:`Stream.fill`): on the copy engine
        (RuntimeOptions.copy_engine)."""
        self._check(name, after)
        target, bytes_ = transfer.fill_args(dst, value, dtype, pattern)
        lane = self.runtime.copy_lane
        return self._add(CopyRegion(self, name, lane, self._record(lane, lambda g: g.fill(target, pattern=bytes_))), after)  # type: ignore[return-value]

    def upload(self, dst: Buffer | View | Binding, data: Any, *, name: str = "upload", after: Sequence[Region] = ()) -> UploadRegion:
        """An upload-lane region moving ``data`` (copied now into graph-owned staging;
        refill with ``region.write``) into ``dst``."""
        self._check(name, after)
        d = as_binding("dst", dst, Access.WRITE)
        if not d.access & Access.WRITE:
            raise InvalidArgument("dst: binding is declared read-only")
        self._check_device("dst", d, "upload")
        src = transfer.host_bytes("data", data)
        if src.nbytes != d.view.length:
            raise OutOfBounds(f"upload: {src.nbytes} bytes for a {d.view.length}-byte destination")
        staging = self.runtime.allocate_staging(src.nbytes)
        try:
            with staging.map("write") as host:
                host[:] = src
            device_graph = self._record("upload", lambda g: g.copyto(d.write(), staging))
        except BaseException:
            staging.close()
            raise
        return self._add(UploadRegion(self, name, "upload", device_graph, staging), after)  # type: ignore[return-value]

    def download(self, src: Buffer | View | Binding, *, name: str = "download", after: Sequence[Region] = ()) -> DownloadRegion:
        """A download-lane region copying ``src`` into graph-owned staging (``region.read()``)."""
        self._check(name, after)
        s = as_binding("src", src, Access.READ)
        if not s.access & Access.READ:
            raise InvalidArgument("src: binding is declared write-only")
        self._check_device("src", s, "download")
        staging = self.runtime.allocate_staging(s.view.length)
        try:
            device_graph = self._record("download", lambda g: g.copyto(staging, s.read()))
        except BaseException:
            staging.close()
            raise
        return self._add(DownloadRegion(self, name, "download", device_graph, staging), after)  # type: ignore[return-value]

    def gpu_scoped(
        self,
        name: str,
        bindings: Sequence[Binding],
        fn: Callable[[Scope], Any],
        *,
        lane: str = "compute",
        after: Sequence[Region] = (),
    ) -> ScopedRegion:
        """A region of native client work: at every submission ``fn(scope)`` enqueues
        work on ``scope.handle`` (the lane's native stream, e.g. for
        ``torch.cuda.ExternalStream``) or ``scope.native``; ``bindings`` declare what
        it reads and writes, so it orders with the other regions by the same hazards."""
        self._check(name, after)
        if not callable(fn):
            raise InvalidArgument(f"fn: expected a callable, got {type(fn).__name__}")
        if isinstance(bindings, (Buffer, View, Binding)) or not isinstance(bindings, Sequence):
            raise InvalidArgument("bindings: expected a list of Bindings (declared access)")
        checked = []
        for i, b in enumerate(bindings):
            if not isinstance(b, Binding):
                raise InvalidArgument(f"bindings[{i}]: declare access with .read(), .write() or .read_write()")
            checked.append(as_binding(f"bindings[{i}]", b))
        self._lane(lane)
        return self._add(ScopedRegion(self, name, lane, fn, checked), after)  # type: ignore[return-value]

    @property
    def binding_bytes(self) -> int:
        """Distinct bound allocation bytes over every region."""
        return sum({id(a): a.nbytes for r in self.regions for a, *_ in r.accesses}.values())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._fast_submit = None
        for region in self.regions:
            region.close()

    def __enter__(self) -> TrackedGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
