"""InferenceGraph and SlotBuilder: what a slot factory receives and returns."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ..buffer import Buffer
from ..errors import InvalidArgument, show
from ..execution.graph import TrackedGraph
from ..kernel import Kernel
from .graphs import ScopedGraph
from .memory import allocate_tracked
from .tensor import DeviceTensor, as_dtype, as_shape

if TYPE_CHECKING:
    from .definition import ModelDefinition


def _named_tensors(what: str, value: Any) -> Mapping[str, DeviceTensor]:
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{what}: expected a mapping of names to DeviceTensors, got {type(value).__name__}")
    for key, tensor in value.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgument(f"{what}: names must be nonempty strings, got {show(key)}")
        if not isinstance(tensor, DeviceTensor):
            raise InvalidArgument(f"{what}[{key!r}]: expected a DeviceTensor, got {type(tensor).__name__}")
    return MappingProxyType(dict(value))


def _inputs(value: Any) -> Mapping[str, DeviceTensor]:
    return _named_tensors("inputs", value)


def _outputs(value: Any) -> Mapping[str, DeviceTensor]:
    return _named_tensors("outputs", value)


@attrs.frozen
class InferenceGraph:
    """What a slot factory returns: the slot's host-facing ``inputs`` and ``outputs``
    (DeviceTensors by name; contiguous; slices and in-place pairs allowed) and the
    tracked ``graph`` that turns the inputs into the outputs."""

    inputs: Mapping[str, DeviceTensor] = attrs.field(converter=_inputs)
    outputs: Mapping[str, DeviceTensor] = attrs.field(converter=_outputs)
    graph: TrackedGraph = attrs.field()

    @graph.validator
    def _check_graph(self, attribute: Any, value: Any) -> None:
        if not isinstance(value, TrackedGraph):
            raise InvalidArgument(f"graph: expected a TrackedGraph, got {type(value).__name__}")


class SlotBuilder:
    """Given to the slot factory once per slot: the definition's weights and kernels,
    a fresh tracked graph for this slot, and private allocation."""

    def __init__(self, definition: ModelDefinition, index: int, scope: str) -> None:
        self.definition = definition
        self.index = index
        self.scope = f"{scope}/slot{index}"
        #: the slot's graph: record regions and fragments here, return it
        self.graph: TrackedGraph = ScopedGraph(definition.runtime, self.scope)
        self.graphs: list[TrackedGraph] = [self.graph]
        self.buffers: list[Buffer] = []

    @property
    def weights(self) -> Mapping[str, DeviceTensor]:
        return self.definition.weights

    def weight(self, name: str) -> DeviceTensor:
        return self.definition.weight(name)

    def kernel(self, key: int | str) -> Kernel:
        return self.definition.kernel(key)

    def new_graph(self, name: str) -> TrackedGraph:
        """Another graph of this slot, for a further entry point (``{"prefill": ...,
        "step": ...}``); entries of one slot may share its memory."""
        graph = ScopedGraph(self.definition.runtime, self.scope, name)
        self.graphs.append(graph)
        return graph

    def tensor(self, shape: Any, dtype: Any) -> DeviceTensor:
        """A new slot-private tensor (contents undefined) that lives as long as the slot:
        inputs, outputs, state such as a KV cache. Charged to the definition's budget."""
        shape = as_shape("shape", shape)
        dt = as_dtype("dtype", dtype)
        nbytes = int(np.prod(shape)) * dt.itemsize
        if nbytes == 0:
            raise InvalidArgument(f"shape: {shape} is empty")
        buf = allocate_tracked(self.definition.runtime, nbytes, self.definition.budget)
        self.buffers.append(buf)
        return DeviceTensor(buf, shape, dt)

    def close(self) -> None:
        """Release the graphs and the slot's buffers (recorded work retains what it uses)."""
        for graph in self.graphs:
            graph.close()
        buffers, self.buffers = self.buffers, []
        for b in buffers:
            b.close()
