"""ModelDefinition: a frozen model -- shared immutable weights and loaded code.

A definition is what every inference slot of a model shares. ``prepare`` builds a
:class:`~hrx_core.model.PreparedModel` of private slots from a slot factory;
``fragment`` validates a stage that can be recorded into any tracked graph (so
several models' stages can form one graph, prepared once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..budget import MemoryBudget
from ..errors import InvalidArgument
from ..kernel import Kernel
from .graphs import Span, tensor_span
from .memory import HeldMemory
from .session import check_name
from .tensor import DeviceTensor

if TYPE_CHECKING:
    from ..execution.runtime import Runtime
    from .fragment import ModelFragment
    from .inference import InferenceGraph, SlotBuilder
    from .prepared import PreparedModel
    from .session import ModelSession


class ModelDefinition:
    """Shared immutable weights and code of a model; create with ``session.freeze()``.

    ``weights`` maps names to DeviceTensors that every slot and fragment may read and
    none may write. ``budget`` is charged for the weights (once) and for everything
    prepared from the definition: slot buffers, fragment outputs and scratch, host
    staging.
    """

    def __init__(self, session: ModelSession, weights: dict[str, DeviceTensor], held: list[HeldMemory],
                 budget: MemoryBudget | None) -> None:
        self.name = session.name
        self.context = session.context
        self.runtime: Runtime = session.runtime
        self.device = session.device
        self.budget = budget
        self.kernels = session.kernels.copy()
        self._held = [h.retain() for h in held]
        self._code: list[Any] = []  # holds on the session's code charges (set by freeze)
        # tensors of its own: closing the session's handles leaves these usable
        self._weights = {n: DeviceTensor(t.view, t.shape, t.dtype, strides=t.strides) for n, t in weights.items()}
        self.weight_spans: list[Span] = [tensor_span(t, False) for t in self._weights.values()]
        self._lock = threading.Lock()
        self._prepared = 0
        self._closing = False
        self.closed = False

    def __repr__(self) -> str:
        return f"<hrx.model.ModelDefinition {self.name!r}: {len(self._weights)} weights, {len(self.kernels)} kernels>"

    @property
    def weights(self) -> Mapping[str, DeviceTensor]:
        """Immutable weights by name (read-only mapping)."""
        return MappingProxyType(self._weights)

    @property
    def weight_bytes(self) -> int:
        """Distinct allocation bytes of the weights."""
        return sum(h.buffer._alloc.nbytes for h in self._held)

    def weight(self, name: str) -> DeviceTensor:
        """The weight ``name``."""
        tensor = self._weights.get(name)
        if tensor is None:
            raise InvalidArgument(f"weight: {name!r} is not a weight of {self.name!r} ({', '.join(self._weights) or 'none'})")
        return tensor

    def kernel(self, key: int | str) -> Kernel:
        """The loaded kernel with (session) id or name ``key``."""
        return self.kernels.get(key)

    def check_open(self) -> None:
        if self.closed or self._closing:
            raise InvalidArgument(f"model definition {self.name!r} is closed")

    # -- preparation ---------------------------------------------------------------------

    def prepare(self, slot_factory: Callable[[SlotBuilder], InferenceGraph], slots: int = 1, *,
                name: str | None = None) -> PreparedModel:
        """A :class:`PreparedModel` with ``slots`` private inference slots.

        ``slot_factory(builder)`` is called once per slot and returns an
        :class:`InferenceGraph` ``(inputs, outputs, graph)``: named DeviceTensors the
        host fills and reads, and the tracked graph (``builder.graph``) that computes
        the outputs. Each slot owns its bindings -- inputs and outputs may be slices of
        one buffer or the same tensor (in place) -- but independent slots must not
        share writable memory (SlotConflict), and no slot may write a weight.
        """
        from .prepared import PreparedModel

        self.check_open()
        return PreparedModel(self, slot_factory, slots, name=self.name if name is None else check_name("name", name))

    def fragment(
        self,
        name: str,
        record: Callable[..., Any],
        *,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, Any],
        scratch: Mapping[str, Any] | None = None,
        kernels: Sequence[int | str] = (),
        weights: Sequence[str] = (),
        reuse_private_scratch: bool = False,
        lane: str = "compute",
    ) -> ModelFragment:
        """Validate a stage; ``fragment.record(graph, inputs)`` appends it to a graph.

        ``record(g, io)`` records the stage's work on ``g`` (an access graph of the
        lane) using ``io.inputs``, ``io.outputs``, ``io.scratch`` (DeviceTensors by
        name), ``io.weights`` and ``io.kernel(key)``. ``inputs``/``outputs``/``scratch``
        declare ``(shape, dtype)`` pairs or :class:`TensorSpec`s. ``kernels`` and
        ``weights`` name what the stage uses (checked now). With
        ``reuse_private_scratch`` the stage promises to write every scratch byte
        before reading it, so its scratch may reuse the scratch of earlier such
        stages of the same graph (never inputs, outputs, weights, or another slot's).
        """
        from .fragment import ModelFragment

        self.check_open()
        return ModelFragment(self, name, record, inputs=inputs, outputs=outputs, scratch=scratch or {},
                             kernels=kernels, weights=weights, reuse_private_scratch=reuse_private_scratch, lane=lane)

    # -- lifetime ---------------------------------------------------------------------------

    def _prepared_opened(self) -> None:
        with self._lock:
            self._prepared += 1

    def _prepared_closed(self) -> None:
        with self._lock:
            self._prepared -= 1
            last = self._closing and self._prepared == 0
        if last:
            self._release()

    def close(self) -> None:
        """Release the definition's hold on the weights (and the charges taken for it)
        once every prepared model of it is closed."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            now = self._prepared == 0
        if now:
            self._release()

    def _release(self) -> None:
        self.closed = True
        held, self._held = self._held, []
        for h in held:
            h.release()
        code, self._code = self._code, []
        for c in code:
            c.release()

    def __enter__(self) -> ModelDefinition:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
