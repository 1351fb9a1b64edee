"""ModelFragment: a validated model stage that records itself into a tracked graph.

``definition.fragment(name, record, inputs=..., outputs=..., scratch=...)`` checks
the stage's contract once (declared tensors, the kernels and weights it uses).
``fragment.record(graph, inputs)`` appends one compute region to ``graph`` and
returns the output tensors; pass them straight to the next stage's ``record``.
Prepare the combined graph once (return it from a slot factory) and adjacent GPU
stages run back to back in one submission, each reading its predecessor's output
buffer in place -- no intermediate copies.

Scratch is private to the graph it is recorded into (one slot's graph). A stage
declared with ``reuse_private_scratch=True`` promises to write every scratch byte
before reading it; its scratch then reuses buffers that earlier such stages of the
same graph used. The reuse is ordered by graph dependencies (the stages write the
same bytes, so the later one follows the earlier); inputs, outputs and weights are
never scratch, and another graph (another slot) never shares it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..buffer import Buffer
from ..errors import InvalidArgument, show
from ..execution.graph import ComputeRegion, Region, TrackedGraph
from ..kernel import Kernel
from .graphs import check_no_writes, tensor_span
from .memory import allocate_tracked
from .session import check_name
from .tensor import DeviceTensor, SharedHold, TensorSpec, check_tensor

if TYPE_CHECKING:
    from .definition import ModelDefinition


class ScratchArena:
    """Scratch buffers of one graph: reusable ones shared by ``reuse_private_scratch``
    stages, and private ones owned by a single stage."""

    def __init__(self) -> None:
        self.reusable: list[Buffer] = []
        self.private: list[Buffer] = []

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in [*self.reusable, *self.private])

    def take(self, definition: ModelDefinition, sizes: Sequence[int], *, reuse: bool) -> tuple[list[Buffer], list[Buffer]]:
        """Buffers for ``sizes`` (one each, distinct within the call) and the ones
        allocated now (to free if recording fails)."""
        chosen: list[Buffer] = []
        fresh: list[Buffer] = []
        try:
            for need in sizes:
                found = None
                if reuse:
                    candidates = [b for b in self.reusable if b.nbytes >= need and all(b is not c for c in chosen)]
                    found = min(candidates, key=lambda b: b.nbytes, default=None)
                if found is None:
                    found = allocate_tracked(definition.runtime, need, definition.budget)
                    fresh.append(found)
                chosen.append(found)
        except BaseException:
            for b in fresh:
                b.close()
            raise
        return chosen, fresh

    def keep(self, fresh: Sequence[Buffer], *, reuse: bool) -> None:
        (self.reusable if reuse else self.private).extend(fresh)

    def close(self) -> None:
        buffers = [*self.reusable, *self.private]
        self.reusable, self.private = [], []
        for b in buffers:
            b.close()


_ARENAS: weakref.WeakKeyDictionary[TrackedGraph, ScratchArena] = weakref.WeakKeyDictionary()


def scratch_arena(graph: TrackedGraph) -> ScratchArena:
    """The scratch arena of ``graph`` (created on first use)."""
    arena = _ARENAS.get(graph)
    if arena is None:
        arena = _ARENAS[graph] = ScratchArena()
    return arena


def scratch_arena_of(graph: TrackedGraph) -> ScratchArena | None:
    """The scratch arena of ``graph`` if it has one (without creating it)."""
    return _ARENAS.get(graph)


def drop_scratch(graph: TrackedGraph) -> None:
    """Free ``graph``'s scratch handles (recorded work retains what it still uses)."""
    arena = _ARENAS.pop(graph, None)
    if arena is not None:
        arena.close()


class StageIO:
    """What a fragment's ``record(g, io)`` gets: its tensors, weights and kernels."""

    def __init__(self, fragment: ModelFragment, inputs: dict[str, DeviceTensor], outputs: dict[str, DeviceTensor],
                 scratch: dict[str, DeviceTensor]) -> None:
        self.fragment = fragment
        self.definition = fragment.definition
        self.inputs: Mapping[str, DeviceTensor] = MappingProxyType(inputs)
        self.outputs: Mapping[str, DeviceTensor] = MappingProxyType(outputs)
        self.scratch: Mapping[str, DeviceTensor] = MappingProxyType(scratch)

    @property
    def weights(self) -> Mapping[str, DeviceTensor]:
        return self.definition.weights

    def kernel(self, key: int | str) -> Kernel:
        return self.definition.kernel(key)


def _specs(what: str, value: Any, *, allow_bytes: bool = False) -> dict[str, TensorSpec]:
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{what}: expected a mapping of names to (shape, dtype), got {type(value).__name__}")
    out = {}
    for key, spec in value.items():
        check_name(f"{what} name", key)
        if allow_bytes and isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
            spec = TensorSpec((int(spec),), np.uint8)
        spec = TensorSpec.coerce(f"{what}[{key!r}]", spec)
        if spec.nbytes == 0:
            raise InvalidArgument(f"{what}[{key!r}]: {list(spec.shape)} {spec.dtype} is empty")
        out[key] = spec
    return out


class ModelFragment:
    """A validated stage of a model; ``record`` appends it to a tracked graph."""

    def __init__(
        self,
        definition: ModelDefinition,
        name: str,
        record: Callable[[Any, StageIO], Any],
        *,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, Any],
        scratch: Mapping[str, Any],
        kernels: Sequence[int | str],
        weights: Sequence[str],
        reuse_private_scratch: bool,
        lane: str,
    ) -> None:
        self.name = check_name("name", name)
        if not callable(record):
            raise InvalidArgument(f"record: expected a callable, got {type(record).__name__}")
        if not isinstance(reuse_private_scratch, bool):
            raise InvalidArgument(f"reuse_private_scratch: expected a bool, got {show(reuse_private_scratch)}")
        if not isinstance(lane, str) or lane not in ("compute", "npu"):
            raise InvalidArgument(f"lane: fragments run on 'compute' or 'npu', got {show(lane)}")
        definition.runtime.lane(lane)  # Unsupported if the runtime has no such device
        self.inputs = MappingProxyType(_specs("inputs", inputs))
        self.outputs = MappingProxyType(_specs("outputs", outputs))
        self.scratch = MappingProxyType(_specs("scratch", scratch, allow_bytes=True))
        if not self.outputs:
            raise InvalidArgument(f"outputs: fragment {name!r} declares no outputs")
        names = [*self.inputs, *self.outputs, *self.scratch]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise InvalidArgument(f"name: {dup!r} is declared twice among inputs, outputs and scratch")
        if isinstance(kernels, (str, int)) or not isinstance(kernels, Sequence):
            raise InvalidArgument(f"kernels: expected a list of kernel ids or names, got {show(kernels)}")
        for k in kernels:
            definition.kernel(k)
        if isinstance(weights, str) or not isinstance(weights, Sequence):
            raise InvalidArgument(f"weights: expected a list of weight names, got {show(weights)}")
        for w in weights:
            definition.weight(w)
        self.definition = definition
        self.record_fn = record
        self.reuse_private_scratch = reuse_private_scratch
        self.lane = lane

    def __repr__(self) -> str:
        return (f"<hrx.model.ModelFragment {self.definition.name}.{self.name}: {list(self.inputs)} -> "
                f"{list(self.outputs)}{' (reuses scratch)' if self.reuse_private_scratch else ''}>")

    def _check_tensor(self, what: str, tensor: Any, spec: TensorSpec) -> DeviceTensor:
        checked = check_tensor(what, tensor, self.definition.device)
        if not spec.matches(checked):
            raise InvalidArgument(
                f"{what}: {list(checked.shape)} {checked.dtype} does not match the declared {list(spec.shape)} {spec.dtype}"
            )
        return checked

    def record(self, graph: TrackedGraph, inputs: Mapping[str, DeviceTensor], *,
               outputs: Mapping[str, DeviceTensor] | None = None, after: Sequence[Region] = ()) -> dict[str, DeviceTensor]:
        """Append this stage to ``graph`` as one region; return its outputs by name.

        ``inputs`` are DeviceTensors matching the declared specs (outputs of earlier
        stages, slot tensors, weights). ``outputs`` may supply some output tensors
        (a slot's output, an in-place state); the others are allocated now, charged
        to the definition's budget, and retained by the graph.
        """
        self.definition.check_open()
        if not isinstance(graph, TrackedGraph):
            raise InvalidArgument(f"graph: expected a TrackedGraph, got {type(graph).__name__}")
        if graph.runtime is not self.definition.runtime:
            raise InvalidArgument("graph: belongs to another runtime than the model definition")
        if graph._closed:
            raise InvalidArgument("graph: is closed")
        if not isinstance(inputs, Mapping):
            raise InvalidArgument(f"inputs: expected a mapping of names to DeviceTensors, got {type(inputs).__name__}")
        if set(inputs) != set(self.inputs):
            raise InvalidArgument(
                f"inputs: fragment {self.name!r} takes {sorted(self.inputs)}, got {sorted(inputs)}"
            )
        ins = {n: self._check_tensor(f"inputs[{n!r}]", inputs[n], spec) for n, spec in self.inputs.items()}
        given = {} if outputs is None else outputs
        if not isinstance(given, Mapping):
            raise InvalidArgument(f"outputs: expected a mapping of names to DeviceTensors, got {type(given).__name__}")
        unknown = [n for n in given if n not in self.outputs]
        if unknown:
            raise InvalidArgument(f"outputs: {unknown[0]!r} is not an output of fragment {self.name!r}")
        outs = {n: self._check_tensor(f"outputs[{n!r}]", t, self.outputs[n]) for n, t in given.items()}
        check_no_writes([tensor_span(t, True) for t in outs.values()], self.definition.weight_spans, f"outputs of {self.name!r}")

        arena = scratch_arena(graph)
        reuse = self.reuse_private_scratch
        scratch_specs = list(self.scratch.items())
        new_outputs = [n for n in self.outputs if n not in outs]
        buffers, fresh = arena.take(self.definition, [s.nbytes for _, s in scratch_specs], reuse=reuse)
        made: list[Buffer] = []
        try:
            for n in new_outputs:
                spec = self.outputs[n]
                buf = allocate_tracked(self.definition.runtime, spec.nbytes, self.definition.budget)
                made.append(buf)
                outs[n] = DeviceTensor(buf, spec.shape, spec.dtype, hold=SharedHold(buf.close))
            scratch = {
                n: DeviceTensor(b.slice(0, spec.nbytes), spec.shape, spec.dtype)
                for (n, spec), b in zip(scratch_specs, buffers)
            }
            io = StageIO(self, ins, {n: outs[n] for n in self.outputs}, scratch)
            device_graph = graph._record(self.lane, lambda g: self.record_fn(g, io))
            region = ComputeRegion(graph, self.name, self.lane, device_graph)
            try:
                check_no_writes(region.accesses, self.definition.weight_spans, f"fragment {self.name!r}")
                graph._add(region, after)
            except BaseException:
                region.close()
                raise
        except BaseException:
            for b in [*made, *fresh]:
                b.close()
            raise
        arena.keep(fresh, reuse=reuse)
        return {n: outs[n] for n in self.outputs}
