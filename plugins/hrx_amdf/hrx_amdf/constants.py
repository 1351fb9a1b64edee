"""libamdf enumerations and flags as Python enums.

Values come from libamdf's public headers (ROCm/hrx-system, ``libamdf/include/amdf``).
Each enum records the C prefix of its members in :data:`C_NAMES`, so the ABI test
checks every member against ``../shared/reference/libamdf-abi.json`` (for instance
``QueueRole.TRANSFER`` against ``AMDF_QUEUE_ROLE_TRANSFER``). Both providers (libamdf
and the simulated Strix Halo) and both AMD engines use these and nothing else.
"""

from __future__ import annotations

import enum

#: ABI versions this binding understands (``AMDF_ABI_VERSION_*``). We negotiate the
#: newest in [MIN_ABI_VERSION, TARGET_ABI_VERSION]; version 5 adds notification types
#: to kernel queue info, which the engines use for host waits.
MIN_ABI_VERSION = 5
TARGET_ABI_VERSION = 5
GPU_EXTENSION_VERSION = 1
XDNA_EXTENSION_VERSION = 1

TIMEOUT_INFINITE = 2**64 - 1
PHYSICAL_COLUMN_ORIGIN_ANY = 2**32 - 1
KERNEL_QUEUE_DEFAULT_PENDING_SUBMISSION_COUNT = 4096
PM4_QUEUE_FORMAT_VERSION = 1
SDMA_QUEUE_FORMAT_VERSION = 1
XDNA_QUEUE_FORMAT_VERSION = 1
XDNA_TRANSACTION_FORMAT_VERSION_0_1 = 1


class StatusDomain(enum.IntEnum):
    API = 0
    NTSTATUS = 1
    FIRMWARE = 2
    ERRNO = 3
    WIN32 = 4
    HRESULT = 5


class StatusCode(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    OUT_OF_RANGE = 2
    UNSUPPORTED = 3
    NOT_FOUND = 4
    RESOURCE_EXHAUSTED = 5
    BUSY = 6
    DEADLINE_EXCEEDED = 7
    PERMISSION_DENIED = 8
    DEVICE_LOST = 9
    VERSION_MISMATCH = 10
    BUFFER_TOO_SMALL = 11
    FAILED_PRECONDITION = 12
    INTERNAL = 13


class Extension(enum.IntEnum):
    XDNA = 1
    GPU = 2


class EngineKind(enum.IntEnum):
    UNKNOWN = 0
    GPU = 1
    XDNA = 2


class EndpointTypeFlag(enum.IntFlag):
    DISPLAY_SUPPORTED = 1
    RENDER_SUPPORTED = 2
    COMPUTE_ONLY = 4
    SOFTWARE_DEVICE = 8


class MemoryClass(enum.IntEnum):
    UNKNOWN = 0
    SYSTEM = 1
    LOCAL = 2
    PRIVATE = 3


class MemoryFlag(enum.IntFlag):
    HOST_VISIBLE = 1 << 0
    DEVICE_LOCAL = 1 << 1
    SHAREABLE = 1 << 2
    QUEUE_STORAGE = 1 << 3
    HOST_COHERENT = 1 << 4
    DEVICE_ADDRESS = 1 << 5


class MemoryAccess(enum.IntFlag):
    READ = 1 << 0
    WRITE = 1 << 1
    EXECUTE = 1 << 2


class AddressKind(enum.IntEnum):
    GPU = 0
    XDNA_DMA = 1
    XDNA_FIRMWARE = 2


class MapFlag(enum.IntFlag):
    READ = 1 << 0
    WRITE = 1 << 1


class ProfileRole(enum.IntFlag):
    CREATE = 1 << 0
    REGISTER = 1 << 1
    IMPORT = 1 << 2
    EXPORT = 1 << 3
    HOST_MAP = 1 << 4
    MAPPING_SOURCE = 1 << 5
    MAPPING_TARGET = 1 << 6


class ExternalMemoryType(enum.IntEnum):
    NONE = 0
    DMA_BUF_FD = 1
    OPAQUE_FD = 2
    D3D12_RESOURCE = 3
    HOST_POINTER = 4
    DEVICE_ADDRESS = 5


class HostCacheability(enum.IntEnum):
    UNKNOWN = 0
    WRITE_BACK = 2
    WRITE_COMBINED = 3
    UNCACHED = 4


class ScopeKind(enum.IntEnum):
    SYSTEM = 0
    LOCAL = 1
    PRIVATE = 2


class HostCacheOperation(enum.IntEnum):
    NONE = 0
    FLUSH = 1
    INVALIDATE = 2


class AtomicScope(enum.IntEnum):
    NONE = 0
    DEVICE = 1
    FABRIC = 2
    SYSTEM = 3


class NativeEventType(enum.IntEnum):
    NONE = 0
    EVENTFD = 1
    WIN32_EVENT = 2


class CommandType(enum.IntEnum):
    UNKNOWN = 0
    GPU_PM4 = 1
    GPU_SDMA = 2
    GPU_AQL = 3
    XDNA = 4
    GPU_AQL_METADATA = 5


class PublicationMode(enum.IntFlag):
    USER = 1 << 0
    KERNEL = 1 << 1


class QueueRole(enum.IntFlag):
    COMPUTE = 1 << 0
    TRANSFER = 1 << 1
    ATOMIC = 1 << 2
    CACHE_CONTROL = 1 << 3
    VIRTUAL_MEMORY = 1 << 4


class ProducerMode(enum.IntEnum):
    SINGLE = 1
    MULTI = 2


class QueuePriority(enum.IntEnum):
    LOW = 1
    NORMAL = 2
    HIGH = 3


class UserQueueCapability(enum.IntFlag):
    HOST_PRODUCER = 1 << 0
    DEVICE_PRODUCER = 1 << 1


class QueueState(enum.IntEnum):
    ACTIVE = 1
    FAILED = 2
    DEVICE_LOST = 3


class GpuDeviceFeature(enum.IntFlag):
    HOST_REGISTRATION = 1 << 0
    DEVICE_RECREATION = 1 << 1
    LOCAL_MEMORY = 1 << 2
    HOST_VISIBLE_LOCAL_MEMORY = 1 << 3


class Pm4FormatFeature(enum.IntFlag):
    ACQUIRE_MEM_GCR = 1 << 0


class SdmaFormatFeature(enum.IntFlag):
    GCR = 1 << 0
    FENCE_SYSTEM = 1 << 1
    MEMORY_SCOPE = 1 << 2


class XdnaArchitecture(enum.IntEnum):
    UNKNOWN = 0
    AIE2 = 1
    AIE2P = 2
    AIE4 = 3


class XdnaSchedulingMode(enum.IntFlag):
    EXCLUSIVE = 1 << 0
    SPATIAL = 1 << 1
    TIME_SLICED = 1 << 2


class XdnaPlacementMode(enum.IntFlag):
    FIXED_FULL_ARRAY = 1 << 0


class XdnaBinaryFormat(enum.IntEnum):
    UNKNOWN = 0
    TRANSACTION = 2


#: The C prefix of each enum's members (``AMDF_<prefix>_<MEMBER>``).
C_NAMES: dict[type[enum.Enum], str] = {
    StatusDomain: "STATUS_DOMAIN",
    StatusCode: "STATUS_CODE",
    Extension: "EXTENSION",
    EngineKind: "ENGINE_KIND",
    EndpointTypeFlag: "ENDPOINT_TYPE_FLAG",
    MemoryClass: "MEMORY_CLASS",
    MemoryFlag: "MEMORY_FLAG",
    MemoryAccess: "MEMORY_ACCESS",
    AddressKind: "MEMORY_ADDRESS",
    MapFlag: "MEMORY_MAP_FLAG",
    ProfileRole: "MEMORY_PROFILE_ROLE",
    ExternalMemoryType: "EXTERNAL_MEMORY_TYPE",
    HostCacheability: "HOST_CACHEABILITY",
    ScopeKind: "MEMORY_SCOPE_KIND",
    HostCacheOperation: "HOST_CACHE_OPERATION",
    AtomicScope: "ATOMIC_SCOPE",
    NativeEventType: "NATIVE_EVENT_TYPE",
    CommandType: "QUEUE_COMMAND_TYPE",
    PublicationMode: "QUEUE_PUBLICATION_MODE",
    QueueRole: "QUEUE_ROLE",
    ProducerMode: "QUEUE_PRODUCER_MODE",
    QueuePriority: "QUEUE_PRIORITY",
    UserQueueCapability: "USER_QUEUE_CAPABILITY",
    QueueState: "QUEUE_STATE",
    GpuDeviceFeature: "GPU_DEVICE_FEATURE",
    Pm4FormatFeature: "GPU_PM4_FORMAT_FEATURE",
    SdmaFormatFeature: "GPU_SDMA_FORMAT_FEATURE",
    XdnaArchitecture: "XDNA_ARCHITECTURE",
    XdnaSchedulingMode: "XDNA_SCHEDULING_MODE",
    XdnaPlacementMode: "XDNA_PLACEMENT_MODE",
    XdnaBinaryFormat: "XDNA_BINARY_FORMAT",
}

#: Module constants checked against the ABI file's #defines.
C_DEFINES: dict[str, int] = {
    "AMDF_ABI_VERSION_LATEST": TARGET_ABI_VERSION,
    "AMDF_GPU_EXTENSION_VERSION_LATEST": GPU_EXTENSION_VERSION,
    "AMDF_XDNA_EXTENSION_VERSION_LATEST": XDNA_EXTENSION_VERSION,
    "AMDF_TIMEOUT_INFINITE": TIMEOUT_INFINITE,
    "AMDF_XDNA_PHYSICAL_COLUMN_ORIGIN_ANY": PHYSICAL_COLUMN_ORIGIN_ANY,
    "AMDF_KERNEL_QUEUE_DEFAULT_PENDING_SUBMISSION_COUNT": KERNEL_QUEUE_DEFAULT_PENDING_SUBMISSION_COUNT,
    "AMDF_GPU_PM4_QUEUE_FORMAT_VERSION_1": PM4_QUEUE_FORMAT_VERSION,
    "AMDF_GPU_SDMA_QUEUE_FORMAT_VERSION_1": SDMA_QUEUE_FORMAT_VERSION,
    "AMDF_XDNA_QUEUE_FORMAT_VERSION_1": XDNA_QUEUE_FORMAT_VERSION,
    "AMDF_XDNA_TRANSACTION_FORMAT_VERSION_0_1": XDNA_TRANSACTION_FORMAT_VERSION_0_1,
}
