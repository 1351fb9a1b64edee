"""Resident GPU-NPU exchange: a GPU participant and an NPU participant that stay
resident on reserved queues and exchange payloads through coherent shared memory
with the WAIT/RUN/ABORT protocol -- no host round trip between them.

* :mod:`.protocol` -- the control block, the four rings and the state machine, in
  Python and as portable C (:func:`protocol.protocol_c`);
* :mod:`.session` -- :class:`ResidentStartup` (coherent attachment chosen with
  ``Fabric.allocation_profiles``, directional memory contracts checked) and
  :class:`ResidentSession` (submission in either order, ``start``, ``abort`` before
  RUN, timeouts that cancel nothing, quarantine when teardown is not proven);
* :func:`host_gpu_kernel` / :func:`host_npu_step` -- the protocol's Python
  participants (the host engine runs them; native engines use the C text).

See docs/npu.md, "Resident GPU-NPU exchange".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..kernel import Kernel
from .protocol import Layout, Stage, run_gpu_role, run_npu_role
from .session import (
    HOST_ACTIONS,
    SYSTEM_SCOPE,
    KernelParticipant,
    Participant,
    ResidentSession,
    ResidentStartup,
    quarantined_sessions,
)


def _stage(name: str, fn: Any) -> Stage:
    if not callable(fn):
        raise InvalidArgument(f"{name}: expected a callable (in_slot, out_slot), got {type(fn).__name__}")
    return fn  # type: ignore[no-any-return]


def host_gpu_kernel(name: str, pre: Stage, post: Stage, *, cuda: str | None = None) -> Kernel:
    """The GPU participant as a Kernel: on the host engine the protocol in Python runs
    ``pre(request_slot, forward_slot)`` and ``post(backward_slot, response_slot)``
    (uint8 arrays); ``cuda`` is the same participant for the cuda engine (built with
    ``hrx_gpu.cuda.resident.participant_source``)."""
    pre, post = _stage("pre", pre), _stage("post", post)

    def participant(memory: np.ndarray) -> None:
        run_gpu_role(memory, pre, post)

    sources: dict[str, Any] = {"host": participant}
    if cuda is not None:
        sources["cuda"] = cuda
    return Kernel(name, buffers=("read_write",), sources=sources, entry="hrx_resident_gpu" if cuda is not None else None)


def host_npu_step(step: Stage) -> Callable[[np.ndarray], None]:
    """The NPU participant's protocol in Python around ``step(forward_slot, backward_slot)``."""
    step = _stage("step", step)

    def participant(memory: np.ndarray) -> None:
        run_npu_role(memory, step)

    return participant



__all__ = [
    "HOST_ACTIONS",
    "SYSTEM_SCOPE",
    "KernelParticipant",
    "Layout",
    "Participant",
    "ResidentSession",
    "ResidentStartup",
    "host_gpu_kernel",
    "host_npu_step",
    "quarantined_sessions",
]
