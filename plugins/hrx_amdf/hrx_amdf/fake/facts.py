"""What the simulated Strix Halo reports: one gfx1151 GPU endpoint and one NPU5.

The figures follow what libamdf reports on the real machine where the headers or its
gfx1151/XDNA providers state them (ROCm/hrx-system at 82892eae, cited per value):

* gfx IP 11.5.1, wave32, 32 waves per CU, one XCC
  (``libamdf/src/gpu/umd/kfd/target/gfx1151/pm4_queue.c``: the PM4 plan requires them);
* PM4 and SDMA user queues with 4096-byte rings, 64-bit indices and doorbells
  (the same file and ``.../gfx1151/sdma_queue.c``; SDMA IP 6.1.1 with the GCR
  format feature only);
* NPU5: PCI 1022:17f0 revision 0x11, AIE2P, target ``amd.xdna.strix_halo.17f0_11``,
  six rows, at most eight logical columns, AIE transaction format 0.1
  (``libamdf/cts/xdna/...`` fixtures).

Others are the Radeon 8060S's public figures (40 CUs, 64 KiB LDS per workgroup) or
choices of the simulation (memory sizes, the AQL ring, instruction limits), marked
as such. Sizes can be reduced with :class:`FakeOptions` so tests stay small.
"""

from __future__ import annotations

import attrs

from ..constants import (
    CommandType,
    EngineKind,
    Pm4FormatFeature,
    ProducerMode,
    PublicationMode,
    QueueRole,
    SdmaFormatFeature,
    XdnaArchitecture,
    XdnaSchedulingMode,
)
from ..provider import GpuEndpointInfo, PciInfo, QueueFamilyInfo

MiB = 1 << 20
GiB = 1 << 30

GPU_NAME = "AMD Radeon 8060S (gfx1151, simulated Strix Halo)"
NPU_NAME = "AMD NPU5 (XDNA2 17f0:11, simulated Strix Halo)"

GPU_PCI = PciInfo(vendor_id=0x1002, device_id=0x1586, revision_id=0xC1)
NPU_PCI = PciInfo(vendor_id=0x1022, device_id=0x17F0, revision_id=0x11)

GPU_ENDPOINT = GpuEndpointInfo(
    gfx_ip=(11, 5, 1),
    asic_revision=0,
    wavefront_size=32,
    compute_unit_count=40,
    max_waves_per_cu=32,
    max_scratch_waves_per_cu=32,
    lds_bytes=64 * 1024,
    xcc_count=1,
    shader_engines_per_xcc=2,
)

#: Ring sizes of the gfx1151 KFD plans (PM4, SDMA); the AQL ring is the simulation's.
PM4_RING_BYTES = 4096
SDMA_RING_BYTES = 4096
AQL_RING_BYTES = 64 * 64

#: Largest byte count of one SDMA COPY_LINEAR / CONST_FILL: the count field holds
#: bytes minus one in 30 bits (SDMA 6 packet layout).
SDMA_MAX_BYTES = 1 << 30
#: Largest byte count of one PM4 DMA_DATA: a 26-bit field.
DMA_DATA_MAX_BYTES = (1 << 26) - 1

_PRODUCER_SINGLE = 1 << ProducerMode.SINGLE
_PRIORITY_NORMAL = 1 << 2

GPU_QUEUE_FAMILIES = (
    QueueFamilyInfo(
        ordinal=0,
        command_type=CommandType.GPU_PM4,
        publication_modes=PublicationMode.USER,
        format_version=1,
        format_features=int(Pm4FormatFeature.ACQUIRE_MEM_GCR),
        roles=QueueRole.COMPUTE | QueueRole.TRANSFER | QueueRole.ATOMIC | QueueRole.CACHE_CONTROL,
        producer_modes=_PRODUCER_SINGLE,
        priority_capabilities=_PRIORITY_NORMAL,
        minimum_ring_bytes=PM4_RING_BYTES,
        maximum_ring_bytes=PM4_RING_BYTES,
        ring_alignment=PM4_RING_BYTES,
    ),
    QueueFamilyInfo(
        ordinal=1,
        command_type=CommandType.GPU_SDMA,
        publication_modes=PublicationMode.USER,
        format_version=1,
        format_features=int(SdmaFormatFeature.GCR),
        roles=QueueRole.TRANSFER | QueueRole.CACHE_CONTROL,
        producer_modes=_PRODUCER_SINGLE,
        priority_capabilities=_PRIORITY_NORMAL,
        minimum_ring_bytes=SDMA_RING_BYTES,
        maximum_ring_bytes=SDMA_RING_BYTES,
        ring_alignment=SDMA_RING_BYTES,
    ),
    QueueFamilyInfo(
        ordinal=2,
        command_type=CommandType.GPU_AQL,
        publication_modes=PublicationMode.USER,
        format_version=1,
        format_features=0,
        roles=QueueRole.COMPUTE | QueueRole.CACHE_CONTROL,
        producer_modes=_PRODUCER_SINGLE,
        priority_capabilities=_PRIORITY_NORMAL,
        minimum_ring_bytes=AQL_RING_BYTES,
        maximum_ring_bytes=1 << 16,
        ring_alignment=AQL_RING_BYTES,
    ),
)

NPU_QUEUE_FAMILIES = (
    QueueFamilyInfo(
        ordinal=0,
        command_type=CommandType.XDNA,
        publication_modes=PublicationMode.KERNEL,
        format_version=1,
        format_features=0,
        roles=QueueRole.COMPUTE,
        priority_capabilities=_PRIORITY_NORMAL,
    ),
)

NPU_ARCHITECTURE = XdnaArchitecture.AIE2P
NPU_TARGET_ID = "amd.xdna.strix_halo.17f0_11"
NPU_COLUMNS = 8
NPU_ROWS = 6
#: AIE2 tile addresses: column in bits 25+, row in bits 20-24.
NPU_COLUMN_STRIDE = 1 << 25
NPU_SCHEDULING = XdnaSchedulingMode.SPATIAL | XdnaSchedulingMode.TIME_SLICED
#: Pending submissions per NPU kernel queue (the spec's 128 per program).
NPU_MAX_PENDING = 128
#: Instruction ranges: the simulation's limits.
NPU_INSTRUCTION_MAX_BYTES = 64 * MiB
NPU_INSTRUCTION_ALIGNMENT = 64
NPU_INSTRUCTION_GRANULARITY = 4

#: Aperture bases a kernel's hidden_shared_base / hidden_private_base must carry.
SHARED_APERTURE = 0x1000_0000_0000_0000
PRIVATE_APERTURE = 0x2000_0000_0000_0000

ENDPOINT_IDS = {EngineKind.GPU: b"fake-gfx1151\0\0\0\0", EngineKind.XDNA: b"fake-npu5-17f0\0\0"}


@attrs.frozen
class FakeOptions:
    """Sizes of the simulated machine (tests shrink them)."""

    #: VRAM carve-out (LOCAL scope) in bytes.
    vram_bytes: int = 512 * MiB
    #: System memory the GTT scope hands out, in bytes.
    gtt_bytes: int = 8 * GiB
    #: Hand a shadow host cache to non-coherent system memory, so missing host cache
    #: maintenance shows up as wrong bytes (see fake.memory).
    model_host_cache: bool = True
    #: Seconds a blocked command-processor wait sleeps between polls of host memory.
    poll_seconds: float = 0.0005
