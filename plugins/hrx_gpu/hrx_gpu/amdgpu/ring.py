"""Publication on one user queue: ring space, wrap, write index and doorbell.

The three queue formats (libamdf gpu.h, ``AMDF_GPU_*_QUEUE_FORMAT_VERSION_1`` and the
HSA queue) publish differently:

* PM4: the write index counts dwords (monotonic), the native read index wraps at the
  ring's capacity; a publication ends on an eight-dword boundary (NOP padding); one
  dword always stays free; a packet never straddles the end of the ring.
* SDMA: both indices count bytes (monotonic); the producer never runs more than the
  ring's capacity ahead; NOP dwords are zero; no packet straddles the end.
* AQL: 64-byte slots; the write index counts reserved packets; a packet's body is
  stored before its header; the doorbell carries the last published packet's index.

Every format stores the write index before the doorbell. :class:`Ring` only answers
how much fits and writes what fits; callers keep what does not for later (see
:class:`hrx_gpu.amdgpu.queue.AmdgpuQueue`), so publishing never blocks.
"""

from __future__ import annotations

import array

import numpy as np

from hrx_amdf.provider import UserQueue, UserQueueMapping

from .encode import pm4

AQL_PACKET_BYTES = 64


class Ring:
    def __init__(self, queue: UserQueue, kind: str) -> None:
        self.queue = queue
        self.kind = kind  # "pm4", "sdma" or "aql"
        self.mapping: UserQueueMapping = queue.map()
        self.ring = self.mapping.ring
        self.words = self.ring.view(np.uint32)
        # the hot path reads and writes through memoryviews (a machine load or store,
        # no NumPy scalar or list conversion); NumPy views stay for the rest
        self._words = self.words.data
        self._read_index = self.mapping.read_index.data
        self._write_index = self.mapping.write_index.data
        self.ring_bytes = self.mapping.info.ring_bytes
        self.write = int(self.mapping.write_index[0])
        if kind == "pm4":
            self.capacity = self.ring_bytes // 4
        elif kind == "sdma":
            self.capacity = self.ring_bytes
        else:
            self.capacity = self.ring_bytes // AQL_PACKET_BYTES
        #: The last value written to the doorbell (what ``consumed`` must reach).
        self.published = 0 if kind != "aql" else -1

    # -- progress -------------------------------------------------------------------------

    def consumed(self) -> int:
        raw: int = self._read_index[0]
        if self.kind == "pm4":
            return self.write - ((self.write - raw) & (self.capacity - 1))
        return raw

    def free(self) -> int:
        """Units (dwords, bytes or packets) that may be written now."""
        outstanding = self.write - self.consumed()
        return self.capacity - outstanding - (1 if self.kind == "pm4" else 0)

    def published_target(self) -> int:
        """The index ``wait_consumed`` takes for everything published so far."""
        return self.published

    # -- PM4 --------------------------------------------------------------------------------

    def pm4_fits(self, dwords: int) -> bool:
        """Whether a publication of ``dwords`` (a multiple of eight) fits, including the
        NOP that pads to the end of the ring when it would straddle it."""
        pos = self.write % self.capacity
        pad = self.capacity - pos if pos + dwords > self.capacity else 0
        return self.free() >= dwords + pad

    def publish_pm4(self, words: list[int]) -> None:
        assert len(words) % 8 == 0
        pos = self.write % self.capacity
        if pos + len(words) > self.capacity:
            filler = self.capacity - pos  # a multiple of eight: publications end aligned
            self.words[pos:] = pm4.nop(filler)
            self.write += filler
            pos = 0
        self._words[pos : pos + len(words)] = array.array("I", words)
        self.write += len(words)
        self._publish(self.write)

    # -- SDMA --------------------------------------------------------------------------------

    def sdma_room(self) -> int:
        """Dwords that fit contiguously now (before the end of the ring or the free space)."""
        pos = (self.write % self.capacity) // 4
        return min(self.free() // 4, self.capacity // 4 - pos)

    def sdma_wrap(self) -> bool:
        """Fill the rest of the ring with NOP dwords when a packet would not fit before
        the end; False if there is no room for that yet."""
        pos = (self.write % self.capacity) // 4
        rest = self.capacity // 4 - pos
        if self.free() // 4 < rest:
            return False
        self.words[pos:] = 0
        self.write += 4 * rest
        return True

    def write_sdma(self, words: list[int]) -> None:
        pos = (self.write % self.capacity) // 4
        self.words[pos : pos + len(words)] = words
        self.write += 4 * len(words)

    def flush_sdma(self) -> None:
        if self.write != self.published:
            self._publish(self.write)

    # -- AQL ---------------------------------------------------------------------------------

    def publish_aql(self, first: int, body: bytes) -> None:
        index = self.write
        self.write += 1
        self.mapping.write_index[0] = self.write  # reserve the slot
        slot = index % self.capacity
        raw = self.ring[slot * AQL_PACKET_BYTES : (slot + 1) * AQL_PACKET_BYTES]
        raw[4:] = np.frombuffer(body, dtype=np.uint8)
        raw[:4].view(np.uint32)[0] = first  # the header last: it makes the slot valid
        self.published = index
        self.mapping.doorbell.write(index)

    # -- common --------------------------------------------------------------------------------

    def _publish(self, value: int) -> None:
        self._write_index[0] = value
        self.published = value
        self.mapping.doorbell.write(value)

    def destroy(self) -> None:
        self.mapping.destroy()


__all__ = ["Ring", "AQL_PACKET_BYTES"]
