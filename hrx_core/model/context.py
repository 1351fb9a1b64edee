"""ModelContext: what models on one device share -- allocation, compilation, scheduling.

Every model session and prepared model of a context submits to the context's
:class:`~hrx_core.execution.Runtime` (one set of lanes, hazards across models, one
``max_submissions``), charges the context's memory budget unless told otherwise,
and loads kernels through the context's kernel registry, so equal kernels compile
and load once for all models. ``plan_cache`` is a shared :class:`PlanCache` for
shape plans of operation libraries (e.g. ``TensorOps(dev, plan_cache=ctx.plan_cache)``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..budget import MemoryBudget
from ..compiler import _source_digest
from ..errors import InvalidArgument
from ..execution.plan_cache import PlanCache
from ..execution.runtime import Runtime, RuntimeOptions
from ..kernel import Kernel

if TYPE_CHECKING:
    from ..device import Device
    from .session import ModelSession


class ModelContext:
    """Shared allocation (budget), compilation (kernels) and scheduling (runtime).

    ``ModelContext(device, RuntimeOptions(memory_budget=...))`` creates and owns a
    runtime; ``ModelContext(runtime=rt)`` shares an existing one (not closed here).
    """

    def __init__(
        self,
        device: Device | None = None,
        options: RuntimeOptions | None = None,
        *,
        runtime: Runtime | None = None,
        plan_cache: PlanCache | None = None,
    ) -> None:
        if runtime is not None:
            if not isinstance(runtime, Runtime):
                raise InvalidArgument(f"runtime: expected a Runtime, got {type(runtime).__name__}")
            if options is not None:
                raise InvalidArgument("options: give options or runtime, not both")
            if device is not None and device is not runtime.device:
                raise InvalidArgument(f"device: {device.name} is not the runtime's device {runtime.device.name}")
            self._owns_runtime = False
        else:
            if device is None:
                raise InvalidArgument("device: give a device (or runtime=)")
            runtime = Runtime(device, options)
            self._owns_runtime = True
        if plan_cache is not None and not isinstance(plan_cache, PlanCache):
            raise InvalidArgument(f"plan_cache: expected a PlanCache or None, got {type(plan_cache).__name__}")
        self.runtime = runtime
        self.device = runtime.device
        self.plan_cache = plan_cache if plan_cache is not None else PlanCache(max_plans=64)
        self._kernels: dict[tuple[Any, ...], Kernel] = {}
        self._lock = threading.Lock()
        self.closed = False

    def __repr__(self) -> str:
        return f"<hrx.model.ModelContext on {self.device.name}, {len(self._kernels)} kernels>"

    @property
    def budget(self) -> MemoryBudget | None:
        """The runtime's memory budget (None: unbudgeted)."""
        return self.runtime.memory_budget

    def kernel(self, kernel: Kernel) -> Kernel:
        """The context's kernel equal to ``kernel`` (same name, entry, sources and
        options), registering ``kernel`` if it is new: sessions share one loaded
        executable per kernel."""
        self._check_open()
        if not isinstance(kernel, Kernel):
            raise InvalidArgument(f"kernel: expected an hrx Kernel, got {type(kernel).__name__}")
        key = (
            kernel.name,
            kernel.entry,
            kernel.buffer_access,
            kernel.scalar_types,
            tuple(sorted((t, _source_digest(s)) for t, s in kernel.sources.items())),
            tuple(sorted(kernel.options.items())),
        )
        with self._lock:
            return self._kernels.setdefault(key, kernel)

    def session(self, name: str = "model") -> ModelSession:
        """A new :class:`ModelSession` in this context."""
        from .session import ModelSession

        self._check_open()
        return ModelSession(self, name)

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument("model context is closed")

    def close(self) -> None:
        """Close the runtime if the context created it (drains submissions)."""
        if self.closed:
            return
        self.closed = True
        if self._owns_runtime:
            self.runtime.close()

    def __enter__(self) -> ModelContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
