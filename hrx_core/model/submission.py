"""SlotSubmission: one submitted step of an inference slot -- wait, read, take views."""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..timeouts import check_timeout
from .tensor import DeviceTensor

if TYPE_CHECKING:
    from ..execution.runtime import Submission
    from .prepared import ModelSlot
    from .slot_io import SlotIO


class SlotSubmission:
    """The handle of one ``slot.submit``: completion, output views and host readback.

    ``output(name)`` returns a DeviceTensor view of the slot's output that carries
    the producing completion and a lease on the slot: the slot is not submitted
    again (its outputs are not overwritten) until every such view is closed.
    ``read(name)`` copies an output to the host through the slot's reused readback
    staging. Both are valid until the slot is submitted again.
    """

    def __init__(self, slot: ModelSlot, io: SlotIO, generation: int, submissions: Sequence[Submission],
                 compute: Submission, readbacks: dict[str, Submission]) -> None:
        self.slot = slot
        #: the entry point this step ran
        self.io = io
        self.generation = generation
        self.submissions = list(submissions)
        self.compute = compute
        self._readbacks = readbacks
        self._host: dict[str, np.ndarray] = {}

    def __repr__(self) -> str:
        state = "complete" if self.is_complete else "pending"
        return f"<hrx.model.SlotSubmission {self.slot.name} {self.io.entry} step {self.generation} {state}>"

    @property
    def is_complete(self) -> bool:
        return all(s.is_complete for s in self.submissions)

    def refresh(self) -> bool:
        """Poll (and settle) the step's submissions; True when all are done."""
        done = [s.refresh() for s in self.submissions]  # refresh (settle) every one
        return all(done)

    def wait(self, timeout: float | None = None) -> None:
        """Block until the step (uploads, compute and requested readbacks) finished."""
        timeout = check_timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        for s in list(self.submissions):
            s.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait_async().__await__()

    async def _wait_async(self) -> None:
        for s in list(self.submissions):
            await s

    @property
    def stale(self) -> bool:
        """True once the slot was submitted again (outputs now belong to a later step)."""
        return self.slot._generation != self.generation

    def output(self, name: str) -> DeviceTensor:
        """A leased view of output ``name`` carrying its producer's completion; close it
        (or let it be collected) to let the slot run again."""
        return self.slot._issue_view(self, name)

    @property
    def outputs(self) -> dict[str, DeviceTensor]:
        """Leased views of every output (see :meth:`output`)."""
        return {name: self.output(name) for name in self.io.outputs}

    def read(self, name: str, *, timeout: float | None = None) -> np.ndarray:
        """Output ``name`` as a new host array (its declared shape and dtype)."""
        timeout = check_timeout("timeout", timeout)
        cached = self._host.get(name)
        if cached is None:
            cached = self.slot._read(self, name, timeout)
            self._host[name] = cached
        return cached.copy()

    def read_all(self, *, timeout: float | None = None) -> dict[str, np.ndarray]:
        """Every output as host arrays."""
        return {name: self.read(name, timeout=timeout) for name in self.io.outputs}
