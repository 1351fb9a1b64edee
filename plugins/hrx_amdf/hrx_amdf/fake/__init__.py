"""A simulated Strix Halo behind the :class:`~hrx_amdf.provider.Provider` interface.

One gfx1151 GPU endpoint (PM4 and AQL compute queues, SDMA copy queues, a VRAM
carve-out and GTT system memory) and one NPU5 endpoint (contexts on an eight-column
array, a kernel queue with a 128-submission window), with the queue-family, memory
scope and profile facts libamdf reports (:mod:`.facts`). Its memory is host memory,
as the APU's is, so the simulation executes what an engine writes into its rings and
checks it strictly (:mod:`.queues`, :mod:`.pm4`, :mod:`.sdma`, :mod:`.aql`,
:mod:`.kernels`, :mod:`.npu`). Failures can be injected (:mod:`.faults`).

This is a test fixture. It proves that an engine writes well-formed commands in the
right order and that HRX's semantics hold on top of them; it is never evidence that
the engine runs on AMD hardware. Beyond the :class:`Provider` interface it offers
three simulation-only calls an engine makes when it runs on the simulation:
:meth:`FakeProvider.register_code_object`, :meth:`FakeProvider.describe_kernargs`
and :meth:`FakeProvider.register_npu_program`.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..constants import (
    AddressKind,
    EngineKind,
    ExternalMemoryType,
    HostCacheability,
    MemoryAccess,
    MemoryClass,
    MemoryFlag,
    ProducerMode,
    ProfileRole,
    PublicationMode,
    QueuePriority,
    ScopeKind,
    StatusCode,
    XdnaSchedulingMode,
)
from ..errors import AmdfError
from ..provider import (
    Device,
    DeviceAccess,
    Endpoint,
    EndpointInfo,
    GpuDevice,
    GpuDeviceInfo,
    GpuEndpointInfo,
    KernelQueue,
    MemoryProfile,
    MemoryScope,
    Provider,
    QueueFamilyInfo,
    Scratch,
    ScopeInfo,
    XdnaDevice,
    XdnaDeviceInfo,
    XdnaEndpointInfo,
)
from . import facts
from .faults import Faults
from .facts import FakeOptions
from .kernels import CodeObjects, KernelFault, KernelReference, LoadedCodeObject, check_loaded
from .memory import AddressSpace, Backing, FakeExternalMemory, FakeMemory, fail
from .npu import FakeXdnaContext, NpuBinding, NpuProgram, NpuPrograms
from .queues import STATUS_DEVICE_LOST, FakeUserQueue

ALL_ACCESS = MemoryAccess.READ | MemoryAccess.WRITE | MemoryAccess.EXECUTE
_SYSTEM_FLAGS = MemoryFlag.HOST_VISIBLE | MemoryFlag.SHAREABLE | MemoryFlag.QUEUE_STORAGE | MemoryFlag.DEVICE_ADDRESS
_DMABUF = frozenset({ExternalMemoryType.DMA_BUF_FD})


def _profile(ordinal: int, cls: MemoryClass, guaranteed: MemoryFlag, supported: MemoryFlag, cacheability: HostCacheability, maximum: int, roles: ProfileRole) -> MemoryProfile:
    return MemoryProfile(
        ordinal=ordinal,
        memory_class=cls,
        roles=roles,
        guaranteed_flags=guaranteed,
        supported_flags=supported | guaranteed,
        maximum_bytes=maximum,
        granularity=1,
        minimum_alignment=4096,
        maximum_alignment=1 << 30,
        host_cacheability=cacheability,
        imports=_DMABUF if roles & ProfileRole.IMPORT else frozenset(),
        exports=_DMABUF if roles & ProfileRole.EXPORT else frozenset(),
    )


#: System scope profiles: 0 ordinary (cacheable, explicit host cache maintenance),
#: 1 coherent (``allocate_shared``).
SYSTEM_CACHED, SYSTEM_COHERENT = 0, 1
_SHARE_ROLES = ProfileRole.CREATE | ProfileRole.HOST_MAP | ProfileRole.IMPORT | ProfileRole.EXPORT


class FakeScope(MemoryScope):
    """A memory scope of the simulation (system, GPU-local or NPU-context private)."""

    def __init__(self, provider: FakeProvider, info: ScopeInfo, budget: list[int], *, owner: Any = None) -> None:
        self.provider = provider
        self.info = info
        self._budget = budget  # [bytes left]
        self.owner = owner  # the GPU device of a local scope, the context of a private one
        self._memories: set[FakeMemory] = set()

    @classmethod
    def private_for(cls, provider: FakeProvider, context: FakeXdnaContext) -> FakeScope:
        profile = _profile(
            0, MemoryClass.PRIVATE, MemoryFlag.HOST_VISIBLE | MemoryFlag.DEVICE_ADDRESS, MemoryFlag(0), HostCacheability.WRITE_BACK,
            facts.NPU_INSTRUCTION_MAX_BYTES, ProfileRole.CREATE | ProfileRole.HOST_MAP,
        )
        return cls(provider, ScopeInfo(ScopeKind.PRIVATE, facts.ENDPOINT_IDS[EngineKind.XDNA], (profile,)), [64 * facts.MiB], owner=context)

    def live_memories(self) -> int:
        return sum(1 for m in self._memories if m.alive)

    def _check_accesses(self, call: str, accesses: Sequence[DeviceAccess]) -> None:
        for i, access in enumerate(accesses):
            device = access.device
            if not isinstance(device, (FakeGpuDevice, FakeXdnaDevice)) or device.provider is not self.provider:
                raise fail(call, StatusCode.INVALID_ARGUMENT, f"accesses[{i}]: not a device of this provider")
            if device.destroyed:
                raise fail(call, StatusCode.INVALID_ARGUMENT, f"accesses[{i}]: device destroyed")
            if not access.access or int(access.access) & ~int(ALL_ACCESS):
                raise fail(call, StatusCode.INVALID_ARGUMENT, f"accesses[{i}]: access {access.access!r}")
            allowed = {AddressKind.GPU} if isinstance(device, FakeGpuDevice) else {AddressKind.XDNA_DMA, AddressKind.XDNA_FIRMWARE}
            if not access.address_kinds or not set(access.address_kinds) <= allowed:
                raise fail(call, StatusCode.UNSUPPORTED, f"accesses[{i}]: address kinds {sorted(k.name for k in access.address_kinds)} for a {type(device).__name__}")
            if self.info.kind == ScopeKind.LOCAL and device is not self.owner:
                raise fail(call, StatusCode.UNSUPPORTED, f"accesses[{i}]: the VRAM carve-out is reachable by its GPU only")
            if self.info.kind == ScopeKind.PRIVATE and device is not self.owner.device:
                raise fail(call, StatusCode.UNSUPPORTED, f"accesses[{i}]: private context memory accepts only the context's device")
            if self.info.kind == ScopeKind.PRIVATE and set(access.address_kinds) != {AddressKind.XDNA_FIRMWARE}:
                raise fail(call, StatusCode.UNSUPPORTED, f"accesses[{i}]: private instruction memory has XDNA_FIRMWARE addresses")
            if access.flags & MemoryFlag.HOST_COHERENT and not self.info.kind == ScopeKind.SYSTEM:
                raise fail(call, StatusCode.UNSUPPORTED, f"accesses[{i}]: coherent access needs system memory")

    def _profile_for(self, call: str, profile: int) -> MemoryProfile:
        if not isinstance(profile, int) or not 0 <= profile < len(self.info.profiles):
            raise fail(call, StatusCode.OUT_OF_RANGE, f"profile {profile!r} of {len(self.info.profiles)}")
        return self.info.profiles[profile]

    def create(self, nbytes: int, *, profile: int, accesses: Sequence[DeviceAccess], flags: MemoryFlag = MemoryFlag(0), alignment: int = 0) -> FakeMemory:
        call = "memory_create"
        chosen = self._profile_for(call, profile)
        if not chosen.roles & ProfileRole.CREATE:
            raise fail(call, StatusCode.UNSUPPORTED, f"profile {profile} cannot create memory")
        if not isinstance(nbytes, int) or nbytes <= 0 or nbytes > chosen.maximum_bytes:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"byte length {nbytes!r} (1..{chosen.maximum_bytes})")
        if int(flags) & ~int(chosen.supported_flags):
            raise fail(call, StatusCode.UNSUPPORTED, f"flags {int(flags) & ~int(chosen.supported_flags):#x} not supported by profile {profile}")
        if alignment and (alignment & (alignment - 1) or alignment > chosen.maximum_alignment):
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"alignment {alignment}")
        self._check_accesses(call, accesses)
        for i, access in enumerate(accesses):
            if int(access.flags) & ~int(chosen.supported_flags):
                raise fail(call, StatusCode.UNSUPPORTED, f"accesses[{i}]: flags {access.flags!r} beyond the profile")
        with self.provider._lock:
            if nbytes > self._budget[0]:
                raise fail(call, StatusCode.RESOURCE_EXHAUSTED, f"{nbytes} bytes requested, {self._budget[0]} left in the {self.info.kind.name.lower()} scope")
            self._budget[0] -= nbytes
        backing = Backing(nbytes, chosen.memory_class, chosen.guaranteed_flags | MemoryFlag(flags), chosen.host_cacheability, self.provider.options.model_host_cache)
        backing.release = lambda: self._give_back(nbytes)  # type: ignore[attr-defined]
        memory = FakeMemory(self.provider, backing, 0, nbytes, profile, accesses, alignment)
        memory.scope = self  # type: ignore[attr-defined]
        self._memories.add(memory)
        return memory

    def _give_back(self, nbytes: int) -> None:
        with self.provider._lock:
            self._budget[0] += nbytes

    def import_memory(self, external: Any, *, profile: int, accesses: Sequence[DeviceAccess], flags: MemoryFlag = MemoryFlag(0)) -> FakeMemory:
        call = "memory_import"
        chosen = self._profile_for(call, profile)
        if not chosen.roles & ProfileRole.IMPORT:
            raise fail(call, StatusCode.UNSUPPORTED, f"profile {profile} cannot import")
        if not isinstance(external, FakeExternalMemory):
            raise fail(call, StatusCode.INVALID_ARGUMENT, "not an external memory of this provider")
        self._check_accesses(call, accesses)
        backing, offset, nbytes = external.take()
        memory = FakeMemory(self.provider, backing, offset, nbytes, profile, accesses, 4096)
        with backing.lock:
            backing.references -= 1  # the export's reference passes to the import
        memory.scope = self  # type: ignore[attr-defined]
        self._memories.add(memory)
        return memory


class _FakeDevice(Device):
    provider: FakeProvider
    endpoint: FakeEndpoint

    def __init__(self, provider: FakeProvider, endpoint: FakeEndpoint) -> None:
        self.provider = provider
        self.endpoint = endpoint
        self.destroyed = False
        self.lost = False
        self.reset_epoch = 1


class FakeGpuDevice(_FakeDevice, GpuDevice):
    def __init__(self, provider: FakeProvider, endpoint: FakeEndpoint) -> None:
        super().__init__(provider, endpoint)
        self.info = GpuDeviceInfo(id=next(provider._device_ids).to_bytes(16, "little"), reset_epoch=1, features=0b0111)
        self._queues: set[FakeUserQueue] = set()
        profile = _profile(
            0, MemoryClass.LOCAL, MemoryFlag.DEVICE_LOCAL | MemoryFlag.DEVICE_ADDRESS,
            MemoryFlag.HOST_VISIBLE | MemoryFlag.SHAREABLE | MemoryFlag.QUEUE_STORAGE, HostCacheability.WRITE_COMBINED,
            provider.options.vram_bytes, _SHARE_ROLES,
        )
        self._local = FakeScope(provider, ScopeInfo(ScopeKind.LOCAL, endpoint.info.id, (profile,)), [provider.options.vram_bytes], owner=self)

    def memory_scopes(self) -> list[MemoryScope]:
        return [self._local]

    def create_user_queue(self, family: int, *, ring_bytes: int = 0, priority: QueuePriority = QueuePriority.NORMAL, producer: ProducerMode = ProducerMode.SINGLE, scratch: Scratch | None = None) -> FakeUserQueue:
        call = "gpu.user_queue_create"
        if self.destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "device destroyed")
        if self.lost:
            raise fail(call, StatusCode.DEVICE_LOST, "the device was lost; destroy it and create another")
        families = self.endpoint.queue_families()
        if not isinstance(family, int) or not 0 <= family < len(families):
            raise fail(call, StatusCode.OUT_OF_RANGE, f"queue family {family!r} of {len(families)}")
        info = families[family]
        if not info.publication_modes & PublicationMode.USER:
            raise fail(call, StatusCode.UNSUPPORTED, f"family {family} has no user queues")
        size = ring_bytes or info.minimum_ring_bytes
        if size & (size - 1) or not info.minimum_ring_bytes <= size <= info.maximum_ring_bytes:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"ring of {size} bytes (power of two in {info.minimum_ring_bytes}..{info.maximum_ring_bytes})")
        if priority != QueuePriority.NORMAL or producer != ProducerMode.SINGLE:
            raise fail(call, StatusCode.UNSUPPORTED, "only NORMAL priority and a SINGLE producer")
        if scratch is not None:
            memory = scratch.memory
            if not isinstance(memory, FakeMemory) or not memory.alive or scratch.nbytes <= 0 or scratch.offset + scratch.nbytes > memory.info.nbytes:
                raise fail(call, StatusCode.INVALID_ARGUMENT, "scratch does not name a live range of provider memory")
            if scratch.max_private_bytes <= 0 or scratch.max_waves <= 0:
                raise fail(call, StatusCode.INVALID_ARGUMENT, "scratch needs max_private_bytes and max_waves")
        queue = FakeUserQueue(self.provider, self, info, size, priority, producer, scratch)
        self._queues.add(queue)
        return queue

    def create_kernel_queue(self, family: int, *, max_pending: int = 0) -> KernelQueue:
        raise fail("gpu.kernel_queue_create", StatusCode.UNSUPPORTED, "the gfx1151 families publish through user queues only")

    def destroy(self) -> None:
        call = "device_destroy"
        if self.destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "device already destroyed")
        if self._queues:
            raise fail(call, StatusCode.BUSY, f"{len(self._queues)} queue(s) still live")
        self.destroyed = True
        self.endpoint._devices.discard(self)

    def _lose(self) -> None:
        self.lost = True
        self.reset_epoch += 1
        for queue in list(self._queues):
            queue._fail(STATUS_DEVICE_LOST, "device lost")


class FakeXdnaDevice(_FakeDevice, XdnaDevice):
    def __init__(self, provider: FakeProvider, endpoint: FakeEndpoint) -> None:
        super().__init__(provider, endpoint)
        self.info = XdnaDeviceInfo(
            id=next(provider._device_ids).to_bytes(16, "little"),
            reset_epoch=1,
            placement_modes=1,
            column_origin=0,
            column_count=facts.NPU_COLUMNS,
            row_count=facts.NPU_ROWS,
            column_stride=facts.NPU_COLUMN_STRIDE,
            scheduling_modes=facts.NPU_SCHEDULING,
            minimum_columns=1,
            maximum_columns=facts.NPU_COLUMNS,
            column_granularity=1,
            instruction_max_bytes=facts.NPU_INSTRUCTION_MAX_BYTES,
            instruction_alignment=facts.NPU_INSTRUCTION_ALIGNMENT,
            instruction_granularity=facts.NPU_INSTRUCTION_GRANULARITY,
            instruction_format=2,
            instruction_format_version=1,
        )
        self._contexts: set[FakeXdnaContext] = set()
        self._columns_used = 0
        self._array = threading.Lock()
        self._owner: FakeXdnaContext | None = None
        #: How often the array switched between contexts (time-slicing).
        self.context_switches = 0

    def memory_scopes(self) -> list[MemoryScope]:
        return []

    def create_context(self, columns: int, *, origin: int | None = None, modes: XdnaSchedulingMode = XdnaSchedulingMode.SPATIAL | XdnaSchedulingMode.TIME_SLICED) -> FakeXdnaContext:
        call = "xdna.context_create"
        if self.destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "device destroyed")
        if not isinstance(columns, int) or not self.info.minimum_columns <= columns <= self.info.maximum_columns:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"{columns!r} columns ({self.info.minimum_columns}..{self.info.maximum_columns})")
        if not modes or int(modes) & ~int(self.info.scheduling_modes):
            raise fail(call, StatusCode.UNSUPPORTED, f"scheduling modes {modes!r}; the device admits {self.info.scheduling_modes!r}")
        if origin not in (None, 0):
            raise fail(call, StatusCode.UNSUPPORTED, f"origin {origin}: fixed placement covers the full array from column 0")
        with self.provider._lock:
            if modes & XdnaSchedulingMode.SPATIAL and self._columns_used + columns <= self.info.column_count:
                mode = XdnaSchedulingMode.SPATIAL
                self._columns_used += columns
            elif modes & XdnaSchedulingMode.TIME_SLICED:
                mode = XdnaSchedulingMode.TIME_SLICED
            else:
                raise fail(call, StatusCode.RESOURCE_EXHAUSTED, f"{columns} columns requested, {self.info.column_count - self._columns_used} free and time-slicing not acceptable")
        context = FakeXdnaContext(self.provider, self, columns, mode, 0)
        self._contexts.add(context)
        return context

    def _release_context(self, context: FakeXdnaContext) -> None:
        with self.provider._lock:
            self._contexts.discard(context)
            if context.info.scheduling_mode == XdnaSchedulingMode.SPATIAL:
                self._columns_used -= context.info.columns

    def run_on_array(self, context: FakeXdnaContext, work: Callable[[], None]) -> None:
        """Run one submission; time-sliced contexts take turns on the array."""
        with self._array:
            if self._owner is not context:
                if self._owner is not None:
                    self.context_switches += 1
                self._owner = context
            work()

    def destroy(self) -> None:
        call = "device_destroy"
        if self.destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "device already destroyed")
        if self._contexts:
            raise fail(call, StatusCode.BUSY, f"{len(self._contexts)} context(s) still live")
        self.destroyed = True
        self.endpoint._devices.discard(self)

    def _lose(self) -> None:
        self.lost = True
        for context in list(self._contexts):
            for queue in list(context._queues):
                with queue._cond:
                    if queue.state.name == "ACTIVE":
                        from ..constants import QueueState

                        queue.state, queue.terminal, queue.detail = QueueState.DEVICE_LOST, STATUS_DEVICE_LOST, f"{queue.name}: device lost"
                    queue._cond.notify_all()


class FakeEndpoint(Endpoint):
    def __init__(self, provider: FakeProvider, kind: EngineKind) -> None:
        self.provider = provider
        gpu = kind == EngineKind.GPU
        families = facts.GPU_QUEUE_FAMILIES if gpu else facts.NPU_QUEUE_FAMILIES
        self.info = EndpointInfo(
            id=facts.ENDPOINT_IDS[kind],
            engine_kind=kind,
            name=facts.GPU_NAME if gpu else facts.NPU_NAME,
            pci=facts.GPU_PCI if gpu else facts.NPU_PCI,
            queue_family_count=len(families),
            type_flags=0b0110 if gpu else 0b0100,
        )
        self._families = families
        self._devices: set[Any] = set()
        self.closed = False

    def queue_families(self) -> tuple[QueueFamilyInfo, ...]:
        return self._families

    def gpu_info(self) -> GpuEndpointInfo:
        if self.info.engine_kind != EngineKind.GPU:
            raise fail("gpu.endpoint_query_info", StatusCode.UNSUPPORTED, "not a GPU endpoint")
        return facts.GPU_ENDPOINT

    def xdna_info(self) -> XdnaEndpointInfo:
        if self.info.engine_kind != EngineKind.XDNA:
            raise fail("xdna.endpoint_query_info", StatusCode.UNSUPPORTED, "not an XDNA endpoint")
        return XdnaEndpointInfo(facts.NPU_ARCHITECTURE, facts.NPU_TARGET_ID)

    def create_gpu_device(self) -> FakeGpuDevice:
        self.gpu_info()
        if self.closed:
            raise fail("gpu.device_create", StatusCode.INVALID_ARGUMENT, "endpoint closed")
        device = FakeGpuDevice(self.provider, self)
        self._devices.add(device)
        return device

    def create_xdna_device(self) -> FakeXdnaDevice:
        self.xdna_info()
        if self.closed:
            raise fail("xdna.device_create", StatusCode.INVALID_ARGUMENT, "endpoint closed")
        device = FakeXdnaDevice(self.provider, self)
        self._devices.add(device)
        return device

    def close(self) -> None:
        if self._devices:
            raise fail("endpoint_close", StatusCode.BUSY, f"{len(self._devices)} device(s) still live")
        self.closed = True


class FakeProvider(Provider):
    """The simulated Strix Halo (see the module docstring)."""

    name = "fake"
    abi_version = 5

    def __init__(self, options: FakeOptions | None = None) -> None:
        self.options = options or FakeOptions()
        self._lock = threading.RLock()
        self._device_ids = itertools.count(1)
        self._spaces = {kind: AddressSpace(kind) for kind in AddressKind}
        self._memory_changed = threading.Condition()
        self._doorbells = itertools.count(0x0000_7F00_0000_0000, 8)
        self.code_objects = CodeObjects()
        self.npu_programs = NpuPrograms()
        self.faults = Faults(self)
        self.shared_aperture = facts.SHARED_APERTURE
        self.private_aperture = facts.PRIVATE_APERTURE
        coherent_flags = MemoryFlag.HOST_VISIBLE | MemoryFlag.HOST_COHERENT | MemoryFlag.DEVICE_ADDRESS
        profiles = (
            _profile(SYSTEM_CACHED, MemoryClass.SYSTEM, MemoryFlag.HOST_VISIBLE | MemoryFlag.DEVICE_ADDRESS, _SYSTEM_FLAGS, HostCacheability.WRITE_BACK, self.options.gtt_bytes, _SHARE_ROLES),
            _profile(SYSTEM_COHERENT, MemoryClass.SYSTEM, coherent_flags, _SYSTEM_FLAGS, HostCacheability.WRITE_BACK, self.options.gtt_bytes, _SHARE_ROLES),
        )
        self._system = FakeScope(self, ScopeInfo(ScopeKind.SYSTEM, b"\0" * 16, profiles), [self.options.gtt_bytes])
        self._endpoints = [FakeEndpoint(self, EngineKind.GPU), FakeEndpoint(self, EngineKind.XDNA)]
        self.closed = False

    # -- Provider API ------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "fake",
            "abi_version": self.abi_version,
            "note": "simulated Strix Halo (gfx1151 + NPU5): a test fixture that checks and executes commands; not hardware",
            "endpoints": [e.info.name for e in self._endpoints],
        }

    def endpoints(self) -> list[Endpoint]:
        if self.closed:
            raise fail("endpoint_enumerate", StatusCode.INVALID_ARGUMENT, "provider closed")
        return list(self._endpoints)

    def system_scopes(self) -> list[MemoryScope]:
        return [self._system]

    def close(self) -> None:
        for endpoint in self._endpoints:
            if endpoint._devices:
                raise fail("instance_destroy", StatusCode.BUSY, f"{endpoint.info.name}: {len(endpoint._devices)} device(s) still live")
        self.closed = True

    def shutdown(self) -> None:
        """Stop every command processor and NPU worker at once (test teardown; skips
        the ordering checks of ``destroy``)."""
        for endpoint in self._endpoints:
            for device in list(endpoint._devices):
                queues = list(getattr(device, "_queues", ())) + [q for c in getattr(device, "_contexts", ()) for q in c._queues]
                for queue in queues:
                    with queue._cond:
                        queue._stopping = True
                        queue._cond.notify_all()
        self._wake_waiters()

    # -- simulation-only calls ----------------------------------------------------------------

    def register_code_object(self, memory: FakeMemory, offset: int, code: bytes, references: Mapping[str, KernelReference]) -> None:
        """Tell the simulation that ``code`` (an AMDGPU code object) was loaded into
        ``memory`` at ``offset``, and which reference runs each of its kernels.

        The load image must already be in place (segments at the base, relocations
        applied); dispatches check it again, so a later overwrite is caught."""
        from ..codeobject import CodeObject

        if not isinstance(memory, FakeMemory) or not memory.alive:
            raise fail("register_code_object", StatusCode.INVALID_ARGUMENT, "memory is not live memory of the simulation")
        gpu_access = next((a for a in memory.accesses if isinstance(a.device, FakeGpuDevice)), None)
        if gpu_access is None:
            raise fail("register_code_object", StatusCode.INVALID_ARGUMENT, "memory has no GPU access")
        parsed = code if isinstance(code, CodeObject) else CodeObject(bytes(code))
        base = gpu_access.addresses[AddressKind.GPU] + offset
        loaded = LoadedCodeObject(base=base, code=parsed, memory=memory, references=dict(references))
        try:
            check_loaded(self, loaded, gpu_access.device)
        except KernelFault as exc:
            raise fail("register_code_object", StatusCode.INVALID_ARGUMENT, str(exc)) from None
        self.code_objects.register(loaded)

    def describe_kernargs(self, address: int, extents: Sequence[tuple[int, int]]) -> None:
        """Record (pointer, byte length) of each pointer argument packed at the kernarg
        block ``address``, so the kernel's reference gets views of the right length."""
        self.code_objects.describe_kernargs(address, extents)

    def register_npu_program(
        self,
        name: str,
        template: bytes,
        patches: Sequence[tuple[int, int]],
        bindings: Sequence[NpuBinding],
        reference: Callable[[list[Any]], None],
        *,
        columns: int = 1,
    ) -> NpuProgram:
        """Tell the simulation how to recognise and run a program's instruction streams."""
        program = NpuProgram(name, bytes(template), tuple((int(o), int(i)) for o, i in patches), tuple(bindings), reference, columns)
        for offset, index in program.patches:
            if not 0 <= offset <= len(program.template) - 8 or not 0 <= index < len(program.bindings):
                raise fail("register_npu_program", StatusCode.INVALID_ARGUMENT, f"patch site ({offset}, {index}) outside the template or the bindings")
        self.npu_programs.register(program)
        return program

    def npu_families(self) -> tuple[QueueFamilyInfo, ...]:
        return facts.NPU_QUEUE_FAMILIES

    # -- internals used by the simulation ------------------------------------------------------

    def address_space(self, kind: AddressKind) -> AddressSpace:
        return self._spaces[AddressKind(kind)]

    def _internal_memory(self, device: FakeGpuDevice, nbytes: int) -> FakeMemory:
        return self._system.create(nbytes, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(device)], flags=MemoryFlag.QUEUE_STORAGE)

    def _next_doorbell(self) -> int:
        return next(self._doorbells)

    def _memory_destroyed(self, memory: FakeMemory) -> None:
        self.code_objects.forget_memory(memory)
        backing = memory.backing
        with backing.lock:
            last = backing.references == 0
        if last and hasattr(backing, "release"):
            backing.release()

    def _wake_waiters(self) -> None:
        with self._memory_changed:
            self._memory_changed.notify_all()

    def _wait_for_memory(self, timeout: float) -> None:
        with self._memory_changed:
            self._memory_changed.wait(timeout)


__all__ = [
    "FakeProvider",
    "FakeOptions",
    "FakeEndpoint",
    "FakeGpuDevice",
    "FakeXdnaDevice",
    "FakeScope",
    "FakeMemory",
    "KernelReference",
    "NpuBinding",
    "NpuProgram",
    "SYSTEM_CACHED",
    "SYSTEM_COHERENT",
    "AmdfError",
]
