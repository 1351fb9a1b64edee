"""npu-host queues: host worker queues whose dispatches are NPU invocations.

A dispatch checks the program's contract on the encoded arguments and takes one of
the program's pending-invocation slots before anything is encoded. A rejected
dispatch drops everything its encode call had encoded so far and gives the slots
back, so a rejected launch -- or a rejected graph replay -- changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hrx_core.engine import Executable, KernelArg
from hrx_core.host.queue import HostQueue

from ..errors import ContractViolation
from .program import HostProgram

if TYPE_CHECKING:
    from ..pending import PendingLimit
    from .engine import NpuHostDevice


class NpuHostQueue(HostQueue):
    def __init__(self, device: NpuHostDevice, family: str, index: int) -> None:
        super().__init__(device, family, index)
        self.name = f"npu-host-{family}{index}"
        # slots taken by invocations encoded since the last submit
        self._slots: list[PendingLimit] = []

    def dispatch(self, executable: Executable, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[KernelArg]) -> None:
        try:
            if not isinstance(executable, HostProgram):
                raise ContractViolation(
                    f"{executable.name!r} was loaded without a contract; load it with NpuDevice.load_artifact(artifact, columns=, contract=)"
                )
            if executable.unloaded:  # its columns belong to other programs now
                raise ContractViolation(f"NPU program {executable.name!r} is closed (unloaded from its columns)")
            command = executable.prepare(executable.contract.check_args(args))
            executable.pending.acquire(self._make_runnable)
        except BaseException:
            self._drop_encoded()
            raise
        self._slots.append(executable.pending)
        self._pending.append(command)

    def _make_runnable(self) -> None:
        # about to wait for a slot: what this encode call queued so far must be able to run
        self.submit()

    def _drop_encoded(self) -> None:
        self._pending = []
        slots, self._slots = self._slots, []
        for limit in slots:
            limit.release()

    def submit(self) -> None:
        slots, self._slots = self._slots, []
        try:
            super().submit()
        except BaseException:
            for limit in slots:  # the batch was dropped: its invocations never run
                limit.release()
            raise
