"""Recorded graphs: record once, replay many times.

* ``stream.graph()`` takes explicit predecessor lists: ``deps=[]`` starts an
  independent branch, pass branch endings to their consumer, ``join`` adds an empty
  dependency node.
* ``stream.access_graph()`` infers dependencies from each binding's declared access
  and byte range (disjoint slices of one buffer do not serialize).
* ``stream.owned_graph()`` retains the buffers, kernels and budget charges it binds
  through every replay; other graphs borrow them, and replaying after a bound
  buffer was closed raises InvalidArgument.

Recording executes nothing. ``input(name, buffer)`` declares a replaceable input;
``launch(inputs={name: other})`` replays with another buffer of the same size and
sufficient access, without re-recording. Engines with native graphs (CUDA graphs)
build one at the first launch and patch only the changed parameters afterwards;
others replay the nodes in recording order on the stream's queue.
"""

from __future__ import annotations

import threading
import weakref

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import transfer
from .buffer import EPOCH, Allocation, Binding, Buffer, View, as_binding, backing_of
from .completion import Completion
from .device import AUTO_FLUSH_OPS
from .engine import Access, BufferArg, Executable, GraphNode, NativeGraph, NativeQueue
from .errors import InvalidArgument, OutOfBounds, Overlap, show
from .fastpath import TalliedCount
from .finalize import close_later_if_collecting
from .hazards import HazardTracker
from .kernel import Kernel
from .record import LaunchRecord, merge_uses
from .stream import Stream, _dims, _narrower

if TYPE_CHECKING:
    from .device import QueueSlot
    from .model.tensor import DeviceTensor


class Node:
    """A recorded node; pass it in ``deps`` of later nodes (explicit graphs)."""

    __slots__ = ("graph", "index", "kind", "deps", "refs", "params")

    def __init__(self, graph: Graph, index: int, kind: str, deps: tuple[int, ...], refs: list[tuple[Buffer, int, int, Access]], params: dict[str, Any]) -> None:
        self.graph = graph
        self.index = index
        self.kind = kind
        self.deps = deps
        # (buffer, offset in buffer, length, access) per bound range
        self.refs = refs
        self.params = params

    def __repr__(self) -> str:
        return f"<hrx.graph.Node #{self.index} {self.kind} deps={list(self.deps)}>"


_Resolved = dict[int, tuple[Allocation, int]]  # id(buffer) -> (allocation, base offset)


#: Rebinding memos: validated bindings kept per input, argument-cell patches per graph.
_INPUT_MEMO = 4
_PATCH_MEMO = 64
#: Rebind records kept per graph (one per distinct inputs mapping replayed).
_REBIND_MEMO = 8


class _RebindRecord:
    """One ``inputs`` mapping of a graph, resolved once: what a replay with it checks
    (EPOCH, and that each value is still the object it was made from) and applies
    (per declared input, the argument-cell patches that bind it; the memory bound for
    the replay only). Valid while EPOCH stands and the graph keeps its native graph
    (records are dropped with the launch record)."""

    __slots__ = ("epoch", "refs", "items", "rebound", "chosen", "holds")

    def __init__(self, epoch: int, refs: tuple[Any, ...], items: tuple[tuple[str, tuple[int, int], list[tuple[int, int, BufferArg]], Any], ...],
                 extra: list[tuple[Allocation, int, int, bool]], rebound: bool, chosen: dict[str, tuple[Allocation, int, int, bool]]) -> None:
        self.epoch = epoch
        self.refs = refs  # weak references to the mapping's values, in its order
        # per declared input: (name, (id(allocation), start), patches, what the native
        # graph's prepare_patches made of them or None)
        self.items = items
        self.rebound = rebound
        self.chosen = chosen  # what _validate_inputs returned (the slow path's argument)
        # the memory bound for these replays only, held while the record lives (a
        # launch notes itself: nothing retained and released per launch)
        self.holds = LaunchRecord(extra) if extra else None
        if self.holds is not None:
            self.holds.epoch = epoch  # validated at that epoch, with the inputs

    def close(self) -> None:
        self.epoch = -1  # never current again (the compiled replay may still hold it)
        if self.holds is not None:
            self.holds.close()  # launches in flight become pending uses


def _reached(slot: QueueSlot, value: int) -> bool:
    """Whether the work of ``slot`` up to ``value`` is known finished (signalled and
    reached by the timeline)."""
    return value <= slot.signaled and (slot._timeline or slot.timeline).completed() >= value


class _GraphHold:
    """Keeps a closed owned graph's retained memory alive until its latest launch on
    one queue retires (:meth:`Graph.close` takes one per queue still running it)."""

    __slots__ = ("graph",)

    def __init__(self, graph: Graph) -> None:
        self.graph: Graph | None = graph

    def release(self) -> None:
        graph, self.graph = self.graph, None
        if graph is not None:
            graph._unhold()


def _weak_check(graph: Graph) -> Any:
    """The graph's record check, holding the graph weakly: the record is registered on
    every allocation it binds, so a strong reference would keep a graph its user
    dropped (its native graph and retained memory included) alive as long as any of
    those buffers lives."""
    ref = weakref.WeakMethod(graph._check_record)

    def check() -> None:
        method = ref()
        if method is None:  # (its finalizer closes the record; nothing launches it)
            raise InvalidArgument("graph: was garbage-collected")
        method()

    return check


class Graph:
    """A recorded graph of copies, fills, dispatches and joins."""

    # the attributes the compiled replay (hrx_core.fastpath) reads and writes on every
    # launch, as slots: it reaches them at their offsets; the rest live in __dict__
    #: How many times the graph was launched (compiled replays count in _launch_tallies).
    launches = TalliedCount("_launches", "_launch_tallies", "How many times the graph was launched.")

    __slots__ = ("stream", "device", "owned", "_plan", "_record", "_rebound", "_bound", "_rebind_memo", "_restore",
                 "_last_launch", "_launches", "_launch_tallies", "_fast", "_fast_for", "_closed", "_native", "__dict__",
                 "__weakref__")

    def __init__(self, stream: Stream, *, inferred: bool, owned: bool) -> None:
        self.stream = stream
        self.device = stream.device
        self.inferred = inferred
        self.owned = owned
        self.nodes: list[Node] = []
        self._buffers: dict[int, Buffer] = {}
        self._retained: dict[int, Allocation] = {}
        self._kernels: list[Kernel] = []
        self._executables: list[Executable] = []  # distinct executables the dispatches launch
        self._hazards = HazardTracker() if inferred else None
        self._inputs: dict[str, Buffer] = {}
        self._native: NativeGraph | None = None
        self._native_map: list[list[int]] = []
        self._native_deps: list[tuple[int, ...]] = []
        # per bound buffer: [first byte, end, writes] over all nodes, and its nodes
        self._spans: dict[int, list[Any]] = {}
        self._nodes_of: dict[int, list[int]] = {}
        self._access: dict[int, Access] = {}
        # an owned graph's latest launch value per queue (its launches take no hold:
        # close() defers the release behind the ones still in flight), and the holds
        # close() took; the graph frees its buffers only after them
        self._last_launch: dict[QueueSlot, int] = {}
        self._holds = 0
        self._hold_lock = threading.Lock()
        # (allocations, uses, encode) for the default bindings, rebuilt when stale
        self._plan: tuple[list[Allocation], list[tuple[Allocation, int, int, bool]], Any] | None = None
        # the default bindings' launch record (made with the plan)
        self._record: LaunchRecord | None = None
        self._default_allocs: dict[int, Allocation] = {}
        # rebind plans (native graphs, compiled with the native graph): per input, the
        # dispatch argument cells it feeds as (native node, argument, offset in the
        # input, length, access), and the nodes needing a full update (copies, fills)
        self._cells: dict[str, list[tuple[int, int, int, int, Access]]] = {}
        self._slow: dict[str, list[int]] = {}
        self._node_of_native: dict[int, int] = {}
        # per input: (id(allocation), start) of its default, and what the native graph holds
        self._default_keys: dict[str, tuple[int, int]] = {}
        self._bound: dict[str, tuple[int, int]] = {}
        #: whether the native graph holds other memory than the defaults for an input
        self._rebound = False
        # rebinding memos, dropped with the launch record and stale once EPOCH moves:
        # per input, Buffer/View bindings validated before -- id(value) -> (weak
        # reference, epoch, (allocation, start, end, writes), bound elsewhere); and per
        # (input, (id(allocation), start)) its argument-cell patches (epoch, patches)
        self._input_memo: dict[str, dict[int, tuple[Any, int, tuple[Allocation, int, int, bool], bool]]] = {}
        self._patch_memo: dict[tuple[str, tuple[int, int]], tuple[int, list[tuple[int, int, BufferArg]]]] = {}
        # and per inputs mapping (its names, then id() of its values) a rebind record
        self._rebind_memo: dict[tuple[Any, ...], _RebindRecord] = {}
        # the record that binds the defaults again after a rebinding replay (what a
        # plain launch() of a rebound graph applies), made by the first such launch
        self._restore: _RebindRecord | None = None
        # owned graphs: each node's native commands, prepared when it was recorded
        self._prepared: list[list[tuple[str, dict[str, Any]]]] = []
        self._closed = False
        self._launches = 0  # (launches: this plus what compiled replays counted in _launch_tallies)
        self._launch_tallies: Any = None
        # the compiled common replay (hrx_core.fastpath), made for the plan in _fast_for
        self._fast: Any = None
        self._fast_for: Any = None

    def __repr__(self) -> str:
        kind = "access" if self.inferred else "explicit"
        owned = " owned" if self.owned else ""
        return f"<hrx.Graph {kind}{owned}, {len(self.nodes)} nodes on {self.stream.queue}>"

    # -- recording --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument("graph is closed")

    def _deps(self, deps: Sequence[Node] | None) -> list[int]:
        if deps is None:
            if not self.inferred:
                raise InvalidArgument(
                    "deps: an explicit graph needs a predecessor list ([] starts an independent branch)"
                )
            return []
        if isinstance(deps, Node) or not isinstance(deps, Sequence):
            raise InvalidArgument("deps: expected a list of nodes of this graph")
        out = []
        for i, d in enumerate(deps):
            if not isinstance(d, Node) or d.graph is not self:
                raise InvalidArgument(f"deps[{i}]: not a node of this graph")
            out.append(d.index)
        return out

    def _bind(self, name: str, value: Any, default: Access) -> tuple[Buffer, int, int, Access]:
        binding = as_binding(name, value, default)
        view = binding.view
        buffer = view.buffer
        if buffer.device is not self.device:
            raise InvalidArgument(f"{name}: buffer belongs to {buffer.device.name}, not {self.device.name}")
        return buffer, view.offset, view.length, binding.access

    def _add(self, kind: str, deps: Sequence[Node] | None, refs: list[tuple[Buffer, int, int, Access]], params: dict[str, Any]) -> Node:
        explicit = self._deps(deps)
        index = len(self.nodes)
        found: set[int] = set(explicit)
        if self._hazards is not None:
            found |= self._hazards.add(
                index, [(id(b.allocation), b._base + off, b._base + off + n, a.writes) for b, off, n, a in refs]
            )
        for buffer, off, n, access in refs:
            key = id(buffer)
            self._access[key] = self._access.get(key, Access(0)) | access
            if key not in self._buffers:
                self._buffers[key] = buffer
                self._spans[key] = [off, off + n, access.writes]
                if self.owned:
                    alloc = buffer.allocation
                    if id(alloc) not in self._retained:
                        self._retained[id(alloc)] = alloc.retain()
            else:
                span = self._spans[key]
                span[0], span[1], span[2] = min(span[0], off), max(span[1], off + n), span[2] or access.writes
            self._nodes_of.setdefault(key, []).append(index)
        node = Node(self, index, kind, tuple(sorted(found)), refs, params)
        if self.owned:
            # owned graphs prepare each node's native commands as it is recorded (their
            # bindings are retained, so the recorded addresses stay valid)
            self._prepared.append(self._expand(node, self._recorded_bindings(refs), self.device.info.limits.max_transfer_bytes))
        self.nodes.append(node)
        self._native = None  # topology changed: rebuild on next launch (or prepare())
        self._drop_record()
        return node

    def _recorded_bindings(self, refs: list[tuple[Buffer, int, int, Access]]) -> _Resolved:
        return {id(b): (b._alloc, b._base) for b, *_ in refs}

    def prepare(self) -> None:
        """Prepare the replay now: build the native graph (engines with native graphs)
        or the command list, so the first launch costs what every launch costs. Owned
        graphs also prepare each node's commands while recording. Runtime regions are
        prepared when recorded."""
        self._check_open()
        if self.nodes and self._plan is None:
            self._make_plan(self._resolve(None), cache=True)

    def copy(self, src: Buffer | View | Binding, dst: Buffer | View | Binding, *, deps: Sequence[Node] | None = None) -> Node:
        """Deprecated: ``copyto(dst, src)`` -- destination first, like every other transfer."""
        transfer.deprecated_copy("Graph")
        return self.copyto(dst, src, deps=deps)

    def copyto(self, dst: Buffer | View | Binding, src: Buffer | View | Binding, *, deps: Sequence[Node] | None = None) -> Node:
        """Record a copy of ``src`` into ``dst`` (equal lengths, no overlap; destination
        first, as ``numpy.copyto``; large ranges are split)."""
        self._check_open()
        s = self._bind("src", src, Access.READ)
        d = self._bind("dst", dst, Access.WRITE)
        if not s[3] & Access.READ:
            raise InvalidArgument("src: binding is declared write-only")
        if not d[3] & Access.WRITE:
            raise InvalidArgument("dst: binding is declared read-only")
        if s[2] != d[2]:
            raise OutOfBounds(f"copy: src has {s[2]} bytes, dst has {d[2]}")
        sa, da = backing_of(s[0].allocation), backing_of(d[0].allocation)
        s0, d0 = s[0]._base + s[1], d[0]._base + d[1]
        if sa is da and s0 < d0 + d[2] and d0 < s0 + s[2]:
            raise Overlap("copy: src and dst overlap in one allocation")
        return self._add("copy", deps, [(s[0], s[1], s[2], Access.READ), (d[0], d[1], d[2], Access.WRITE)], {})

    def fill(self, dst: Buffer | View | Binding | DeviceTensor, value: Any = None, *, dtype: Any = None,
             pattern: Any = None, deps: Sequence[Node] | None = None) -> Node:
        """Record a fill: ``value`` as an element of ``dtype`` (or of a DeviceTensor's
        dtype), or the bytes of ``pattern=``; 1, 2 or 4 bytes (as :meth:`Stream.fill`)."""
        self._check_open()
        dst, pattern = transfer.fill_args(dst, value, dtype, pattern)
        d = self._bind("dst", dst, Access.WRITE)
        if not d[3] & Access.WRITE:
            raise InvalidArgument("dst: binding is declared read-only")
        p = len(pattern)
        if (d[0]._base + d[1]) % p or d[2] % p:
            raise InvalidArgument(f"fill: a {p}-byte pattern needs offset and length multiples of {p}")
        return self._add("fill", deps, [(d[0], d[1], d[2], Access.WRITE)], {"pattern": pattern})

    def dispatch(
        self,
        kernel: Kernel,
        grid: int | Sequence[int],
        bindings: Sequence[Buffer | View | Binding],
        *,
        block: int | Sequence[int] = 1,
        scalars: Sequence[Any] = (),
        deps: Sequence[Node] | None = None,
    ) -> Node:
        """Record a kernel launch (the kernel is compiled and loaded now)."""
        self._check_open()
        if not isinstance(kernel, Kernel):
            raise InvalidArgument(f"kernel: expected an hrx Kernel, got {type(kernel).__name__}")
        limits = self.device.info.limits
        g = _dims("grid", grid, limits.max_grid)
        b = _dims("block", block, limits.max_block)
        if b[0] * b[1] * b[2] > limits.max_threads_per_block:
            raise InvalidArgument(f"block: {b} has more than {limits.max_threads_per_block} threads")
        if isinstance(bindings, (Buffer, View, Binding)) or not isinstance(bindings, Sequence):
            raise InvalidArgument("bindings: expected a list of Buffer, View or Binding")
        if len(bindings) != len(kernel.buffer_access):
            raise InvalidArgument(
                f"bindings: kernel {kernel.name!r} takes {len(kernel.buffer_access)} buffers, got {len(bindings)}"
            )
        refs = [self._bind(f"bindings[{i}]", v, a) for i, (v, a) in enumerate(zip(bindings, kernel.buffer_access))]
        for i, (ref, access) in enumerate(zip(refs, kernel.buffer_access)):
            if ref[3] & access != access:  # hazards follow the declaration: it must cover the kernel's use
                _narrower(kernel, i, Binding(View._make(ref[0], ref[1], ref[2]), ref[3]), access)
        values = kernel.check_scalars(scalars)
        exe = kernel.executable(self.device)
        self._kernels.append(kernel)
        if all(e is not exe for e in self._executables):
            self._executables.append(exe)
        return self._add("dispatch", deps, refs, {"executable": exe, "grid": g, "block": b, "scalars": values})

    def join(self, deps: Sequence[Node]) -> Node:
        """An empty node that depends on ``deps``."""
        self._check_open()
        if deps is None:
            raise InvalidArgument("deps: join needs a list of nodes")
        return self._add("empty", deps, [], {})

    def input(self, name: str, buffer: Buffer) -> Buffer:
        """Declare ``buffer`` as the input ``name``, replaceable at launch; returns it."""
        self._check_open()
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"name: expected a nonempty str, got {show(name)}")
        if not isinstance(buffer, Buffer):
            raise InvalidArgument(f"buffer: expected a Buffer, got {type(buffer).__name__}")
        if name in self._inputs:
            raise InvalidArgument(f"name: input {name!r} is already declared")
        if buffer.device is not self.device:
            raise InvalidArgument(f"buffer: belongs to {buffer.device.name}, not {self.device.name}")
        if buffer.closed:
            raise InvalidArgument("buffer: is closed")
        self._inputs[name] = buffer
        self._native = None  # rebind plans are compiled with the native graph
        self._drop_record()
        return buffer

    @property
    def inputs(self) -> dict[str, Buffer]:
        return dict(self._inputs)

    @property
    def binding_bytes(self) -> int:
        """Distinct bound allocation bytes."""
        seen: dict[int, int] = {}
        for buffer in self._buffers.values():
            alloc = buffer._alloc
            seen[id(alloc)] = alloc.nbytes
        return sum(seen.values())

    def access_of(self, buffer: Buffer) -> Access:
        """The union of the access the graph's nodes make to ``buffer``."""
        return self._access.get(id(buffer), Access(0))

    # -- replay -----------------------------------------------------------------

    def _resolve(self, inputs: Mapping[str, Any] | None) -> _Resolved:
        resolved: _Resolved = {}
        owned = self.owned
        for key, buffer in self._buffers.items():
            if not owned and buffer._closed:
                raise InvalidArgument(f"graph: bound {buffer!r} was closed; use owned_graph() to retain buffers")
            resolved[key] = (buffer._alloc, buffer._base)
        if not inputs:
            return resolved
        if not isinstance(inputs, Mapping):
            raise InvalidArgument("inputs: expected a mapping of input name to Buffer, View or Binding")
        access = self._access
        replaced: list[tuple[Allocation, int, int, bool, int]] = []
        for name, value in inputs.items():
            declared, view, used = self._input_binding(name, value)
            alloc = view.buffer.allocation
            key = id(declared)
            if key in resolved:
                resolved[key] = (alloc, view.start)
            replaced.append((alloc, view.start, view.end, bool(int(used) & 2), key))
        # A replacement must not alias other memory the graph uses where either writes.
        for alloc, start, end, writes, mine in replaced:
            for key, (a, base) in resolved.items():
                if key == mine or a is not alloc:
                    continue
                nbytes = self._buffers[key].nbytes
                if start < base + nbytes and base < end and (writes or int(access.get(key, 0)) & 2):
                    name = next(n for n, b in self._inputs.items() if id(b) == mine)
                    raise Overlap(f"inputs[{name!r}]: overlaps other memory bound in the graph")
        return resolved

    def _commands(self, node: Node, resolved: _Resolved, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """``node``'s native commands: prepared at recording (owned graphs bound as
        recorded), else expanded now."""
        if self._prepared and all(resolved.get(id(b)) == (b._alloc, b._base) for b, *_ in node.refs):
            return self._prepared[node.index]
        return self._expand(node, resolved, limit)

    def _native_nodes(self, resolved: _Resolved) -> tuple[list[GraphNode], list[list[int]]]:
        limit = self.device.info.limits.max_transfer_bytes
        out: list[GraphNode] = []
        mapping: list[list[int]] = []
        for node in self.nodes:
            deps = tuple(i for d in node.deps for i in mapping[d])
            mine: list[int] = []
            for kind, params in self._commands(node, resolved, limit):
                mine.append(len(out))
                out.append(GraphNode(kind, deps, params))
            mapping.append(mine)
        return out, mapping

    @staticmethod
    def _expand(node: Node, resolved: _Resolved, limit: int) -> list[tuple[str, dict[str, Any]]]:
        if node.kind == "copy":
            (sb, so, n, _), (db, do, _, _) = node.refs
            sa, sbase = resolved[id(sb)]
            da, dbase = resolved[id(db)]
            return [
                ("copy", {"src": sa.native, "src_offset": sbase + so + off, "dst": da.native,
                          "dst_offset": dbase + do + off, "nbytes": length})
                for off, length in transfer.split(n, limit)
            ]
        if node.kind == "fill":
            ((db, do, n, _),) = node.refs
            da, dbase = resolved[id(db)]
            pattern = node.params["pattern"]
            return [
                ("fill", {"dst": da.native, "offset": dbase + do + off, "nbytes": length, "pattern": pattern})
                for off, length in transfer.split(n, limit, len(pattern))
            ]
        if node.kind == "dispatch":
            args: list[Any] = []
            for b, off, n, access in node.refs:
                a, base = resolved[id(b)]
                args.append(BufferArg(a.native, base + off, n, access))
            args.extend(node.params["scalars"])
            p = node.params
            return [("dispatch", {"executable": p["executable"], "grid": p["grid"], "block": p["block"], "args": tuple(args)})]
        return [("empty", {})]

    def launch(self, stream: Stream | None = None, *, inputs: Mapping[str, Any] | None = None) -> Completion:
        """Replay the graph on ``stream`` (default: the recording stream).

        The default bindings are validated once into a launch record; a replay checks
        one epoch counter and encodes. ``inputs`` rebinds declared inputs for this
        replay: each new binding is validated once, and on native graphs only the
        argument cells it feeds are rewritten (:meth:`NativeGraph.patch_args`), with
        overlap checks only where the new memory is bound elsewhere in the graph."""
        if stream is None:
            fast = self._fast
            if fast is not None:
                # the compiled replay (with inputs: a mapping replayed before, its rebind
                # record current); None: it did nothing, the Python path runs
                completion: Completion | None = fast.rebind(self, inputs) if inputs else fast(self)
                if completion is not None:
                    return completion
        return self._launch_py(stream, inputs=inputs)

    def _launch_py(self, stream: Stream | None = None, *, inputs: Mapping[str, Any] | None = None) -> Completion:
        """:meth:`launch` after its compiled replay did nothing (or there is none)."""
        if stream is None:
            if not inputs and self._plan is not None and not self._rebound and not self._closed:
                # the common replay: the recording stream, the default bindings, a
                # current plan -- what follows, without the checks that cannot fail here
                completion = self._launch_signaled_py(self.stream, True)
                if self._fast_for is not self._plan:
                    self._make_fast()
                return completion
        self._check_open()
        stream = self.stream if stream is None else stream
        if not isinstance(stream, Stream):
            raise InvalidArgument(f"stream: expected a Stream or None, got {type(stream).__name__}")
        if stream.device is not self.device:
            raise InvalidArgument(f"stream: is on {stream.device.name}, the graph on {self.device.name}")
        if not self.nodes:
            return stream.completion()
        if inputs and not self.device.info.native_graphs:
            return self._launch_replanned(stream, inputs)
        plan = self._plan or self._make_plan(self._resolve(None), cache=True)
        rebind: _RebindRecord | None = None
        chosen = None
        key: tuple[Any, ...] = ()
        epoch = 0
        if inputs:
            if type(inputs) is dict:
                # a mapping replayed before: one record, checked by EPOCH and identity
                key = (*inputs, *map(id, inputs.values()))
                rebind = self._rebind_memo.get(key)
                if rebind is not None and rebind.epoch == EPOCH.value:
                    for ref, value in zip(rebind.refs, inputs.values()):
                        if ref() is not value:
                            rebind = None
                            break
                else:
                    rebind = None
            if rebind is None:
                epoch = EPOCH.value  # read first: a change during the checks makes a record stale
                chosen = self._validate_inputs(inputs)
        record = self._record
        assert record is not None
        encode = plan[2]
        slot = stream.slot
        extra: list[tuple[Allocation, int, int, bool]] = []
        with slot.lock:
            self._check_launchable(record, slot)
            if rebind is not None:
                self._apply_record(rebind)  # (its memory is held by the record: no extra uses)
            elif chosen or self._rebound:  # graphs without inputs skip the check
                extra = self._apply_inputs(chosen or {})
                if key and chosen:
                    self._remember_rebind(key, inputs, chosen, extra, epoch)  # type: ignore[arg-type]
                elif not inputs and not self._rebound and stream is self.stream:
                    self._remember_restore(record.epoch)
            held: list[Any] = []
            try:
                for a, *_ in extra:  # memory bound for this replay only
                    held.append(a.retain())
                native = slot._native or slot.native
                encode(native)
                if native.needs_submit:
                    native.submit()
            except BaseException:
                for obj in held:
                    obj.release()
                raise
            if self.owned:
                self._last_launch[slot] = slot.pending_value  # what close() defers behind
            value, done = slot.commit_locked(held)
            completion = stream._done(value)
            record.last[slot] = completion
            if rebind is not None and rebind.holds is not None:
                rebind.holds.last[slot] = completion  # the record holds what it rebinds
        if done:
            slot.release_retired(done)
        for a, start, end, writes in extra:
            a.note_use(completion, start, end, writes)
        self.launches += 1
        self.device.stats.graph_launches += 1
        if self._fast_for is not self._plan and stream is self.stream:
            self._make_fast()
        return completion

    def _make_fast(self) -> None:
        """Make the compiled replay of the current plan (see :mod:`hrx_core.fastpath`),
        where it can be built: after a replay, so the queue and native graph exist."""
        plan, record = self._plan, self._record
        self._fast_for = plan
        self._fast = None
        if plan is None or record is None or self._closed or not self.nodes:
            return
        slot = self.stream.slot
        queue = slot._native
        if queue is None:
            return
        from . import fastpath

        mod = fastpath.module()
        if not mod.compiled:
            return
        fastpath.bind_entry(Graph, "launch", Graph._launch_py, "graph_launch", mod.lib)
        tallies = (Graph.launches.tally(self, mod.lib), self.device.stats.graph_launch_tally(mod.lib))
        native_graph = self._native if self.device.info.native_graphs else None
        entry = native_graph.fast_launch(queue) if native_graph is not None else None
        address, argument, on_failure, keep = entry if entry is not None else (0, 0, None, None)
        stage = native_graph.fast_stage() if native_graph is not None else None
        self._fast = mod.lib.Replayer(
            plan, self._native, record, EPOCH, slot, self.stream, self.device.stats,
            plan[2], on_failure, address, argument, keep, self.owned, AUTO_FLUSH_OPS, stage, tallies,
        )

    def _check_launchable(self, record: LaunchRecord, slot: QueueSlot) -> None:
        """What a replay checks under the queue's lock: the launch record is current
        (one epoch read while nothing changed; unloading a kernel moves the epoch and
        the record's check refuses it), the queue is open."""
        if record.epoch != EPOCH.value:
            record.validate("graph")
        if slot.closed:
            raise InvalidArgument(f"{slot.name}: device is closed")

    def _launch_signaled(self, stream: Stream, *, lazy: bool = False) -> Completion:
        """``launch(stream)`` with its default bindings, then the signal covering it,
        under one hold of the queue's lock: the runtime's resubmission path (a region
        replays its graph and records an event right after). Returns the completion of
        the signalled value. Same checks, results and failures as the two calls; the
        caller (the runtime) validated ``stream`` when the region was made. ``lazy``:
        the launch alone, its value signalled as a stream's work is (every few
        operations, or once something waits on, polls or orders after it)."""
        if lazy and stream is self.stream:
            fast = self._fast
            if fast is not None:
                completion: Completion | None = fast(self)  # the compiled replay; None: it did nothing
                if completion is not None:
                    return completion
        return self._launch_signaled_py(stream, lazy)

    def _launch_signaled_py(self, stream: Stream, lazy: bool) -> Completion:
        """:meth:`_launch_signaled` without the compiled replay."""
        slot = stream.slot
        record = self._record
        if self._plan is None or record is None or self._closed or self._rebound \
                or stream.device is not self.device or not self.nodes:
            self.launch(stream)
            if not lazy:
                stream.slot.flush()
            last = stream._last
            return last if last is not None else Completion(slot, 0)
        encode = self._plan[2]
        native_graph = self._native if self.device.info.native_graphs else None
        with slot.lock:
            self._check_launchable(record, slot)
            native = slot._native or slot.native
            value = slot.pending_value
            signaled = False
            done: Sequence[Any]
            if native_graph is not None and not lazy:
                signaled = native_graph.launch_signaled(native, slot._timeline or slot.timeline, value)
            else:
                encode(native)
            if native.needs_submit:
                native.submit()  # a refused submission drops what it would have run
            if self.owned:
                self._last_launch[slot] = value  # what close() defers behind
            # what commit_locked and the flush after it do, with one signal
            if signaled:
                done = slot._signaled_locked(slot._timeline or slot.timeline, value)
            elif lazy:
                value, done = slot.commit_locked(())
            else:
                slot.unsignaled_ops += 1
                done = slot._flush_locked()
            completion = stream._done(value)
            record.last[slot] = completion
        if done:
            slot.release_retired(done)
        self.launches += 1
        self.device.stats.graph_launches += 1
        if lazy and self._fast_for is not self._plan and stream is self.stream:
            self._make_fast()  # a runtime region's graph is prepared, not launched, first
        return completion

    def _launch_replanned(self, stream: Stream, inputs: Mapping[str, Any]) -> Completion:
        """Engines without native graphs: replay with other inputs from a plan made
        for this launch (every bound allocation retained until it retires)."""
        allocs, uses, encode = self._make_plan(self._resolve(inputs), cache=False)
        for exe in self._executables:
            if exe.unloaded:
                raise InvalidArgument(f"graph: kernel {exe.name!r} was unloaded (a closed program); nothing was launched")
        for a, start, end, writes in uses:
            if a.freed:
                raise InvalidArgument("graph: bound memory was freed")
            if a.host_maps or a.host_dirty:
                a.check_device_use(start, end, writes)
        for a in allocs:
            a.retain()
        value = stream.slot.encode(encode, allocs)
        completion = stream._done(value)
        for a, start, end, writes in uses:
            a.note_use(completion, start, end, writes)
        self.launches += 1
        self.device.stats.graph_launches += 1
        return completion

    def _input_binding(self, name: Any, value: Any) -> tuple[Buffer, View, Access]:
        """(declared input, new view, access the graph makes) of one input binding:
        a declared name, this device, the declared size, sufficient access."""
        declared = self._inputs.get(name) if isinstance(name, str) else None
        if declared is None:
            raise InvalidArgument(f"inputs: {show(name)} is not a declared input ({', '.join(self._inputs) or 'none'})")
        used = self._access.get(id(declared), Access.READ_WRITE)
        binding = as_binding(f"inputs[{name!r}]", value, used)
        view = binding.view
        if view.buffer.device is not self.device:
            raise InvalidArgument(f"inputs[{name!r}]: belongs to {view.buffer.device.name}, not {self.device.name}")
        if view.length != declared.nbytes:
            raise InvalidArgument(f"inputs[{name!r}]: has {view.length} bytes, the declared input has {declared.nbytes}")
        if int(used) & ~int(binding.access):
            raise InvalidArgument(f"inputs[{name!r}]: declared {binding.access.label}, the graph needs {used.label}")
        return declared, view, used

    def _validate_inputs(self, inputs: Mapping[str, Any]) -> dict[str, tuple[Allocation, int, int, bool]]:
        """Each input binding checked once: declared name, device, size, access, host
        mappings; overlap with other bound memory only where its allocation is bound
        elsewhere in the graph. Returns name -> (allocation, start, end, writes)."""
        if not isinstance(inputs, Mapping):
            raise InvalidArgument("inputs: expected a mapping of input name to Buffer, View or Binding")
        chosen: dict[str, tuple[Allocation, int, int, bool]] = {}
        seen: set[int] = set()
        shared = False
        defaults: dict[int, Allocation] | None = None
        memo = self._input_memo
        epoch = EPOCH.value  # read first: a change during the checks makes the memo stale
        for name, value in inputs.items():
            per = memo.get(name) if type(name) is str else None
            hit = per.get(id(value)) if per is not None else None
            if hit is not None and hit[1] == epoch and hit[0]() is value:
                # validated before, and no handle closed, memory freed or host mapping
                # made since (each moves EPOCH)
                entry, elsewhere = hit[2], hit[3]
            else:
                _, view, used = self._input_binding(name, value)
                alloc = view.buffer.allocation
                writes = bool(int(used) & 2)
                mapped = alloc.host_maps or alloc.host_dirty
                if mapped:
                    alloc.check_device_use(view.start, view.end, writes)
                if defaults is None:
                    defaults = self._default_allocs or {id(b._alloc): b._alloc for b in self._buffers.values()}
                entry = (alloc, view.start, view.end, writes)
                # memory bound elsewhere (binding an input's own default is not)
                elsewhere = id(alloc) in defaults and (id(alloc), view.start) != self._default_keys.get(name)
                if not mapped and (type(value) is Buffer or type(value) is View):
                    if per is None:
                        per = memo[name] = {}
                    elif len(per) >= _INPUT_MEMO:
                        del per[next(iter(per))]
                    per[id(value)] = (weakref.ref(value), epoch, entry, elsewhere)
            key = id(entry[0])
            if key in seen or elsewhere:
                shared = True
            seen.add(key)
            chosen[name] = entry
        if shared:
            self._resolve(inputs)  # the full overlap check (raises Overlap)
        return chosen

    def _note_bound(self) -> None:
        """Recompute :attr:`_rebound` after ``_bound`` changed."""
        self._rebound = any(self._bound.get(n) != k for n, k in self._default_keys.items())

    def _apply_inputs(self, chosen: Mapping[str, tuple[Allocation, int, int, bool]]) -> list[tuple[Allocation, int, int, bool]]:
        """Make the native graph hold ``chosen`` (defaults for inputs not named);
        returns the uses of memory other than the defaults. Under the queue lock."""
        native = self._native
        assert native is not None
        patches: list[tuple[int, int, BufferArg]] = []
        slow: set[int] = set()
        changed: dict[str, tuple[int, int]] = {}
        extra: list[tuple[Allocation, int, int, bool]] = []
        for name, declared in self._inputs.items():
            c = chosen.get(name)
            if c is None:
                alloc, start = declared._alloc, declared._base
            else:
                alloc, start = c[0], c[1]
                if (id(alloc), start) != self._default_keys[name]:
                    extra.append(c)
            key = (id(alloc), start)
            if self._bound.get(name) == key:
                continue
            changed[name] = key
            slow.update(self._slow.get(name, ()))
            hit = self._patch_memo.get((name, key))
            if hit is not None and hit[0] == EPOCH.value:
                patches.extend(hit[1])
                continue
            mine = [(native_index, arg, BufferArg(alloc.native, start + off, n, acc))
                    for native_index, arg, off, n, acc in self._cells.get(name, ())]
            if len(self._patch_memo) >= _PATCH_MEMO:
                self._patch_memo.clear()
            self._patch_memo[(name, key)] = (EPOCH.value, mine)
            patches.extend(mine)
        if patches and not native.patch_args(patches):
            slow.update(self._node_of_native[i] for i, _, _ in patches)
        if slow:
            resolved = self._resolve(None)
            for name, key in {**self._bound, **changed}.items():
                declared = self._inputs[name]
                c = chosen.get(name)
                resolved[id(declared)] = (c[0], c[1]) if c is not None else (declared._alloc, declared._base)
            limit = self.device.info.limits.max_transfer_bytes
            for index in sorted(slow):
                node = self.nodes[index]
                deps = self._native_deps[index]
                for i, (kind, params) in zip(self._native_map[index], self._expand(node, resolved, limit)):
                    native.update(i, GraphNode(kind, deps, params))
        self._bound.update(changed)
        self._note_bound()
        return extra

    def _remember_rebind(self, key: tuple[Any, ...], inputs: dict[str, Any], chosen: dict[str, tuple[Allocation, int, int, bool]],
                         extra: list[tuple[Allocation, int, int, bool]], epoch: int) -> None:
        """Keep a rebind record of ``inputs`` (validated into ``chosen`` at ``epoch``,
        applied): only where every value is a Buffer or View (weakly referenceable, as
        the input memo keeps them), none host-mapped, and every input rebinds through
        argument cells alone (no copies or fills to rebuild)."""
        native = self._native
        if native is None or any(self._slow.values()):
            return
        refs = []
        for value in inputs.values():
            if type(value) is not Buffer and type(value) is not View:
                return
            refs.append(weakref.ref(value))
        for alloc, *_ in chosen.values():
            if alloc.host_maps or alloc.host_dirty:
                return
        items = self._rebind_items(native, chosen)
        memo = self._rebind_memo
        old = memo.pop(key, None)
        if old is None and len(memo) >= _REBIND_MEMO:
            old = memo.pop(next(iter(memo)))
        if old is not None:
            old.close()
        memo[key] = _RebindRecord(epoch, tuple(refs), items, extra, self._rebound, chosen)

    def _remember_restore(self, epoch: int) -> None:
        """Keep the record that binds every input's default again (the default bindings
        validated at ``epoch``, the launch record's, which holds their memory), for the
        compiled replay of a plain launch() after rebinding replays; as
        :meth:`_remember_rebind`, only where every input rebinds through argument cells."""
        native = self._native
        restore = self._restore
        if native is None or any(self._slow.values()) or (restore is not None and restore.epoch == epoch):
            return
        items = self._rebind_items(native, {})
        if restore is not None:
            restore.close()
        self._restore = _RebindRecord(epoch, (), items, [], False, {})

    def _rebind_items(self, native: NativeGraph, chosen: Mapping[str, tuple[Allocation, int, int, bool]]) -> tuple[Any, ...]:
        """A rebind record's items: per declared input (its default where ``chosen``
        names none), (name, (id(allocation), start), its argument-cell patches, what
        the native graph's prepare_patches made of them or None)."""
        items = []
        for name, declared in self._inputs.items():
            c = chosen.get(name)
            alloc, start = (declared._alloc, declared._base) if c is None else (c[0], c[1])
            patches = [(native_index, arg, BufferArg(alloc.native, start + off, n, acc))
                       for native_index, arg, off, n, acc in self._cells.get(name, ())]
            items.append((name, (id(alloc), start), patches, native.prepare_patches(patches) if patches else None))
        return tuple(items)

    def _apply_record(self, rebind: _RebindRecord) -> None:
        """:meth:`_apply_inputs` from a rebind record: patch the inputs whose bound
        memory differs from the record's. Under the queue lock."""
        bound = self._bound
        native = self._native
        assert native is not None
        for name, key, mine, prepared in rebind.items:
            if bound[name] != key:
                # (an input staged before a refusal stays staged: the general path
                # starts from what is bound now)
                if (prepared is None or not native.apply_patches(prepared)) and mine and not native.patch_args(mine):
                    self._apply_inputs(rebind.chosen)  # refused, nothing changed: the general path
                    return
                bound[name] = key
        self._rebound = rebind.rebound

    def _make_plan(self, resolved: _Resolved, *, cache: bool) -> tuple[list[Allocation], list[tuple[Allocation, int, int, bool]], Any]:
        uses = merge_uses([(a, base + off, base + end, writes)
                           for key, (off, end, writes) in self._spans.items() for a, base in (resolved[key],)])
        allocs = [u[0] for u in uses]
        if self.device.info.native_graphs:
            encode = self._native_launch(resolved)
        else:
            limit = self.device.info.limits.max_transfer_bytes
            commands = [c for node in self.nodes for c in self._commands(node, resolved, limit)]

            def encode(q: NativeQueue) -> None:
                for kind, p in commands:
                    if kind == "copy":
                        q.copy(p["src"], p["src_offset"], p["dst"], p["dst_offset"], p["nbytes"])
                    elif kind == "fill":
                        q.fill(p["dst"], p["offset"], p["nbytes"], p["pattern"])
                    elif kind == "dispatch":
                        q.dispatch(p["executable"], p["grid"], p["block"], p["args"])

        plan = (allocs, uses, encode)
        if cache:
            self._drop_record()
            self._record = LaunchRecord(uses, check=_weak_check(self))
            self._default_allocs = {id(a): a for a in allocs}
            self._plan = plan
        return plan

    def _check_record(self) -> None:
        """The graph's own conditions of a current launch record: no kernel unloaded
        (an unload moves the epoch, so a record made current before it is checked
        again), and borrowed buffer handles still open."""
        for exe in self._executables:
            if exe.unloaded:
                raise InvalidArgument(f"graph: kernel {exe.name!r} was unloaded (a closed program); nothing was launched")
        if not self.owned:
            self._check_borrowed()

    def _check_borrowed(self) -> None:
        for buffer in self._buffers.values():
            if buffer._closed:
                raise InvalidArgument(f"graph: bound {buffer!r} was closed; use owned_graph() to retain buffers")

    def _drop_record(self) -> None:
        self._plan = None
        self._fast = None  # made for the plan: goes with it
        self._input_memo = {}
        self._patch_memo = {}
        rebinds, self._rebind_memo = self._rebind_memo, {}
        for rebind in rebinds.values():
            rebind.close()
        restore, self._restore = self._restore, None
        if restore is not None:
            restore.close()
        record, self._record = self._record, None
        if record is not None:
            record.close()

    def _native_launch(self, resolved: _Resolved) -> Any:
        """Build the native graph from the default bindings (once per topology) and
        compile the rebind plans: per input, the dispatch argument cells it feeds."""
        if self._native is None:
            nodes, mapping = self._native_nodes(resolved)
            self._native = self.device.native.build_graph(nodes)
            self._native_map = mapping
            self._native_deps = [tuple(i for d in n.deps for i in mapping[d]) for n in self.nodes]
            self._node_of_native = {i: index for index, mine in enumerate(mapping) for i in mine}
            self._default_keys = {name: (id(b._alloc), b._base) for name, b in self._inputs.items()}
            self._bound = dict(self._default_keys)
            self._rebound = False
            self._cells, self._slow = {}, {}
            for name, declared in self._inputs.items():
                cells: list[tuple[int, int, int, int, Access]] = []
                slow: list[int] = []
                for index in self._nodes_of.get(id(declared), ()):
                    node = self.nodes[index]
                    if node.kind != "dispatch" or len(mapping[index]) != 1:
                        slow.append(index)
                        continue
                    for arg, (b, off, n, acc) in enumerate(node.refs):
                        if b is declared:
                            cells.append((mapping[index][0], arg, off, n, acc))
                self._cells[name], self._slow[name] = cells, sorted(set(slow))
        return self._native.launch

    def close(self) -> None:
        """Release retained buffers (owned graphs) and the native graph.

        Launches still in flight keep what they use until they retire.
        """
        with self._hold_lock:
            if self._closed:
                return
            self._closed = True
            self._fast = None
            # an owned graph's launches still in flight (the latest on each queue covers
            # the earlier ones) keep what it retains: the last of them to retire
            # releases it; launches take no hold of their own
            pending = [(slot, value) for slot, value in self._last_launch.items() if not _reached(slot, value)]
            self._last_launch = {}
            self._holds += len(pending)
            deferred = self._holds > 0
        for slot, value in pending:
            slot.retain_until(value, _GraphHold(self))
        if not deferred:
            self._release()

    def _unhold(self) -> None:
        with self._hold_lock:
            self._holds -= 1
            last = self._closed and self._holds == 0
        if last:
            self._release()

    def _release(self) -> None:
        if self._native is not None:
            self._native.close()
            self._native = None
        retained, self._retained = self._retained, {}
        for alloc in retained.values():
            alloc.release()
        self._kernels.clear()
        self._executables.clear()
        # a closed graph cannot launch: drop what it bound so buffers can go
        self._buffers.clear()
        self.nodes = []
        self._prepared = []
        self._drop_record()

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed and not close_later_if_collecting(self.close):  # (see hrx_core.finalize)
                self.close()
        except Exception:
            pass
