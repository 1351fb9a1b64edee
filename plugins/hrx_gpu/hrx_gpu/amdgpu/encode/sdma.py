"""SDMA 6 packets (gfx1151's copy engine), as pure functions to words.

Layouts follow the SDMA 6 packet definitions; the words match those libamdf's
conformance tests write (ROCm/hrx-system 659c2333, libamdf/cts/gpu/sdma/encoding/
commands.cc). gfx1151's SDMA family reports only the GCR format feature, so FENCE
has no system bit and COPY_LINEAR no scope fields.
"""

from __future__ import annotations

from collections.abc import Sequence

MASK32 = 0xFFFFFFFF

#: Largest COPY_LINEAR / CONST_FILL: a 30-bit byte count minus one.
MAX_BYTES = 1 << 30

OP_NOP, OP_COPY, OP_WRITE, OP_FENCE, OP_TRAP, OP_POLL_REGMEM, OP_CONST_FILL, OP_TIMESTAMP, OP_GCR = 0, 1, 2, 5, 6, 8, 11, 13, 17
SUBOP_TIMESTAMP_GET_GLOBAL = 2
SUBOP_USER_GCR = 1
FILL_DWORD = 2

# POLL_REGMEM compare functions
LESS, LESS_EQUAL, EQUAL, NOT_EQUAL, GREATER_EQUAL, GREATER = 1, 2, 3, 4, 5, 6

# GCR controls (the CTS's AcquireFromSystem / ReleaseToSystem)
ACQUIRE_FROM_SYSTEM_GCR = 0xC3C0
RELEASE_TO_SYSTEM_GCR = 0x8040


def nop(dwords: int = 1) -> list[int]:
    """NOP dwords are zero."""
    return [0] * dwords


def copy_linear(src: int, dst: int, nbytes: int) -> list[int]:
    if not 1 <= nbytes <= MAX_BYTES:
        raise ValueError(f"COPY_LINEAR moves 1..{MAX_BYTES} bytes, not {nbytes}")
    return [OP_COPY, nbytes - 1, 0, src & MASK32, src >> 32, dst & MASK32, dst >> 32]


def const_fill(dst: int, pattern: int, nbytes: int) -> list[int]:
    """Fill whole dwords with a 32-bit ``pattern`` (dword aligned and sized)."""
    if dst % 4 or nbytes % 4 or not 4 <= nbytes <= MAX_BYTES:
        raise ValueError(f"CONST_FILL fills whole aligned dwords: dst {dst:#x}, {nbytes} bytes")
    return [OP_CONST_FILL | (FILL_DWORD << 30), dst & MASK32, dst >> 32, pattern & MASK32, nbytes - 1]


def fence(address: int, value: int) -> list[int]:
    """Write a 32-bit ``value`` once earlier packets are done."""
    if address % 4:
        raise ValueError(f"fence address {address:#x} is not dword aligned")
    return [OP_FENCE, address & MASK32, address >> 32, value & MASK32]


def poll_regmem(address: int, reference: int, *, function: int = GREATER_EQUAL, mask: int = MASK32, interval: int = 4, retries: int = 0xFFF) -> list[int]:
    """Wait until ``(mem32 & mask) function reference`` (memory poll)."""
    if address % 4:
        raise ValueError(f"poll address {address:#x} is not dword aligned")
    return [OP_POLL_REGMEM | (function << 28) | (1 << 31), address & MASK32, address >> 32, reference & MASK32, mask & MASK32, ((retries & 0xFFF) << 16) | (interval & 0xFFFF)]


def timestamp(address: int) -> list[int]:
    """Write the 64-bit global timestamp (8-byte aligned address)."""
    if address % 8:
        raise ValueError(f"timestamp address {address:#x} is not 8-byte aligned")
    return [OP_TIMESTAMP | (SUBOP_TIMESTAMP_GET_GLOBAL << 8), address & MASK32, address >> 32]


def trap(context: int = 0) -> list[int]:
    return [OP_TRAP, context & 0x0FFFFFFF]


def write(dst: int, values: Sequence[int]) -> list[int]:
    """Write dwords (linear WRITE, count = dwords - 1)."""
    if dst % 4 or not values:
        raise ValueError("SDMA WRITE writes at least one dword to a dword-aligned address")
    return [OP_WRITE, dst & MASK32, dst >> 32, len(values) - 1, *(int(v) & MASK32 for v in values)]


def gcr(control: int) -> list[int]:
    """The five-dword GCR packet (USER_GCR) with its control at bit 16 of dword 2."""
    return [OP_GCR | (SUBOP_USER_GCR << 8), 0, (control & 0xFFFF) << 16, (control >> 16) & 0x7, 0]


__all__ = ["nop", "copy_linear", "const_fill", "fence", "poll_regmem", "timestamp", "trap", "write", "gcr", "MAX_BYTES"]
