"""SlotIO: one entry point of an inference slot -- its graph, its I/O, its staging.

Host inputs travel through one packed staging buffer per entry, allocated on the
first host upload and reused: each input has a fixed offset in it. An upload
graph is recorded once per set of inputs uploaded together (all of them, or the
subset a step names). Each output read back gets its own staging, allocated on its
first readback and reused. An entry that is only submitted device-only never
allocates staging.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import transfer
from ..buffer import Buffer
from ..errors import InvalidArgument, show
from ..execution.graph import DownloadRegion, TrackedGraph, UploadRegion
from .graphs import ScopedGraph, tensor_span
from .memory import allocate_tracked
from .tensor import DeviceTensor, TensorSpec

if TYPE_CHECKING:
    from ..completion import Completion
    from ..execution.runtime import Submission
    from .definition import ModelDefinition
    from .inference import InferenceGraph

#: alignment of each input inside the packed host staging
STAGING_ALIGNMENT = 64


class StagedInputs(dict):  # type: ignore[type-arg]
    """What ``submit_host_with(fill)`` passes to ``fill``: a writable numpy array over
    the staging bytes of each input being uploaded (its declared shape and dtype) by
    name, and ``packed``, the entry's whole staging buffer as uint8."""

    packed: np.ndarray


def _last_writer(graph: TrackedGraph, tensor: DeviceTensor) -> int | None:
    """Index of the last region of ``graph`` writing bytes of ``tensor``."""
    alloc, start, end, _ = tensor_span(tensor, True)
    for region in reversed(graph.regions):
        for a, s, e, w in region.accesses:
            if w and a is alloc and s < end and start < e:
                return region.index
    return None


class SlotIO:
    """One entry of a slot (see the module docstring)."""

    def __init__(self, definition: ModelDefinition, scope: str, entry: str, graph: InferenceGraph) -> None:
        self.definition = definition
        self.scope = scope
        self.entry = entry
        self.graph: TrackedGraph = graph.graph
        self.tensors_in: dict[str, DeviceTensor] = dict(graph.inputs)
        self.tensors_out: dict[str, DeviceTensor] = dict(graph.outputs)
        self.inputs: Mapping[str, TensorSpec] = MappingProxyType({n: TensorSpec(t.shape, t.dtype) for n, t in self.tensors_in.items()})
        self.outputs: Mapping[str, TensorSpec] = MappingProxyType({n: TensorSpec(t.shape, t.dtype) for n, t in self.tensors_out.items()})
        self._producer = {n: _last_writer(self.graph, t) for n, t in self.tensors_out.items()}
        offset = 0
        self._layout: dict[str, int] = {}
        for name, t in self.tensors_in.items():
            self._layout[name] = offset
            offset += -(-t.nbytes // STAGING_ALIGNMENT) * STAGING_ALIGNMENT
        self._staging_size = offset
        self._staging: Buffer | None = None
        self._uploads: dict[frozenset[str], TrackedGraph] = {}
        self._last_upload: Submission | None = None
        self._readback: dict[str, TrackedGraph] = {}

    # -- validation ---------------------------------------------------------------------

    def _label(self) -> str:
        return self.scope if self.entry == "main" else f"{self.scope} entry {self.entry!r}"

    def check_inputs(self, inputs: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
        """Host arrays by input name as flat bytes of the declared dtype and size."""
        if inputs is None:
            return {}
        if not isinstance(inputs, Mapping):
            raise InvalidArgument(f"inputs: expected a mapping of input names to arrays, got {type(inputs).__name__}")
        self.check_names(list(inputs))
        out = {}
        for name, value in inputs.items():
            spec = self.tensors_in[name]
            if isinstance(value, DeviceTensor):
                raise InvalidArgument(
                    f"inputs[{name!r}]: a DeviceTensor; chain device stages with fragments recorded into one "
                    "graph, or read it back first"
                )
            try:
                array = np.asarray(value)
                if array.dtype != spec.dtype:
                    array = array.astype(spec.dtype, casting="same_kind")
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(f"inputs[{name!r}]: cannot convert to {spec.dtype}: {exc}") from None
            if array.size != spec.size:
                raise InvalidArgument(
                    f"inputs[{name!r}]: has {array.size} elements (shape {list(array.shape)}), "
                    f"the input is {list(spec.shape)} {spec.dtype}"
                )
            out[name] = transfer.host_bytes(f"inputs[{name!r}]", np.ascontiguousarray(array))
        return out

    def check_names(self, names: Sequence[str]) -> list[str]:
        for name in names:
            if name not in self.tensors_in:
                raise InvalidArgument(f"inputs: {name!r} is not an input of {self._label()} ({', '.join(self.tensors_in) or 'none'})")
        return list(dict.fromkeys(names))

    def check_reads(self, read: Sequence[str] | bool | None) -> list[str]:
        if read is True:
            return list(self.tensors_out)
        if read is False or read is None:
            return []
        if isinstance(read, str) or not isinstance(read, Sequence):
            raise InvalidArgument(f"read: expected a list of output names or a bool, got {show(read)}")
        for name in read:
            if name not in self.tensors_out:
                raise InvalidArgument(f"read: {name!r} is not an output of {self._label()} ({', '.join(self.tensors_out) or 'none'})")
        return list(dict.fromkeys(read))

    def output_tensor(self, name: str) -> DeviceTensor:
        out = self.tensors_out.get(name)
        if out is None:
            raise InvalidArgument(f"name: {name!r} is not an output of {self._label()} ({', '.join(self.tensors_out) or 'none'})")
        return out

    # -- host staging ---------------------------------------------------------------------

    @property
    def staging_bytes(self) -> int:
        total = 0 if self._staging is None else self._staging.nbytes
        for g in self._readback.values():
            region = g.regions[0]
            assert isinstance(region, DownloadRegion)
            total += region.staging.nbytes
        return total

    def _upload_graph(self, names: frozenset[str]) -> TrackedGraph:
        graph = self._uploads.get(names)
        if graph is not None:
            return graph
        runtime, budget = self.definition.runtime, self.definition.budget
        if self._staging is None:
            self._staging = allocate_tracked(runtime, self._staging_size, budget, shared=True)
        staging = self._staging
        # the region closes its own handle; the entry keeps the staging for other subsets
        handle = Buffer(staging.device, staging.allocation.retain(), 0, staging.nbytes)
        label = "upload" if len(names) == len(self.tensors_in) else "upload-" + "-".join(sorted(names))
        graph = ScopedGraph(runtime, self.scope, label)
        try:
            def record(g: Any) -> None:
                for name in self.tensors_in:
                    if name in names:
                        t = self.tensors_in[name]
                        g.copyto(t.view.write(), handle.slice(self._layout[name], t.nbytes))

            device_graph = graph._record("upload", record)
            graph._add(UploadRegion(graph, label, "upload", device_graph, handle), ())
        except BaseException:
            graph.close()
            handle.close()
            raise
        self._uploads[names] = graph
        return graph

    def stage(self, names: Sequence[str], fill: Callable[[StagedInputs], Any]) -> Submission:
        """Let ``fill`` write the named inputs into the staging, then submit their upload."""
        graph = self._upload_graph(frozenset(names))
        staging = self._staging
        assert staging is not None
        if self._last_upload is not None:
            self._last_upload.wait()  # the previous upload still reads the staging
        with staging.map("write") as host:
            staged = StagedInputs()
            for name in names:
                t, offset = self.tensors_in[name], self._layout[name]
                staged[name] = host[offset: offset + t.nbytes].view(t.dtype).reshape(t.shape)
            staged.packed = host
            fill(staged)
        self._last_upload = self.definition.runtime.submit(graph)
        return self._last_upload

    def write_arrays(self, arrays: Mapping[str, np.ndarray]) -> Callable[[StagedInputs], None]:
        """A ``fill`` copying checked host bytes into their staging slots."""
        def fill(staged: StagedInputs) -> None:
            for name, data in arrays.items():
                offset = self._layout[name]
                staged.packed[offset: offset + data.nbytes] = data

        return fill

    def readback(self, name: str) -> TrackedGraph:
        """The readback graph of output ``name`` (its staging allocated on first use)."""
        graph = self._readback.get(name)
        if graph is not None:
            return graph
        out = self.output_tensor(name)
        runtime = self.definition.runtime
        staging = allocate_tracked(runtime, out.nbytes, self.definition.budget, shared=True)
        graph = ScopedGraph(runtime, self.scope, f"read-{name}")
        try:
            device_graph = graph._record("download", lambda g: g.copyto(staging, out.view.read()))
            graph._add(DownloadRegion(graph, f"read-{name}", "download", device_graph, staging), ())
        except BaseException:
            graph.close()
            staging.close()
            raise
        self._readback[name] = graph
        return graph

    def read_staged(self, submission: Submission, name: str, timeout: float | None) -> np.ndarray:
        submission.wait(timeout)
        region = submission.graph.regions[0]
        assert isinstance(region, DownloadRegion)
        out = self.tensors_out[name]
        return region.read(np.uint8).view(out.dtype).reshape(out.shape)

    def completion_of(self, name: str, compute: Submission) -> Completion | None:
        """The completion of the region that produced output ``name`` in ``compute``."""
        index = self._producer[name]
        events = compute.events
        if index is not None:
            return events[index].completion
        return events[-1].completion if events else None

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        graphs = [*self._uploads.values(), *self._readback.values()]
        self._uploads, self._readback = {}, {}
        for g in graphs:
            g.close()  # closes the staging handles with the regions
        if self._staging is not None:
            self._staging.close()
            self._staging = None
        self.graph.close()
        for t in [*self.tensors_in.values(), *self.tensors_out.values()]:
            t.close()  # the slot owns its bindings (fragment outputs free their buffers)
