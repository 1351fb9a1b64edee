"""The model layer: load a model once, freeze it, run it in private inference slots.

    ctx = ModelContext(dev, RuntimeOptions(memory_budget=budget))   # shared runtime, budget, kernels
    session = ctx.session("mlp")
    with session.in_context(budget):
        session.load_kernel(SCALE)                                  # session-scoped id 0
        session.weight("w", weights)                                # immutable weight
    definition = session.freeze()                                   # shared weights and code

    def slot(b):                                                    # once per slot
        x, y = b.tensor((1024,), "f32"), b.tensor((1024,), "f32")
        b.graph.compute("mlp", lambda g: g.dispatch(SCALE, 4, [x.read(), b.weight("w").read(), y.write()]))
        return InferenceGraph(inputs={"x": x}, outputs={"y": y}, graph=b.graph)

    model = definition.prepare(slot, slots=2)
    print(model.slot(0).run({"x": host_x})["y"])

Stages of one or more models compose through fragments: ``definition.fragment(...)``
validates a stage, ``fragment.record(graph, inputs)`` appends it to a graph and
returns output tensors that feed the next stage directly. See docs/model.md.
"""

from __future__ import annotations

from .context import ModelContext
from .definition import ModelDefinition
from .errors import SlotBusy, SlotConflict
from .fragment import ModelFragment, StageIO
from .inference import InferenceGraph, SlotBuilder
from .kernels import KernelBatch
from .prepared import ModelSlot, PreparedModel
from .session import ModelSession
from .slot_io import SlotIO, StagedInputs
from .submission import SlotSubmission
from .tensor import DeviceTensor, SharedHold, TensorSpec, as_dtype

__all__ = [
    "DeviceTensor",
    "InferenceGraph",
    "KernelBatch",
    "ModelContext",
    "ModelDefinition",
    "ModelFragment",
    "ModelSession",
    "ModelSlot",
    "PreparedModel",
    "SharedHold",
    "SlotBuilder",
    "SlotBusy",
    "SlotConflict",
    "SlotIO",
    "SlotSubmission",
    "StageIO",
    "StagedInputs",
    "TensorSpec",
    "as_dtype",
]
