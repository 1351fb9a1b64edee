"""AQL packets (HSA System Architecture 1.2, tables 2-4 to 2-10) and AMD's vendor
formats, as pure functions to 64-byte packets.

The words match libamdf's conformance tests (ROCm/hrx-system 7c086fc5,
libamdf/cts/gpu/aql/encoding/packets_test.cc). The header is returned apart from the
body because a producer stores the body first and the header last.
"""

from __future__ import annotations

import struct

from . import pm4

PACKET_BYTES = 64

# header types
VENDOR_SPECIFIC, INVALID, KERNEL_DISPATCH, BARRIER_AND, BARRIER_OR = 0, 1, 2, 3, 5
# fence scopes
NONE, AGENT, SYSTEM = 0, 1, 2
# AMD vendor formats
FORMAT_PM4_IB = 1
FORMAT_BARRIER_VALUE = 2
# barrier-value conditions (hsa_signal_condition_t)
EQ, NE, LT, GTE = 0, 1, 2, 3

#: amd_signal_t: kind (int64) at byte 0, value (int64) at byte 8; 64-byte records.
SIGNAL_BYTES = 64
SIGNAL_VALUE_OFFSET = 8
SIGNAL_KIND_USER = 1


def header(kind: int, *, barrier: bool = False, acquire: int = SYSTEM, release: int = SYSTEM) -> int:
    return kind | (int(barrier) << 8) | (acquire << 9) | (release << 11)


def _packet(first: int, body: bytes) -> tuple[int, bytes]:
    """(first dword: header | setup/format, the 60 bytes after it)."""
    assert len(body) == PACKET_BYTES - 4
    return first, body


def kernel_dispatch(
    descriptor: int,
    kernarg: int,
    block: tuple[int, int, int],
    grid: tuple[int, int, int],
    dims: int,
    *,
    group_segment: int = 0,
    private_segment: int = 0,
    completion: int = 0,
    barrier: bool = True,
    acquire: int = SYSTEM,
    release: int = SYSTEM,
) -> tuple[int, bytes]:
    """A kernel dispatch; ``grid`` counts work-items (not workgroups)."""
    if dims not in (1, 2, 3):
        raise ValueError(f"dims must be 1..3, not {dims}")
    if kernarg % 16:
        raise ValueError(f"kernarg address {kernarg:#x} is not 16-byte aligned")
    first = header(KERNEL_DISPATCH, barrier=barrier, acquire=acquire, release=release) | (dims << 16)
    body = struct.pack("<HHHHIIIIIQQQQ", block[0], block[1], block[2], 0, grid[0], grid[1], grid[2], private_segment, group_segment, descriptor, kernarg, 0, completion)
    return _packet(first, body)


def barrier_and(dependencies: tuple[int, ...] = (), *, completion: int = 0, barrier: bool = True, acquire: int = SYSTEM, release: int = SYSTEM) -> tuple[int, bytes]:
    """Wait until every (non-null) dependency signal's value is zero."""
    if len(dependencies) > 5:
        raise ValueError("a barrier packet holds at most five dependencies")
    deps = list(dependencies) + [0] * (5 - len(dependencies))
    body = struct.pack("<I5QQQ", 0, *deps, 0, completion)
    return _packet(header(BARRIER_AND, barrier=barrier, acquire=acquire, release=release), body)


def pm4_indirect_buffer(address: int, dwords: int, *, completion: int = 0, barrier: bool = True, acquire: int = SYSTEM, release: int = SYSTEM) -> tuple[int, bytes]:
    """AMD vendor format 1: run a PM4 indirect buffer on the packet processor."""
    ib = pm4.indirect_buffer(address, dwords)
    body = struct.pack("<4I I 8I Q", *ib, 0xA, *([0] * 8), completion)
    return _packet(header(VENDOR_SPECIFIC, barrier=barrier, acquire=acquire, release=release) | (FORMAT_PM4_IB << 16), body)


def barrier_value(signal: int, value: int, *, condition: int = GTE, mask: int = (1 << 63) - 1, completion: int = 0, barrier: bool = True) -> tuple[int, bytes]:
    """AMD vendor format 2: wait until ``(signal.value & mask) condition value``."""
    body = struct.pack("<I Q q q I I Q Q Q", 0, signal, value, mask, condition, 0, 0, 0, completion)
    return _packet(header(VENDOR_SPECIFIC, barrier=barrier, acquire=NONE, release=NONE) | (FORMAT_BARRIER_VALUE << 16), body)


def words(packet: tuple[int, bytes]) -> list[int]:
    """All sixteen dwords (header first) of a packet."""
    first, body = packet
    return [first, *struct.unpack("<15I", body)]


__all__ = ["kernel_dispatch", "barrier_and", "pm4_indirect_buffer", "barrier_value", "words", "header", "PACKET_BYTES"]
