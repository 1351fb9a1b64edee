"""Native graphs of the amdgpu engine: recorded once, replayed with one submission.

A graph is encoded node by node (in the core's topological order) for the queue kind
that launches it and laid out in graph-owned memory:

* PM4: one indirect buffer holding every node's packets; a node with dependencies
  starts with CS_PARTIAL_FLUSH and ACQUIRE_MEM, independent nodes follow each other
  without a barrier. Replay is one INDIRECT_BUFFER packet in the ring.
* AQL: the nodes' packets (dispatches with the barrier bit where a node has
  dependencies; copies and fills as vendor PM4 packets over the graph's memory).
* SDMA (graphs of copies and fills only): the packets, in order.

Kernel arguments live beside the commands. :meth:`AmdgpuGraph.update` re-encodes the
changed nodes; the next launch lays the graph out again into the *other* of two
copies of its memory, first waiting for that copy's earlier launches to retire --
so rebinding never changes bytes an in-flight replay reads (double buffering; a
host wait only when both copies are still in flight).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hrx_core.engine import GraphNode, NativeGraph, NativeQueue
from hrx_core.errors import DeviceError, InvalidArgument, Timeout

from .encode import aql, pm4, sdma
from .kernel import KERNARG_ALIGN, AmdgpuExecutable, rank

if TYPE_CHECKING:
    from .device import AmdgpuDevice
    from .queue import AmdgpuQueue

MASK32 = 0xFFFFFFFF


class _Encoded:
    """One node for one queue kind: PM4 or SDMA words / AQL packets, its data and the
    places that need the data's address."""

    __slots__ = ("words", "packets", "data", "fixups", "describes")

    def __init__(self) -> None:
        self.words: list[int] = []
        self.packets: list[tuple[int, bytearray, list[tuple[int, int]]]] = []
        self.data = bytearray()
        self.fixups: list[tuple[int, int]] = []
        self.describes: list[tuple[int, list[tuple[int, int]]]] = []

    def add_data(self, blob: bytes, align: int = KERNARG_ALIGN) -> int:
        offset = -(-len(self.data) // align) * align
        self.data.extend(b"\0" * (offset - len(self.data)))
        self.data.extend(blob)
        return offset


class _Copy:
    """One laid-out copy of the graph in its own memory."""

    def __init__(self, device: AmdgpuDevice, kind: str, nodes: list[_Encoded]) -> None:
        code = sum(4 * len(n.words) for n in nodes)
        data_at = -(-code // KERNARG_ALIGN) * KERNARG_ALIGN
        offsets = []
        size = data_at
        for node in nodes:
            size = -(-size // KERNARG_ALIGN) * KERNARG_ALIGN
            offsets.append(size)
            size += len(node.data)
        self.memory = device._create_memory(max(size, 64), coherent=True)
        self.base = self.memory.address()
        mapping = self.memory.map()
        view = mapping.array
        self.dwords = code // 4
        self.packets: list[tuple[int, bytes]] = []
        self.sdma_words: list[int] = []
        self.describes: list[tuple[int, list[tuple[int, int]]]] = []
        self.in_flight: list[tuple[AmdgpuQueue, int]] = []
        at = 0
        for node, data_offset in zip(nodes, offsets):
            data_base = self.base + data_offset
            view[data_offset : data_offset + len(node.data)] = np.frombuffer(bytes(node.data), dtype=np.uint8)
            words = np.array(node.words, dtype=np.uint64).astype(np.uint32)
            for index, offset in node.fixups:
                address = data_base + offset
                words[index], words[index + 1] = address & MASK32, address >> 32
            if kind == "sdma":
                self.sdma_words.extend(int(w) for w in words)
            else:
                view[at : at + 4 * len(words)] = words.view(np.uint8)
            if kind == "aql":
                for first, body, fixes in node.packets:
                    body = bytearray(body)
                    for index, offset in fixes:
                        body[index : index + 8] = (data_base + offset).to_bytes(8, "little")
                    if first is None:  # a vendor packet over this node's PM4 words
                        first, packed = aql.pm4_indirect_buffer(self.base + at, len(words))
                        body = bytearray(packed)
                    self.packets.append((first, bytes(body)))
            at += 4 * len(words)
            for offset, extents in node.describes:
                self.describes.append((data_base + offset, extents))
        mapping.destroy()

    def idle(self) -> bool:
        self.in_flight = [(q, s) for q, s in self.in_flight if q.retired() < s and q.failure is None]
        return not self.in_flight

    def destroy(self) -> None:
        self.memory.destroy()


class AmdgpuGraph(NativeGraph):
    """A recorded graph (see the module docstring)."""

    def __init__(self, device: AmdgpuDevice, nodes: Sequence[GraphNode]) -> None:
        self.device = device
        self.nodes = list(nodes)
        for i, node in enumerate(self.nodes):
            if node.kind not in ("copy", "fill", "dispatch", "empty"):
                raise InvalidArgument(f"graph node {i}: unknown kind {node.kind!r}")
            if node.kind == "dispatch" and not isinstance(node.params["executable"], AmdgpuExecutable):
                raise InvalidArgument(f"graph node {i}: not an amdgpu executable")
        self._encoded: dict[str, list[_Encoded]] = {}
        self._copies: dict[str, list[_Copy]] = {}
        self._current: dict[str, int] = {}
        self._stale: dict[str, bool] = {}
        self.closed = False

    # -- encoding ---------------------------------------------------------------------------

    def _encode(self, kind: str, node: GraphNode) -> _Encoded:
        out = _Encoded()
        p = node.params
        barrier = bool(node.deps)
        if node.kind == "empty":
            return out
        if node.kind == "dispatch":
            if kind == "sdma":
                raise InvalidArgument("a graph with kernel dispatches cannot run on an SDMA queue")
            layout = p["executable"].layout
            grid, block = p["grid"], p["block"]
            kernargs, extents = layout.pack(grid, block, p["args"])
            offset = out.add_data(bytes(kernargs))
            out.describes.append((offset, extents))
            if kind == "pm4":
                if barrier:
                    out.words += pm4.cs_partial_flush() + pm4.acquire_mem()
                words, fixup = layout.pm4_words(grid, block)
                if fixup is not None:
                    out.fixups.append((len(out.words) + fixup, offset))
                out.words += words
            else:
                items = tuple(g * b for g, b in zip(grid, block))
                first, body = aql.kernel_dispatch(layout.descriptor_address, 0, block, items, rank(grid, block),  # type: ignore[arg-type]
                                                  group_segment=layout.group_segment, barrier=barrier)  # fmt: skip
                out.packets.append((first, bytearray(body), [(36, offset)]))
            return out
        # copies and fills: SDMA packets on an SDMA queue, CP DMA otherwise
        if kind == "pm4" and barrier:
            out.words += pm4.cs_partial_flush() + pm4.acquire_mem()
        if node.kind == "copy":
            src = p["src"].address + p["src_offset"]
            dst = p["dst"].address + p["dst_offset"]
            n = p["nbytes"]
            if kind == "sdma":
                out.words += sdma.copy_linear(src, dst, n)
            else:
                for start in range(0, n, pm4.DMA_DATA_MAX_BYTES):
                    out.words += pm4.dma_data_copy(src + start, dst + start, min(pm4.DMA_DATA_MAX_BYTES, n - start))
                out.words += pm4.dma_data_drain()
        else:
            self._encode_fill(kind, out, p["dst"].address + p["offset"], p["nbytes"], p["pattern"])
        if kind == "aql":
            out.packets.append((None, bytearray(60), []))  # type: ignore[arg-type]  # vendor packet over out.words
        return out

    def _encode_fill(self, kind: str, out: _Encoded, address: int, nbytes: int, pattern: bytes) -> None:
        head = min(-address % 4, nbytes)
        body = (nbytes - head) // 4 * 4
        tail = nbytes - head - body
        unit = len(pattern)
        phase = lambda k: bytes(pattern[(k + i) % unit] for i in range(4))  # noqa: E731
        for at, blob in ((address, phase(0)[:head]), (address + head + body, phase(head + body)[:tail])):
            if not blob:
                continue
            offset = out.add_data(blob, 8)
            words = sdma.copy_linear(0, at, len(blob)) if kind == "sdma" else pm4.dma_data_copy(0, at, len(blob))
            out.fixups.append((len(out.words) + (3 if kind == "sdma" else 2), offset))
            out.words += words
        if body:
            value = int.from_bytes(phase(head), "little")
            if kind == "sdma":
                out.words += sdma.const_fill(address + head, value, body)
            else:
                step = pm4.DMA_DATA_MAX_BYTES & ~3
                for start in range(0, body, step):
                    out.words += pm4.dma_data_fill(address + head + start, value, min(step, body - start))
        if kind != "sdma":
            out.words += pm4.dma_data_drain()

    # -- NativeGraph ----------------------------------------------------------------------------

    def update(self, index: int, node: GraphNode) -> None:
        if not 0 <= index < len(self.nodes) or node.kind != self.nodes[index].kind:
            raise InvalidArgument(f"graph update: node {index} must keep its kind")
        self.nodes[index] = node
        for kind, encoded in self._encoded.items():
            encoded[index] = self._encode(kind, node)
            self._stale[kind] = True

    def launch(self, queue: NativeQueue) -> None:
        self.launch_on(queue)  # type: ignore[arg-type]

    def launch_on(self, queue: AmdgpuQueue) -> None:
        if self.closed:
            raise InvalidArgument("graph is closed")
        kind = queue.kind
        copy = self._copy_for(kind)
        batch = queue._batch
        queue._barrier()
        if kind == "pm4":
            if copy.dwords:
                batch.items.append(("ib", copy.base, copy.dwords))
        elif kind == "aql":
            for first, body in copy.packets:
                batch.items.append(("aql", first, bytearray(body), []))
        elif copy.sdma_words:
            batch.items.append(("sdma", list(copy.sdma_words), []))
        for address, extents in copy.describes:
            self.device._describe_kernargs(address, extents)
        queue._dirty = True
        batch.graphs.append(self)
        copy.in_flight.append((queue, queue._next_sequence))  # the sequence this batch will get

    def _copy_for(self, kind: str) -> _Copy:
        encoded = self._encoded.get(kind)
        if encoded is None:
            encoded = self._encoded[kind] = [self._encode(kind, n) for n in self.nodes]
            self._copies[kind] = [_Copy(self.device, kind, encoded)]
            self._current[kind] = 0
            self._stale[kind] = False
        copies = self._copies[kind]
        if self._stale.get(kind):
            target = 1 - self._current[kind] if len(copies) == 2 else 1
            if len(copies) == 2:
                self._wait_idle(copies[target])
                copies[target].destroy()
                copies[target] = _Copy(self.device, kind, encoded)
            else:
                copies.append(_Copy(self.device, kind, encoded))
            self._current[kind] = target
            self._stale[kind] = False
        return copies[self._current[kind]]

    def _wait_idle(self, copy: _Copy) -> None:
        deadline = time.monotonic() + 60
        while not copy.idle():
            for queue, _ in copy.in_flight:
                queue.pump()
                queue.wait_published(0.002)
                failure = queue.check()
                if failure is not None:
                    raise DeviceError(f"graph replay failed before it could be rebound: {failure}")
            if time.monotonic() > deadline:
                raise Timeout("graph rebind: an earlier replay did not retire within 60 s")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        copies = [c for cs in self._copies.values() for c in cs]
        self._copies.clear()
        self.device._release_graph_memory(copies)


__all__ = ["AmdgpuGraph"]

_ = Any
