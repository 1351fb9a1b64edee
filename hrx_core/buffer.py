"""Buffers, views and bindings.

A :class:`Buffer` belongs to a device; every stream of that device can use it. A
:class:`View` is a checked byte range of a buffer (views of views compose), and a
:class:`Binding` is a view with declared access (read, write or read_write), which
is what graphs and the runtime use to order work.

Native memory lives in an :class:`Allocation`, reference counted so that pending
work, owned graphs and pools keep it alive exactly as long as needed.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from .engine import Access, CacheOp, NativeBuffer
from .errors import AccessConflict, InvalidArgument, OutOfBounds, Unsupported, show
from .finalize import close_later_if_collecting

if TYPE_CHECKING:
    from .budget import Charge
    from .completion import Completion
    from .device import Device
    from .placement import Visibility


class Epoch:
    """A process-wide counter that moves whenever a validated launch could go stale.

    Launch records (:mod:`hrx_core.record`) validate their bound memory once and keep
    the epoch they saw; a launch whose record still holds the current value skips the
    per-allocation checks. Every change those checks depend on moves it *after* the
    change: a buffer handle closed, memory freed, a host mapping opened or closed,
    host writes left unflushed or flushed, a program unloaded (``Executable.unloaded``). Values are unique
    (``itertools.count``), so concurrent moves never cancel out.
    """

    __slots__ = ("value", "_count")

    def __init__(self) -> None:
        self._count = itertools.count(1)
        self.value = 0

    def bump(self) -> None:
        self.value = next(self._count)


#: The one epoch of this process.
EPOCH = Epoch()


def check_int(name: str, value: Any, *, minimum: int = 0) -> int:
    """Validate a non-negative (or >= minimum) integer argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name}: expected an int, got {type(value).__name__} {show(value)}")
    number = int(value)
    if number < minimum:
        raise InvalidArgument(f"{name}: must be >= {minimum}, got {number}")
    return number


class Allocation:
    """One native allocation, its charge and the bookkeeping guards need.

    ``refs`` counts owners (the buffer handle, pending work, owned graphs, pools);
    the native memory is freed and the budget charge released when it reaches 0.
    """

    __slots__ = (
        "device",
        "native",
        "nbytes",
        "shared",
        "external",
        "_refs",
        "_lock",
        "freed",
        "charge",
        "pending",
        "host_maps",
        "device_dirty",
        "host_dirty",
        "quarantined",
        "on_free",
        "records",
        "dropped",
        "__weakref__",
    )

    def __init__(
        self,
        device: Device,
        native: NativeBuffer,
        nbytes: int,
        *,
        shared: bool,
        charge: Charge | None = None,
        external: Any = None,
    ) -> None:
        self.device = device
        self.native = native
        self.nbytes = nbytes
        self.shared = shared
        self.external = external
        self._refs = 1
        self._lock = threading.RLock()  # reentrant: __del__ of another handle may run inside
        self.freed = False
        self.charge = charge
        # Pending device use per queue: [completion, start, end, writes]. Queues are
        # FIFO, so the latest completion on a queue covers earlier uses on it; ranges
        # of uses still pending are merged (conservative, bounded by the queue count).
        self.pending: dict[Any, list[Any]] = {}
        # Active host mappings: [start, end, writes].
        self.host_maps: list[tuple[int, int, bool]] = []
        # Cache-control protocol for ordinary (non-coherent) buffers.
        self.device_dirty = False
        self.host_dirty = False
        # > 0 while a runtime holds this allocation in quarantine (pools skip it)
        self.quarantined = 0
        # called with the allocation once its native memory is freed (runtime tracking)
        self.on_free: list[Any] = []
        # launch records that bind this memory -> (start, end, writes) over their uses;
        # their latest launches count as pending device use (aliases share the dict)
        self.records: dict[Any, tuple[int, int, bool]] = {}
        # every owner let go; memory waits only for launches in flight (records refuse it)
        self.dropped = False

    @property
    def refs(self) -> int:
        return self._refs

    def retain(self) -> Allocation:
        with self._lock:
            if self.freed:
                raise InvalidArgument("buffer memory was already freed")
            self._refs += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            if self._refs > 0 or self.freed:
                return
            if self.records:
                # launch records do not retain per launch: their launches in flight
                # hold the memory instead (each queue releases one reference when the
                # launch retires); records refuse it from now on
                self._refs += 1
                self.dropped = True
            else:
                self.freed = True
        if not self.freed:
            EPOCH.bump()
            self._release_after_records()
            return
        self._free_native()

    def _release_after_records(self) -> None:
        """The last owner let go while launch records bind this memory: hand one
        reference per queue with launches in flight to that queue's retirement, then
        free once none is left (the reference release() kept is dropped here)."""
        from .record import inflight_launches

        inflight = inflight_launches(self)
        with self._lock:
            self._refs += len(inflight) - 1
            if self._refs > 0 or self.freed:
                free = False
            else:
                self.freed = free = True
        for slot, value in inflight:
            slot.retain_until(value, self)
        if free:
            self._free_native()

    def _free_native(self) -> None:
        EPOCH.bump()
        try:
            self.native.free()
        finally:
            if self.charge is not None:
                self.charge.release()
                self.charge = None
            self.device._allocation_freed(self)
            for callback in self.on_free:
                callback(self)
            self.on_free = []

    # -- pending device use (host mapping guards, pool reuse) -------------------

    def note_use(self, completion: Completion, start: int, end: int, writes: bool) -> None:
        slot = completion.slot
        entry = self.pending.get(slot)
        if entry is not None and entry[1] <= start and end <= entry[2] and (entry[3] or not writes):
            entry[0] = completion  # the common replay case: same bytes, later work
            if writes:
                self.device_dirty = True
            return
        if entry is None or entry[0].done_now():
            self.pending[slot] = [completion, start, end, writes]
        else:
            entry[0] = completion
            if start < entry[1]:
                entry[1] = start
            if end > entry[2]:
                entry[2] = end
            entry[3] = entry[3] or writes
        if writes:
            self.device_dirty = True

    def pending_uses(self) -> list[tuple[Completion, int, int, bool]]:
        """(completion, start, end, writes) of device work not known to be finished:
        dynamic work noted per use, and the latest launches of the records binding it."""
        live = [(c, s, e, w) for c, s, e, w in list(self.pending.values()) if not c.is_complete]
        if len(live) != len(self.pending):
            for key in [k for k, v in list(self.pending.items()) if v[0].is_complete]:
                self.pending.pop(key, None)
        if self.records:
            for record, (s, e, w) in list(self.records.items()):
                for c in list(record.last.values()):
                    if not c.is_complete:
                        live.append((c, s, e, w))
        return live

    def busy(self, start: int = 0, end: int | None = None, *, host_writes: bool = True) -> bool:
        """True if pending device work conflicts with host access to [start, end)."""
        end = self.nbytes if end is None else end
        return any(s < end and start < e and (host_writes or w) for _, s, e, w in self.pending_uses())

    def check_device_use(self, start: int, end: int, writes: bool) -> None:
        """Reject device use of bytes that a live host mapping conflicts with."""
        for s, e, w in self.host_maps:
            if s < end and start < e and (w or writes):
                raise AccessConflict(
                    f"bytes [{start}, {end}) are mapped for the host "
                    f"({'read_write' if w else 'read'}) over [{s}, {e}); close the mapping first"
                )
        if self.host_dirty:
            raise InvalidArgument(
                "buffer was written through a host mapping without "
                "cache_control(CacheOp.FLUSH); flush before device use"
            )


def backing_of(alloc: Allocation) -> Allocation:
    """The allocation that owns the backing (itself, or an alias's original).
    Hazard tracking and overlap checks key on it, so an alias and its original are one."""
    origin = getattr(alloc, "origin", None)
    return alloc if origin is None else origin


class Buffer:
    """Device memory. Use :meth:`binding`, :meth:`slice` or :meth:`view` to bind it."""

    __slots__ = ("device", "_alloc", "_base", "nbytes", "_closed", "__weakref__")

    def __init__(self, device: Device, alloc: Allocation, base: int = 0, nbytes: int | None = None) -> None:
        self.device = device
        self._alloc = alloc
        self._base = base
        self.nbytes = alloc.nbytes - base if nbytes is None else nbytes
        self._closed = False

    # -- identity ---------------------------------------------------------------

    @property
    def allocation(self) -> Allocation:
        if self._closed:
            raise InvalidArgument("buffer is closed")
        return self._alloc

    @property
    def shared(self) -> bool:
        """True for coherent host-visible memory from ``allocate_shared``."""
        return self._alloc.shared

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        kind = "shared" if self._alloc.shared else "device"
        state = ", closed" if self._closed else ""
        return f"<hrx.Buffer {self.nbytes} bytes {kind} on {self.device.name}{state}>"

    # -- views and bindings -----------------------------------------------------

    def view(self) -> View:
        return View._make(self, 0, self.nbytes)

    def slice(self, offset: int, length: int) -> View:
        """The ``length`` bytes from ``offset`` (not a [start, stop) pair)."""
        return self.view().slice(offset, length)

    def binding(self) -> Binding:
        """Bind the whole buffer (read_write; narrow with .read() or .write())."""
        return Binding(self.view(), Access.READ_WRITE)

    # -- host access ------------------------------------------------------------

    @contextlib.contextmanager
    def map(self, access: Access | str = Access.READ_WRITE, offset: int = 0, length: int | None = None) -> Iterator[np.ndarray]:
        """Map bytes for direct host access; yields a uint8 numpy array.

        Shared buffers are coherent. Ordinary buffers (where the engine can map them)
        need :meth:`cache_control` with ``INVALIDATE`` before host reads of
        device-written data and ``FLUSH`` after host writes, before device use.
        A mapping that conflicts with pending device work raises AccessConflict; while
        the mapping is open, conflicting device use raises AccessConflict.
        """
        access = coerce_access(access)
        view = self.view() if length is None and offset == 0 else self.slice(offset, self.nbytes - offset if length is None else length)
        alloc = self.allocation
        host = alloc.native.host_view()
        if host is None:
            raise Unsupported(
                f"{self.device.name}: this buffer is not host-mappable; use stream.download/upload "
                "or allocate_shared for host-visible memory"
            )
        start, end = view.start, view.end
        if alloc.busy(start, end, host_writes=access.writes):
            raise AccessConflict(
                f"bytes [{start - self._base}, {end - self._base}) have pending device work; "
                "wait for its completion before mapping"
            )
        if not alloc.shared and (access & Access.READ) and alloc.device_dirty:
            raise InvalidArgument(
                "device wrote this ordinary buffer: call cache_control(CacheOp.INVALIDATE) "
                "before host reads (or map with access='write')"
            )
        entry = (start, end, access.writes)
        alloc.host_maps.append(entry)
        EPOCH.bump()
        array = host[start:end]
        if not access.writes:
            array = array.view()
            array.flags.writeable = False
        try:
            yield array
        finally:
            alloc.host_maps.remove(entry)
            if access.writes and not alloc.shared:
                alloc.host_dirty = True
            EPOCH.bump()

    def cache_control(self, op: CacheOp | str, offset: int = 0, length: int | None = None) -> None:
        """Host cache maintenance for direct host access to an ordinary buffer.

        ``INVALIDATE`` before host reads (after device writes); ``FLUSH`` after host
        writes (before device use). On shared (coherent) buffers it is a checked no-op.
        """
        try:
            op = CacheOp(op)
        except ValueError:
            raise InvalidArgument(f"op: expected 'invalidate' or 'flush', got {show(op)}") from None
        view = self.slice(offset, self.nbytes - offset if length is None else length)
        alloc = self.allocation
        if alloc.busy(view.start, view.end, host_writes=True):
            raise AccessConflict("cache_control on bytes with pending device work; wait for it first")
        if alloc.shared:
            return
        alloc.native.cache_control(op, view.start, view.length)
        if op is CacheOp.INVALIDATE:
            alloc.device_dirty = False
        else:
            alloc.host_dirty = False
            EPOCH.bump()

    def is_idle(self) -> bool:
        """True when no device work on this buffer is pending."""
        return not self.allocation.busy()

    def visibility(self, producer: Device | str, consumer: Device | str) -> Visibility:
        """Reach, release/acquire actions and atomic scopes of this buffer's backing
        from ``producer`` to ``consumer`` (devices or "host"); see hrx_core.placement."""
        from .placement import visibility

        return visibility(self, producer, consumer)

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Drop this handle. Memory is freed once pending work and owned graphs let go."""
        if not self._closed:
            self._closed = True
            EPOCH.bump()  # graphs that borrow this handle refuse to launch now
            self._alloc.release()

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            # (inside a garbage collection: closed at the next safe point, see
            # hrx_core.finalize)
            if not self._closed and not close_later_if_collecting(self.close):
                self.close()
        except Exception:
            pass

    # -- interop ------------------------------------------------------------------

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.view().__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.view().__dlpack__(**kwargs)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self.view().__cuda_array_interface__


class View:
    """A checked byte range ``[offset, offset + length)`` of a buffer."""

    __slots__ = ("buffer", "offset", "length", "__weakref__")

    def __init__(self, buffer: Buffer, offset: int, length: int) -> None:
        if not isinstance(buffer, Buffer):
            raise InvalidArgument(f"buffer: expected an hrx Buffer, got {type(buffer).__name__}")
        offset = check_int("offset", offset)
        length = check_int("length", length, minimum=1)
        if offset + length > buffer.nbytes:
            raise OutOfBounds(f"View(offset={offset}, length={length}) ends past the {buffer.nbytes}-byte buffer")
        self.buffer = buffer
        self.offset = offset
        self.length = length

    @classmethod
    def _make(cls, buffer: Buffer, offset: int, length: int) -> View:
        """A view whose range the caller already checked."""
        view = object.__new__(cls)
        view.buffer = buffer
        view.offset = offset
        view.length = length
        return view

    @property
    def start(self) -> int:
        """Offset inside the allocation."""
        return self.buffer._base + self.offset

    @property
    def end(self) -> int:
        return self.buffer._base + self.offset + self.length

    def slice(self, offset: int, length: int) -> View:
        """A subrange of this view; raises OutOfBounds if it does not fit or is empty."""
        offset = check_int("offset", offset)
        length = check_int("length", length)
        if length == 0:
            raise OutOfBounds("length: ranges must be nonempty, got 0")
        if offset + length > self.length:
            raise OutOfBounds(
                f"slice(offset={offset}, length={length}) ends at {offset + length}, "
                f"past the {self.length}-byte view"
            )
        return View._make(self.buffer, self.offset + offset, length)

    def binding(self) -> Binding:
        return Binding(self, Access.READ_WRITE)

    def read(self) -> Binding:
        return Binding(self, Access.READ)

    def write(self) -> Binding:
        return Binding(self, Access.WRITE)

    def read_write(self) -> Binding:
        return Binding(self, Access.READ_WRITE)

    def __repr__(self) -> str:
        # offset/length as slice() takes them; the half-open byte range after them
        end = self.offset + self.length
        return f"<hrx.View offset={self.offset} length={self.length} (bytes [{self.offset}, {end})) of {self.buffer!r}>"

    # -- interop ------------------------------------------------------------------

    def __dlpack_device__(self) -> tuple[int, int]:
        from .interop import dlpack_device

        return dlpack_device(self)

    def __dlpack__(self, **kwargs: Any) -> Any:
        from .interop import to_dlpack

        return to_dlpack(self, **kwargs)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        from .interop import cuda_array_interface

        return cuda_array_interface(self)


class Binding:
    """A view with declared access. Graphs order work by these declarations."""

    __slots__ = ("view", "access")

    def __init__(self, view: View, access: Access | str) -> None:
        if not isinstance(view, View):
            raise InvalidArgument(f"view: expected an hrx View, got {type(view).__name__}")
        self.view = view
        self.access = access if type(access) is Access and access in _ACCESSES else coerce_access(access)

    def read(self) -> Binding:
        return Binding(self.view, Access.READ)

    def write(self) -> Binding:
        return Binding(self.view, Access.WRITE)

    def read_write(self) -> Binding:
        return Binding(self.view, Access.READ_WRITE)

    @property
    def buffer(self) -> Buffer:
        return self.view.buffer

    def __repr__(self) -> str:
        return f"<hrx.Binding {self.access.label} {self.view!r}>"


Bindable = Union[Buffer, View, Binding]
_ACCESSES = frozenset((Access.READ, Access.WRITE, Access.READ_WRITE))


def check_bool(name: str, value: Any) -> bool:
    """Validate a bool argument (not 0/1, not a numpy array)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgument(f"{name}: expected a bool, got {type(value).__name__} {show(value)}")
    return bool(value)


def check_str(name: str, value: Any, *, empty: bool = False) -> str:
    """Validate a str argument (nonempty unless ``empty``, without NUL bytes)."""
    if not isinstance(value, str) or (not empty and not value) or "\x00" in value:
        raise InvalidArgument(f"{name}: expected a {'' if empty else 'nonempty '}str, got {show(value)}")
    return value


def coerce_access(access: Access | str) -> Access:
    if isinstance(access, Access):
        if access not in (Access.READ, Access.WRITE, Access.READ_WRITE):
            raise InvalidArgument(f"access: expected read, write or read_write, got {show(access)}")
        return access
    names = {"read": Access.READ, "r": Access.READ, "write": Access.WRITE, "w": Access.WRITE,
             "read_write": Access.READ_WRITE, "rw": Access.READ_WRITE}
    if isinstance(access, str) and access in names:
        return names[access]
    raise InvalidArgument(f"access: expected 'read', 'write' or 'read_write', got {show(access)}")


def as_binding(name: str, value: Any, default: Access = Access.READ_WRITE) -> Binding:
    """Coerce a Buffer, View or Binding argument, checking it is usable."""
    if isinstance(value, Binding):
        binding = value
    elif isinstance(value, View):
        binding = Binding(value, default)
    elif isinstance(value, Buffer):
        binding = Binding(value.view(), default)
    else:
        raise InvalidArgument(f"{name}: expected a Buffer, View or Binding, got {type(value).__name__}")
    if binding.view.buffer.closed:
        raise InvalidArgument(f"{name}: buffer is closed")
    return binding
