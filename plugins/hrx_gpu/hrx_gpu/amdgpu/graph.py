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
changed nodes; the next launch patches them into a copy of the graph's memory that no
replay is reading and switches to it -- so rebinding never changes bytes an in-flight
replay reads. Up to four copies are kept (multi-buffering); a rebind waits on the host
only when every copy is still in flight.

Each node's content has a token (``_versions``), and each copy records the tokens it
holds. :meth:`AmdgpuGraph.patch_args` remembers what a patch made of a node (the same
patch of the same content gives the same new node, encodings and token), so bindings
that come back -- inputs alternating between sets of buffers -- find a copy that
already holds them: the launch switches to it without writing anything.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hrx_core.engine import BufferArg, GraphNode, NativeGraph, NativeQueue, patched_args
from hrx_core.errors import DeviceError, InvalidArgument, Timeout

from .encode import aql, as_dwords, pm4, sdma
from .kernel import KERNARG_ALIGN, AmdgpuExecutable, rank

if TYPE_CHECKING:
    from .device import AmdgpuDevice
    from .queue import AmdgpuQueue

MASK32 = 0xFFFFFFFF
#: Copies of a graph's memory kept for rebinding while earlier replays are in flight.
MAX_COPIES = 4
#: In-flight entries a graph copy keeps before it drops the retired ones (then twice
#: what is left, at least this).
PRUNE_AT = 32
#: Patch results remembered per graph (node content + patch -> new content); cleared when full.
MAX_DERIVED = 256
#: Node content tokens: equal tokens, equal node content (never reused in a process).
_TOKENS = itertools.count(1)


def _first(item: tuple[int, Any]) -> int:
    return item[0]


def _by_node(patches: Sequence[tuple[int, int, BufferArg]]) -> dict[int, list[tuple[int, BufferArg]]]:
    """``patches`` grouped by node index: (argument index, new argument) in order."""
    by_node: dict[int, list[tuple[int, BufferArg]]] = {}
    for index, arg_index, arg in patches:
        by_node.setdefault(index, []).append((arg_index, arg))
    return by_node


#: Transitions remembered per prepared patch set (content token -> patched content).
MAX_TRANSITIONS = 16


class _Prepared:
    """:meth:`AmdgpuGraph.prepare_patches`' result: the patches, grouped by node, and
    what they made of each node content they met ((node, token) -> the patched content,
    as ``AmdgpuGraph._derived`` holds it)."""

    __slots__ = ("patches", "by_node", "transitions")

    def __init__(self, patches: tuple[tuple[int, int, BufferArg], ...], by_node: dict[int, list[tuple[int, BufferArg]]]) -> None:
        self.patches = patches
        self.by_node = by_node
        self.transitions: dict[tuple[int, int], _Content] = {}


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

    def with_pointers(self, layout: Any, pointers: Sequence[tuple[int, BufferArg]]) -> _Encoded:
        """This dispatch node with buffer pointers ``(index among the kernel's pointers,
        new argument)`` rewritten in its kernel arguments; packets shared, unchanged."""
        out = _Encoded()
        out.words, out.packets, out.fixups = self.words, self.packets, self.fixups
        out.data = bytearray(self.data)
        ((offset, extents),) = self.describes
        extents = list(extents)
        raw = memoryview(out.data)[offset:]
        for index, arg in pointers:
            layout.set_pointer(raw, extents, index, arg)
        out.describes = [(offset, extents)]
        return out



#: A node's patched content: its token, node, encodings by queue kind and the buffer
#: arguments patched since its root.
_Content = tuple[int, GraphNode, dict[str, _Encoded], dict[int, BufferArg]]


class _Copy:
    """One laid-out copy of the graph in its own memory, patchable node by node."""

    def __init__(self, device: AmdgpuDevice, kind: str, nodes: list[_Encoded]) -> None:
        self.device = device
        self.kind = kind
        code = sum(4 * len(n.words) for n in nodes)
        self.code_at: list[int] = []
        at = 0
        for node in nodes:
            self.code_at.append(at)
            at += 4 * len(node.words)
        size = -(-code // KERNARG_ALIGN) * KERNARG_ALIGN
        self.data_at: list[int] = []
        for node in nodes:
            size = -(-size // KERNARG_ALIGN) * KERNARG_ALIGN
            self.data_at.append(size)
            size += len(node.data)
        self.shape = [(len(n.words), len(n.data), len(n.packets)) for n in nodes]
        self.memory = device._create_memory(max(size, 64), coherent=True)
        self.base = self.memory.address()
        self.mapping = self.memory.map()
        self.dwords = code // 4
        self.node_packets: list[list[tuple[int, bytes]]] = [[] for _ in nodes]
        self.node_sdma: list[list[int]] = [[] for _ in nodes]
        self.versions = [-1] * len(nodes)
        self.in_flight: list[tuple[AmdgpuQueue, int]] = []
        self._prune_at = PRUNE_AT
        for i, node in enumerate(nodes):
            self.write(i, node, 0)

    def fits(self, index: int, node: _Encoded) -> bool:
        return self.shape[index] == (len(node.words), len(node.data), len(node.packets))

    def write(self, index: int, node: _Encoded, version: int) -> None:
        """Lay node ``index`` out (its shape must be the one this copy was built with)."""
        host = memoryview(self.mapping.array)
        data_offset = self.data_at[index]
        data_base = self.base + data_offset
        if node.data:
            host[data_offset : data_offset + len(node.data)] = node.data
        words = as_dwords(node.words)
        for i, offset in node.fixups:
            address = data_base + offset
            words[i], words[i + 1] = address & MASK32, address >> 32
        at = self.code_at[index]
        if self.kind == "sdma":
            self.node_sdma[index] = [int(w) for w in words]
        elif len(words):
            host[at : at + 4 * len(words)] = memoryview(words).cast("B")
        if self.kind == "aql":
            packets = []
            for first, body, fixes in node.packets:
                body = bytearray(body)
                for i, offset in fixes:
                    body[i : i + 8] = (data_base + offset).to_bytes(8, "little")
                if first is None:  # a vendor packet over this node's PM4 words
                    first, packed = aql.pm4_indirect_buffer(self.base + at, len(words))
                    body = bytearray(packed)
                packets.append((first, bytes(body)))
            self.node_packets[index] = packets
        for offset, extents in node.describes:
            self.device._describe_kernargs(data_base + offset, extents)
        self.versions[index] = version

    def idle(self) -> bool:
        self.in_flight = [(q, s) for q, s in self.in_flight if q.retired() < s and q.failure is None]
        return not self.in_flight

    def note_launch(self, queue: AmdgpuQueue, sequence: int) -> None:
        """A replay of this copy goes out in ``queue``'s batch ``sequence``. Retired
        entries are dropped once the list doubles, so a copy replayed over and over
        (the same bindings every time) keeps only what may still be in flight."""
        self.in_flight.append((queue, sequence))
        if len(self.in_flight) >= self._prune_at:
            self.idle()
            self._prune_at = max(PRUNE_AT, 2 * len(self.in_flight))

    def destroy(self) -> None:
        self.mapping.destroy()
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
        self._versions = [next(_TOKENS) for _ in self.nodes]  # each node's content token
        # a node's content: as built or last updated (its root token) with the buffer
        # arguments patched since (argument index -> BufferArg)
        self._roots = list(self._versions)
        self._overrides: list[dict[int, BufferArg]] = [{} for _ in self.nodes]
        # (node index, root token, overrides) -> (token, node, encodings by kind, overrides)
        self._derived: dict[tuple[Any, ...], _Content] = {}
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
        self._versions[index] = self._roots[index] = next(_TOKENS)
        self._overrides[index] = {}
        for kind, encoded in self._encoded.items():
            encoded[index] = self._encode(kind, node)

    def patch_args(self, patches: Sequence[tuple[int, int, BufferArg]]) -> bool:
        """Point buffer arguments of dispatch nodes at new ranges: only the pointers in
        the nodes' kernel arguments change (their packets stay as encoded); the next
        launch writes the changed nodes into a copy no replay is reading, as after
        :meth:`update`. Anything but a buffer argument of a dispatch node: False,
        nothing changed."""
        if self.closed:
            raise InvalidArgument("graph is closed")
        if any(not hasattr(getattr(arg, "buffer", None), "address") for _, _, arg in patches):
            return False
        # per node, its patches; a node whose content was patched alike before takes
        # the remembered result (validated then, against the same content)
        by_node = _by_node(patches)
        hits: dict[int, _Content] = {}
        keys: dict[int, tuple[Any, ...]] = {}
        for index, mine in by_node.items():
            try:
                if not 0 <= index < len(self.nodes):
                    return False
                overrides = {**self._overrides[index], **dict(mine)}
                key = keys[index] = (index, self._roots[index], tuple(sorted(overrides.items(), key=_first)))
                hit = self._derived.get(key)
            except TypeError:  # not an index, or an unhashable argument (not a buffer argument)
                return False
            if hit is not None:
                hits[index] = hit
        # the rest is checked before anything changes (a refused call changes nothing)
        changed = patched_args(self.nodes, [p for p in patches if p[0] not in hits]) if len(hits) < len(by_node) else {}
        if changed is None:
            return False
        for index, hit in hits.items():
            self._take(index, *hit)
        if len(self._derived) + len(changed) > MAX_DERIVED:
            self._derived.clear()
        for index, args in changed.items():
            node = self.nodes[index]
            # each patched pointer's place among its kernel's buffer arguments
            pointers = [(sum(isinstance(a, BufferArg) for a in node.params["args"][:arg_index]), arg)
                        for arg_index, arg in by_node[index]]
            layout = node.params["executable"].layout
            made = (next(_TOKENS), GraphNode(node.kind, node.deps, {**node.params, "args": tuple(args)}),
                    {kind: encoded[index].with_pointers(layout, pointers) for kind, encoded in self._encoded.items()},
                    dict(keys[index][2]))
            self._derived[keys[index]] = made
            self._take(index, *made)
        return True

    def prepare_patches(self, patches: Sequence[tuple[int, int, BufferArg]]) -> Any:
        """``patches`` grouped by node, for :meth:`apply_patches` (which the core's
        compiled replay calls when it rebinds this graph)."""
        if not patches:
            return None
        return _Prepared(tuple(patches), _by_node(patches))

    def apply_patches(self, prepared: Any) -> bool:
        """Stage ``prepared`` as :meth:`patch_args` stages its patches. A node whose
        content token the same patches met before takes the result they made then."""
        if self.closed or type(prepared) is not _Prepared:
            return False
        transitions = prepared.transitions
        versions = self._versions
        found = []
        for index in prepared.by_node:
            hit = transitions.get((index, versions[index]))
            if hit is None:
                break
            found.append((index, hit))
        else:
            for index, hit in found:
                self._take(index, *hit)
            return True
        before = {index: versions[index] for index in prepared.by_node}
        if not self.patch_args(prepared.patches):
            return False
        if len(transitions) >= MAX_TRANSITIONS:
            transitions.clear()
        for index, token in before.items():
            key = (index, self._roots[index], tuple(sorted(self._overrides[index].items(), key=_first)))
            made = self._derived.get(key)
            if made is not None and made[0] == versions[index]:
                transitions[(index, token)] = made
        return True

    def _take(self, index: int, token: int, node: GraphNode, encodings: dict[str, _Encoded],
              overrides: dict[int, BufferArg]) -> None:
        """Make node ``index`` the patched content ``node`` (token ``token``, its buffer
        arguments patched since its root ``overrides``), with its encodings for the
        queue kinds encoded so far (others are encoded now, and kept)."""
        self.nodes[index] = node
        self._versions[index] = token
        self._overrides[index] = overrides
        for kind, encoded in self._encoded.items():
            mine = encodings.get(kind)
            if mine is None:
                mine = encodings[kind] = self._encode(kind, node)
            encoded[index] = mine

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
            for packets in copy.node_packets:
                for first, body in packets:
                    batch.items.append(("aql", first, bytearray(body), []))
        else:
            words = [w for node in copy.node_sdma for w in node]
            if words:
                batch.items.append(("sdma", words, []))
        queue._dirty = True
        batch.graphs.append(self)
        copy.note_launch(queue, queue._next_sequence)  # the sequence this batch will get

    def _copy_for(self, kind: str) -> _Copy:
        encoded = self._encoded.get(kind)
        if encoded is None:
            encoded = self._encoded[kind] = [self._encode(kind, n) for n in self.nodes]
            copy = _Copy(self.device, kind, encoded)
            copy.versions = list(self._versions)
            self._copies[kind] = [copy]
            self._current[kind] = 0
        copies = self._copies[kind]
        current = copies[self._current[kind]]
        if current.versions == self._versions:
            return current
        for i, copy in enumerate(copies):
            # a copy that holds these contents already (in flight or not: replays only
            # read a copy, and nothing is written to this one)
            if copy is not current and copy.versions == self._versions:
                self._current[kind] = i
                return copy
        # Rebound nodes: patch a copy no replay is reading, then switch to it. Up to
        # MAX_COPIES copies exist; only when all are in flight does a rebind wait.
        others = [i for i in range(len(copies)) if i != self._current[kind]]
        target = next((i for i in others if copies[i].idle()), None)
        if target is None and len(copies) < MAX_COPIES:
            copies.append(_Copy(self.device, kind, encoded))  # (laid out as the graph is now)
            copies[-1].versions = list(self._versions)
            target = len(copies) - 1
        elif target is None:
            target = min(others, key=lambda i: max((s for _, s in copies[i].in_flight), default=0))
            self._wait_idle(copies[target])
        copy = copies[target]
        stale = [i for i, v in enumerate(self._versions) if copy.versions[i] != v]
        if all(copy.fits(i, encoded[i]) for i in stale):
            for i in stale:
                copy.write(i, encoded[i], self._versions[i])
        else:  # a node changed shape: lay the whole graph out again
            copy.destroy()
            copy = copies[target] = _Copy(self.device, kind, encoded)
        copy.versions = list(self._versions)
        self._current[kind] = target
        return copy

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
