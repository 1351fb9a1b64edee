"""PreparedModel and ModelSlot: private inference slots of a frozen model.

Each slot owns the bindings its factory made -- inputs, outputs, state, scratch --
and one tracked graph per entry point, recorded once. A step uploads host inputs
(through staging allocated on the slot's first host upload and then reused),
submits the entry's graph, and optionally reads outputs back (through per-output
staging allocated on the first readback); see :mod:`.slot_io`. Device-only
pipelines allocate no staging. Output views handed out by a step lease the slot:
it is not submitted again while a consumer holds one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..buffer import check_int
from ..errors import HRXError, InvalidArgument, Timeout, show
from ..timeouts import check_timeout
from ..execution.graph import TrackedGraph
from .errors import SlotBusy
from .fragment import drop_scratch, scratch_arena_of
from .graphs import Span, check_no_writes, check_private, graph_spans, tensor_span
from .inference import InferenceGraph, SlotBuilder
from .session import check_name
from .slot_io import SlotIO, StagedInputs
from .submission import SlotSubmission
from .tensor import DeviceTensor, SharedHold, TensorSpec

if TYPE_CHECKING:
    from ..execution.runtime import Submission
    from .definition import ModelDefinition

__all__ = ["ModelSlot", "PreparedModel", "StagedInputs"]


def _executables(graph: TrackedGraph) -> list[Any]:
    """The executables the regions of ``graph`` launch."""
    out = []
    for region in graph.regions:
        device_graph = getattr(region, "device_graph", None)
        if device_graph is not None:
            out.extend(device_graph._executables)
    return out


class ModelSlot:
    """One private inference slot: ``submit``, ``submit_host_with``, ``run``.

    A slot has one or more named entry points (a factory returning a mapping of
    InferenceGraphs, e.g. ``"prefill"`` and ``"step"``); they share the slot's
    memory. Calls take ``entry=`` (default: the first).
    """

    def __init__(self, model: PreparedModel, index: int, builder: SlotBuilder, graphs: Mapping[str, InferenceGraph]) -> None:
        self.model = model
        self.index = index
        self.name = f"{model.name}/slot{index}"
        self._builder = builder
        self.entries: Mapping[str, SlotIO] = MappingProxyType(
            {entry: SlotIO(model.definition, self.name, entry, g) for entry, g in graphs.items()}
        )
        self.default_entry = next(iter(self.entries))
        # Reentrant: a view collected by the garbage collector releases its lease on
        # whatever thread runs the collection, possibly inside this lock.
        self._cond = threading.Condition(threading.RLock())
        self._io_lock = threading.RLock()
        self._views = 0
        self._submitting = False
        self._reserved = False
        self._generation = 0
        self.closed = False

    def __repr__(self) -> str:
        return f"<hrx.model.ModelSlot {self.name}: entries {list(self.entries)}>"

    # -- entries and state -----------------------------------------------------------------

    def entry(self, name: str | None = None) -> SlotIO:
        """The entry point ``name`` (default: the first)."""
        if name is None:
            return self.entries[self.default_entry]
        io = self.entries.get(name) if isinstance(name, str) else None
        if io is None:
            raise InvalidArgument(f"entry: {name!r} is not an entry of {self.name} ({', '.join(self.entries)})")
        return io

    @property
    def graph(self) -> TrackedGraph:
        """The default entry's graph."""
        return self.entry().graph

    @property
    def inputs(self) -> Mapping[str, TensorSpec]:
        """The default entry's inputs (name -> shape and dtype)."""
        return self.entry().inputs

    @property
    def outputs(self) -> Mapping[str, TensorSpec]:
        """The default entry's outputs (name -> shape and dtype)."""
        return self.entry().outputs

    @property
    def busy(self) -> bool:
        """True while a consumer holds an output view or a submission is being made."""
        return self._views > 0 or self._submitting

    @property
    def leases(self) -> int:
        """Output views of the latest step still open."""
        return self._views

    @property
    def staging_bytes(self) -> int:
        """Host staging bytes this slot allocated (0 until its first host upload/readback)."""
        return sum(io.staging_bytes for io in self.entries.values())

    def state(self, name: str, *, entry: str | None = None) -> DeviceTensor:
        """The slot's own tensor for input or output ``name`` (unleased; for inspecting
        state between steps)."""
        io = self.entry(entry)
        if not isinstance(name, str):
            raise InvalidArgument(f"name: expected an input or output name, got {type(name).__name__}")
        tensor = io.tensors_in.get(name) or io.tensors_out.get(name)
        if tensor is None:
            raise InvalidArgument(f"name: {name!r} is neither an input nor an output of {self.name}")
        return tensor

    # -- leases ------------------------------------------------------------------------------

    def _begin(self, timeout: float | None) -> None:
        timeout = check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while (self._submitting or self._views > 0) and not self.closed:
                if timeout == 0:
                    why = (f"{self._views} output view(s) of its last step are still open; close them"
                           if self._views else "another thread is submitting it")
                    raise SlotBusy(f"{self.name}: busy -- {why} (or pass timeout= to wait)")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise Timeout(f"{self.name}: still busy after {timeout} s ({self._views} output view(s) open)")
                self._cond.wait(left)
            if self.closed:
                raise InvalidArgument(f"{self.name} is closed")
            self._submitting = True

    def _end(self) -> None:
        with self._cond:
            self._submitting = False
            self._cond.notify_all()

    def _pin(self, run: SlotSubmission) -> None:
        """Count a lease on the outputs of ``run`` (which must be the latest step)."""
        with self._cond:
            if run.generation != self._generation:
                raise InvalidArgument(f"{self.name}: step {run.generation} is stale (the slot ran step {self._generation} since)")
            self._views += 1

    def _unpin(self) -> None:
        with self._cond:
            self._views -= 1
            self._cond.notify_all()

    def _issue_view(self, run: SlotSubmission, name: str) -> DeviceTensor:
        out = run.io.output_tensor(name)
        self._pin(run)
        completion = run.io.completion_of(name, run.compute)
        return DeviceTensor(out.view, out.shape, out.dtype, completion=completion, hold=SharedHold(self._unpin))

    def _read(self, run: SlotSubmission, name: str, timeout: float | None) -> np.ndarray:
        run.io.output_tensor(name)
        self._pin(run)  # pins the outputs and the readback staging while reading
        try:
            with self._io_lock:
                submission = run._readbacks.get(name)
                if submission is None:
                    submission = self.model.runtime.submit(run.io.readback(name))
                    run._readbacks[name] = submission
                    run.submissions.append(submission)
            return run.io.read_staged(submission, name, timeout)
        finally:
            self._unpin()

    # -- steps ---------------------------------------------------------------------------------------

    def submit(self, inputs: Mapping[str, Any] | None = None, *, entry: str | None = None,
               read: Sequence[str] | bool = (), timeout: float | None = 0.0) -> SlotSubmission:
        """Run one step of ``entry``: upload ``inputs`` (host arrays by input name; inputs
        left out keep their device contents; None or {} is a device-only step), submit
        the entry's graph, and queue readback of the outputs named in ``read``
        (``True``: all) right behind it.

        If a consumer still holds an output view of the previous step, ``timeout=0``
        (default) raises SlotBusy; a positive ``timeout`` waits up to that long (then
        Timeout) and ``None`` waits indefinitely. A rejected call changes nothing.
        """
        self._check_open()
        io = self.entry(entry)
        arrays = io.check_inputs(inputs)
        reads = io.check_reads(read)
        fill = io.write_arrays(arrays) if arrays else None
        return self._step(io, list(arrays), fill, reads, timeout)

    def submit_host_with(self, fill: Callable[[StagedInputs], Any], *, entry: str | None = None,
                         inputs: Sequence[str] | None = None, read: Sequence[str] | bool = (),
                         timeout: float | None = 0.0) -> SlotSubmission:
        """Like :meth:`submit`, but ``fill(staged)`` writes the packed inputs directly
        into the slot's staging: ``staged[name]`` is a writable array of each input's
        shape and dtype over the staging bytes, ``staged.packed`` the whole buffer.
        ``inputs`` names the inputs to upload (default: all); bytes ``fill`` leaves
        alone keep the values last staged."""
        self._check_open()
        io = self.entry(entry)
        if not callable(fill):
            raise InvalidArgument(f"fill: expected a callable, got {type(fill).__name__}")
        if isinstance(inputs, str) or (inputs is not None and not isinstance(inputs, Sequence)):
            raise InvalidArgument(f"inputs: expected a list of input names, got {show(inputs)}")
        names = io.check_names(list(io.tensors_in) if inputs is None else inputs)
        if not names:
            raise InvalidArgument(f"{self.name} has no inputs to fill")
        return self._step(io, names, fill, io.check_reads(read), timeout)

    def _step(self, io: SlotIO, names: list[str], fill: Callable[[StagedInputs], Any] | None, reads: list[str],
              timeout: float | None) -> SlotSubmission:
        self._begin(timeout)
        try:
            with self._io_lock:
                runtime = self.model.runtime
                submissions: list[Submission] = []
                if fill is not None:
                    submissions.append(io.stage(names, fill))
                compute = runtime.submit(io.graph)
                submissions.append(compute)
                readbacks = {}
                for name in reads:
                    readbacks[name] = runtime.submit(io.readback(name))
                    submissions.append(readbacks[name])
                with self._cond:
                    self._generation += 1
                    generation = self._generation
        finally:
            self._end()
        return SlotSubmission(self, io, generation, submissions, compute, readbacks)

    def run(self, inputs: Mapping[str, Any] | None = None, *, entry: str | None = None,
            read: Sequence[str] | bool = True, timeout: float | None = None) -> dict[str, np.ndarray]:
        """Submit a step, wait and return the outputs named in ``read`` as host arrays.

        ``timeout`` bounds waiting for the slot and for the step; with None the step is
        awaited indefinitely but a busy slot raises SlotBusy at once (waiting for views
        the calling thread itself holds would never end)."""
        timeout = check_timeout("timeout", timeout)
        step = self.submit(inputs, entry=entry, read=read, timeout=0.0 if timeout is None else timeout)
        return {name: step.read(name, timeout=timeout) for name in step.io.check_reads(read)}

    # -- reservation and lifetime ----------------------------------------------------------------------

    def release(self) -> None:
        """Give a slot taken with ``PreparedModel.acquire`` back to the model."""
        self.model._give_back(self)

    def __enter__(self) -> ModelSlot:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._reserved:
            self.release()

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"{self.name} is closed")

    def close(self) -> None:
        """Release the slot's graphs, staging and buffers (in-flight work keeps what it uses)."""
        with self._cond:
            if self.closed:
                return
            self.closed = True
            self._cond.notify_all()
        for io in self.entries.values():
            io.close()
            drop_scratch(io.graph)
        self._builder.close()


class PreparedModel:
    """Private inference slots of a :class:`ModelDefinition`; see ``definition.prepare``."""

    def __init__(self, definition: ModelDefinition,
                 slot_factory: Callable[[SlotBuilder], InferenceGraph | Mapping[str, InferenceGraph]], slots: int,
                 *, name: str) -> None:
        if not callable(slot_factory):
            raise InvalidArgument(f"slot_factory: expected a callable, got {type(slot_factory).__name__}")
        count = check_int("slots", slots, minimum=1)
        self.definition = definition
        self.runtime = definition.runtime
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        built: list[ModelSlot] = []
        try:
            spans: list[tuple[str, list[Span]]] = []
            for i in range(count):
                builder = SlotBuilder(definition, i, name)
                try:
                    graphs = self._entries(i, slot_factory(builder))
                    slot_spans = [span for entry, g in graphs.items() for span in self._check_entry(i, entry, g)]
                except BaseException:
                    builder.close()
                    raise
                built.append(ModelSlot(self, i, builder, graphs))
                spans.append((f"slot {i}", slot_spans))
            check_private(spans)
            # the model's reservation includes the private workspace its code needs:
            # every slot may run at once, so each slot's share is charged
            self._workspace = self._charge_workspace(built)
        except BaseException:
            for s in built:
                s.close()
            raise
        self.slots: tuple[ModelSlot, ...] = tuple(built)
        definition._prepared_opened()
        self.closed = False

    def _charge_workspace(self, slots: Sequence[ModelSlot]) -> Any:
        """Charge the definition's budget for the private workspace (scratch) of the
        code each slot dispatches; None when there is none or no budget."""
        per_slot = []
        for slot in slots:
            exes = {id(e): e for io in slot.entries.values() for e in _executables(io.graph)}
            per_slot.append(sum(int(getattr(e, "private_bytes", 0) or 0) for e in exes.values()))
        total = sum(per_slot)
        self.workspace_bytes = total
        budget = self.definition.budget
        if budget is None or not total:
            return None
        return budget.charge(total, f"private workspace of {self.name!r}")

    @property
    def reserved_bytes(self) -> int:
        """Everything this model holds charged to its budget: every slot's inputs,
        outputs, state, scratch and host staging, and the private workspace of the
        code they run."""
        total = self.workspace_bytes
        for slot in self.slots:
            allocs = {id(b._alloc): b._alloc.nbytes for b in slot._builder.buffers}
            for io in slot.entries.values():
                for t in [*io.tensors_in.values(), *io.tensors_out.values()]:
                    allocs[id(t.view.buffer._alloc)] = t.view.buffer._alloc.nbytes
                arena = scratch_arena_of(io.graph)
                if arena is not None:
                    for b in [*arena.reusable, *arena.private]:
                        allocs[id(b._alloc)] = b._alloc.nbytes
            total += sum(allocs.values()) + slot.staging_bytes
        return total

    @staticmethod
    def _entries(index: int, result: Any) -> dict[str, InferenceGraph]:
        what = f"slot_factory (slot {index})"
        if isinstance(result, InferenceGraph):
            return {"main": result}
        if isinstance(result, Mapping) and result:
            for entry, graph in result.items():
                check_name(f"{what}: entry name", entry)
                if not isinstance(graph, InferenceGraph):
                    raise InvalidArgument(f"{what}: entry {entry!r} is {type(graph).__name__}, expected an InferenceGraph")
            return dict(result)
        raise InvalidArgument(
            f"{what}: returned {type(result).__name__}, expected an InferenceGraph or a nonempty mapping of entry names to them"
        )

    def _check_entry(self, index: int, entry: str, graph: InferenceGraph) -> list[Span]:
        what = f"slot_factory (slot {index})" if entry == "main" else f"slot_factory (slot {index}, entry {entry!r})"
        g = graph.graph
        if g.runtime is not self.runtime:
            raise InvalidArgument(f"{what}: the graph belongs to another runtime (use builder.graph)")
        if g._closed:
            raise InvalidArgument(f"{what}: the graph is closed")
        if not g.regions:
            raise InvalidArgument(f"{what}: the graph records no regions")
        spans = list(graph_spans(g))
        for kind, tensors, writes in (("inputs", graph.inputs, True), ("outputs", graph.outputs, False)):
            for key, t in tensors.items():
                if t.closed:
                    raise InvalidArgument(f"{what}: {kind}[{key!r}] is closed")
                if t.device is not self.runtime.device:
                    raise InvalidArgument(f"{what}: {kind}[{key!r}] lives on {t.device.name}, not {self.runtime.device.name}")
                if not t.contiguous or t.nbytes == 0:
                    raise InvalidArgument(f"{what}: {kind}[{key!r}] must be contiguous and nonempty")
                spans.append(tensor_span(t, writes))
        check_no_writes(spans, self.definition.weight_spans, what)
        return spans

    def __repr__(self) -> str:
        return f"<hrx.model.PreparedModel {self.name!r}: {len(self.slots)} slots>"

    def __len__(self) -> int:
        return len(self.slots)

    def __iter__(self) -> Iterator[ModelSlot]:
        return iter(self.slots)

    def slot(self, index: int) -> ModelSlot:
        """Slot ``index``."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.slots):
            raise InvalidArgument(f"index: expected 0 <= index < {len(self.slots)}, got {show(index)}")
        return self.slots[index]

    def acquire(self, timeout: float | None = None) -> ModelSlot:
        """Reserve an idle slot for the caller (``with model.acquire() as slot:``);
        waits up to ``timeout`` (None: indefinitely; 0: SlotBusy at once)."""
        timeout = check_timeout("timeout", timeout)
        if self.closed:
            raise InvalidArgument(f"prepared model {self.name!r} is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                free = [s for s in self.slots if not s._reserved and not s.busy]
                free = free or [s for s in self.slots if not s._reserved]
                if free:
                    free[0]._reserved = True
                    return free[0]
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise SlotBusy(f"{self.name}: all {len(self.slots)} slots are reserved")
                self._cond.wait(left)

    def _give_back(self, slot: ModelSlot) -> None:
        with self._cond:
            if not slot._reserved:
                raise InvalidArgument(f"{slot.name} is not reserved")
            slot._reserved = False
            self._cond.notify_all()

    def close(self) -> None:
        """Close every slot; the definition may then release its weights."""
        if self.closed:
            return
        self.closed = True
        errors: list[HRXError] = []
        for s in self.slots:
            try:
                s.close()
            except HRXError as exc:
                errors.append(exc)
        charge, self._workspace = self._workspace, None
        if charge is not None:
            charge.release()
        self.definition._prepared_closed()
        if errors:
            raise errors[0]

    def __enter__(self) -> PreparedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
