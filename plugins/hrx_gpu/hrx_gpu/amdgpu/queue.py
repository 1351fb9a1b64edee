"""Queues of the amdgpu engine: PM4 or AQL compute queues and SDMA copy queues.

Encoding collects one submission (a *batch*) on the host. ``submit`` gives it memory
from the queue's arena -- the submission's indirect buffer (PM4), the indirect buffers
of its vendor packets (AQL), kernel arguments and fill patterns -- patches the
addresses in, and publishes it:

* PM4: each batch becomes indirect buffers; the ring receives one INDIRECT_BUFFER
  packet per buffer (and per recorded graph it launches), padded to eight dwords.
* AQL: packets go into the ring; signals, copies and fills travel in vendor PM4
  packets; waits are BARRIER_VALUE packets.
* SDMA: packets go into the ring directly.

Every batch ends by writing its sequence number to the queue's *retire counter* at
the end of its work; arena memory is reused only once the counter passed the batch.
What does not fit yet (arena or ring full, a host completion check not yet met)
waits in the queue's backlog, which the device's publisher thread drains, so
``submit`` never blocks on earlier device work.

Ordering within a queue is FIFO, as the seam requires: on PM4 every dispatch and
copy after earlier work starts with CS_PARTIAL_FLUSH and ACQUIRE_MEM; AQL packets
set the barrier bit; SDMA executes in order.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hrx_amdf.constants import QueueState
from hrx_amdf.errors import AmdfError, AmdfTimeout, error_for
from hrx_core.engine import Executable, KernelArg, NativeBuffer, NativeQueue, Timeline
from hrx_core.errors import DeviceError, InvalidArgument

from .encode import aql, as_dwords, pm4, sdma
from .kernel import KERNARG_ALIGN, AmdgpuExecutable, KernelLayout, rank
from .ring import Ring
from .timeline import MIRROR_MAX, AmdgpuTimeline

if TYPE_CHECKING:
    from .device import AmdgpuDevice
    from .graph import AmdgpuGraph

MASK32 = 0xFFFFFFFF


class Batch:
    """One submission's commands before they have memory.

    ``items`` in order: ("pm4", words, fixups) -- PM4 words (run from an indirect buffer
    on PM4 and AQL queues); ("ib", address, dwords, graph) -- a recorded graph's buffer;
    ("aql", first, body, fixups) -- an AQL packet; ("sdma", words, fixups) -- SDMA words;
    ("gate", timeline, value) -- hold the rest until the host sees ``value``. Fixups
    are (word or byte index, offset in ``data``): an address to patch in."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.data = bytearray()
        self.describes: list[tuple[int, list[tuple[int, int]]]] = []  # kernarg offset, extents
        self.sequence = 0
        self.address = 0  # arena base of this batch once allocated
        self.view: np.ndarray | None = None
        self.graphs: list[AmdgpuGraph] = []
        self.signals: list[tuple[AmdgpuTimeline, int]] = []
        self.position = 0  # next item to publish
        self.prepared: list[tuple[Any, ...]] | None = None  # publication units once laid out

    def add_data(self, blob: bytes, align: int = KERNARG_ALIGN) -> int:
        offset = -(-len(self.data) // align) * align
        self.data.extend(b"\0" * (offset - len(self.data)))
        self.data.extend(blob)
        return offset

    def last_pm4(self) -> list[Any]:
        if not self.items or self.items[-1][0] != "pm4":
            self.items.append(["pm4", [], []])
        return self.items[-1]


class AmdgpuQueue(NativeQueue):
    """One hardware queue of the amdgpu engine (``kind``: "pm4", "aql" or "sdma")."""

    needs_submit = True

    def __init__(self, device: AmdgpuDevice, family: str, index: int, kind: str) -> None:
        self.device = device
        self.family = family
        self.index = index
        self.kind = kind
        self.name = f"amdgpu:{device.index}:{family}{index}({kind})"
        self._lock = threading.RLock()  # publication: the core's thread and the publisher
        self._batch = Batch()
        self._dirty = False  # the batch holds work that orders after earlier work
        self._backlog: collections.deque[Batch] = collections.deque()
        self._next_sequence = 1
        self._retire_slab, self._retire_slot = device._signal_slot()
        self.retire_address = self._retire_slab.base + self._retire_slot * 64 + 8
        self._retire = self._retire_slab.records[self._retire_slot, 1:2].view(np.uint64)
        # reads through a memoryview: one machine load, no NumPy scalar (a hot path)
        self._retire_word = self._retire.data
        self.failure: DeviceError | None = None
        self._open()
        self.closed = False

    def _open(self) -> None:
        self.native = self.device._create_native_queue(self.kind)
        self.ring = Ring(self.native, self.kind)
        self.arena = self.device._create_arena()
        self.failure = None

    # -- progress ---------------------------------------------------------------------------

    def retired(self) -> int:
        return self._retire_word[0]  # type: ignore[no-any-return]

    def idle(self) -> bool:
        with self._lock:
            return not self._backlog and self.retired() >= self._next_sequence - 1

    def wait_published(self, seconds: float) -> None:
        """Block in the provider until the queue consumed what it published so far
        (at most ``seconds``); failures are reported by :meth:`check`."""
        target = self.ring.published_target()
        if target < 0 or self.ring.consumed() >= target + (1 if self.kind == "aql" else 0):
            return
        try:
            self.native.wait_consumed(target, max(int(seconds * 1e9), 1))
        except (AmdfTimeout, AmdfError):
            pass

    def check(self) -> DeviceError | None:
        """The queue's failure, recorded from the provider's status if it just failed."""
        if self.failure is not None:
            return self.failure
        try:
            status = self.native.status()
        except AmdfError as exc:
            failure: DeviceError = exc if isinstance(exc, DeviceError) else DeviceError(str(exc))
        else:
            if status.state == QueueState.ACTIVE:
                return None
            error = error_for(f"{self.name} (user queue)", status.terminal, status.detail)
            failure = error if isinstance(error, DeviceError) else DeviceError(str(error))
        self._failed(failure)
        return failure

    def _failed(self, failure: DeviceError) -> None:
        with self._lock:
            if self.failure is not None:
                return
            self.failure = failure
            self._backlog.clear()
        self.device._queue_failed(self, failure)

    # -- the batch -----------------------------------------------------------------------------

    def _barrier(self) -> None:
        """Order the next command after everything earlier on this queue."""
        if self.kind == "pm4" and self._dirty:
            item = self._batch.last_pm4()
            item[1].extend(pm4.cs_partial_flush() + pm4.acquire_mem())

    def copy(self, src: NativeBuffer, src_offset: int, dst: NativeBuffer, dst_offset: int, nbytes: int) -> None:
        s = src.address + src_offset  # type: ignore[attr-defined]
        d = dst.address + dst_offset  # type: ignore[attr-defined]
        if self.kind == "sdma":
            self._sdma(sdma.copy_linear(s, d, nbytes))
            return
        self._barrier()
        item = self._pm4_item()
        for start in range(0, nbytes, pm4.DMA_DATA_MAX_BYTES):
            n = min(pm4.DMA_DATA_MAX_BYTES, nbytes - start)
            item[1].extend(pm4.dma_data_copy(s + start, d + start, n))
        item[1].extend(pm4.dma_data_drain())
        self._dirty = True

    def fill(self, dst: NativeBuffer, offset: int, nbytes: int, pattern: bytes) -> None:
        address = dst.address + offset  # type: ignore[attr-defined]
        head = min(-address % 4, nbytes)
        body = (nbytes - head) // 4 * 4
        tail = nbytes - head - body
        unit = len(pattern)
        # the pattern as it continues at byte k of the range
        phase = lambda k: bytes(pattern[(k + i) % unit] for i in range(4))  # noqa: E731
        if self.kind != "sdma":
            self._barrier()
        if head:
            self._copy_constant(address, phase(0)[:head])
        if body:
            value = int.from_bytes(phase(head), "little")
            if self.kind == "sdma":
                for start in range(0, body, sdma.MAX_BYTES):
                    self._sdma(sdma.const_fill(address + head + start, value, min(sdma.MAX_BYTES, body - start)))
            else:
                item = self._pm4_item()
                for start in range(0, body, pm4.DMA_DATA_MAX_BYTES & ~3):
                    item[1].extend(pm4.dma_data_fill(address + head + start, value, min(pm4.DMA_DATA_MAX_BYTES & ~3, body - start)))
        if tail:
            self._copy_constant(address + head + body, phase(head + body)[:tail])
        if self.kind != "sdma":
            self._pm4_item()[1].extend(pm4.dma_data_drain())
        self._dirty = True

    def _copy_constant(self, address: int, blob: bytes) -> None:
        """Copy a few bytes (an unaligned fill head or tail) from the batch's data."""
        offset = self._batch.add_data(blob, 8)
        if self.kind == "sdma":
            words = sdma.copy_linear(0, address, len(blob))
            self._sdma(words, [(3, offset)])
        else:
            item = self._pm4_item()
            start = len(item[1])
            item[1].extend(pm4.dma_data_copy(0, address, len(blob)))
            item[2].append((start + 2, offset))

    def dispatch(self, executable: Executable, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[KernelArg]) -> None:
        if self.kind == "sdma":
            raise InvalidArgument(f"{self.name}: an SDMA queue cannot dispatch kernels")
        if not isinstance(executable, AmdgpuExecutable):
            raise InvalidArgument(f"executable: expected an amdgpu executable, got {type(executable).__name__}")
        layout = executable.layout
        kernargs, extents = layout.pack(grid, block, args)
        words, fixup = layout.pm4_words(grid, block) if self.kind == "pm4" else (None, None)
        self.dispatch_packed(layout, grid, block, bytes(kernargs), extents, words, fixup)

    def dispatch_packed(
        self,
        layout: KernelLayout,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernargs: bytes,
        extents: list[tuple[int, int]],
        words: list[int] | None,
        fixup: int | None,
    ) -> None:
        """A dispatch whose kernel arguments and PM4 words were packed already."""
        offset = self._batch.add_data(kernargs, KERNARG_ALIGN)
        self._batch.describes.append((offset, extents))
        if self.kind == "pm4":
            self._barrier()
            item = self._pm4_item()
            start = len(item[1])
            item[1].extend(words if words is not None else layout.pm4_words(grid, block)[0])
            if fixup is not None:
                item[2].append((start + fixup, offset))
        else:
            dims = rank(grid, block)
            items = tuple(g * b for g, b in zip(grid, block))
            first, body = aql.kernel_dispatch(layout.descriptor_address, 0, block, items, dims, group_segment=layout.group_segment)  # type: ignore[arg-type]
            self._batch.items.append(("aql", first, bytearray(body), [(40 - 4, offset)]))
        self._dirty = True

    def wait(self, timeline: Timeline, value: int) -> None:
        assert isinstance(timeline, AmdgpuTimeline)
        if self.kind == "pm4":
            self._pm4_item()[1].extend(pm4.wait_reg_mem64(timeline.value_address, value) + pm4.acquire_mem())
        elif self.kind == "aql":
            first, body = aql.barrier_value(timeline.address, value, condition=aql.GTE, mask=(1 << 63) - 1)
            self._batch.items.append(("aql", first, bytearray(body), []))
        elif value < MIRROR_MAX:
            self._sdma(sdma.poll_regmem(timeline.mirror_address, value, function=sdma.GREATER_EQUAL) + sdma.gcr(sdma.ACQUIRE_FROM_SYSTEM_GCR))
        else:
            self._batch.items.append(("gate", timeline, value))
        self._dirty = False

    def signal(self, timeline: Timeline, value: int) -> None:
        assert isinstance(timeline, AmdgpuTimeline)
        mirror = min(value, MIRROR_MAX)
        if self.kind == "sdma":
            self._sdma(
                sdma.gcr(sdma.RELEASE_TO_SYSTEM_GCR)
                + sdma.fence(timeline.value_address, value & MASK32)
                + sdma.fence(timeline.value_address + 4, value >> 32)
                + sdma.fence(timeline.mirror_address, mirror)
            )
        else:
            item = self._pm4_item()
            item[1].extend(pm4.release_mem(timeline.value_address, value) + pm4.release_mem(timeline.mirror_address, mirror, data="32"))
        timeline.note_signal(self, value)
        self._batch.signals.append((timeline, value))

    def launch_graph(self, graph: AmdgpuGraph) -> None:
        graph.launch_on(self)

    def _pm4_item(self) -> list[Any]:
        return self._batch.last_pm4()

    def _sdma(self, words: list[int], fixups: list[tuple[int, int]] | None = None) -> None:
        self._batch.items.append(("sdma", words, fixups or []))

    def native_handle(self) -> int | None:
        return None

    # -- submission ---------------------------------------------------------------------------

    def submit(self) -> None:
        with self._lock:
            if self.failure is not None:
                # A failed queue is replaced: later work runs on a fresh hardware queue.
                self._reopen()
            batch = self._batch
            if not batch.items:
                return
            self._batch = Batch()
            batch.sequence = self._next_sequence
            self._next_sequence += 1
            self._finish(batch)
            self._backlog.append(batch)
            self.pump()
        if self._backlog:
            self.device._publisher.wake()

    def _finish(self, batch: Batch) -> None:
        """The batch's retire marker: written at the end of its work."""
        if self.kind == "sdma":
            s = batch.sequence
            batch.items.append(("sdma", sdma.fence(self.retire_address, s & MASK32) + sdma.fence(self.retire_address + 4, s >> 32), []))
        elif self.kind == "pm4":
            batch.last_pm4()[1].extend(pm4.release_mem(self.retire_address, batch.sequence))
        else:
            batch.items.append(["pm4", pm4.release_mem(self.retire_address, batch.sequence), []])
        self._dirty = False

    def pump(self) -> bool:
        """Publish what fits of the backlog now; True if anything was published."""
        progressed = False
        with self._lock:
            while self._backlog and self.failure is None:
                batch = self._backlog[0]
                if batch.prepared is None and not self._lay_out(batch):
                    break
                if not self._publish(batch):
                    progressed = progressed or batch.position > 0
                    break
                self._backlog.popleft()
                progressed = True
        return progressed

    def _lay_out(self, batch: Batch) -> bool:
        """Give the batch arena memory, copy its PM4 words and data in, patch addresses."""
        pm4_items = [item for item in batch.items if item[0] == "pm4"]
        code_bytes = sum(4 * len(item[1]) for item in pm4_items)
        data_at = -(-code_bytes // KERNARG_ALIGN) * KERNARG_ALIGN
        chunk = self.arena.allocate(data_at + len(batch.data), batch.sequence, self.retired())
        if chunk is None:
            return False
        base, view = chunk
        batch.address = base
        host = view.data  # a memoryview: its byte slices copy at C speed
        if batch.data:
            host[data_at : data_at + len(batch.data)] = batch.data
        data_base = base + data_at
        units: list[tuple[Any, ...]] = []
        at = 0
        for item in batch.items:
            kind = item[0]
            if kind == "pm4":
                words = as_dwords(item[1])
                for index, offset in item[2]:
                    address = data_base + offset
                    words[index] = address & MASK32
                    words[index + 1] = address >> 32
                host[at : at + 4 * len(words)] = memoryview(words).cast("B")
                units.append(("ib", base + at, len(words)))
                at += 4 * len(words)
            elif kind == "ib":
                units.append(("ib", item[1], item[2]))
            elif kind == "aql":
                body = item[2]
                for index, offset in item[3]:
                    body[index : index + 8] = (data_base + offset).to_bytes(8, "little")
                units.append(("aql", item[1], bytes(body)))
            elif kind == "sdma":
                dwords = list(item[1])
                for index, offset in item[2]:
                    address = data_base + offset
                    dwords[index] = address & MASK32
                    dwords[index + 1] = address >> 32
                units.append(("sdma", dwords))
            else:
                units.append(item)  # gate
        for offset, extents in batch.describes:
            self.device._describe_kernargs(data_base + offset, extents)
        batch.prepared = units
        batch.view = view
        return True

    def _publish(self, batch: Batch) -> bool:
        """Publish the batch's units from ``batch.position``; False when it must wait."""
        units = batch.prepared
        assert units is not None
        ring = self.ring
        if self.kind == "pm4":
            words: list[int] = []
            for unit in units[batch.position :]:
                if unit[0] == "gate":
                    raise AssertionError("PM4 batches carry no host gates")
                words.extend(pm4.indirect_buffer(unit[1], unit[2]))
            words.extend(pm4.pad_to(len(words)))
            if not ring.pm4_fits(len(words)):
                return False
            ring.publish_pm4(words)
            batch.position = len(units)
            return True
        while batch.position < len(units):
            unit = units[batch.position]
            if unit[0] == "gate":
                timeline, value = unit[1], unit[2]
                if timeline.completed() < value and timeline.error(value) is None:
                    if self.kind == "sdma":
                        ring.flush_sdma()
                    return False
            elif self.kind == "aql":
                if unit[0] == "ib":
                    first, body = aql.pm4_indirect_buffer(unit[1], unit[2])
                else:
                    first, body = unit[1], unit[2]
                if ring.free() < 1:
                    return False
                ring.publish_aql(first, body)
            else:  # sdma
                words = unit[1]
                if ring.sdma_room() < len(words):
                    if ring.free() // 4 >= len(words) and ring.sdma_wrap():
                        continue
                    ring.flush_sdma()
                    return False
                ring.write_sdma(words)
            batch.position += 1
        if self.kind == "sdma":
            ring.flush_sdma()
        return True

    def _reopen(self) -> None:
        """Replace a failed hardware queue (the old one is released when possible)."""
        old_ring, old_native, old_arena = self.ring, self.native, self.arena
        self.device._discard_native_queue(old_native, old_ring, old_arena)
        self._open()
        self._retire[0] = self._next_sequence - 1  # nothing of the new queue is pending

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.device._close_queue(self)


__all__ = ["AmdgpuQueue", "Batch"]
