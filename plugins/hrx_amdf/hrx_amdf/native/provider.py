"""``LibamdfProvider``: the :class:`~hrx_amdf.provider.Provider` interface over libamdf.

Every call goes through the negotiated API tables (:mod:`.library`). Each input
structure is zero-filled by cffi and given its ``type`` and ``structure_size`` (so
reserved fields are zero and extension chains empty); each output structure is given
its header before the call; every status goes through :func:`hrx_amdf.errors.check`
with the entry point's name.

Python arguments are checked before any native call: a wrong type, a value out of
range or an object that was already destroyed raises
:class:`hrx_core.errors.InvalidArgument` naming the argument, so bad input never
reaches libamdf (whose handle misuse is undefined behaviour).

libamdf leaves some lifetimes to its caller (memory before its devices, mappings
before their memory, command memory until its submission retires: "violating that
precondition is undefined behavior"). The binding keeps those rules itself: every
object records its live children, and destroying one that still has children raises
:class:`~hrx_amdf.errors.AmdfBusy` without calling libamdf.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
from hrx_core.errors import InvalidArgument

from .. import provider as api
from ..constants import (
    AddressKind,
    AtomicScope,
    CommandType,
    EngineKind,
    ExternalMemoryType,
    HostCacheability,
    HostCacheOperation,
    MapFlag,
    MemoryAccess,
    MemoryClass,
    MemoryFlag,
    NativeEventType,
    ProducerMode,
    ProfileRole,
    PublicationMode,
    QueuePriority,
    QueueRole,
    QueueState,
    ScopeKind,
    StatusCode,
    UserQueueCapability,
    XdnaArchitecture,
    XdnaSchedulingMode,
)
from ..errors import AmdfBusy, AmdfError, AmdfUnsupported, check, error_for, make_status
from .cdef import BINDING_CONSTANTS, STRUCTURE_TYPES, ffi
from .library import Library, load

_U32 = 2**32 - 1
_U64 = 2**64 - 1
_E = TypeVar("_E")

_PHYSICAL_COLUMN_ORIGIN_ANY = 0xFFFFFFFF
_PAIR_REACHABLE = BINDING_CONSTANTS["AMDF_MEMORY_PAIR_FLAG_SHARED_BACKING_REACHABLE"]
_SUPPORT_IMPORT = BINDING_CONSTANTS["AMDF_EXTERNAL_MEMORY_SUPPORT_FLAG_IMPORT"]
_SUPPORT_EXPORT = BINDING_CONSTANTS["AMDF_EXTERNAL_MEMORY_SUPPORT_FLAG_EXPORT"]
_SITE_DEVICE = BINDING_CONSTANTS["AMDF_MEMORY_SITE_KIND_DEVICE"]
_SITE_HOST = BINDING_CONSTANTS["AMDF_MEMORY_SITE_KIND_HOST"]
_READ_WRITE = MemoryAccess.READ | MemoryAccess.WRITE


# --------------------------------------------------------------------------- checks


def _int(name: str, value: Any, *, minimum: int = 0, maximum: int = _U64) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if not minimum <= value <= maximum:
        raise InvalidArgument(f"{name}: must be in [{minimum}, {maximum}], got {value}")
    return value


def _member(name: str, value: Any, enum_type: type[_E]) -> _E:
    """``value`` as a member of the IntEnum ``enum_type`` (InvalidArgument otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name}: expected a {enum_type.__name__}, got {type(value).__name__} {value!r}")
    try:
        return enum_type(int(value))  # type: ignore[call-arg]
    except ValueError:
        raise InvalidArgument(f"{name}: {value!r} is not a {enum_type.__name__}") from None


def _flags(name: str, value: Any, flag_type: type[_E], *, nonzero: bool = False) -> int:
    """``value`` as a bit set of ``flag_type`` (an IntFlag): only its defined bits."""
    bits = _int(name, value)
    known = 0
    for member in flag_type:  # type: ignore[attr-defined]
        known |= int(member)
    if bits & ~known:
        raise InvalidArgument(f"{name}: bits {bits & ~known:#x} are not {flag_type.__name__} flags")
    if nonzero and not bits:
        raise InvalidArgument(f"{name}: at least one {flag_type.__name__} flag is needed")
    return bits


def _power_of_two_or_zero(name: str, value: Any) -> int:
    value = _int(name, value)
    if value & (value - 1):
        raise InvalidArgument(f"{name}: must be zero or a power of two, got {value}")
    return value


def _range(name: str, offset: Any, nbytes: Any, limit: int) -> tuple[int, int]:
    """A non-empty byte range inside ``[0, limit)`` (``nbytes`` None: to the end)."""
    offset = _int(f"{name} offset", offset)
    if nbytes is None:
        nbytes = limit - offset
    nbytes = _int(f"{name} nbytes", nbytes, minimum=1)
    if offset + nbytes > limit:
        raise InvalidArgument(f"{name}: range [{offset}, {offset + nbytes}) exceeds the {limit} bytes")
    return offset, nbytes


def _known(enum_type: type[_E], value: int) -> _E | int:
    """A native enum value as ``enum_type`` when it names a member, else the raw int
    (a newer library may report values this binding does not know)."""
    try:
        return enum_type(value)  # type: ignore[call-arg]
    except ValueError:
        return value


def _as(name: str, value: Any, cls: type[_E]) -> _E:
    if not isinstance(value, cls):
        raise InvalidArgument(f"{name}: expected a libamdf {cls.__name__.removeprefix('Libamdf')}, got {value!r}")
    return value


def _id(field: Any) -> bytes:
    return bytes(ffi.buffer(ffi.addressof(field), 16))


def _text(chars: Any) -> str:
    return ffi.string(chars).decode("utf-8", "replace")


def _new(ctype: str, **fields: Any) -> Any:
    """A zero-filled ``ctype`` with its structure header set, then ``fields``."""
    made = ffi.new(f"{ctype} *")
    made.type = STRUCTURE_TYPES[ctype][1]
    made.structure_size = ffi.sizeof(ctype)
    for key, value in fields.items():
        setattr(made, key, value)
    return made


def _busy(call: str, what: str, children: Iterable[Any]) -> AmdfBusy:
    names = sorted({type(child).__name__.removeprefix("Libamdf") for child in children})
    return AmdfBusy(call, make_status(StatusCode.BUSY), f"{what} still has live {', '.join(names)}")


# --------------------------------------------------------------------------- plumbing


class _Native:
    """The tables and the lock one provider's objects share."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self.api = library.api
        self.gpu = library.gpu.table
        self.xdna = library.xdna.table
        self.lock = threading.RLock()

    def call(self, name: str, *args: Any) -> None:
        check(name, getattr(self.api, name)(*args))

    def ext(self, ext: str, name: str) -> Callable[..., int]:
        table = self.gpu if ext == "gpu" else self.xdna
        if table is None:
            reason = (self.library.gpu if ext == "gpu" else self.library.xdna).reason
            raise AmdfUnsupported(
                f"{ext}.{name}", make_status(StatusCode.UNSUPPORTED), f"the library has no {ext} extension: {reason}"
            )
        return getattr(table, name)

    def call_ext(self, ext: str, name: str, *args: Any) -> None:
        check(f"{ext}.{name}", self.ext(ext, name)(*args))

    def enumerate(self, call: str, fn: Callable[..., int], owner: Any, ctype: str) -> list[Any]:
        """The count/prefix protocol of libamdf's enumerations (a zero-capacity query
        may answer BUFFER_TOO_SMALL with the count; the set may grow between calls)."""
        too_small = make_status(StatusCode.BUFFER_TOO_SMALL)
        count = ffi.new("uint32_t *")
        capacity = 0
        items = ffi.NULL
        for _ in range(8):
            status = fn(owner, capacity, items, count)
            if status not in (0, too_small):
                check(call, status)
            if status == 0 and count[0] <= capacity:
                # Pointers are values; structs are copied out of the array we own.
                if ctype.endswith("*"):
                    return [items[i] for i in range(count[0])]
                return [ffi.new(f"{ctype} *", items[i]) for i in range(count[0])]
            capacity = max(int(count[0]), capacity + 1)
            items = ffi.new(f"{ctype}[]", capacity)
        raise error_for(call, too_small, "the count kept growing")


class _Node:
    """A native object: its handle (None once destroyed), parents and live children."""

    def __init__(self, native: _Native, handle: Any, parents: Sequence[_Node] = ()) -> None:
        self._native = native
        self._handle = handle
        self._parents = tuple(parents)
        self._children: set[_Node] = set()
        with native.lock:
            for parent in self._parents:
                parent._children.add(self)

    @property
    def destroyed(self) -> bool:
        return self._handle is None

    def _live(self, name: str = "self") -> Any:
        handle = self._handle
        if handle is None:
            raise InvalidArgument(f"{name}: this {type(self).__name__.removeprefix('Libamdf')} was destroyed")
        return handle

    def _busy_children(self) -> set[_Node]:
        return set(self._children)

    def _released(self) -> None:
        """Called once the native handle is gone (drop bookkeeping that refers to it)."""

    def _destroy(self, call: str, fn: Callable[[Any], int], *, consumed_on_failure: bool = False) -> None:
        """Destroy through ``fn`` unless children are live (AmdfBusy). Idempotent.

        ``consumed_on_failure``: libamdf consumes the handle on every result except an
        API-domain BUSY (memory, queues); otherwise a failure leaves it live."""
        with self._native.lock:
            if self._handle is None:
                return
            busy = self._busy_children()
            if busy:
                raise _busy(call, type(self).__name__.removeprefix("Libamdf"), busy)
            status = fn(self._handle)
            if status and not (consumed_on_failure and status != make_status(StatusCode.BUSY)):
                check(call, status)
            self._handle = None
            for parent in self._parents:
                parent._children.discard(self)
            self._released()
            check(call, status)


# --------------------------------------------------------------------------- memory


def _transition(native: Any) -> api.CacheTransition:
    return api.CacheTransition(
        kind=int(native.kind),
        executor=int(native.executor),
        operation=int(native.operation),
        host_operation=_known(HostCacheOperation, int(native.host_operation)),  # type: ignore[arg-type]
    )


def _address_bits(name: str, kinds: Any) -> int:
    if not isinstance(kinds, (set, frozenset, list, tuple)):
        raise InvalidArgument(f"{name}: expected a set of AddressKind, got {kinds!r}")
    bits = 0
    for kind in kinds:
        bits |= 1 << int(_member(name, kind, AddressKind))
    return bits


def _device_accesses(name: str, accesses: Any, native: _Native) -> tuple[Any, list[LibamdfDevice]]:
    """``amdf_memory_device_access_t[]`` (or NULL) for ``accesses`` and their devices."""
    if isinstance(accesses, (str, bytes)) or not isinstance(accesses, Sequence):
        raise InvalidArgument(f"{name}: expected a sequence of DeviceAccess, got {accesses!r}")
    devices: list[LibamdfDevice] = []
    for index, access in enumerate(accesses):
        where = f"{name}[{index}]"
        if not isinstance(access, api.DeviceAccess):
            raise InvalidArgument(f"{where}: expected a DeviceAccess, got {access!r}")
        device = _as(f"{where}.device", access.device, LibamdfDevice)
        device._live(f"{where}.device")
        if device._native is not native:
            raise InvalidArgument(f"{where}.device: belongs to another provider")
        if device in devices:
            raise InvalidArgument(f"{where}.device: listed twice (consumers are unique)")
        devices.append(device)
    if not devices:
        return ffi.NULL, devices
    array = ffi.new("amdf_memory_device_access_t[]", len(devices))
    for index, access in enumerate(accesses):
        where = f"{name}[{index}]"
        array[index].device = devices[index]._handle
        array[index].requirements.access = _flags(f"{where}.access", access.access, MemoryAccess)
        array[index].requirements.flags = _flags(f"{where}.flags", access.flags, MemoryFlag)
        array[index].requirements.address_kinds = _address_bits(f"{where}.address_kinds", access.address_kinds)
    return array, devices


def _profile(native: Any) -> api.MemoryProfile:
    roles = int(native.roles)
    if roles & ProfileRole.CREATE:
        construction = native.allocation
    elif roles & ProfileRole.REGISTER:
        construction = native.registration
    else:
        construction = getattr(native, "import")  # a C field named like a Python keyword
    imports: set[ExternalMemoryType] = set()
    exports: set[ExternalMemoryType] = set()
    count = min(int(native.external_memory_support_count), len(native.external_memory_support))
    for support in native.external_memory_support[0:count]:
        kind = _known(ExternalMemoryType, int(support.type))
        if not isinstance(kind, ExternalMemoryType):
            continue
        if support.flags & _SUPPORT_IMPORT:
            imports.add(kind)
        if support.flags & _SUPPORT_EXPORT:
            exports.add(kind)
    cacheability = (
        _known(HostCacheability, int(native.registration.registered_host_cacheability))
        if roles & ProfileRole.REGISTER
        else HostCacheability.UNKNOWN
    )
    return api.MemoryProfile(
        ordinal=int(native.ordinal),
        memory_class=_known(MemoryClass, int(native.memory_class)),  # type: ignore[arg-type]
        roles=ProfileRole(roles),
        guaranteed_flags=MemoryFlag(int(native.guaranteed_flags)),
        supported_flags=MemoryFlag(int(native.supported_flags)),
        maximum_bytes=int(construction.maximum_byte_length),
        granularity=int(construction.byte_length_granularity),
        minimum_alignment=int(construction.minimum_alignment),
        maximum_alignment=int(construction.maximum_alignment),
        host_cacheability=cacheability,  # type: ignore[arg-type]
        imports=frozenset(imports),
        exports=frozenset(exports),
    )


class LibamdfExternalMemory(api.ExternalMemory):
    """A move-owned ``amdf_external_memory_t`` (on Linux a dma-buf descriptor)."""

    def __init__(self, native: _Native, value: Any) -> None:
        self._native = native
        self._value = value
        self._lock = threading.Lock()
        self.type = _known(ExternalMemoryType, int(value.type))  # type: ignore[assignment]
        self.nbytes = int(value.byte_length)
        self.source_offset = int(value.source_byte_offset)

    @property
    def fd(self) -> int:
        """The file descriptor of a DMA_BUF_FD / OPAQUE_FD payload (-1 once consumed)."""
        if self._value is None:
            return -1
        return int(self._value.payload.file_descriptor)

    @property
    def consumed(self) -> bool:
        return self._value is None

    def _take(self, name: str) -> Any:
        if self._value is None:
            raise InvalidArgument(f"{name}: this ExternalMemory was already imported or released")
        return self._value

    def _consumed(self) -> None:
        self._value = None

    def release(self) -> None:
        with self._lock:
            value, self._value = self._value, None
        if value is not None:
            self._native.api.external_memory_release(value)


class LibamdfHostMapping(_Node, api.HostMapping):
    """``amdf_host_mapping_t``: ``array`` is a numpy uint8 view over the mapped bytes."""

    def __init__(self, native: _Native, handle: Any, memory: LibamdfMemory) -> None:
        super().__init__(native, handle, (memory,))
        self.memory = memory
        out = _new("amdf_host_mapping_info_t")
        native.call("host_mapping_query_info", handle, out)
        self.info = api.HostMappingInfo(
            flags=MapFlag(int(out.flags)),
            cacheability=_known(HostCacheability, int(out.cacheability)),  # type: ignore[arg-type]
            address=int(ffi.cast("uintptr_t", out.pointer)),
            offset=int(out.memory_byte_offset),
            nbytes=int(out.byte_length),
            cache_line_size=int(out.cache_line_size),
            flush=_transition(out.flush),
            invalidate=_transition(out.invalidate),
        )
        if out.pointer == ffi.NULL or not self.info.nbytes:
            self.array = np.zeros(0, dtype=np.uint8)
        else:
            self.array = _view(self.info.address, self.info.nbytes)
        if not self.info.flags & MapFlag.WRITE:
            self.array.flags.writeable = False

    def cache_control(self, operation: HostCacheOperation, offset: int, nbytes: int) -> None:
        handle = self._live()
        operation = _member("operation", operation, HostCacheOperation)
        offset = _int("offset", offset)
        nbytes = _int("nbytes", nbytes)
        if offset + nbytes > self.info.nbytes:
            raise InvalidArgument(
                f"cache_control: range [{offset}, {offset + nbytes}) exceeds the mapping's {self.info.nbytes} bytes"
            )
        self._native.call("host_mapping_cache_control", handle, int(operation), offset, nbytes)

    def destroy(self) -> None:
        self._destroy("host_mapping_destroy", self._native.api.host_mapping_destroy)


class LibamdfMemory(_Node, api.Memory):
    """``amdf_memory_t``: one backing with its device accesses (in request order)."""

    def __init__(self, native: _Native, handle: Any, parents: Sequence[_Node]) -> None:
        super().__init__(native, handle, parents)
        out = _new("amdf_memory_info_t")
        native.call("memory_query_info", handle, out)
        self.info = api.MemoryInfo(
            profile=int(out.memory_profile_ordinal),
            memory_class=_known(MemoryClass, int(out.memory_class)),  # type: ignore[arg-type]
            access_count=int(out.access_count),
            flags=MemoryFlag(int(out.flags)),
            nbytes=int(out.byte_length),
            alignment=int(out.alignment),
            native_bytes=int(out.native_allocation_byte_length),
        )
        self.physical_id = _id(out.physical_backing_id)
        #: Kernel queues whose pending submissions read this memory.
        self._users: set[LibamdfKernelQueue] = set()

    def _busy_children(self) -> set[_Node]:
        busy = set(self._children)
        for queue in list(self._users):
            if queue._pending_uses(self):
                busy.add(queue)
        return busy

    def _ordinal(self, name: str, ordinal: Any) -> int:
        ordinal = _int(name, ordinal, maximum=_U32)
        if ordinal >= self.info.access_count:
            raise InvalidArgument(f"{name}: {ordinal} is not below this memory's {self.info.access_count} accesses")
        return ordinal

    def address(self, access_ordinal: int = 0, kind: AddressKind = AddressKind.GPU) -> int:
        handle = self._live()
        ordinal = self._ordinal("access_ordinal", access_ordinal)
        kind = _member("kind", kind, AddressKind)
        out = ffi.new("uint64_t *")
        self._native.call("memory_query_address", handle, ordinal, int(kind), out)
        return int(out[0])

    def map(
        self, offset: int = 0, nbytes: int | None = None, flags: MapFlag = MapFlag.READ | MapFlag.WRITE
    ) -> LibamdfHostMapping:
        handle = self._live()
        offset, nbytes = _range("map", offset, nbytes, self.info.nbytes)
        bits = _flags("flags", flags, MapFlag, nonzero=True)
        info = _new("amdf_memory_map_info_t", byte_offset=offset, byte_length=nbytes, flags=bits)
        out = ffi.new("amdf_host_mapping_t **")
        with self._native.lock:
            self._native.call("memory_map", handle, info, out)
            try:
                return LibamdfHostMapping(self._native, out[0], self)
            except AmdfError:
                self._native.api.host_mapping_destroy(out[0])
                raise

    def export(
        self, type: ExternalMemoryType = ExternalMemoryType.DMA_BUF_FD, offset: int = 0, nbytes: int | None = None
    ) -> LibamdfExternalMemory:
        handle = self._live()
        kind = _member("type", type, ExternalMemoryType)
        if kind == ExternalMemoryType.NONE:
            raise InvalidArgument("type: NONE carries no payload")
        offset, nbytes = _range("export", offset, nbytes, self.info.nbytes)
        info = _new("amdf_memory_export_info_t", external_memory_type=int(kind), byte_offset=offset, byte_length=nbytes)
        value = ffi.new("amdf_external_memory_t *")
        self._native.call("memory_export", handle, info, value)
        return LibamdfExternalMemory(self._native, value)

    def _site(self, name: str, site: Any) -> Any:
        made = _new("amdf_memory_site_t")
        if isinstance(site, api.DeviceSite):
            memory = _as(f"{name}.memory", site.memory, LibamdfMemory)
            made.kind = _SITE_DEVICE
            made.value.device.memory = memory._live(f"{name}.memory")
            made.value.device.access_ordinal = memory._ordinal(f"{name}.access_ordinal", site.access_ordinal)
            made.value.device.queue_family_ordinal = _int(f"{name}.queue_family", site.queue_family, maximum=_U32)
        elif isinstance(site, api.HostSite):
            mapping = _as(f"{name}.mapping", site.mapping, LibamdfHostMapping)
            made.kind = _SITE_HOST
            made.value.host_mapping = mapping._live(f"{name}.mapping")
        else:
            raise InvalidArgument(f"{name}: expected a DeviceSite or HostSite, got {site!r}")
        return made

    def pair_info(
        self, producer: api.DeviceSite | api.HostSite, consumer: api.DeviceSite | api.HostSite
    ) -> api.PairInfo:
        self._live()
        made_producer = self._site("producer", producer)
        made_consumer = self._site("consumer", consumer)
        out = _new("amdf_memory_pair_info_t")
        self._native.call("memory_query_pair_info", made_producer, made_consumer, out)
        return api.PairInfo(
            reachable=bool(out.flags & _PAIR_REACHABLE),
            release=_transition(out.release),
            acquire=_transition(out.acquire),
            atomic_scope_32=_known(AtomicScope, int(out.atomic_reach.scope_32)),  # type: ignore[arg-type]
            atomic_scope_64=_known(AtomicScope, int(out.atomic_reach.scope_64)),  # type: ignore[arg-type]
        )

    def _released(self) -> None:
        for queue in list(self._users):
            queue._forget(self)
        self._users.clear()

    def destroy(self) -> None:
        self._destroy("memory_destroy", self._native.api.memory_destroy, consumed_on_failure=True)


class LibamdfMemoryScope(api.MemoryScope):
    """A borrowed ``amdf_memory_scope_t`` (valid while its owner lives).

    libamdf answers a profile for a set of consumers. ``info.profiles`` are the answers
    for this scope's natural consumers: its owning device for device and context
    scopes; for the instance's system scope every device of the provider that is live
    when ``info`` is read (then each alone, then none -- CPU-only -- for profiles the
    whole set cannot share). :meth:`profile_for` answers for an exact access list."""

    def __init__(
        self, native: _Native, handle: Any, owner: _Node, consumers: Callable[[], list[LibamdfDevice]]
    ) -> None:
        self._native = native
        self._handle = handle
        self._owner = owner
        self._consumers = consumers
        self._cached: tuple[tuple[int, ...], api.ScopeInfo] | None = None

    def _live(self) -> Any:
        self._owner._live("scope owner")
        return self._handle

    def _query_profile(self, ordinal: int, accesses: Any, count: int) -> api.MemoryProfile:
        out = _new("amdf_memory_profile_t")
        caps = ffi.new("amdf_memory_access_capabilities_t[]", max(count, 1))
        for cap in caps:
            cap.type = STRUCTURE_TYPES["amdf_memory_access_capabilities_t"][1]
            cap.structure_size = ffi.sizeof("amdf_memory_access_capabilities_t")
        caps_arg = caps if count else ffi.NULL
        self._native.call("memory_scope_query_device_profile", self._handle, ordinal, count, accesses, out, caps_arg)
        return _profile(out)

    def profile_for(self, ordinal: int, accesses: Sequence[api.DeviceAccess]) -> api.MemoryProfile:
        """The profile ``ordinal`` for exactly ``accesses`` (``memory_scope_query_device_profile``)."""
        self._live()
        ordinal = _int("ordinal", ordinal, maximum=_U32)
        array, devices = _device_accesses("accesses", accesses, self._native)
        return self._query_profile(ordinal, array, len(devices))

    def _answer(self, ordinal: int, consumers: list[LibamdfDevice]) -> api.MemoryProfile | None:
        sets = [consumers] + ([[device] for device in consumers] if len(consumers) > 1 else [])
        sets.append([])
        unsupported = (make_status(StatusCode.UNSUPPORTED), make_status(StatusCode.NOT_FOUND))
        for devices in sets:
            for access in (_READ_WRITE, _READ_WRITE | MemoryAccess.EXECUTE):
                asked = [api.DeviceAccess(device, access, address_kinds=frozenset()) for device in devices]
                array, _ = _device_accesses("accesses", asked, self._native)
                try:
                    return self._query_profile(ordinal, array, len(devices))
                except AmdfError as exc:
                    if exc.status not in unsupported:
                        raise
                if not devices:
                    break
        return None

    @property
    def info(self) -> api.ScopeInfo:  # type: ignore[override]
        handle = self._live()
        consumers = [device for device in self._consumers() if not device.destroyed]
        key = tuple(id(device) for device in consumers)
        cached = self._cached
        if cached is not None and cached[0] == key:
            return cached[1]
        out = _new("amdf_memory_scope_info_t")
        self._native.call("memory_scope_query_info", handle, out)
        profiles = []
        for ordinal in range(int(out.memory_profile_count)):
            found = self._answer(ordinal, consumers)
            if found is not None:
                profiles.append(found)
        info = api.ScopeInfo(
            kind=_known(ScopeKind, int(out.kind)),  # type: ignore[arg-type]
            physical_endpoint_id=_id(out.physical_endpoint_id),
            profiles=tuple(profiles),
        )
        self._cached = (key, info)
        return info

    def _parents(self, devices: list[LibamdfDevice]) -> list[_Node]:
        parents: list[_Node] = list(devices)
        if not any(parent is self._owner for parent in parents):
            parents.append(self._owner)
        return parents

    def create(
        self,
        nbytes: int,
        *,
        profile: int,
        accesses: Sequence[api.DeviceAccess],
        flags: MemoryFlag = MemoryFlag(0),
        alignment: int = 0,
    ) -> LibamdfMemory:
        handle = self._live()
        nbytes = _int("nbytes", nbytes, minimum=1)
        profile = _int("profile", profile, maximum=_U32)
        required = _flags("flags", flags, MemoryFlag)
        alignment = _power_of_two_or_zero("alignment", alignment)
        array, devices = _device_accesses("accesses", accesses, self._native)
        info = _new(
            "amdf_memory_create_info_t",
            memory_profile_ordinal=profile,
            access_count=len(devices),
            required_flags=required,
            byte_length=nbytes,
            minimum_alignment=alignment,
            accesses=array,
        )
        out = ffi.new("amdf_memory_t **")
        with self._native.lock:
            self._native.call("memory_create", handle, info, out)
            return self._adopt(out[0], devices)

    def _adopt(self, handle: Any, devices: list[LibamdfDevice]) -> LibamdfMemory:
        try:
            return LibamdfMemory(self._native, handle, self._parents(devices))
        except AmdfError:
            self._native.api.memory_destroy(handle)
            raise

    def import_memory(
        self,
        external: api.ExternalMemory,
        *,
        profile: int,
        accesses: Sequence[api.DeviceAccess],
        flags: MemoryFlag = MemoryFlag(0),
    ) -> LibamdfMemory:
        handle = self._live()
        external = _as("external", external, LibamdfExternalMemory)
        if external._native is not self._native:
            raise InvalidArgument("external: exported by another provider")
        profile = _int("profile", profile, maximum=_U32)
        required = _flags("flags", flags, MemoryFlag)
        array, devices = _device_accesses("accesses", accesses, self._native)
        info = _new(
            "amdf_memory_import_info_t",
            memory_profile_ordinal=profile,
            access_count=len(devices),
            required_flags=required,
            accesses=array,
        )
        out = ffi.new("amdf_memory_t **")
        with self._native.lock, external._lock:
            value = external._take("external")
            self._native.call("memory_import", handle, info, value, out)
            external._consumed()
            return self._adopt(out[0], devices)


# --------------------------------------------------------------------------- queues


def _kernel_status(out: Any) -> api.KernelQueueStatus:
    return api.KernelQueueStatus(
        retired_submission=int(out.retired_submission),
        state=_known(QueueState, int(out.state)),  # type: ignore[arg-type]
        terminal=int(out.terminal_status),
    )


class LibamdfKernelQueue(_Node, api.KernelQueue):
    """``amdf_kernel_queue_t`` of a GPU device (PM4/SDMA) or an XDNA context."""

    def __init__(self, native: _Native, handle: Any, parent: _Node, ext: str) -> None:
        super().__init__(native, handle, (parent,))
        self._ext = ext
        self._retired = 0
        #: (completion point, memories its commands read), oldest first.
        self._pending: list[tuple[int, tuple[LibamdfMemory, ...]]] = []
        out = _new("amdf_kernel_queue_info_t")
        native.call("kernel_queue_query_info", handle, out)
        self.info = api.KernelQueueInfo(
            family=int(out.queue_family_ordinal),
            command_type=_known(CommandType, int(out.command_type)),  # type: ignore[arg-type]
            maximum_pending=int(out.maximum_pending_submission_count),
            maximum_commands=int(out.maximum_command_count),
            notification_types=int(out.notification_types),
        )

    # memory-lifetime bookkeeping
    def _advance(self, retired: int) -> None:
        with self._native.lock:
            self._retired = max(self._retired, retired)
            while self._pending and self._pending[0][0] <= self._retired:
                _, memories = self._pending.pop(0)
                for memory in memories:
                    if not self._pending_uses(memory):
                        memory._users.discard(self)

    def _pending_uses(self, memory: LibamdfMemory) -> bool:
        if not any(memory in memories for _, memories in self._pending):
            return False
        if self._handle is not None:
            out = _new("amdf_kernel_queue_status_t")
            if not self._native.api.kernel_queue_query_status(self._handle, out):
                self._retired = max(self._retired, int(out.retired_submission))
        return any(point > self._retired and memory in memories for point, memories in self._pending)

    def _forget(self, memory: LibamdfMemory) -> None:
        self._pending = [(point, tuple(m for m in memories if m is not memory)) for point, memories in self._pending]

    def submit(self, commands: Sequence[api.KernelCommand]) -> int:
        handle = self._live()
        if isinstance(commands, (str, bytes)) or not isinstance(commands, Sequence):
            raise InvalidArgument(f"commands: expected a sequence of KernelCommand, got {commands!r}")
        if not commands:
            raise InvalidArgument("commands: at least one command is needed")
        limit = self.info.maximum_commands
        if limit and len(commands) > limit:
            raise InvalidArgument(f"commands: {len(commands)} exceed the queue's {limit} commands per submission")
        ctype = f"amdf_{self._ext}_kernel_command_t"
        array = ffi.new(f"{ctype}[]", len(commands))
        memories: list[LibamdfMemory] = []
        for index, command in enumerate(commands):
            where = f"commands[{index}]"
            if not isinstance(command, api.KernelCommand):
                raise InvalidArgument(f"{where}: expected a KernelCommand, got {command!r}")
            memory = _as(f"{where}.memory", command.memory, LibamdfMemory)
            array[index].memory = memory._live(f"{where}.memory")
            array[index].access_ordinal = memory._ordinal(f"{where}.access_ordinal", command.access_ordinal)
            offset, nbytes = _range(where, command.offset, command.nbytes, memory.info.nbytes)
            array[index].byte_offset = offset
            array[index].byte_length = nbytes
            memories.append(memory)
        info = _new(f"amdf_{self._ext}_kernel_queue_submission_info_t", command_count=len(commands), commands=array)
        out = ffi.new("uint64_t *")
        self._native.call_ext(self._ext, "kernel_queue_submit", handle, info, out)
        point = int(out[0])
        with self._native.lock:
            used = tuple(dict.fromkeys(memories))
            self._pending.append((point, used))
            for memory in used:
                memory._users.add(self)
        return point

    def status(self) -> api.KernelQueueStatus:
        handle = self._live()
        out = _new("amdf_kernel_queue_status_t")
        self._native.call("kernel_queue_query_status", handle, out)
        found = _kernel_status(out)
        self._advance(found.retired_submission)
        return found

    def refresh(self) -> api.KernelQueueStatus:
        handle = self._live()
        out = _new("amdf_kernel_queue_status_t")
        self._native.call("kernel_queue_refresh_status", handle, out)
        found = _kernel_status(out)
        self._advance(found.retired_submission)
        return found

    def wait(self, submission: int, timeout_ns: int, poll_ns: int = 0) -> None:
        handle = self._live()
        submission = _int("submission", submission, minimum=1)
        timeout_ns = _int("timeout_ns", timeout_ns)
        poll_ns = _int("poll_ns", poll_ns)
        self._native.call("kernel_queue_wait", handle, submission, timeout_ns, poll_ns)
        self._advance(submission)

    def request_notification(self, submission: int, eventfd: int) -> None:
        handle = self._live()
        submission = _int("submission", submission, minimum=1)
        fd = _int("eventfd", eventfd, maximum=2**31 - 1)
        event = ffi.new("amdf_native_event_t *")
        event.type = int(NativeEventType.EVENTFD)
        event.payload.file_descriptor = fd
        self._native.call("kernel_queue_request_notification", handle, submission, event)

    def _released(self) -> None:
        for _, memories in self._pending:
            for memory in memories:
                memory._users.discard(self)
        self._pending.clear()

    def destroy(self) -> None:
        self._destroy("kernel_queue_destroy", self._native.api.kernel_queue_destroy, consumed_on_failure=True)


class LibamdfDoorbell(api.Doorbell):
    """The doorbell of one user queue mapping: a ``doorbell_bits``-wide store."""

    def __init__(self, mapping: LibamdfUserQueueMapping, address: int, bits: int) -> None:
        self._mapping = mapping
        self._bits = bits
        self._pointer = ffi.cast("uint64_t *" if bits == 64 else "uint32_t *", address)

    def write(self, value: int) -> None:
        value = _int("value", value, maximum=2**self._bits - 1)
        self._mapping._live("doorbell")
        # One aligned store of the full width (x86-64 keeps it after the earlier
        # write-index store, which is the release order the queue formats ask for).
        self._pointer[0] = value


def _view(address: int, nbytes: int, dtype: type[np.generic] = np.uint8) -> np.ndarray:
    """A writable numpy array over ``nbytes`` of native memory at ``address``."""
    return np.frombuffer(ffi.buffer(ffi.cast("char *", address), nbytes), dtype=dtype)


class LibamdfUserQueueMapping(_Node, api.UserQueueMapping):
    """``amdf_user_queue_mapping_t`` for host publication."""

    def __init__(self, native: _Native, handle: Any, queue: LibamdfUserQueue) -> None:
        super().__init__(native, handle, (queue,))
        out = _new("amdf_user_queue_mapping_info_t")
        native.call("user_queue_mapping_query_info", handle, out)
        self.info = api.UserQueueMappingInfo(
            ring_address=int(out.ring_address),
            ring_bytes=int(out.ring_byte_length),
            read_index_address=int(out.read_index_address),
            write_index_address=int(out.write_index_address),
            doorbell_address=int(out.doorbell_address),
            index_bits=int(out.index_bits),
            doorbell_bits=int(out.doorbell_bits),
        )
        problems = []
        if self.info.index_bits not in (32, 64):
            problems.append(f"index_bits {self.info.index_bits}")
        if self.info.doorbell_bits not in (32, 64):
            problems.append(f"doorbell_bits {self.info.doorbell_bits}")
        addresses = (self.info.ring_address, self.info.read_index_address, self.info.write_index_address)
        if not all(addresses + (self.info.doorbell_address,)):
            problems.append("a null ring, index or doorbell address")
        if problems:
            raise AmdfUnsupported(
                "user_queue_mapping_query_info", make_status(StatusCode.UNSUPPORTED), "; ".join(problems)
            )
        self.ring = _view(self.info.ring_address, self.info.ring_bytes)
        index_type = np.uint64 if self.info.index_bits == 64 else np.uint32
        self.read_index = _view(self.info.read_index_address, self.info.index_bits // 8, index_type)
        self.write_index = _view(self.info.write_index_address, self.info.index_bits // 8, index_type)
        self.doorbell = LibamdfDoorbell(self, self.info.doorbell_address, self.info.doorbell_bits)

    def destroy(self) -> None:
        self._destroy("user_queue_mapping_destroy", self._native.api.user_queue_mapping_destroy)


class LibamdfUserQueue(_Node, api.UserQueue):
    """``amdf_user_queue_t``: a directly published PM4, SDMA or AQL queue."""

    def __init__(self, native: _Native, handle: Any, parents: Sequence[_Node]) -> None:
        super().__init__(native, handle, parents)
        out = _new("amdf_user_queue_info_t")
        native.call("user_queue_query_info", handle, out)
        self.info = api.UserQueueInfo(
            queue_id=_id(out.queue_id),
            family=int(out.queue_family_ordinal),
            command_type=_known(CommandType, int(out.command_type)),  # type: ignore[arg-type]
            format_version=int(out.format_version),
            format_features=int(out.format_features),
            producer_mode=_known(ProducerMode, int(out.producer_mode)),  # type: ignore[arg-type]
            priority=_known(QueuePriority, int(out.priority)),  # type: ignore[arg-type]
            roles=QueueRole(int(out.roles)),
            ring_bytes=int(out.ring_byte_length),
        )

    def map(self) -> LibamdfUserQueueMapping:
        handle = self._live()
        out = ffi.new("amdf_user_queue_mapping_t **")
        with self._native.lock:
            self._native.call("user_queue_map", handle, ffi.NULL, out)
            try:
                return LibamdfUserQueueMapping(self._native, out[0], self)
            except AmdfError:
                self._native.api.user_queue_mapping_destroy(out[0])
                raise

    def status(self) -> api.UserQueueStatus:
        handle = self._live()
        out = _new("amdf_user_queue_status_t")
        self._native.call("user_queue_query_status", handle, out)
        return api.UserQueueStatus(
            state=_known(QueueState, int(out.state)),  # type: ignore[arg-type]
            reset_epoch=int(out.reset_epoch),
            producer_index=int(out.producer_index),
            consumed_index=int(out.consumed_index),
            terminal=int(out.terminal_status),
        )

    def wait_consumed(self, index: int, timeout_ns: int, poll_ns: int = 0) -> None:
        handle = self._live()
        index = _int("index", index)
        timeout_ns = _int("timeout_ns", timeout_ns)
        poll_ns = _int("poll_ns", poll_ns)
        self._native.call("user_queue_wait_consumed", handle, index, timeout_ns, poll_ns)

    def destroy(self) -> None:
        self._destroy("user_queue_destroy", self._native.api.user_queue_destroy, consumed_on_failure=True)


# --------------------------------------------------------------------------- devices


class LibamdfDevice(_Node, api.Device):
    """Common part of the GPU and XDNA devices."""

    endpoint: LibamdfEndpoint

    def __init__(self, native: _Native, handle: Any, endpoint: LibamdfEndpoint) -> None:
        super().__init__(native, handle, (endpoint,))
        self.endpoint = endpoint
        self._scopes: dict[int, LibamdfMemoryScope] = {}

    def memory_scopes(self) -> list[api.MemoryScope]:
        handle = self._live()
        call = "device_enumerate_memory_scopes"
        found = self._native.enumerate(call, getattr(self._native.api, call), handle, "amdf_memory_scope_t *")
        return [_scope_for(self._native, self._scopes, scope, self, lambda: [self]) for scope in found]

    def destroy(self) -> None:
        self._destroy("device_destroy", self._native.api.device_destroy)


def _scope_for(
    native: _Native,
    cache: dict[int, LibamdfMemoryScope],
    handle: Any,
    owner: _Node,
    consumers: Callable[[], list[LibamdfDevice]],
) -> LibamdfMemoryScope:
    key = int(ffi.cast("uintptr_t", handle))
    scope = cache.get(key)
    if scope is None:
        scope = cache[key] = LibamdfMemoryScope(native, handle, owner, consumers)
    return scope


def _family(device: LibamdfDevice, family: Any) -> int:
    family = _int("family", family, maximum=_U32)
    count = device.endpoint.info.queue_family_count
    if family >= count:
        raise InvalidArgument(f"family: {family} is not below the endpoint's {count} queue families")
    return family


class LibamdfGpuDevice(LibamdfDevice, api.GpuDevice):
    """A GPU device (``gpu.device_create``)."""

    @property
    def info(self) -> api.GpuDeviceInfo:  # type: ignore[override]
        handle = self._live()
        out = _new("amdf_gpu_device_info_t")
        self._native.call_ext("gpu", "device_query_info", handle, out)
        return api.GpuDeviceInfo(id=_id(out.id), reset_epoch=int(out.reset_epoch), features=int(out.features))

    def create_user_queue(
        self,
        family: int,
        *,
        ring_bytes: int = 0,
        priority: QueuePriority = QueuePriority.NORMAL,
        producer: ProducerMode = ProducerMode.SINGLE,
        scratch: api.Scratch | None = None,
    ) -> LibamdfUserQueue:
        handle = self._live()
        family = _family(self, family)
        ring_bytes = _power_of_two_or_zero("ring_bytes", ring_bytes)
        priority = _member("priority", priority, QueuePriority)
        producer = _member("producer", producer, ProducerMode)
        info = _new(
            "amdf_gpu_user_queue_create_info_t",
            queue_family_ordinal=family,
            priority=int(priority),
            producer_mode=int(producer),
            required_capabilities=int(UserQueueCapability.HOST_PRODUCER),
            ring_byte_length=ring_bytes,
        )
        parents: list[_Node] = [self]
        if scratch is not None:
            if not isinstance(scratch, api.Scratch):
                raise InvalidArgument(f"scratch: expected a Scratch, got {scratch!r}")
            memory = _as("scratch.memory", scratch.memory, LibamdfMemory)
            info.scratch.memory = memory._live("scratch.memory")
            info.scratch.access_ordinal = memory._ordinal("scratch.access_ordinal", scratch.access_ordinal)
            offset, nbytes = _range("scratch", scratch.offset, scratch.nbytes, memory.info.nbytes)
            info.scratch.byte_offset = offset
            info.scratch.byte_length = nbytes
            info.scratch.maximum_private_segment_byte_length = _int(
                "scratch.max_private_bytes", scratch.max_private_bytes, maximum=_U32
            )
            info.scratch.maximum_wave_count = _int("scratch.max_waves", scratch.max_waves, maximum=_U32)
            parents.append(memory)
        out = ffi.new("amdf_user_queue_t **")
        with self._native.lock:
            self._native.call_ext("gpu", "user_queue_create", handle, info, out)
            try:
                return LibamdfUserQueue(self._native, out[0], parents)
            except AmdfError:
                self._native.api.user_queue_destroy(out[0])
                raise

    def create_kernel_queue(self, family: int, *, max_pending: int = 0) -> LibamdfKernelQueue:
        handle = self._live()
        info = _new(
            "amdf_gpu_kernel_queue_create_info_t",
            queue_family_ordinal=_family(self, family),
            maximum_pending_submission_count=_int("max_pending", max_pending, maximum=_U32),
        )
        out = ffi.new("amdf_kernel_queue_t **")
        with self._native.lock:
            self._native.call_ext("gpu", "kernel_queue_create", handle, info, out)
            return _adopt_kernel_queue(self._native, out[0], self, "gpu")


def _adopt_kernel_queue(native: _Native, handle: Any, parent: _Node, ext: str) -> LibamdfKernelQueue:
    try:
        return LibamdfKernelQueue(native, handle, parent, ext)
    except AmdfError:
        native.api.kernel_queue_destroy(handle)
        raise


class LibamdfXdnaContext(_Node, api.XdnaContext):
    """``amdf_xdna_context_t``: a schedulable context of some logical columns."""

    def __init__(self, native: _Native, handle: Any, device: LibamdfXdnaDevice) -> None:
        super().__init__(native, handle, (device,))
        self.device = device
        self._scopes: dict[int, LibamdfMemoryScope] = {}
        out = _new("amdf_xdna_context_info_t")
        native.call_ext("xdna", "context_query_info", handle, out)
        self.info = api.XdnaContextInfo(
            id=_id(out.id),
            device_id=_id(out.device_id),
            reset_epoch=int(out.reset_epoch),
            scheduling_mode=XdnaSchedulingMode(int(out.scheduling_mode)),
            columns=int(out.logical_column_count),
            rows=int(out.row_count),
        )

    def placement(self) -> tuple[int, int]:
        handle = self._live()
        out = _new("amdf_xdna_context_placement_info_t")
        self._native.call_ext("xdna", "context_query_placement_info", handle, out)
        return int(out.column_origin), int(out.column_count)

    def memory_scopes(self) -> list[api.MemoryScope]:
        handle = self._live()
        found = self._native.enumerate(
            "xdna.context_enumerate_memory_scopes",
            self._native.ext("xdna", "context_enumerate_memory_scopes"),
            handle,
            "amdf_memory_scope_t *",
        )
        return [_scope_for(self._native, self._scopes, scope, self, lambda: [self.device]) for scope in found]

    def create_kernel_queue(self, family: int, *, max_pending: int = 0) -> LibamdfKernelQueue:
        handle = self._live()
        info = _new(
            "amdf_xdna_kernel_queue_create_info_t",
            queue_family_ordinal=_family(self.device, family),
            maximum_pending_submission_count=_int("max_pending", max_pending, maximum=_U32),
        )
        out = ffi.new("amdf_kernel_queue_t **")
        with self._native.lock:
            self._native.call_ext("xdna", "kernel_queue_create", handle, info, out)
            return _adopt_kernel_queue(self._native, out[0], self, "xdna")

    def destroy(self) -> None:
        self._destroy("xdna.context_destroy", self._native.ext("xdna", "context_destroy"))


class LibamdfXdnaDevice(LibamdfDevice, api.XdnaDevice):
    """An XDNA device (``xdna.device_create``)."""

    @property
    def info(self) -> api.XdnaDeviceInfo:  # type: ignore[override]
        handle = self._live()
        out = _new("amdf_xdna_device_info_t")
        self._native.call_ext("xdna", "device_query_info", handle, out)
        return api.XdnaDeviceInfo(
            id=_id(out.id),
            reset_epoch=int(out.reset_epoch),
            placement_modes=int(out.placement_modes),
            column_origin=int(out.array.column_origin),
            column_count=int(out.array.column_count),
            row_count=int(out.array.row_count),
            column_stride=int(out.array.column_stride),
            scheduling_modes=XdnaSchedulingMode(int(out.context.scheduling_modes)),
            minimum_columns=int(out.context.minimum_column_count),
            maximum_columns=int(out.context.maximum_column_count),
            column_granularity=int(out.context.column_count_granularity),
            instruction_max_bytes=int(out.instruction.maximum_byte_length),
            instruction_alignment=int(out.instruction.address_alignment),
            instruction_granularity=int(out.instruction.byte_length_granularity),
            instruction_format=int(out.instruction.format.format),
            instruction_format_version=int(out.instruction.format.version),
        )

    def create_context(
        self,
        columns: int,
        *,
        origin: int | None = None,
        modes: XdnaSchedulingMode = XdnaSchedulingMode.SPATIAL | XdnaSchedulingMode.TIME_SLICED,
    ) -> LibamdfXdnaContext:
        handle = self._live()
        info = _new(
            "amdf_xdna_context_create_info_t",
            logical_column_count=_int("columns", columns, minimum=1, maximum=_U32),
            physical_column_origin=(
                _PHYSICAL_COLUMN_ORIGIN_ANY if origin is None else _int("origin", origin, maximum=_U32 - 1)
            ),
            acceptable_scheduling_modes=_flags("modes", modes, XdnaSchedulingMode, nonzero=True),
        )
        out = ffi.new("amdf_xdna_context_t **")
        with self._native.lock:
            self._native.call_ext("xdna", "context_create", handle, info, out)
            try:
                return LibamdfXdnaContext(self._native, out[0], self)
            except AmdfError:
                self._native.ext("xdna", "context_destroy")(out[0])
                raise


# --------------------------------------------------------------------------- endpoints


class LibamdfEndpoint(_Node, api.Endpoint):
    """An opened ``amdf_endpoint_t`` (query-only until a device is created)."""

    def __init__(self, native: _Native, handle: Any, provider: LibamdfProvider) -> None:
        super().__init__(native, handle, (provider,))
        out = _new("amdf_endpoint_info_t")
        native.call("endpoint_query_info", handle, out)
        self.info = api.EndpointInfo(
            id=_id(out.id),
            engine_kind=_known(EngineKind, int(out.engine_kind)),  # type: ignore[arg-type]
            name=_text(out.name),
            pci=api.PciInfo(
                vendor_id=int(out.pci.vendor_id),
                device_id=int(out.pci.device_id),
                subsystem_vendor_id=int(out.pci.subsystem_vendor_id),
                subsystem_device_id=int(out.pci.subsystem_device_id),
                revision_id=int(out.pci.revision_id),
            ),
            queue_family_count=int(out.queue_family_count),
            type_flags=int(out.type_flags),
        )
        families = []
        for ordinal in range(self.info.queue_family_count):
            fam = _new("amdf_queue_family_info_t")
            native.call("endpoint_query_queue_family_info", handle, ordinal, fam)
            families.append(
                api.QueueFamilyInfo(
                    ordinal=int(fam.ordinal),
                    command_type=_known(CommandType, int(fam.command_type)),  # type: ignore[arg-type]
                    publication_modes=PublicationMode(int(fam.publication_modes)),
                    format_version=int(fam.format_version),
                    format_features=int(fam.format_features),
                    roles=QueueRole(int(fam.roles)),
                    producer_modes=int(fam.producer_modes),
                    priority_capabilities=int(fam.priority_capabilities),
                    minimum_ring_bytes=int(fam.minimum_ring_byte_length),
                    maximum_ring_bytes=int(fam.maximum_ring_byte_length),
                    ring_alignment=int(fam.ring_byte_length_alignment),
                )
            )
        self._families = tuple(families)

    def queue_families(self) -> tuple[api.QueueFamilyInfo, ...]:
        return self._families

    def gpu_info(self) -> api.GpuEndpointInfo:
        handle = self._live()
        out = _new("amdf_gpu_endpoint_info_t")
        self._native.call_ext("gpu", "endpoint_query_info", handle, out)
        return api.GpuEndpointInfo(
            gfx_ip=(int(out.gfx_ip.major), int(out.gfx_ip.minor), int(out.gfx_ip.stepping)),
            asic_revision=int(out.asic_revision),
            wavefront_size=int(out.compute.wavefront_size),
            compute_unit_count=int(out.compute.compute_unit_count),
            max_waves_per_cu=int(out.compute.maximum_wave_count_per_compute_unit),
            max_scratch_waves_per_cu=int(out.compute.maximum_scratch_wave_count_per_compute_unit),
            lds_bytes=int(out.compute.local_data_share_byte_length),
            xcc_count=int(out.topology.xcc_count),
            shader_engines_per_xcc=int(out.topology.shader_engine_count_per_xcc),
        )

    def xdna_info(self) -> api.XdnaEndpointInfo:
        handle = self._live()
        out = _new("amdf_xdna_endpoint_info_t")
        self._native.call_ext("xdna", "endpoint_query_info", handle, out)
        return api.XdnaEndpointInfo(
            architecture=_known(XdnaArchitecture, int(out.architecture)),  # type: ignore[arg-type]
            target_id=_text(out.target_id),
        )

    def create_gpu_device(self) -> LibamdfGpuDevice:
        handle = self._live()
        info = _new("amdf_gpu_device_create_info_t")
        out = ffi.new("amdf_device_t **")
        with self._native.lock:
            self._native.call_ext("gpu", "device_create", handle, info, out)
            return LibamdfGpuDevice(self._native, out[0], self)

    def create_xdna_device(self) -> LibamdfXdnaDevice:
        handle = self._live()
        info = _new("amdf_xdna_device_create_info_t")
        out = ffi.new("amdf_device_t **")
        with self._native.lock:
            self._native.call_ext("xdna", "device_create", handle, info, out)
            return LibamdfXdnaDevice(self._native, out[0], self)

    def close(self) -> None:
        self._destroy("endpoint_close", self._native.api.endpoint_close)


# --------------------------------------------------------------------------- provider


class LibamdfProvider(_Node, api.Provider):
    """One libamdf instance (``instance_create``) with its endpoints opened on demand.

    ``library`` overrides ``HRX_AMDF_LIBRARY`` (a path to the shared object or its
    directory). Raises :class:`~hrx_amdf.native.library.LibraryNotFound` when libamdf
    cannot be found and :class:`~hrx_amdf.errors.AmdfUnsupported` (``VERSION_MISMATCH``)
    when it offers no ABI version this binding speaks."""

    name = "libamdf"

    def __init__(self, library: str | None = None) -> None:
        loaded = load(library)
        native = _Native(loaded)
        info = _new("amdf_instance_create_info_t", native_lifetime=BINDING_CONSTANTS["AMDF_NATIVE_LIFETIME_PROCESS"])
        out = ffi.new("amdf_instance_t **")
        native.call("instance_create", info, out)
        super().__init__(native, out[0])
        self.library = loaded
        self.abi_version = loaded.abi_version
        self._endpoints: list[LibamdfEndpoint] | None = None
        self._scopes: dict[int, LibamdfMemoryScope] = {}

    def _devices(self) -> list[LibamdfDevice]:
        with self._native.lock:
            return [
                device
                for endpoint in self._endpoints or []
                for device in endpoint._children
                if isinstance(device, LibamdfDevice) and not device.destroyed
            ]

    def endpoints(self) -> list[api.Endpoint]:
        handle = self._live()
        with self._native.lock:
            if self._endpoints is None:
                summaries = self._native.enumerate(
                    "endpoint_enumerate", self._native.api.endpoint_enumerate, handle, "amdf_endpoint_summary_t"
                )
                opened: list[LibamdfEndpoint] = []
                try:
                    for summary in summaries:
                        out = ffi.new("amdf_endpoint_t **")
                        self._native.call("endpoint_open", handle, ffi.addressof(summary[0], "id"), out)
                        try:
                            opened.append(LibamdfEndpoint(self._native, out[0], self))
                        except AmdfError:
                            self._native.api.endpoint_close(out[0])
                            raise
                except AmdfError:
                    for endpoint in opened:
                        endpoint.close()
                    raise
                self._endpoints = opened
            return [endpoint for endpoint in self._endpoints if not endpoint.destroyed]

    def system_scopes(self) -> list[api.MemoryScope]:
        handle = self._live()
        found = self._native.enumerate(
            "instance_enumerate_memory_scopes",
            self._native.api.instance_enumerate_memory_scopes,
            handle,
            "amdf_memory_scope_t *",
        )
        return [_scope_for(self._native, self._scopes, scope, self, self._devices) for scope in found]

    def describe(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"provider": self.name, **self.library.facts()}
        if self.destroyed:
            facts["notes"] = ["closed"]
            return facts
        try:
            endpoints = self.endpoints()
        except AmdfError as exc:
            facts["endpoints_error"] = str(exc)
            return facts
        listed = []
        for endpoint in endpoints:
            info = endpoint.info
            entry: dict[str, Any] = {
                "name": info.name,
                "kind": info.engine_kind.name if isinstance(info.engine_kind, EngineKind) else int(info.engine_kind),
                "pci": f"{info.pci.vendor_id:04x}:{info.pci.device_id:04x} rev {info.pci.revision_id:02x}",
                "queue_families": [
                    f"{getattr(f.command_type, 'name', f.command_type)}/"
                    + "|".join(mode.name or "" for mode in PublicationMode if mode & f.publication_modes)
                    for f in endpoint.queue_families()
                ],
            }
            try:
                if info.engine_kind == EngineKind.GPU:
                    entry["target"] = endpoint.gpu_info().target
                elif info.engine_kind == EngineKind.XDNA:
                    entry["target"] = endpoint.xdna_info().target_id
            except AmdfError as exc:
                entry["target_error"] = str(exc)
            listed.append(entry)
        facts["endpoints"] = listed
        return facts

    def close(self) -> None:
        """Close the endpoints this provider opened, then destroy the instance."""
        with self._native.lock:
            if self._handle is None:
                return
            endpoints = [endpoint for endpoint in self._endpoints or [] if not endpoint.destroyed]
            busy = {child for child in self._children if child not in endpoints}
            busy.update(child for endpoint in endpoints for child in endpoint._children)
            if busy:
                raise _busy("instance_destroy", "Provider", busy)
            for endpoint in endpoints:
                endpoint.close()
            self._destroy("instance_destroy", self._native.api.instance_destroy)


__all__ = [
    "LibamdfProvider",
    "LibamdfEndpoint",
    "LibamdfDevice",
    "LibamdfGpuDevice",
    "LibamdfXdnaDevice",
    "LibamdfXdnaContext",
    "LibamdfMemoryScope",
    "LibamdfMemory",
    "LibamdfHostMapping",
    "LibamdfExternalMemory",
    "LibamdfUserQueue",
    "LibamdfUserQueueMapping",
    "LibamdfDoorbell",
    "LibamdfKernelQueue",
]
