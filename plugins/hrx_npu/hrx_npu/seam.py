"""What an NPU engine adds to the hrx engine seam (hrx_core.engine).

An NPU engine is an ordinary hrx :class:`~hrx_core.engine.Engine` whose devices
have kind ``"npu"``, an ``npu`` queue family, and these properties in
``DeviceInfo.properties``: ``columns`` (array columns), ``column_memory_bytes``
(tile memory per column, the most a contract's ``scratch_bytes`` may ask) and
``max_pending_invocations`` (per program; 128 on the reference hardware).

Policy -- contract validation, column placement, the pending limit's semantics --
lives in :mod:`hrx_npu.device` and is written once. An engine device only loads a
program for a given column range (:meth:`NpuEngineDevice.load_program`) and runs it
when its queues encode a dispatch of the returned executable, establishing the
columns' state before every invocation.
"""

from __future__ import annotations

import abc
from typing import Any

from hrx_core.engine import Artifact, Engine, EngineDevice, Executable

from .contract import KernelContract
from .pending import PendingLimit


class NpuEngine(Engine):
    """Marker base of engines that drive NPUs (found by :func:`hrx_npu.device`)."""

    @abc.abstractmethod
    def open_device(self, index: int, **options: Any) -> NpuEngineDevice:
        """Open device ``index``: an NPU engine's devices are :class:`NpuEngineDevice`."""


class NpuExecutable(Executable):
    """A program loaded into a hardware context: contract, columns, pending limit."""

    contract: KernelContract
    pending: PendingLimit
    context: int
    start: int
    columns: int


class NpuEngineDevice(EngineDevice):
    """An NPU engine's device."""

    @abc.abstractmethod
    def load_program(
        self, artifact: Artifact, contract: KernelContract, *, context: int, start: int, columns: int, max_pending: int
    ) -> NpuExecutable:
        """Load ``artifact`` as hardware context ``context`` on columns
        ``[start, start + columns)``."""

    def unload_program(self, executable: NpuExecutable) -> None:
        """Release what :meth:`load_program` created."""

    def counters(self) -> dict[str, Any]:
        """Engine counters for NpuDevice.npu_stats (invocations, context switches...)."""
        return {}


__all__ = ["NpuEngine", "NpuEngineDevice", "NpuExecutable"]
