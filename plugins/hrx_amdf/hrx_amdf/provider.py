"""One Python interface over libamdf's object model, with two implementations.

libamdf (ROCm/hrx-system, ``libamdf/``) is a low-level provider: instance ->
endpoints -> devices -> memory scopes and profiles -> memory (create, import,
export, host mapping) -> queues (user queues published through a caller-mapped ring,
read/write indices and a doorbell; kernel-mediated queues with bounded pending
submissions) -> native events. It never encodes commands: the AMD engines write
PM4, SDMA, AQL and XDNA commands themselves.

:class:`Provider` mirrors that model one call per libamdf entry point, in Python
shapes (attrs records for the info structures, numpy arrays over host mappings,
exceptions from :mod:`hrx_amdf.errors` for statuses). Implementations:

* :class:`hrx_amdf.native.LibamdfProvider` -- libamdf through cffi, on a Strix Halo.
* :class:`hrx_amdf.fake.FakeProvider` -- a simulated Strix Halo (gfx1151 + NPU5)
  that executes and checks what an engine writes; a test fixture, not hardware.

Rules every implementation keeps (the engines rely on them):

* A failed call raises an :class:`~hrx_amdf.errors.AmdfError` subclass and changes
  nothing, as libamdf's "failure leaves outputs unchanged" contracts say.
* Objects are destroyed explicitly (``destroy()``/``close()``), children first;
  destroying a parent with live children raises :class:`~hrx_amdf.errors.AmdfBusy`.
* Host mappings are numpy ``uint8`` arrays over the mapped bytes; they stay valid
  until the mapping is destroyed. The doorbell is written only through
  :meth:`Doorbell.write`, after the write index (the queue formats' publication
  order).
* Waits take nanoseconds (``TIMEOUT_INFINITE`` for none) and raise
  :class:`~hrx_amdf.errors.AmdfTimeout` when the deadline passes; a timeout never
  cancels work.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from .constants import (
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
    ProducerMode,
    ProfileRole,
    PublicationMode,
    QueuePriority,
    QueueRole,
    QueueState,
    ScopeKind,
    XdnaArchitecture,
    XdnaSchedulingMode,
)

# --------------------------------------------------------------------------- records


@attrs.frozen
class PciInfo:
    vendor_id: int
    device_id: int
    subsystem_vendor_id: int = 0
    subsystem_device_id: int = 0
    revision_id: int = 0


@attrs.frozen
class EndpointInfo:
    """``amdf_endpoint_info_t``: identity of one selectable endpoint."""

    id: bytes  # 16 opaque bytes
    engine_kind: EngineKind
    name: str
    pci: PciInfo
    queue_family_count: int
    type_flags: int = 0


@attrs.frozen
class QueueFamilyInfo:
    """``amdf_queue_family_info_t``: what queues of one family accept."""

    ordinal: int
    command_type: CommandType
    publication_modes: PublicationMode
    format_version: int
    format_features: int
    roles: QueueRole
    producer_modes: int = 0
    priority_capabilities: int = 0
    minimum_ring_bytes: int = 0
    maximum_ring_bytes: int = 0
    ring_alignment: int = 0


@attrs.frozen
class GpuEndpointInfo:
    """``amdf_gpu_endpoint_info_t``: gfx IP, compute geometry and topology."""

    gfx_ip: tuple[int, int, int]
    asic_revision: int
    wavefront_size: int
    compute_unit_count: int
    max_waves_per_cu: int
    max_scratch_waves_per_cu: int
    lds_bytes: int
    xcc_count: int
    shader_engines_per_xcc: int

    @property
    def target(self) -> str:
        """The LLVM target name (``gfx1151`` for gfx IP 11.5.1)."""
        major, minor, stepping = self.gfx_ip
        return f"gfx{major}{minor:x}{stepping:x}"


@attrs.frozen
class GpuDeviceInfo:
    """``amdf_gpu_device_info_t``."""

    id: bytes
    reset_epoch: int
    features: int


@attrs.frozen
class XdnaEndpointInfo:
    """``amdf_xdna_endpoint_info_t``."""

    architecture: XdnaArchitecture
    target_id: str


@attrs.frozen
class XdnaDeviceInfo:
    """``amdf_xdna_device_info_t``: array geometry, context and instruction limits."""

    id: bytes
    reset_epoch: int
    placement_modes: int
    column_origin: int
    column_count: int
    row_count: int
    column_stride: int
    scheduling_modes: XdnaSchedulingMode
    minimum_columns: int
    maximum_columns: int
    column_granularity: int
    instruction_max_bytes: int
    instruction_alignment: int
    instruction_granularity: int
    instruction_format: int
    instruction_format_version: int


@attrs.frozen
class XdnaContextInfo:
    """``amdf_xdna_context_info_t``."""

    id: bytes
    device_id: bytes
    reset_epoch: int
    scheduling_mode: XdnaSchedulingMode
    columns: int
    rows: int


@attrs.frozen
class MemoryProfile:
    """``amdf_memory_profile_t``, reduced to what the engines choose by."""

    ordinal: int
    memory_class: MemoryClass
    roles: ProfileRole
    guaranteed_flags: MemoryFlag
    supported_flags: MemoryFlag
    maximum_bytes: int
    granularity: int
    minimum_alignment: int
    maximum_alignment: int
    #: Host cacheability of mappings created through this profile.
    host_cacheability: HostCacheability = HostCacheability.UNKNOWN
    #: External memory types this profile imports and exports.
    imports: frozenset[ExternalMemoryType] = frozenset()
    exports: frozenset[ExternalMemoryType] = frozenset()


@attrs.frozen
class ScopeInfo:
    """``amdf_memory_scope_info_t`` with its profiles."""

    kind: ScopeKind
    physical_endpoint_id: bytes
    profiles: tuple[MemoryProfile, ...]


@attrs.frozen
class DeviceAccess:
    """One requested device consumer of a memory (``amdf_memory_device_access_t``)."""

    device: Device
    access: MemoryAccess = MemoryAccess.READ | MemoryAccess.WRITE
    #: Properties this consumer's access must have (e.g. ``HOST_COHERENT``).
    flags: MemoryFlag = MemoryFlag(0)
    #: Address kinds this consumer needs (GPU, or XDNA_DMA/XDNA_FIRMWARE).
    address_kinds: frozenset[AddressKind] = frozenset({AddressKind.GPU})


@attrs.frozen
class MemoryInfo:
    """``amdf_memory_info_t``."""

    profile: int
    memory_class: MemoryClass
    access_count: int
    flags: MemoryFlag
    nbytes: int
    alignment: int
    native_bytes: int


@attrs.frozen
class CacheTransition:
    """``amdf_cache_transition_t``: how one release/acquire is carried out."""

    kind: int  # 0 unknown, 1 none, 2 range, 3 global
    executor: int  # 0 none, 1 queue, 2 program, 3 host direct, 4 host api
    operation: int
    host_operation: HostCacheOperation = HostCacheOperation.NONE

    @property
    def needed(self) -> bool:
        return self.kind not in (0, 1)


@attrs.frozen
class HostMappingInfo:
    """``amdf_host_mapping_info_t``."""

    flags: MapFlag
    cacheability: HostCacheability
    address: int
    offset: int
    nbytes: int
    cache_line_size: int
    flush: CacheTransition
    invalidate: CacheTransition


@attrs.frozen
class PairInfo:
    """``amdf_memory_pair_info_t``: reach and visibility from producer to consumer."""

    reachable: bool
    release: CacheTransition
    acquire: CacheTransition
    atomic_scope_32: AtomicScope
    atomic_scope_64: AtomicScope


@attrs.frozen
class DeviceSite:
    """A device access (by ordinal) used from one queue family."""

    memory: Memory
    access_ordinal: int = 0
    queue_family: int = 0


@attrs.frozen
class HostSite:
    """A host mapping."""

    mapping: HostMapping


@attrs.frozen
class UserQueueInfo:
    """``amdf_user_queue_info_t``."""

    queue_id: bytes
    family: int
    command_type: CommandType
    format_version: int
    format_features: int
    producer_mode: ProducerMode
    priority: QueuePriority
    roles: QueueRole
    ring_bytes: int


@attrs.frozen
class UserQueueMappingInfo:
    """``amdf_user_queue_mapping_info_t``: producer-local addresses."""

    ring_address: int
    ring_bytes: int
    read_index_address: int
    write_index_address: int
    doorbell_address: int
    index_bits: int
    doorbell_bits: int


@attrs.frozen
class UserQueueStatus:
    """``amdf_user_queue_status_t``. ``terminal`` is the sticky failure status (0 while
    ACTIVE); ``consumed_index`` is the monotonic consumed frontier."""

    state: QueueState
    reset_epoch: int
    producer_index: int
    consumed_index: int
    terminal: int
    #: What failed, in words, where the provider knows (the simulation does).
    detail: str = ""


@attrs.frozen
class KernelQueueInfo:
    """``amdf_kernel_queue_info_t``."""

    family: int
    command_type: CommandType
    maximum_pending: int
    maximum_commands: int
    notification_types: int


@attrs.frozen
class KernelQueueStatus:
    """``amdf_kernel_queue_status_t``."""

    retired_submission: int
    state: QueueState
    terminal: int
    #: What failed, in words, where the provider knows (the simulation does).
    detail: str = ""


@attrs.frozen
class KernelCommand:
    """One immutable command range (``amdf_gpu_kernel_command_t`` /
    ``amdf_xdna_kernel_command_t``)."""

    memory: Memory
    offset: int
    nbytes: int
    access_ordinal: int = 0


@attrs.frozen
class Scratch:
    """``amdf_gpu_queue_scratch_t``: scratch backing borrowed by a compute queue."""

    memory: Memory
    offset: int
    nbytes: int
    max_private_bytes: int
    max_waves: int
    access_ordinal: int = 0


# --------------------------------------------------------------------------- objects


class ExternalMemory(abc.ABC):
    """A move-owned export (``amdf_external_memory_t``): a dma-buf on Linux.
    Import consumes it; otherwise :meth:`release` it once."""

    type: ExternalMemoryType
    nbytes: int
    source_offset: int

    @abc.abstractmethod
    def release(self) -> None:
        """Release the payload if it was not imported (idempotent)."""


class HostMapping(abc.ABC):
    """An explicit host mapping of one memory range."""

    info: HostMappingInfo
    #: The mapped bytes (writable when mapped with WRITE).
    array: np.ndarray

    @abc.abstractmethod
    def cache_control(self, operation: HostCacheOperation, offset: int, nbytes: int) -> None:
        """Flush (publish host writes) or invalidate (see device writes) a range."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """End host access; ``array`` must not be used afterwards."""


class Memory(abc.ABC):
    """Physical backing with its established device accesses (``amdf_memory_t``)."""

    info: MemoryInfo

    @property
    def nbytes(self) -> int:
        return self.info.nbytes

    @abc.abstractmethod
    def address(self, access_ordinal: int = 0, kind: AddressKind = AddressKind.GPU) -> int:
        """The stable address ``kind`` consumers use for byte zero."""

    @abc.abstractmethod
    def map(self, offset: int = 0, nbytes: int | None = None, flags: MapFlag = MapFlag.READ | MapFlag.WRITE) -> HostMapping:
        """Create a host mapping (the memory must be HOST_VISIBLE)."""

    @abc.abstractmethod
    def export(
        self, type: ExternalMemoryType = ExternalMemoryType.DMA_BUF_FD, offset: int = 0, nbytes: int | None = None
    ) -> ExternalMemory:
        """Export a range for another device's import."""

    @abc.abstractmethod
    def pair_info(self, producer: DeviceSite | HostSite, consumer: DeviceSite | HostSite) -> PairInfo:
        """Directional reach and release/acquire recipe between two sites of this backing."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """Release the backing; every use (mappings, queued commands) must be over."""


class MemoryScope(abc.ABC):
    """A storage contract: system (GTT), local (VRAM carve-out) or context-private."""

    info: ScopeInfo

    def profiles(self) -> tuple[MemoryProfile, ...]:
        return self.info.profiles

    @abc.abstractmethod
    def create(
        self,
        nbytes: int,
        *,
        profile: int,
        accesses: Sequence[DeviceAccess],
        flags: MemoryFlag = MemoryFlag(0),
        alignment: int = 0,
    ) -> Memory:
        """``memory_create``: allocate backing with every listed access established."""

    @abc.abstractmethod
    def import_memory(
        self,
        external: ExternalMemory,
        *,
        profile: int,
        accesses: Sequence[DeviceAccess],
        flags: MemoryFlag = MemoryFlag(0),
    ) -> Memory:
        """``memory_import``: attach an exported backing (consumes ``external``)."""


class Doorbell(abc.ABC):
    """The write-only notification doorbell of a user queue mapping."""

    @abc.abstractmethod
    def write(self, value: int) -> None:
        """Release-store ``value`` (the just-published write index)."""


class UserQueueMapping(abc.ABC):
    """A host producer's view of a user queue: ring, indices and doorbell.

    ``ring`` is the ring's bytes (uint8). ``read_index`` and ``write_index`` are
    one-element uint64 arrays over the index storage (``index_bits`` wide). The units
    of the indices, the ring wrap and the publication order belong to the queue's
    command type and format version (see libamdf's gpu.h)."""

    info: UserQueueMappingInfo
    ring: np.ndarray
    read_index: np.ndarray
    write_index: np.ndarray
    doorbell: Doorbell

    @abc.abstractmethod
    def destroy(self) -> None:
        """Unmap (the producer has stopped publishing)."""


class UserQueue(abc.ABC):
    """A directly published queue (PM4, SDMA or AQL)."""

    info: UserQueueInfo

    @abc.abstractmethod
    def map(self) -> UserQueueMapping:
        """Map the queue for host publication."""

    @abc.abstractmethod
    def status(self) -> UserQueueStatus:
        """Sample progress and any sticky terminal failure (may ask the driver)."""

    @abc.abstractmethod
    def wait_consumed(self, index: int, timeout_ns: int, poll_ns: int = 0) -> None:
        """Wait until the queue consumed up to ``index`` (AmdfTimeout on the deadline).
        Consumption is not completion: completion needs a fence the engine writes."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """Destroy (mappings gone and everything published consumed, else AmdfBusy)."""


class KernelQueue(abc.ABC):
    """A kernel-mediated queue: bounded submissions of immutable command ranges."""

    info: KernelQueueInfo

    @abc.abstractmethod
    def submit(self, commands: Sequence[KernelCommand]) -> int:
        """Publish commands; returns an increasing completion point. AmdfBusy when
        the pending window is full after one progress check."""

    @abc.abstractmethod
    def status(self) -> KernelQueueStatus:
        """Read-only snapshot of checked retirement (no native progress check)."""

    @abc.abstractmethod
    def refresh(self) -> KernelQueueStatus:
        """Refresh native progress, check completed results, retire them."""

    @abc.abstractmethod
    def wait(self, submission: int, timeout_ns: int, poll_ns: int = 0) -> None:
        """Wait for checked retirement of ``submission`` (AmdfTimeout on the deadline;
        the terminal failure of the queue as its error)."""

    @abc.abstractmethod
    def request_notification(self, submission: int, eventfd: int) -> None:
        """One-shot: add an eventfd credit once ``submission`` may have retired."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """Destroy after every accepted submission retired (else AmdfBusy)."""


class XdnaContext(abc.ABC):
    """A schedulable XDNA context of some logical columns."""

    info: XdnaContextInfo

    @abc.abstractmethod
    def placement(self) -> tuple[int, int]:
        """(physical column origin, physical width) of the fixed backing."""

    @abc.abstractmethod
    def memory_scopes(self) -> list[MemoryScope]:
        """The context's private scopes (instruction storage)."""

    @abc.abstractmethod
    def create_kernel_queue(self, family: int, *, max_pending: int = 0) -> KernelQueue:
        """A kernel queue submitting instruction ranges in this context."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """Destroy (queues first, else AmdfBusy)."""


class Device(abc.ABC):
    """A materialized device (GPU or XDNA) of one endpoint."""

    endpoint: Endpoint

    @abc.abstractmethod
    def memory_scopes(self) -> list[MemoryScope]:
        """Physical-local scopes reached through this device (e.g. VRAM carve-out)."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """Destroy (queues and contexts first, else AmdfBusy)."""


class GpuDevice(Device):
    info: GpuDeviceInfo

    @abc.abstractmethod
    def create_user_queue(
        self,
        family: int,
        *,
        ring_bytes: int = 0,
        priority: QueuePriority = QueuePriority.NORMAL,
        producer: ProducerMode = ProducerMode.SINGLE,
        scratch: Scratch | None = None,
    ) -> UserQueue:
        """A directly published PM4, SDMA or AQL queue of ``family``."""

    @abc.abstractmethod
    def create_kernel_queue(self, family: int, *, max_pending: int = 0) -> KernelQueue:
        """A kernel-mediated PM4 or SDMA queue."""


class XdnaDevice(Device):
    info: XdnaDeviceInfo

    @abc.abstractmethod
    def create_context(
        self,
        columns: int,
        *,
        origin: int | None = None,
        modes: XdnaSchedulingMode = XdnaSchedulingMode.SPATIAL | XdnaSchedulingMode.TIME_SLICED,
    ) -> XdnaContext:
        """Admit a context of ``columns`` logical columns (``origin`` None: ANY)."""


class Endpoint(abc.ABC):
    """One selectable endpoint (query-only until a device is created)."""

    info: EndpointInfo

    @abc.abstractmethod
    def queue_families(self) -> tuple[QueueFamilyInfo, ...]:
        """Every queue family of the endpoint, by ordinal."""

    @abc.abstractmethod
    def gpu_info(self) -> GpuEndpointInfo:
        """GPU facts (AmdfUnsupported on an XDNA endpoint)."""

    @abc.abstractmethod
    def xdna_info(self) -> XdnaEndpointInfo:
        """XDNA identity (AmdfUnsupported on a GPU endpoint)."""

    @abc.abstractmethod
    def create_gpu_device(self) -> GpuDevice:
        """Materialize the GPU execution and address domain."""

    @abc.abstractmethod
    def create_xdna_device(self) -> XdnaDevice:
        """Materialize the XDNA ordinary address domain."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close after every device of it is destroyed."""

    def family(self, command_type: CommandType, mode: PublicationMode) -> QueueFamilyInfo | None:
        """The first family with ``command_type`` that supports publication ``mode``."""
        for family in self.queue_families():
            if family.command_type == command_type and family.publication_modes & mode:
                return family
        return None


class Provider(abc.ABC):
    """A libamdf instance (or its simulation)."""

    #: "libamdf" or "fake".
    name: str
    #: Negotiated ABI version of the API table.
    abi_version: int

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Facts for ``hrx doctor``: provider, version/ABI, library path, notes."""

    @abc.abstractmethod
    def endpoints(self) -> list[Endpoint]:
        """Every endpoint (opened; owned by the provider, closed with it)."""

    @abc.abstractmethod
    def system_scopes(self) -> list[MemoryScope]:
        """The instance's system-storage scopes (GTT on an APU)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Destroy the instance (endpoints first)."""

    def endpoint(self, kind: EngineKind, index: int = 0) -> Endpoint:
        """The ``index``-th endpoint of ``kind``."""
        from .errors import AmdfUnsupported
        from .errors import make_status

        found = [e for e in self.endpoints() if e.info.engine_kind == kind]
        if index >= len(found):
            raise AmdfUnsupported("endpoint_enumerate", make_status(3), f"no {kind.name} endpoint {index} ({len(found)} found)")
        return found[index]


__all__ = [
    "PciInfo",
    "EndpointInfo",
    "QueueFamilyInfo",
    "GpuEndpointInfo",
    "GpuDeviceInfo",
    "XdnaEndpointInfo",
    "XdnaDeviceInfo",
    "XdnaContextInfo",
    "MemoryProfile",
    "ScopeInfo",
    "DeviceAccess",
    "MemoryInfo",
    "CacheTransition",
    "HostMappingInfo",
    "PairInfo",
    "DeviceSite",
    "HostSite",
    "UserQueueInfo",
    "UserQueueMappingInfo",
    "UserQueueStatus",
    "KernelQueueInfo",
    "KernelQueueStatus",
    "KernelCommand",
    "Scratch",
    "ExternalMemory",
    "HostMapping",
    "Memory",
    "MemoryScope",
    "Doorbell",
    "UserQueueMapping",
    "UserQueue",
    "KernelQueue",
    "XdnaContext",
    "Device",
    "GpuDevice",
    "XdnaDevice",
    "Endpoint",
    "Provider",
]
