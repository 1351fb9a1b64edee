"""PM4 type-3 packets for gfx11 compute queues (the MEC), as pure functions to words.

Each function returns the packet's dwords as a list of ints. Layouts follow the gfx11
PM4 definitions; the register addresses and the gfx11 GCR profile are those libamdf's
conformance tests use (ROCm/hrx-system 659c2333, libamdf/cts/gpu/pm4/encoding/
commands.cc and profile.cc). Tests compare every function with literal words; the
simulated Strix Halo, which interprets these packets, has its own independent tables.
"""

from __future__ import annotations

from collections.abc import Sequence

MASK32 = 0xFFFFFFFF

# opcodes
NOP = 0x10
DISPATCH_DIRECT = 0x15
WRITE_DATA = 0x37
WAIT_REG_MEM = 0x3C
INDIRECT_BUFFER = 0x3F
EVENT_WRITE = 0x46
RELEASE_MEM = 0x49
DMA_DATA = 0x50
ACQUIRE_MEM = 0x58
SET_SH_REG = 0x76
WAIT_REG_MEM64 = 0x93

#: SET_SH_REG offsets count from this dword address.
SH_REG_BASE = 0x2C00
# gfx11 compute registers (dword addresses)
COMPUTE_START_X = 0x2E04
COMPUTE_NUM_THREAD_X = 0x2E07
COMPUTE_PGM_LO = 0x2E0C
COMPUTE_PGM_RSRC1 = 0x2E12
COMPUTE_RESOURCE_LIMITS = 0x2E15
COMPUTE_TMPRING_SIZE = 0x2E18
COMPUTE_PGM_RSRC3 = 0x2E28
COMPUTE_USER_DATA_0 = 0x2E40

#: COMPUTE_PGM_RSRC2.LDS_SIZE: bits 15-23, in 512-byte units on gfx11 compute.
LDS_SIZE_SHIFT = 15
LDS_SIZE_MASK = 0x1FF << LDS_SIZE_SHIFT
LDS_GRANULE = 512

# gfx11 GCR profile (PAL's): whole-cache acquire incl. I$, release before a
# system-visible marker (RELEASE_MEM's own GCR layout, unshifted), GL2 writeback only.
SYSTEM_ACQUIRE_GCR = (1 << 0) | (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 14) | (1 << 15)
SYSTEM_RELEASE_GCR = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 8) | (1 << 9)
GL2_WRITEBACK_GCR = 1 << 15

# events
CS_PARTIAL_FLUSH = 0x07
BOTTOM_OF_PIPE_TS = 0x28
END_OF_PIPE = 5

# WAIT_REG_MEM compare functions
LESS, LESS_EQUAL, EQUAL, NOT_EQUAL, GREATER_EQUAL, GREATER = 1, 2, 3, 4, 5, 6

# DISPATCH_INITIATOR bits
COMPUTE_SHADER_EN = 1 << 0
FORCE_START_AT_000 = 1 << 2
USE_THREAD_DIMENSIONS = 1 << 5
CS_W32_EN = 1 << 15


def header(opcode: int, dwords: int, *, compute: bool = False) -> int:
    """Type 3 (bits 30-31), COUNT = dwords - 2 (bits 16-29), opcode (8-15), SHADER_TYPE (1)."""
    if not 2 <= dwords <= 0x3FFF + 2:
        raise ValueError(f"a type-3 packet has 2..{0x3FFF + 2} dwords, not {dwords}")
    return (3 << 30) | ((dwords - 2) << 16) | (opcode << 8) | (2 if compute else 0)


def nop(dwords: int) -> list[int]:
    """A NOP of ``dwords`` dwords (at least 2)."""
    return [header(NOP, dwords)] + [0] * (dwords - 1)


def set_sh_reg(register: int, values: Sequence[int]) -> list[int]:
    """Set consecutive compute (SH) registers from ``register``."""
    if not values:
        raise ValueError("set_sh_reg needs at least one value")
    return [header(SET_SH_REG, len(values) + 2, compute=True), register - SH_REG_BASE, *(int(v) & MASK32 for v in values)]


def dispatch_direct(x: int, y: int, z: int, *, wave32: bool = True, thread_dimensions: bool = True) -> list[int]:
    """DISPATCH_DIRECT: ``x, y, z`` are work-items (``thread_dimensions``) or workgroups."""
    initiator = COMPUTE_SHADER_EN | FORCE_START_AT_000 | (USE_THREAD_DIMENSIONS if thread_dimensions else 0) | (CS_W32_EN if wave32 else 0)
    return [header(DISPATCH_DIRECT, 5, compute=True), x, y, z, initiator]


def release_mem(address: int, value: int = 0, *, data: str = "64", gcr: int = SYSTEM_RELEASE_GCR, int_sel: int = 3) -> list[int]:
    """RELEASE_MEM at end of pipe: cache actions ``gcr``, then write ``value``.

    ``data``: "64" (64-bit value), "32" (low 32 bits), "clock" (the GPU clock) or "none".
    ``int_sel`` 3 sends the data after write confirmation, without an interrupt."""
    data_sel = {"none": 0, "32": 1, "64": 2, "clock": 3}[data]
    if data_sel and address % (8 if data_sel in (2, 3) else 4):
        raise ValueError(f"release address {address:#x} is misaligned for {data}-bit data")
    dw1 = BOTTOM_OF_PIPE_TS | (END_OF_PIPE << 8) | ((gcr & 0x1FFF) << 12)
    dw2 = (data_sel << 29) | (int_sel << 24) | (1 << 16)  # DST_SEL 1: TC_L2
    if data_sel == 0:
        address = 0
    return [header(RELEASE_MEM, 8), dw1, dw2, address & MASK32, address >> 32, value & MASK32, (value >> 32) & MASK32, 0]


def acquire_mem(gcr: int = SYSTEM_ACQUIRE_GCR) -> list[int]:
    """The eight-dword gfx10+ ACQUIRE_MEM over the whole address space."""
    return [header(ACQUIRE_MEM, 8), 0, MASK32, 0xFF, 0, 0, 0x0A, gcr & 0x7FFFF]


def cs_partial_flush() -> list[int]:
    """EVENT_WRITE CS_PARTIAL_FLUSH: later packets wait for earlier dispatches to finish."""
    return [header(EVENT_WRITE, 2), CS_PARTIAL_FLUSH | (4 << 8)]


def wait_reg_mem(address: int, reference: int, *, function: int = GREATER_EQUAL, mask: int = MASK32, poll: int = 4) -> list[int]:
    """Wait until ``(mem32 & mask) function reference`` (memory space, ordinary wait)."""
    if address % 4:
        raise ValueError(f"wait address {address:#x} is not dword aligned")
    return [header(WAIT_REG_MEM, 7), function | (1 << 4), address & MASK32, address >> 32, reference & MASK32, mask & MASK32, poll & 0xFFFF]


def wait_reg_mem64(address: int, reference: int, *, function: int = GREATER_EQUAL, mask: int = (1 << 64) - 1, poll: int = 4) -> list[int]:
    """Wait until ``(mem64 & mask) function reference``."""
    if address % 8:
        raise ValueError(f"wait address {address:#x} is not 8-byte aligned")
    return [
        header(WAIT_REG_MEM64, 9), function | (1 << 4), address & MASK32, address >> 32,
        reference & MASK32, (reference >> 32) & MASK32, mask & MASK32, (mask >> 32) & MASK32, poll & 0xFFFF,
    ]  # fmt: skip


def indirect_buffer(address: int, dwords: int) -> list[int]:
    """INDIRECT_BUFFER: run ``dwords`` dwords at ``address`` (VALID set, VMID 0)."""
    if address % 4 or address >> 48:
        raise ValueError(f"indirect buffer address {address:#x} must be dword aligned below 2**48")
    if not 1 <= dwords < (1 << 20):
        raise ValueError(f"indirect buffer of {dwords} dwords (1..{(1 << 20) - 1})")
    return [header(INDIRECT_BUFFER, 4), address & MASK32, address >> 32, dwords | (1 << 23)]


#: DMA_DATA moves at most this many bytes (a 26-bit count).
DMA_DATA_MAX_BYTES = (1 << 26) - 1


def dma_data_copy(src: int, dst: int, nbytes: int) -> list[int]:
    """CP DMA copy through L2 (SRC_SEL/DST_SEL 3), waiting for earlier writes (RAW_WAIT)."""
    if not 1 <= nbytes <= DMA_DATA_MAX_BYTES:
        raise ValueError(f"DMA_DATA moves 1..{DMA_DATA_MAX_BYTES} bytes, not {nbytes}")
    return [header(DMA_DATA, 7), (3 << 29) | (3 << 20), src & MASK32, src >> 32, dst & MASK32, dst >> 32, nbytes | (1 << 30)]


def dma_data_fill(dst: int, value: int, nbytes: int) -> list[int]:
    """CP DMA fill of a 32-bit ``value`` (SRC_SEL 2: DATA); dword aligned and sized."""
    if dst % 4 or nbytes % 4 or not 4 <= nbytes <= DMA_DATA_MAX_BYTES:
        raise ValueError(f"DMA_DATA fills whole aligned dwords: dst {dst:#x}, {nbytes} bytes")
    return [header(DMA_DATA, 7), (2 << 29) | (3 << 20), value & MASK32, 0, dst & MASK32, dst >> 32, nbytes | (1 << 30)]


def dma_data_drain() -> list[int]:
    """Zero-length DMA_DATA: a drain of earlier CP DMA."""
    return [header(DMA_DATA, 7), 0, 0, 0, 0, 0, 0]


def write_data(dst: int, values: Sequence[int], *, confirm: bool = True) -> list[int]:
    """WRITE_DATA of dwords to memory (DST_SEL 5), incrementing addresses."""
    if dst % 4 or not values:
        raise ValueError("WRITE_DATA writes at least one dword to a dword-aligned address")
    return [header(WRITE_DATA, len(values) + 4), (5 << 8) | (int(confirm) << 20), dst & MASK32, dst >> 32, *(int(v) & MASK32 for v in values)]


def pad_to(words_used: int, boundary: int = 8) -> list[int]:
    """NOPs that bring ``words_used`` to a multiple of ``boundary`` (a one-dword gap
    takes a NOP of ``boundary + 1``: a type-3 packet has at least two dwords)."""
    gap = -words_used % boundary
    if gap == 0:
        return []
    return nop(gap if gap >= 2 else gap + boundary)


__all__ = [
    "header",
    "nop",
    "set_sh_reg",
    "dispatch_direct",
    "release_mem",
    "acquire_mem",
    "cs_partial_flush",
    "wait_reg_mem",
    "wait_reg_mem64",
    "indirect_buffer",
    "dma_data_copy",
    "dma_data_fill",
    "dma_data_drain",
    "write_data",
    "pad_to",
]
