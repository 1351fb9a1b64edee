"""Streams: ordered work on one native queue of a device.

``copy``, ``fill`` and ``dispatch`` are plain calls that several threads may issue
on several streams at once. Staging transfers (``upload``, ``download``) and
synchronization serialize per stream. Every argument is validated before anything
is encoded, so a rejected call changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import transfer
from .buffer import EPOCH, Allocation, Binding, Buffer, View, as_binding, backing_of, check_bool, check_int
from .completion import Completion, Event
from .device import AUTO_FLUSH_OPS
from .engine import Access, BufferArg, CacheOp, KernelArg, NativeQueue, NativeTimestamp
from .errors import ArtifactError, DeviceError, InvalidArgument, OutOfBounds, Overlap, Unsupported, show
from .finalize import close_later_if_collecting, drain_at_entry
from .kernel import Kernel, check_scalar
from .record import LaunchRecord
from .timeouts import check_timeout
from .staging import MAX_CHUNK_BYTES, StagingRing, file_read_async, host_copy, host_copy_async, wait_all

if TYPE_CHECKING:
    from .budget import MemoryBudget
    from .device import Device, QueueSlot
    from .graph import Graph
    from .model.tensor import DeviceTensor


#: ``allocate_from`` asks the engine to register (page-lock) pageable host data of at
#: least this size for a direct copy instead of staging it (registration costs more
#: than a memcpy for small data).
REGISTER_MIN_BYTES = 8 << 20

_DIMS: dict[tuple[Any, ...], tuple[int, int, int]] = {}


def _dims(name: str, value: Any, limit: tuple[int, int, int]) -> tuple[int, int, int]:
    """Validate a grid or block: an int or 1 to 3 ints within ``limit``. Plain ints are
    memoised by exact type (``1.0 == 1`` must not hit the memo of ``1``)."""
    if type(value) is not int:
        return _check_dims(name, value, limit)
    key = (name, value, limit)
    dims = _DIMS.get(key)
    if dims is None:
        dims = _check_dims(name, value, limit)
        if len(_DIMS) < 4096:
            _DIMS[key] = dims
    return dims


def _check_dims(name: str, value: Any, limit: tuple[int, int, int]) -> tuple[int, int, int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        dims = [int(value)]
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3:
        dims = [check_int(f"{name}[{i}]", v, minimum=1) for i, v in enumerate(value)]
    else:
        raise InvalidArgument(f"{name}: expected an int or a tuple of 1 to 3 ints, got {show(value)}")
    dims += [1] * (3 - len(dims))
    for i, (d, m) in enumerate(zip(dims, limit)):
        if not 1 <= d <= m:
            raise InvalidArgument(f"{name}[{i}]: {d} is outside 1..{m}")
    return dims[0], dims[1], dims[2]


def _unloaded(kernel: Kernel) -> None:
    raise InvalidArgument(f"kernel {kernel.name!r}: its code was unloaded (a closed program); nothing was launched")


def _narrower(kernel: Kernel, index: int, binding: Binding, access: Access) -> None:
    verb = {Access.READ: "reads", Access.WRITE: "writes"}.get(access, "reads and writes")
    raise InvalidArgument(
        f"bindings[{index}]: declared {binding.access.label} but kernel {kernel.name!r} "
        f"{verb} this buffer (declare .{access.label}())"
    )


class PreparedLaunch:
    """A dispatch bound once (kernel, geometry, bindings, scalars); launch repeatedly.

    Validation and packing happen here, once. The bindings live in a
    :class:`~hrx_core.record.LaunchRecord`: ``launch()`` checks one epoch counter
    (it moves when a buffer is closed or freed, or a host mapping or host write could
    conflict) and re-validates only then; otherwise it costs one native launch and a
    little bookkeeping. Allocations are not retained per launch: the record answers
    for them while launches are in flight. ``close()`` (or dropping it) unbinds.
    """

    def __init__(self, stream: Stream, kernel: Kernel, native: Any, ranges: list[tuple[Allocation, int, int, bool]]) -> None:
        self._stream = stream
        self._slot = stream.slot
        self._kernel = kernel
        self._native = native
        self._launch = native.bind(stream.slot.native)
        self._exe = native.executable
        self._needs_submit = stream.slot.native.needs_submit
        self._ranges = tuple(ranges)
        self._stats = stream.device.stats
        self._record = LaunchRecord(ranges)

    def rebind(self, index: int, binding: Buffer | View | Binding) -> None:
        """Point buffer ``index`` at another Buffer, View or Binding for later launches.

        The binding is validated like a dispatch argument (device, declared access,
        host mappings); geometry and scalars stay as prepared. A rejected rebind
        changes nothing. Work already launched keeps its old binding.
        """
        expected = self._kernel.buffer_access
        if type(index) is not int or not 0 <= index < len(expected):
            raise InvalidArgument(f"index: kernel {self._kernel.name!r} has buffers 0..{len(expected) - 1}, got {show(index)}")
        arg, use = self._stream._buffer_arg(self._kernel, index, binding, expected[index])
        if self._record.closed:
            raise InvalidArgument("prepared launch: closed")
        ranges = list(self._ranges)
        ranges[index] = use
        with self._slot.lock:  # launches of other threads see old or new, never a mix
            self._record.replace(ranges)
            self._native.set_arg(index, arg)
            self._ranges = tuple(ranges)

    def set_scalar(self, index: int, value: Any) -> None:
        """Give scalar ``index`` another value for later launches.

        ``value`` is converted as a dispatch's scalars are (the declared dtype, exactly;
        a record is copied). A rejected value changes nothing. Work already launched
        keeps the value it was launched with, so the caller may reuse its own memory
        as soon as :meth:`launch` returns: with a record scalar, a small table (row
        indices, say) travels with each launch."""
        value = check_scalar(self._kernel, index, value)
        if self._record.closed:
            raise InvalidArgument("prepared launch: closed")
        with self._slot.lock:  # launches of other threads see old or new, never a mix
            self._native.set_scalar(len(self._kernel.buffer_access) + index, value)

    def launch(self) -> Completion:
        slot = self._slot
        with slot.lock:
            record = self._record
            if record.epoch != EPOCH.value:
                record.validate("prepared launch")
            if self._exe.unloaded:
                _unloaded(self._kernel)
            if slot.closed:
                raise InvalidArgument(f"{slot.name}: device is closed")
            self._launch()
            if self._needs_submit:
                slot._native.submit()  # type: ignore[union-attr]
            # slot.commit_locked(()) and stream._done(value), inlined for this hot path:
            # count the operation, signal every AUTO_FLUSH_OPS; launches between two
            # signals share the stream's latest completion
            value = slot.pending_value
            slot.unsignaled_ops += 1
            done = slot._flush_locked() if slot.unsignaled_ops >= AUTO_FLUSH_OPS else ()
            stream = self._stream
            completion = stream._last
            if completion is None or completion.value != value or not stream._values or stream._values[-1] != value:
                completion = stream._done(value)
            record.last[slot] = completion
        if done:
            slot.release_retired(done)
        self._stats.dispatches += 1
        return completion

    @property
    def closed(self) -> bool:
        return self._record.closed

    def close(self) -> None:
        """Unbind (launches in flight keep what they use until they retire)."""
        self._record.close()

    def __enter__(self) -> PreparedLaunch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self.closed and not close_later_if_collecting(self.close):  # (see hrx_core.finalize)
                self.close()
        except Exception:  # noqa: BLE001
            pass


class Stream:
    """Ordered work on one native queue. Create with ``device.stream()``."""

    # the attributes the compiled paths (hrx_core.fastpath) read and write on every
    # launch, as slots: they reach them at their offsets; the rest live in __dict__
    __slots__ = ("device", "slot", "_values", "_reported", "_waited", "_last", "_fast_dispatch",
                 "__dict__", "__weakref__")

    def __init__(self, device: Device, slot: QueueSlot) -> None:
        self.device = device
        self.slot = slot
        self._transfer_lock = threading.Lock()
        self._staging: StagingRing | None = None
        self._budget: MemoryBudget | None = None
        self._values: list[int] = []
        # _values[:_reported] were checked for failures by a download (see _report_failures)
        self._reported = 0
        # work of other streams this stream waited for (wait_event): its failure is this
        # stream's too -- later work here read what it should have written
        self._waited: list[Completion] = []
        self._last: Completion | None = None
        family = device.info.family(slot.family)
        self._operations = family.operations if family is not None else frozenset()
        self._limits = device.info.limits
        # the compiled dispatch: False until the first dispatch made the native queue,
        # then a fastpath.Dispatcher, or None where it cannot be built
        self._fast_dispatch: Any = False

    def __repr__(self) -> str:
        return f"<hrx.Stream on {self.slot.name}>"

    @property
    def queue(self) -> str:
        """Name of the native queue this stream runs on."""
        return self.slot.name

    def native_queue(self) -> NativeQueue:
        """The engine queue (a CUDA stream object, a host worker) for native clients."""
        return self.slot.native

    # -- budget -----------------------------------------------------------------

    def with_memory_budget(self, budget: MemoryBudget | None) -> Stream:
        """Charge this stream's allocations and staging to ``budget`` (before allocating)."""
        from .budget import MemoryBudget

        if budget is not None and not isinstance(budget, MemoryBudget):
            raise InvalidArgument(f"budget: expected a MemoryBudget or None, got {type(budget).__name__}")
        self._budget = budget
        return self

    @property
    def memory_budget(self) -> MemoryBudget | None:
        return self._budget

    # -- allocation -------------------------------------------------------------

    def allocate(self, nbytes: int) -> Buffer:
        drain_at_entry()  # finalizers' closes queued in a collection (hrx_core.finalize)
        return self.device.allocate(nbytes, budget=self._budget)

    def allocate_shared(self, nbytes: int) -> Buffer:
        drain_at_entry()  # finalizers' closes queued in a collection (hrx_core.finalize)
        return self.device.allocate_shared(nbytes, budget=self._budget)

    def allocate_from(self, data: Any) -> Buffer:
        """A new buffer initialised from nonempty host data, with no separate zero-fill."""
        drain_at_entry()  # finalizers' closes queued in a collection (hrx_core.finalize)
        src = transfer.host_bytes("data", data)
        alloc = self.device._allocate(src.nbytes, shared=False, budget=self._budget, what="buffer")
        buffer = Buffer(self.device, alloc)
        host = alloc.native.host_view()
        if host is not None:
            # A brand-new allocation has no pending work: write it directly.
            host_copy(host[: src.nbytes], src)
            alloc.native.cache_control(CacheOp.FLUSH, 0, src.nbytes)
            self.device.stats.upload_bytes += src.nbytes
        else:
            try:
                pinned = self.device.native.wrap_pinned(src, register=src.nbytes >= REGISTER_MIN_BYTES)
                if pinned is None:
                    self.upload(buffer, src)
                else:
                    self._copy_pinned(pinned, alloc, src.nbytes)
            except BaseException:
                buffer.close()
                raise
        return buffer

    def _copy_pinned(self, pinned: Any, alloc: Allocation, n: int) -> None:
        """Copy ``n`` bytes from host memory the queues read directly (already pinned,
        or registered for this copy) into ``alloc``: no staging copy. Waits for the
        copy, so the caller may reuse its data at once; then ends the registration."""
        try:
            with self._transfer_lock:
                done = self._direct(pinned, 0, alloc, 0, n, writes_host=False)
            done.wait()
        finally:
            pinned.free()
        self.device.stats.upload_bytes += n

    # -- bookkeeping ------------------------------------------------------------

    def _done(self, value: int) -> Completion:
        # (hrx_core.fastpath's stream_done does the common case in C: change both)
        values = self._values
        if not values or values[-1] != value:
            values.append(value)
            if len(values) > 4096:
                self._prune_values()
        last = self._last
        if last is not None and last.value >= value:
            return last if last.value == value else Completion(self.slot, value)  # a racing thread moved on
        completion = self._last = Completion(self.slot, value)
        return completion

    def _prune_values(self) -> None:
        completed = self.slot.timeline.completed()
        timeline = self.slot.timeline
        keep = [v for v in self._values[self._reported:] if v > completed or timeline.error(v) is not None]
        self._values[:] = keep[-4096:]
        self._reported = 0

    def _check_device(self, name: str, binding: Binding) -> None:
        if binding.view.buffer.device is not self.device:
            raise InvalidArgument(f"{name}: buffer belongs to {binding.view.buffer.device.name}, not {self.device.name}")

    def _check_family(self, operation: str) -> None:
        if operation not in self._operations:
            raise Unsupported(f"{operation}: {self.slot.family} queues of {self.device.name} cannot encode it")

    # -- operations -------------------------------------------------------------

    def copy(self, src: Buffer | View | Binding, dst: Buffer | View | Binding) -> Completion:
        """Deprecated: ``copyto(dst, src)`` -- destination first, like every other transfer."""
        transfer.deprecated_copy("Stream")
        return self.copyto(dst, src)

    def copyto(self, dst: Buffer | View | Binding, src: Buffer | View | Binding) -> Completion:
        """Copy ``src`` into ``dst`` (equal lengths, no overlap; destination first, as
        ``numpy.copyto``); splits large ranges."""
        s = as_binding("src", src, Access.READ)
        d = as_binding("dst", dst, Access.WRITE)
        self._check_device("src", s)
        self._check_device("dst", d)
        if not s.access & Access.READ:
            raise InvalidArgument("src: binding is declared write-only")
        if not d.access & Access.WRITE:
            raise InvalidArgument("dst: binding is declared read-only")
        sv, dv = s.view, d.view
        if sv.length != dv.length:
            raise OutOfBounds(f"copy: src has {sv.length} bytes, dst has {dv.length}")
        sa, da = sv.buffer.allocation, dv.buffer.allocation
        if backing_of(sa) is backing_of(da) and sv.start < dv.end and dv.start < sv.end:
            raise Overlap(
                f"copy: src [{sv.start}, {sv.end}) and dst [{dv.start}, {dv.end}) overlap in one allocation"
            )
        if sa.host_maps or sa.host_dirty:
            sa.check_device_use(sv.start, sv.end, False)
        if da.host_maps or da.host_dirty:
            da.check_device_use(dv.start, dv.end, True)
        self._check_family("copy")
        n = sv.length
        limit = self.device.info.limits.max_transfer_bytes
        sn, dn, s0, d0 = sa.native, da.native, sv.start, dv.start
        if n <= limit:
            def encode(q: NativeQueue) -> None:
                q.copy(sn, s0, dn, d0, n)
        else:
            pieces = list(transfer.split(n, limit))

            def encode(q: NativeQueue) -> None:
                for off, length in pieces:
                    q.copy(sn, s0 + off, dn, d0 + off, length)

        value = self.slot.encode(encode, (sa.retain(), da.retain()))
        completion = self._done(value)
        sa.note_use(completion, sv.start, sv.end, False)
        da.note_use(completion, dv.start, dv.end, True)
        self.device.stats.copy_bytes += n
        return completion

    def fill(self, dst: Buffer | View | Binding | DeviceTensor, value: Any = None, *, dtype: Any = None,
             pattern: Any = None) -> Completion:
        """Fill ``dst`` with ``value`` as an element of ``dtype`` (a DeviceTensor's own
        dtype, or a numpy scalar's), or with the bytes of ``pattern=``; elements and
        patterns are 1, 2 or 4 bytes (see :func:`hrx_core.transfer.fill_pattern`)."""
        dst, pattern = transfer.fill_args(dst, value, dtype, pattern)
        d = as_binding("dst", dst, Access.WRITE)
        self._check_device("dst", d)
        if not d.access & Access.WRITE:
            raise InvalidArgument("dst: binding is declared read-only")
        dv = d.view
        p = len(pattern)
        if dv.start % p or dv.length % p:
            raise InvalidArgument(
                f"fill: a {p}-byte pattern needs offset and length multiples of {p} "
                f"(offset {dv.start}, length {dv.length})"
            )
        da = dv.buffer.allocation
        if da.host_maps or da.host_dirty:
            da.check_device_use(dv.start, dv.end, True)
        self._check_family("fill")
        limit = self.device.info.limits.max_transfer_bytes
        dn, d0, n = da.native, dv.start, dv.length
        pieces = list(transfer.split(n, limit, p))

        def encode(q: NativeQueue) -> None:
            for off, length in pieces:
                q.fill(dn, d0 + off, length, pattern)

        v = self.slot.encode(encode, (da.retain(),))
        completion = self._done(v)
        da.note_use(completion, dv.start, dv.end, True)
        self.device.stats.fill_bytes += n
        return completion

    def _dispatch_args(
        self, kernel: Kernel, bindings: Sequence[Any], scalars: Sequence[Any]
    ) -> tuple[list[KernelArg], list[Allocation], list[tuple[Allocation, int, int, bool]]]:
        if not isinstance(kernel, Kernel):
            raise InvalidArgument(f"kernel: expected an hrx Kernel, got {type(kernel).__name__}")
        if type(bindings) is not list and type(bindings) is not tuple and (
            isinstance(bindings, (Buffer, View, Binding)) or not isinstance(bindings, Sequence)
        ):
            raise InvalidArgument("bindings: expected a list of Buffer, View or Binding")
        if type(bindings) is list:
            bindings = tuple(bindings)  # one snapshot: another thread may change the list
        expected = kernel.buffer_access
        if len(bindings) != len(expected):
            raise InvalidArgument(f"bindings: kernel {kernel.name!r} takes {len(expected)} buffers, got {len(bindings)}")
        if not expected:
            return list(kernel.check_scalars(scalars)), [], []
        args: list[KernelArg] = []
        allocs: list[Allocation] = []
        ranges: list[tuple[Allocation, int, int, bool]] = []
        for i, (b, access) in enumerate(zip(bindings, expected)):
            arg, use = self._buffer_arg(kernel, i, b, access)
            args.append(arg)
            if use[0] not in allocs:
                allocs.append(use[0])
            ranges.append(use)
        args.extend(kernel.check_scalars(scalars))
        return args, allocs, ranges

    def _buffer_arg(self, kernel: Kernel, i: int, b: Any, access: Access) -> tuple[BufferArg, tuple[Allocation, int, int, bool]]:
        """Buffer argument ``i`` of ``kernel`` checked (type, declared access, device,
        host mappings): the native argument and the byte range it uses."""
        binding = as_binding(f"bindings[{i}]", b, access)
        if binding.access & access != access:
            _narrower(kernel, i, binding, access)
        self._check_device(f"bindings[{i}]", binding)
        view = binding.view
        alloc = view.buffer.allocation
        writes = binding.access.writes
        if alloc.host_maps or alloc.host_dirty:
            alloc.check_device_use(view.start, view.end, writes)
        return BufferArg(alloc.native, view.start, view.length, binding.access), (alloc, view.start, view.end, writes)

    def dispatch(
        self,
        kernel: Kernel,
        grid: int | Sequence[int],
        bindings: Sequence[Buffer | View | Binding],
        *,
        block: int | Sequence[int] = 1,
        scalars: Sequence[Any] = (),
    ) -> Completion:
        """Launch ``kernel`` over ``grid`` groups of ``block`` threads."""
        fast = self._fast_dispatch
        if fast:
            # the compiled dispatch (hrx_core.fastpath.Dispatcher): whole buffers, plain
            # geometry, a loaded kernel, the queue free; None: it did nothing
            completion: Completion | None = fast(self, kernel, grid, bindings, block, scalars)
            if completion is not None:
                return completion
        limits = self._limits
        g = _DIMS.get(("grid", grid, limits.max_grid)) if type(grid) is int else None
        if g is None:
            g = _dims("grid", grid, limits.max_grid)
        b = _DIMS.get(("block", block, limits.max_block)) if type(block) is int else None
        if b is None:
            b = _dims("block", block, limits.max_block)
        if b[0] * b[1] * b[2] > limits.max_threads_per_block:
            raise InvalidArgument(f"block: {b} has more than {limits.max_threads_per_block} threads")
        args, allocs, ranges = self._dispatch_args(kernel, bindings, scalars)
        if "dispatch" not in self._operations:
            self._check_family("dispatch")
        exe = kernel._executables.get(id(self.device)) or kernel.executable(self.device)
        if exe.unloaded:
            _unloaded(kernel)
        slot = self.slot
        queue = slot._native or slot.native
        with slot.lock:
            if slot.closed:
                raise InvalidArgument(f"{slot.name}: device is closed")
            queue.dispatch(exe, g, b, args)
            if queue.needs_submit:
                queue.submit()
            for alloc in allocs:
                alloc.retain()
            value, done = slot.commit_locked(allocs)
        if done:
            slot.release_retired(done)
        if fast is False:  # the first dispatch made the native queue: compile the next ones
            self._make_fast_dispatch()
        return self._dispatched(value, ranges)

    def _make_fast_dispatch(self) -> None:
        """Make the stream's compiled dispatch where it can be built (see
        :mod:`hrx_core.fastpath`); None (the Python path only) where not. The engine's
        queue launches through C where it offers :meth:`NativeQueue.fast_dispatch`,
        else the dispatcher calls its Python ``dispatch``."""
        self._fast_dispatch = None
        slot = self.slot
        queue = slot._native
        if queue is None or "dispatch" not in self._operations:
            return
        from . import fastpath

        mod = fastpath.module()
        if not mod.compiled:
            return
        entry = queue.fast_dispatch()
        address, argument, on_failure, keep, address_attr = entry if entry is not None else (0, 0, None, None, "")
        limits = self._limits
        self._fast_dispatch = mod.lib.Dispatcher(
            slot, self.device, self.device.stats, Kernel, Buffer, BufferArg, queue.dispatch, on_failure,
            address, argument, keep, address_attr, limits.max_grid, limits.max_block, limits.max_threads_per_block,
        )

    def _dispatched(self, value: int, ranges: Sequence[tuple[Allocation, int, int, bool]]) -> Completion:
        """The completion of a dispatch at ``value``; notes its buffer uses."""
        completion = self._last
        if completion is None or completion.value != value:
            completion = self._done(value)
        for alloc, start, end, writes in ranges:
            alloc.note_use(completion, start, end, writes)
        self.device.stats.dispatches += 1
        return completion

    def prepare(
        self,
        kernel: Kernel,
        grid: int | Sequence[int],
        bindings: Sequence[Buffer | View | Binding],
        *,
        block: int | Sequence[int] = 1,
        scalars: Sequence[Any] = (),
    ) -> PreparedLaunch:
        """Validate and pack a dispatch once; ``launch()`` it repeatedly at low cost."""
        limits = self.device.info.limits
        g = _dims("grid", grid, limits.max_grid)
        b = _dims("block", block, limits.max_block)
        if b[0] * b[1] * b[2] > limits.max_threads_per_block:
            raise InvalidArgument(f"block: {b} has more than {limits.max_threads_per_block} threads")
        args, _, ranges = self._dispatch_args(kernel, bindings, scalars)
        self._check_family("dispatch")
        exe = kernel.executable(self.device)
        native = self.device.native.prepare_dispatch(exe, g, b, args)
        return PreparedLaunch(self, kernel, native, ranges)

    # -- events and synchronization ---------------------------------------------

    def completion(self) -> Completion:
        """Completion of everything issued on this stream so far (its latest operation;
        already complete for a stream that issued nothing). Work of other streams that
        share the native queue is ordered before it but is not part of it."""
        last = self._last
        return last if last is not None else Completion(self.slot, 0)

    def record_event(self, *, timing: bool = False) -> Event:
        """An event that completes when everything issued so far on this stream has
        finished. With ``timing=True`` the queue also takes a timestamp there (engines
        that can time events), for :meth:`Event.elapsed_time`."""
        check_bool("timing", timing)
        if not timing:
            self.slot.flush()
            return Event(self.completion())
        stamps: list[NativeTimestamp] = []
        value = self.slot.encode(lambda q: stamps.append(q.timestamp()))
        completion = self._done(value)
        self.slot.flush()
        return Event(completion, stamps[0])

    def _event(self) -> Event:
        """``record_event()`` without timing, for the runtime's hot path."""
        self.slot.flush()
        last = self._last
        return Event(last if last is not None else Completion(self.slot, 0))

    def _mark(self, retain: Sequence[Any] = ()) -> Completion:
        """A no-op on this stream after native work a client enqueued on its queue
        directly (``native_queue()``), retaining ``retain`` until it retires; later
        completions and events of the stream cover that work."""
        return self._done(self.slot.encode(lambda q: None, retain))

    def wait_event(self, event: Event) -> None:
        """Later work on this stream starts after ``event`` (ordering across streams)."""
        if not isinstance(event, Event):
            raise InvalidArgument(f"event: expected an Event, got {type(event).__name__}")
        other = event.completion.slot
        if other.device is not self.device:
            event.completion.wait()  # across devices: a host completion check (raises its failure)
            return
        self._note_waited(event.completion)
        if other is self.slot:
            return  # one FIFO queue: already ordered
        other.flush()
        timeline, value = other.timeline, event.completion.value
        if timeline.completed() >= value:
            return
        self.slot.encode(lambda q: q.wait(timeline, value))

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for everything issued on this stream; raise the first failure not yet
        reported (by an earlier synchronize or download) and forget the others."""
        drain_at_entry()  # finalizers' closes queued in a collection (hrx_core.finalize)
        with self._transfer_lock:
            self.slot.completion().wait_quiet(timeout)
            self.slot.settle(timeout)  # releases a completion callback's thread is making
            timeline = self.slot.timeline
            values, start, self._values, self._reported = self._values, self._reported, [], 0
            for v in values[start:]:
                error = timeline.error(v)
                if error is not None:
                    self._waited = []  # one failure per synchronize; this one says more
                    Completion(self.slot, v)._raise_failure()
            self._report_waited()

    def _forget_failures(self) -> None:
        """Treat the failures of work issued so far as reported elsewhere (the runtime
        reports its regions' failures through their submissions). The compiled
        resubmission does the same in C (``forget_failures`` in hrx_core.fastpath)."""
        self._reported = len(self._values)
        self._waited = []

    def _note_waited(self, completion: Completion) -> None:
        waited = self._waited
        if len(waited) >= 64:  # bounded: forget waits that finished cleanly
            waited[:] = [c for c in waited if not c.done_now() or c.slot.timeline.error(c.value) is not None]
        waited.append(completion)

    def _report_waited(self) -> None:
        """Raise (once) the failure of finished work this stream waited for: work issued
        here after the wait consumed what the failed work should have produced."""
        if not self._waited:
            return
        keep: list[Completion] = []
        failed: tuple[Completion, BaseException] | None = None
        for c in self._waited:
            if not c.done_now():
                keep.append(c)
                continue
            error = c.slot.timeline.error(c.value)
            if error is not None and failed is None:
                failed = (c, error)
        self._waited = keep
        if failed is not None:
            c, error = failed
            raise DeviceError(
                f"{self.slot.name}: waited for work on {c.slot.name} (value {c.value}) that failed "
                f"({type(error).__name__}: {error}); work issued here after the wait may have read stale data"
            ) from error

    def _first_failure_after(self, value: int) -> int | None:
        """The first value after ``value`` at which this stream's (complete) work failed."""
        timeline = self.slot.timeline
        return next((v for v in self._values if v > value and timeline.error(v) is not None), None)

    def _report_failures(self, upto: int) -> None:
        """Raise the first failure of this stream's work up to value ``upto`` (all of it
        complete) that no download or synchronize reported yet; each is raised once."""
        values = self._values
        i, n = self._reported, len(values)
        if i >= n:
            return
        timeline = self.slot.timeline
        while i < n and values[i] <= upto:
            v = values[i]
            i += 1
            if timeline.error(v) is not None:
                self._reported = i
                Completion(self.slot, v)._raise_failure()
        self._reported = i

    # -- staged transfers -------------------------------------------------------

    def _ring(self) -> StagingRing:
        if self._staging is None:
            self._staging = StagingRing(self.device, budget=self._budget)
        return self._staging

    @property
    def staging_bytes(self) -> int:
        """Bytes of staging memory this stream holds."""
        return 0 if self._staging is None else self._staging.nbytes

    def upload(self, dst: Buffer | View | Binding, data: Any) -> Completion:
        """Copy host bytes to ``dst`` through bounded staging chunks (<= 64 MiB each).

        Returns after the last chunk is submitted; the host data may be reused at
        once. If a submission fails after some chunks were accepted, those chunks
        stay on this stream's timeline and may still modify the destination.
        """
        da, start, src = self._upload_target(dst, data)
        with self._transfer_lock:
            if self.device.info.host_memory:
                done = self._upload_now(da, start, src)
                if done is not None:
                    return done
            return self._upload_locked([(da, start, src.nbytes, functools.partial(_copy_fill, src))])

    def _upload_now(self, da: Allocation, start: int, src: np.ndarray) -> Completion | None:
        """Devices whose buffers are plain host memory (``DeviceInfo.host_memory``):
        copy ``src`` into the destination on this thread if everything encoded on this
        stream's queue has finished (under the queue's lock, so nothing is encoded
        meanwhile), which is where the queued copy would run; returns a complete
        completion, or None (work is pending: the staged path orders after it)."""
        slot = self.slot
        timeline = slot._timeline or slot.timeline
        done: Sequence[Any] = ()
        try:
            with slot.lock:
                if slot.closed:
                    raise InvalidArgument(f"{slot.name}: device is closed")
                if slot.unsignaled_ops:
                    done = slot._flush_locked()  # owners of finished work: released below
                if timeline.completed() < slot.signaled:
                    return None
                view = da.native.host_view()
                if view is None:
                    return None
                np.copyto(view[start : start + src.nbytes], src, casting="no")
        finally:
            if done:
                slot.release_retired(done)
        self.device.stats.upload_bytes += src.nbytes
        return Completion(slot, 0)

    def upload_file(self, dst: Buffer | View | Binding, file: Any, offset: int = 0, nbytes: int | None = None) -> Completion:
        """Copy ``nbytes`` of a file (a path, a file descriptor or an open binary file)
        from byte ``offset`` into ``dst`` through the staging chunks.

        The copy threads ``pread`` straight into the pinned chunks, so only the byte
        range asked for is read and no memory mapping of the file is faulted in.
        ``nbytes`` defaults to the rest of the file. Returns like :meth:`upload`.
        """
        return self.upload_file_ranges(file, [(dst, offset, nbytes)])

    def upload_file_ranges(self, file: Any, ranges: Sequence[tuple[Buffer | View | Binding, int, int | None]]) -> Completion:
        """:meth:`upload_file` of several ``(dst, offset, nbytes)`` ranges of one file
        through one staging pipeline: the copy threads read the next ranges while the
        queue moves the earlier ones (loading many tensors of a checkpoint). Every
        range is validated before anything is read. Returns the completion of the last.
        """
        if isinstance(ranges, (str, bytes)) or not isinstance(ranges, Sequence) or not ranges:
            raise InvalidArgument("ranges: expected a nonempty list of (dst, offset, nbytes)")
        with _open_file(file) as fd:
            size = os.fstat(fd).st_size
            segments = []
            for i, item in enumerate(ranges):
                if not isinstance(item, (tuple, list)) or len(item) != 3:
                    raise InvalidArgument(f"ranges[{i}]: expected (dst, offset, nbytes), got {show(item)}")
                dst, offset, nbytes = item
                where = "" if len(ranges) == 1 else f"ranges[{i}]: "
                d = self._writable(f"{where}dst", dst)
                check_int(f"{where}offset", offset)
                if nbytes is not None:
                    check_int(f"{where}nbytes", nbytes)
                if offset > size:
                    raise OutOfBounds(f"{where}offset: {offset} is beyond the end of the {size}-byte file")
                n = size - offset if nbytes is None else nbytes
                if offset + n > size:
                    raise OutOfBounds(f"{where}nbytes: [{offset}, {offset + n}) runs past the end of the {size}-byte file")
                da, start = self._fits(d, n, f"{where}upload_file")
                segments.append((da, start, n, functools.partial(_pread_fill, fd, offset)))
            self._check_family("copy")
            with self._transfer_lock:
                try:
                    return self._upload_locked(segments)
                except EOFError as exc:  # the file shrank under us
                    raise OutOfBounds(f"file: {exc}") from None

    def _upload_target(self, dst: Buffer | View | Binding, data: Any) -> tuple[Allocation, int, np.ndarray]:
        """Validate an upload: (allocation, first byte, flat host bytes)."""
        d = self._writable("dst", dst)
        src = transfer.host_bytes("data", data)
        da, start = self._fits(d, src.nbytes, "upload")
        self._check_family("copy")
        return da, start, src

    def _writable(self, name: str, dst: Buffer | View | Binding) -> Binding:
        """``dst`` as a binding of this device that may be written."""
        d = as_binding(name, dst, Access.WRITE)
        self._check_device(name, d)
        if not d.access & Access.WRITE:
            raise InvalidArgument(f"{name}: binding is declared read-only")
        return d

    @staticmethod
    def _fits(d: Binding, n: int, what: str) -> tuple[Allocation, int]:
        """(allocation, first byte) of ``n`` bytes written at ``d``, checked against its
        length and any host mapping of those bytes."""
        dv = d.view
        if n > dv.length:
            raise OutOfBounds(f"{what}: {n} bytes do not fit the {dv.length}-byte destination")
        da = dv.buffer.allocation
        if da.host_maps or da.host_dirty:
            da.check_device_use(dv.start, dv.start + n, True)
        return da, dv.start

    def _upload_locked(self, segments: Sequence[tuple[Allocation, int, int, Callable[[np.ndarray, int], list[Any]]]]) -> Completion:
        """Move ``(allocation, first byte, nbytes, fill)`` segments through the staging
        ring, pipelined across segments: the copy threads fill up to count-1 chunks
        while the queue moves the oldest filled one. ``fill(chunk_host, source_offset)``
        starts filling a chunk and returns the futures to wait for."""
        ring = self._ring()
        completion: Completion | None = None
        depth = max(1, ring.count - 1)
        filling: list[tuple[Any, Allocation, int, int, list[Any]]] = []

        def send(chunk: Any, da: Allocation, dst_off: int, length: int, futures: list[Any]) -> Completion:
            try:
                wait_all(futures)
            finally:
                chunk.leased = False
            cn, dn = chunk.buffer.allocation.native, da.native

            def encode(q: NativeQueue) -> None:
                q.copy(cn, 0, dn, dst_off, length)

            value = self.slot.encode(encode, (da.retain(),))
            done = self._done(value)
            chunk.completion = done
            da.note_use(done, dst_off, dst_off + length, True)
            self.device.stats.upload_bytes += length
            return done

        try:
            for da, start, n, fill in segments:
                for off in range(0, n, MAX_CHUNK_BYTES):
                    length = min(MAX_CHUNK_BYTES, n - off)
                    chunk = ring.acquire(length)
                    chunk.leased = True
                    filling.append((chunk, da, start + off, length, fill(chunk.host[:length], off)))
                    if len(filling) >= depth:
                        completion = send(*filling.pop(0))
            while filling:
                completion = send(*filling.pop(0))
        finally:
            for chunk, *_, futures in filling:  # a failure: let the copy threads finish
                try:
                    wait_all(futures)
                except Exception:
                    pass
                chunk.leased = False
        self.slot.flush()
        return completion if completion is not None else self.completion()  # nothing to move

    def upload_blocking(self, dst: Buffer | View | Binding, data: Any, timeout: float | None = None) -> None:
        """``upload`` and wait for the final chunk.

        Where the engine's queues read ordinary host memory directly (the host
        engine; unified-memory devices), the queue copies straight from ``data``
        instead: the call waits anyway, so no staging copy is needed.
        """
        timeout = check_timeout("timeout", timeout)  # before anything is submitted
        da, start, src = self._upload_target(dst, data)
        with self._transfer_lock:
            direct = self.device.native.wrap_host(src)
            if direct is None:
                completion = self._upload_locked([(da, start, src.nbytes, functools.partial(_copy_fill, src))])
            else:
                completion = self._direct(direct, 0, da, start, src.nbytes, writes_host=False)
                self.device.stats.upload_bytes += src.nbytes
        completion.wait(timeout)

    def _direct(self, host: Any, host_off: int, alloc: Allocation, start: int, n: int, *, writes_host: bool) -> Completion:
        """Copy between device memory and wrapped host memory, split to the limit."""
        limit = self.device.info.limits.max_transfer_bytes
        pieces = list(transfer.split(n, limit))
        dn = alloc.native

        def encode(q: NativeQueue) -> None:
            for off, length in pieces:
                if writes_host:
                    q.copy(dn, start + off, host, host_off + off, length)
                else:
                    q.copy(host, host_off + off, dn, start + off, length)

        value = self.slot.encode(encode, (alloc.retain(),))
        completion = self._done(value)
        alloc.note_use(completion, start, start + n, not writes_host)
        self.slot.flush()
        return completion

    def download(self, src: Buffer | View | Binding, out: np.ndarray | None = None) -> np.ndarray:
        """Copy device bytes into host memory (a new uint8 array, or ``out``) and return it."""
        s = as_binding("src", src, Access.READ)
        self._check_device("src", s)
        if not s.access & Access.READ:
            raise InvalidArgument("src: binding is declared write-only")
        sv = s.view
        n = sv.length
        if out is None:
            out = np.empty(n, dtype=np.uint8)
        elif not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
            raise InvalidArgument("out: expected a writable C-contiguous numpy array")
        elif out.nbytes != n:
            raise OutOfBounds(f"out: has {out.nbytes} bytes, the source has {n}")
        dst = out.reshape(-1).view(np.uint8)
        sa = sv.buffer.allocation
        if sa.host_maps or sa.host_dirty:
            sa.check_device_use(sv.start, sv.end, False)
        self._check_family("copy")
        direct = self.device.native.wrap_host(dst)
        with self._transfer_lock:
            if direct is not None:
                done = self._direct(direct, 0, sa, sv.start, n, writes_host=True)
                done.wait()
            else:
                done = self._download_locked(sa, sv.start, n, dst)
            # the bytes depend on everything before them on this stream, and on what it waited for
            self._report_failures(done.value)
            self._report_waited()
        self.device.stats.download_bytes += n
        return out

    def _download_locked(self, sa: Allocation, start: int, n: int, dst: np.ndarray) -> Completion:
        # Pipelined: the queue moves chunk i while the copy threads empty chunk i-1.
        ring = self._ring()
        sn = sa.native
        moving: tuple[Any, int, int] | None = None
        emptying: list[tuple[Any, list[Any]]] = []
        last: Completion | None = None

        def empty(chunk: Any, off: int, length: int) -> None:
            chunk.completion.wait()
            chunk.completion = None
            emptying.append((chunk, host_copy_async(dst[off : off + length], chunk.host[:length])))

        try:
            for off in range(0, n, MAX_CHUNK_BYTES):
                length = min(MAX_CHUNK_BYTES, n - off)
                while len(emptying) >= ring.count - 1:
                    chunk, futures = emptying.pop(0)
                    wait_all(futures)
                    chunk.leased = False
                chunk = ring.acquire(length)
                chunk.leased = True
                src_off = start + off

                def encode(q: NativeQueue, cn: Any = chunk.buffer.allocation.native, src_off: int = src_off, length: int = length) -> None:
                    q.copy(sn, src_off, cn, 0, length)

                try:
                    value = self.slot.encode(encode, (sa.retain(),))
                except BaseException:
                    chunk.leased = False
                    raise
                done = last = self._done(value)
                chunk.completion = done
                sa.note_use(done, src_off, src_off + length, False)
                self.slot.flush()
                if moving is not None:
                    empty(*moving)
                moving = (chunk, off, length)
            if moving is not None:
                empty(*moving)
                moving = None
            for chunk, futures in emptying:
                wait_all(futures)
        finally:
            if moving is not None:
                moving[0].leased = False
            for chunk, futures in emptying:
                try:
                    wait_all(futures)
                except Exception:
                    pass
                chunk.leased = False
        assert last is not None  # n >= 1: at least one chunk moved
        return last

    # -- graphs -----------------------------------------------------------------

    def graph(self) -> Graph:
        """Record a graph with explicit predecessor lists."""
        from .graph import Graph

        return Graph(self, inferred=False, owned=False)

    def access_graph(self) -> Graph:
        """Record a graph whose dependencies come from declared access and byte ranges."""
        from .graph import Graph

        return Graph(self, inferred=True, owned=False)

    def owned_graph(self, *, inferred: bool = True) -> Graph:
        """Like ``access_graph`` (or ``graph`` with ``inferred=False``), retaining every
        buffer, kernel and charge it binds through every replay."""
        from .graph import Graph

        return Graph(self, inferred=check_bool("inferred", inferred), owned=True)

    def close(self) -> None:
        """Wait for this stream's work and release its staging memory."""
        try:
            self.synchronize()
        finally:
            if self._staging is not None:
                self._staging.close()
                self._staging = None


@contextlib.contextmanager
def _open_file(file: Any) -> Iterator[int]:
    """A readable descriptor of a regular file for a path, a descriptor or an object
    with fileno() (FIFOs, devices and sockets are refused before anything is read)."""
    from .artifacts.files import kind_of, open_regular

    if isinstance(file, (str, bytes, os.PathLike)):
        try:
            fd, _ = open_regular(file, name="file")
        except ArtifactError as exc:
            raise InvalidArgument(f"file: {exc}") from None
        try:
            yield fd
        finally:
            os.close(fd)
        return
    if isinstance(file, (int, np.integer)) and not isinstance(file, (bool, np.bool_)):
        fd = int(file)
    elif hasattr(file, "fileno"):
        try:
            fd = file.fileno()
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise InvalidArgument(f"file: {type(file).__name__} has no usable descriptor ({exc})") from None
        if isinstance(fd, bool) or not isinstance(fd, int):
            raise InvalidArgument(f"file: {type(file).__name__}.fileno() returned {type(fd).__name__}")
    else:
        raise InvalidArgument(f"file: expected a path, a file descriptor or a binary file, got {type(file).__name__}")
    if not 0 <= fd < 2**31:
        raise InvalidArgument(f"file: {fd} is not a file descriptor")
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        raise InvalidArgument(f"file: descriptor {fd} is not open ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise InvalidArgument(f"file: descriptor {fd} is {kind_of(mode)}, not a regular file (only regular files are read)")
    yield fd


def _copy_fill(src: np.ndarray, host: np.ndarray, off: int) -> list[Any]:
    """Staging fill from host memory: bytes [off, off + len(host)) of ``src``."""
    return host_copy_async(host, src[off : off + host.nbytes])


def _pread_fill(fd: int, base: int, host: np.ndarray, off: int) -> list[Any]:
    """Staging fill from a file: bytes at ``base + off`` of descriptor ``fd``."""
    return file_read_async(host, fd, base + off)
