"""What the xdna engine does only on the simulated Strix Halo.

The simulated NPU cannot execute AIE code. It recognises a submitted instruction
stream as a program registered with it (``FakeProvider.register_npu_program``: the
stream template, the patch sites, the contract's bindings) and runs that program's
*reference* -- its npu-host C or numpy build -- on the buffers the patched DMA
addresses reach. The engine registers every program it loads there, and only there.

:class:`SimulatedReference` runs the host build once per column of the context with
each column's tile memory (the contract's scratch) zeroed first: the simulation's
model of the state every invocation establishes by realising its ARRAY program
again before its CONTROL program.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hrx_core.engine import Access, Artifact

from ..contract import KernelContract
from ..host.program import HostEntry


class SimulatedReference:
    """The callable the simulation runs for one program (see the module docstring)."""

    def __init__(self, artifact: Artifact, columns: int, scratch_bytes: int) -> None:
        self.entry = HostEntry(artifact)
        self.scratch_bytes = scratch_bytes
        self.scratch = [np.zeros(max(scratch_bytes, 1), np.uint8) for _ in range(columns)]
        self.runs = 0

    def __call__(self, views: Sequence[Any]) -> None:
        for column in self.scratch:
            column.fill(0)
        self.runs += 1
        self.entry.bind(list(views), self.scratch, self.scratch_bytes)()


def register(provider: Any, program: Any, contract: KernelContract, reference: Artifact) -> Any:
    """Register ``program``'s stream with the simulation; returns the registration."""
    from hrx_amdf.constants import MemoryAccess
    from hrx_amdf.fake import NpuBinding

    bits = {Access.READ: MemoryAccess.READ, Access.WRITE: MemoryAccess.WRITE, Access.READ_WRITE: MemoryAccess.READ | MemoryAccess.WRITE}
    bindings = []
    for i, slot in enumerate(contract.used):
        addends = [s.addend for s in program.sites if s.binding == i]
        bindings.append(NpuBinding(length=slot.length - max(addends, default=0), access=int(bits[slot.access]), alignment=slot.alignment))  # type: ignore[index]
    return provider.register_npu_program(
        program.name, program.template, [(s.offset, s.binding) for s in program.sites], bindings,
        SimulatedReference(reference, program.columns, contract.scratch_bytes), columns=program.columns,
    )


def unregister(provider: Any, registration: Any) -> None:
    if registration is not None:
        provider.npu_programs.unregister(registration)


__all__ = ["SimulatedReference", "register", "unregister"]
