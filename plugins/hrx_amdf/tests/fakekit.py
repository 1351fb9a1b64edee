"""Test-side producers for the simulated Strix Halo.

Packets here are written from literal bit positions (the words libamdf's conformance
tests use, or the HSA/PM4 layouts spelled out), never through the simulation's field
tables or an engine's encoder, so a wrong table in either is caught.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from hrx_amdf.constants import MemoryFlag, QueueState
from hrx_amdf.fake import SYSTEM_CACHED, SYSTEM_COHERENT, FakeProvider
from hrx_amdf.provider import DeviceAccess


def pm4(opcode: int, body: Sequence[int], compute: bool = False) -> list[int]:
    """A type-3 packet: type 3 at bit 30, count (dwords - 2) at 16, opcode at 8."""
    words = [(3 << 30) | ((len(body) - 1) << 16) | (opcode << 8) | (2 if compute else 0)]
    return words + [int(w) & 0xFFFFFFFF for w in body]


def nop(n: int) -> list[int]:
    return pm4(0x10, [0] * (n - 1))


def lo(x: int) -> int:
    return x & 0xFFFFFFFF


def hi(x: int) -> int:
    return (x >> 32) & 0xFFFFFFFF


def release_mem(address: int, value: int, *, bits64: bool = True) -> list[int]:
    # event 0x28 (BOTTOM_OF_PIPE_TS) index 5; DATA_SEL 2 (64-bit) / 1 (32-bit) at bit 29,
    # INT_SEL 0, DST_SEL 1 (TC_L2) at bit 16 -- libamdf cts/gpu/pm4/encoding/commands.cc.
    data_sel = 2 if bits64 else 1
    return pm4(0x49, [0x28 | (5 << 8), (data_sel << 29) | (1 << 16), lo(address), hi(address), lo(value), hi(value), 0])


def wait_mem32(address: int, value: int, function: int = 3, mask: int = 0xFFFFFFFF) -> list[int]:
    return pm4(0x3C, [function | (1 << 4), lo(address), hi(address), value, mask, 4])


def wait_mem64(address: int, value: int, function: int = 5, mask: int = (1 << 64) - 1) -> list[int]:
    return pm4(0x93, [function | (1 << 4), lo(address), hi(address), lo(value), hi(value), lo(mask), hi(mask), 4])


def indirect_buffer(address: int, dwords: int) -> list[int]:
    return pm4(0x3F, [lo(address), hi(address), dwords | (1 << 23)])


def acquire_mem(gcr: int = 0xC3A1) -> list[int]:
    return pm4(0x58, [0, 0xFFFFFFFF, 0xFF, 0, 0, 0x0A, gcr])


def cs_partial_flush() -> list[int]:
    return pm4(0x46, [7 | (4 << 8)])


def dma_copy(src: int, dst: int, nbytes: int) -> list[int]:
    return pm4(0x50, [(3 << 29) | (3 << 20), lo(src), hi(src), lo(dst), hi(dst), nbytes | (1 << 30)])


def dma_fill(dst: int, value: int, nbytes: int) -> list[int]:
    return pm4(0x50, [(2 << 29) | (3 << 20), value, 0, lo(dst), hi(dst), nbytes | (1 << 30)])


def write_data(dst: int, values: Sequence[int]) -> list[int]:
    return pm4(0x37, [(5 << 8) | (1 << 20), lo(dst), hi(dst), *values])


def set_sh_reg(register: int, values: Sequence[int]) -> list[int]:
    return pm4(0x76, [register - 0x2C00, *values], compute=True)


# -- SDMA (SDMA 6 layouts; libamdf cts/gpu/sdma/encoding/commands.cc) --------------------


def sdma_copy(src: int, dst: int, nbytes: int) -> list[int]:
    return [1, nbytes - 1, 0, lo(src), hi(src), lo(dst), hi(dst)]


def sdma_fill(dst: int, pattern: int, nbytes: int) -> list[int]:
    return [11 | (2 << 30), lo(dst), hi(dst), pattern, nbytes - 1]


def sdma_fence(address: int, value: int) -> list[int]:
    return [5, lo(address), hi(address), value]


def sdma_poll(address: int, value: int, function: int = 3, mask: int = 0xFFFFFFFF) -> list[int]:
    return [8 | (function << 28) | (1 << 31), lo(address), hi(address), value, mask, (0xFFF << 16) | 4]


def sdma_timestamp(address: int) -> list[int]:
    return [13 | (2 << 8), lo(address), hi(address)]


def sdma_trap(context: int) -> list[int]:
    return [6, context]


def sdma_write(dst: int, values: Sequence[int]) -> list[int]:
    return [2, lo(dst), hi(dst), len(values) - 1, *values]


def sdma_gcr(control: int) -> list[int]:
    return [17 | (1 << 8), 0, control << 16, 0, 0]


# -- AQL (HSA System Architecture 1.2 table 2-7 and 2-9; AMD vendor formats) -------------


def aql_header(kind: int, barrier: bool = False, acquire: int = 2, release: int = 2) -> int:
    return kind | (int(barrier) << 8) | (acquire << 9) | (release << 11)


def aql_dispatch(descriptor: int, kernarg: int, block: tuple[int, int, int], grid: tuple[int, int, int], dims: int,
                 *, group: int = 0, private: int = 0, completion: int = 0) -> bytes:
    raw = bytearray(64)
    raw[0:2] = aql_header(2).to_bytes(2, "little")
    raw[2:4] = dims.to_bytes(2, "little")
    for i, b in enumerate(block):
        raw[4 + 2 * i : 6 + 2 * i] = b.to_bytes(2, "little")
    for i, g in enumerate(grid):
        raw[12 + 4 * i : 16 + 4 * i] = g.to_bytes(4, "little")
    raw[24:28] = private.to_bytes(4, "little")
    raw[28:32] = group.to_bytes(4, "little")
    raw[32:40] = descriptor.to_bytes(8, "little")
    raw[40:48] = kernarg.to_bytes(8, "little")
    raw[56:64] = completion.to_bytes(8, "little")
    return bytes(raw)


def aql_barrier_and(deps: Sequence[int], completion: int = 0, kind: int = 3) -> bytes:
    raw = bytearray(64)
    raw[0:2] = aql_header(kind, barrier=True).to_bytes(2, "little")
    for i, d in enumerate(deps):
        raw[8 + 8 * i : 16 + 8 * i] = d.to_bytes(8, "little")
    raw[56:64] = completion.to_bytes(8, "little")
    return bytes(raw)


def aql_pm4_ib(address: int, dwords: int, completion: int = 0) -> bytes:
    # AMD vendor format 1: INDIRECT_BUFFER at byte 4, remaining count 0xA at byte 20.
    words = [aql_header(0) | (1 << 16)] + indirect_buffer(address, dwords) + [0xA] + [0] * 8 + [lo(completion), hi(completion)]
    return np.array(words, dtype=np.uint32).tobytes()


def aql_barrier_value(signal: int, value: int, cond: int, mask: int = (1 << 63) - 1, completion: int = 0) -> bytes:
    raw = bytearray(64)
    raw[0:2] = aql_header(0, barrier=True, acquire=0, release=0).to_bytes(2, "little")
    raw[2:4] = (2).to_bytes(2, "little")
    raw[8:16] = signal.to_bytes(8, "little")
    raw[16:24] = value.to_bytes(8, "little", signed=True)
    raw[24:32] = mask.to_bytes(8, "little", signed=True)
    raw[32:36] = cond.to_bytes(4, "little")
    raw[56:64] = completion.to_bytes(8, "little")
    return bytes(raw)


# -- producers -----------------------------------------------------------------------------


class Producer:
    """Publishes commands to one user queue the way each queue format requires."""

    def __init__(self, queue) -> None:
        self.queue = queue
        self.mapping = queue.map()
        self.kind = queue.info.command_type.name
        self.write = int(self.mapping.write_index[0])
        self.aql_next = 0

    def pm4(self, words: Sequence[int], *, pad: bool = True, wait: bool = True) -> None:
        ring = self.mapping.ring.view(np.uint32)
        capacity = len(ring)
        words = list(words)
        if pad:
            total = len(words)
            rem = (self.write + total) % 8
            if rem:
                need = 8 - rem
                words += nop(need if need >= 2 else need + 8)
        # a packet never straddles the end: pad to the end with a NOP if needed
        pos = self.write % capacity
        if pos + len(words) > capacity:
            filler = capacity - pos
            ring[pos:] = nop(filler) if filler >= 2 else [0]
            self.write += filler
            pos = 0
        ring[pos : pos + len(words)] = words
        self.write += len(words)
        self.mapping.write_index[0] = self.write
        self.mapping.doorbell.write(self.write)
        if wait:
            self.queue.wait_consumed(self.write, 5 * 10**9)

    def sdma(self, words: Sequence[int], *, wait: bool = True) -> None:
        ring = self.mapping.ring.view(np.uint32)
        capacity = len(ring)
        pos = (self.write // 4) % capacity
        if pos + len(words) > capacity:
            ring[pos:] = 0  # NOP dwords are zero
            self.write += 4 * (capacity - pos)
            pos = 0
        ring[pos : pos + len(words)] = list(words)
        self.write += 4 * len(words)
        self.mapping.write_index[0] = self.write
        self.mapping.doorbell.write(self.write)
        if wait:
            self.queue.wait_consumed(self.write, 5 * 10**9)

    def aql(self, packet: bytes, *, wait: bool = True) -> None:
        slots = len(self.mapping.ring) // 64
        index = self.aql_next
        self.aql_next += 1
        self.mapping.write_index[0] = self.aql_next
        slot = self.mapping.ring[(index % slots) * 64 : (index % slots + 1) * 64]
        slot[4:] = np.frombuffer(packet[4:], dtype=np.uint8)
        slot[:4] = np.frombuffer(packet[:4], dtype=np.uint8)  # header last
        self.mapping.doorbell.write(index)
        if wait:
            self.queue.wait_consumed(index, 5 * 10**9)


def wait_failed(queue, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = queue.status()
        if status.state != QueueState.ACTIVE:
            return status
        time.sleep(0.005)
    raise AssertionError(f"queue did not fail: {queue.status()}")


def memory(provider: FakeProvider, device, nbytes: int = 4096, *, coherent: bool = True, flags=MemoryFlag(0), devices=None):
    scope = provider.system_scopes()[0]
    accesses = [DeviceAccess(d) for d in (devices or [device])]
    return scope.create(nbytes, profile=SYSTEM_COHERENT if coherent else SYSTEM_CACHED, accesses=accesses, flags=flags)


# -- NPU transaction streams (the simulation's framing: header v0.1, ops with sizes) --------


def txn(columns: int, ops: Sequence[tuple[int, int, int, bytes]], rows: int = 6) -> bytes:
    """A transaction stream: header (0.1, gen 4, rows, columns, 1 memory row, count, size)
    followed by (opcode, column, row, payload) operations."""
    import struct

    body = b""
    for code, col, row, payload in ops:
        size = 8 + len(payload)
        body += struct.pack("<BBBBI", code, col, row, 0, size) + payload
    size = 16 + len(body)
    return struct.pack("<BBBBBBxxII", 0, 1, 4, rows, columns, 1, len(ops), size) + body


def patched_program(bindings: int) -> tuple[bytes, list[tuple[int, int]]]:
    """A stream whose BLOCKWRITE payloads hold one 64-bit address per binding."""
    ops = [(1, 0, 0, b"\0" * 8) for _ in range(bindings)] + [(0, 0, 2, b"\x11" * 8)]
    stream = txn(1, ops)
    patches = [(16 + 16 * i + 8, i) for i in range(bindings)]
    return stream, patches
