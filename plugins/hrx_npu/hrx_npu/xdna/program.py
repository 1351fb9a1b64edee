"""A program loaded on an xdna device: one hardware context, its instruction ring and
its kernel queue.

* **Context.** ``load_artifact(columns=k)`` admits a context of ``k`` columns; the
  driver places it (spatially while columns are free, time-sliced otherwise).
* **Instructions.** The context's private memory holds a ring of instruction slots,
  one per invocation that may be pending (the program's window, 128). Each
  invocation's stream -- the entry's template with its bindings' DMA addresses in the
  patch sites -- is built when the invocation is encoded (checked and then immutable),
  written to the next slot and published with a host cache flush (the private memory
  is cacheable and the firmware does not snoop). A slot is reused only after the
  submission 128 earlier retired, which the window guarantees.
* **Retirement.** Submissions retire in order; the device's retirement thread reads
  the queue's status (and refreshes it after an eventfd notification) and moves
  :attr:`retired` forward. A queue that fails (firmware error, lost device) makes the
  program *failed*: its pending invocations report the typed error, new ones are
  refused with ``Quarantined``.
* **Closing.** A program closes when the user closes it; its native objects are
  destroyed once it is proven idle (every submission retired, or the queue failed).
  Until then it is quarantined on the device, never leaked silently.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hrx_core.engine import BufferArg
from hrx_core.errors import DeviceError, InvalidArgument, OutOfBounds, Quarantined

from ..contract import KernelContract
from ..errors import AlignmentError, ContractViolation
from ..pending import PendingLimit
from ..seam import NpuExecutable
from .memory import XdnaBuffer
from .qualify import Qualified
from .transaction import patch

if TYPE_CHECKING:
    from .engine import XdnaDevice


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


class XdnaProgram(NpuExecutable):
    """One loaded entry of an ``.xdna`` image on a hardware context."""

    def __init__(self, device: XdnaDevice, qualified: Qualified, contract: KernelContract, *, name: str, target: str,
                 context: int, start: int, columns: int, max_pending: int, reference: Any = None) -> None:
        from hrx_amdf.constants import AddressKind, MemoryAccess, MemoryFlag, ProfileRole
        from hrx_amdf.provider import DeviceAccess

        self.name = name
        self.target = target
        self.contract = contract
        self.context = context
        self.start = start
        self.columns = columns
        self.device = device
        self.qualified = qualified
        self.pending = PendingLimit(max_pending, f"NPU program {name!r}")
        instructions = qualified.instructions
        self.template = instructions.template
        self.sites = instructions.sites
        #: Guards the instruction ring and submission order.
        self.lock = threading.Lock()
        self.seq = 0
        #: Highest submission point accepted / known retired (checked retirement).
        self.last_point = 0
        self.retired = 0
        self.failure: BaseException | None = None
        #: Points whose pending-invocation slots are still taken (retirement releases them).
        self.watched: deque[int] = deque()
        self.closing = False
        self.destroyed = False
        self.submitted = 0
        self._simulated: Any = None

        xdna = device.xdna
        info = xdna.info
        self.slot_bytes = _align(len(self.template), max(info.instruction_alignment, 64))
        self.slot_count = max_pending
        created: list[Any] = []
        try:
            self.hw_context = xdna.create_context(columns)
            created.append(self.hw_context)
            self.scheduling = self.hw_context.info.scheduling_mode
            scope = self.hw_context.memory_scopes()[0]
            profile = next(p for p in scope.profiles() if p.roles & ProfileRole.CREATE and p.roles & ProfileRole.HOST_MAP
                           and p.guaranteed_flags & MemoryFlag.HOST_VISIBLE)
            # one ring slot per pending invocation; a stream too large for the window's
            # ring in the context's private memory gets a smaller window
            self.slot_count = min(max_pending, profile.maximum_bytes // self.slot_bytes)
            if self.slot_count < 1:
                raise DeviceError(f"NPU program {name!r}: its {len(self.template)}-byte instruction stream exceeds the context's "
                                  f"{profile.maximum_bytes}-byte private memory")
            if self.slot_count < max_pending:
                self.pending = PendingLimit(self.slot_count, f"NPU program {name!r}")
            self.instructions = scope.create(
                self.slot_bytes * self.slot_count, profile=profile.ordinal, alignment=max(info.instruction_alignment, 1),
                accesses=[DeviceAccess(xdna, MemoryAccess.READ | MemoryAccess.EXECUTE, address_kinds=frozenset({AddressKind.XDNA_FIRMWARE}))],
            )
            created.append(self.instructions)
            self.ring = self.instructions.map()
            created.append(self.ring)
            self.queue = self.hw_context.create_kernel_queue(device.queue_family, max_pending=max_pending)
            created.append(self.queue)
            if device.simulated:
                self._simulated = device.register_simulated(self, reference)
        except BaseException:
            for obj in reversed(created):
                try:
                    obj.destroy()
                except Exception:  # noqa: BLE001 - the original error is the one to report
                    pass
            raise
        self._ring_cached = self.ring.info.flush.needed

    def __repr__(self) -> str:
        return f"<XdnaProgram {self.name!r} {self.columns} columns, {self.submitted} submitted, retired {self.retired}>"

    # -- encode side --------------------------------------------------------------

    def check_usable(self) -> None:
        if self.closing or self.destroyed:
            raise InvalidArgument(f"NPU program {self.name!r} is closed")
        failure = self.failure
        if failure is not None:
            raise Quarantined(f"NPU program {self.name!r} is quarantined: its queue failed ({failure}); close it and load it again")

    def stream_for(self, args: Sequence[BufferArg]) -> bytes:
        """The invocation's instruction stream, every binding address checked."""
        addresses = []
        for i, (arg, record) in enumerate(zip(args, self.qualified.bindings)):
            buf = arg.buffer
            if not isinstance(buf, XdnaBuffer):
                raise ContractViolation(f"launch: binding {i} is not NPU memory of {self.device.info.name} (no XDNA DMA address)")
            if not record.minimum_offset <= arg.offset <= record.maximum_offset:
                raise OutOfBounds(f"launch: binding {i} starts at byte {arg.offset} of its allocation; the image allows "
                                  f"[{record.minimum_offset}, {record.maximum_offset}]")
            address = buf.dma_address + arg.offset
            if address % record.minimum_alignment:
                raise AlignmentError(f"launch: binding {i} at XDNA address {address:#x} is not {record.minimum_alignment}-byte aligned")
            addresses.append(address)
        for site in self.sites:
            value = addresses[site.binding] + site.addend
            if not site.minimum <= value <= site.maximum:
                raise OutOfBounds(f"launch: binding {site.binding} gives relocation {site.relocation} the value {value:#x}, "
                                  f"outside [{site.minimum:#x}, {site.maximum:#x}]")
            if value % site.alignment:
                raise AlignmentError(f"launch: binding {site.binding} gives relocation {site.relocation} the value {value:#x}, "
                                     f"not {site.alignment}-byte aligned")
        return patch(self.template, self.sites, addresses)

    # -- submission (queue workers) -----------------------------------------------------

    def submit(self, stream: bytes, abort: Any) -> int:
        """Write ``stream`` to the next instruction slot and submit it; returns the
        kernel queue's completion point. A full window waits for retirement."""
        from hrx_amdf.constants import HostCacheOperation, XdnaSchedulingMode
        from hrx_amdf.errors import AmdfBusy, AmdfError
        from hrx_amdf.provider import KernelCommand

        with self.lock:
            self.check_usable()
            offset = (self.seq % self.slot_count) * self.slot_bytes
            self.ring.array[offset : offset + len(stream)] = memoryview(stream)
            if self._ring_cached:
                self.ring.cache_control(HostCacheOperation.FLUSH, offset, len(stream))
            command = KernelCommand(self.instructions, offset, len(stream))
            while True:
                try:
                    point = self.queue.submit([command])
                    break
                except AmdfBusy:
                    # the driver's window is full: wait for checked retirement, then retry
                    self.device.retirement.wait_progress(self, abort)
                except AmdfError as exc:
                    if self._queue_failed():
                        self.failure = self.failure or exc  # a failed queue takes no more work: quarantined
                    if isinstance(exc, DeviceError):
                        raise
                    # the arguments were checked when the launch was encoded: a refusal now is the engine's or the device's
                    raise DeviceError(f"NPU program {self.name!r}: the XDNA queue refused the submission: {exc}") from exc
            self.seq += 1
            self.last_point = point
            self.submitted += 1
            self.device.note_invocation(self, self.scheduling == XdnaSchedulingMode.TIME_SLICED)
            self.device.retirement.watch(self, point)
            return point

    def _queue_failed(self) -> bool:
        from hrx_amdf.constants import QueueState
        from hrx_amdf.errors import AmdfError

        try:
            return self.queue.status().state != QueueState.ACTIVE
        except AmdfError:
            return True

    # -- retirement (the device's retirement thread) ----------------------------------------

    def settled(self, point: int) -> bool:
        return point <= self.retired or self.failure is not None

    def error_for(self, point: int) -> BaseException | None:
        return None if point <= self.retired else self.failure

    def refresh(self, native: bool, points: Sequence[int]) -> None:
        """Read retirement (status; ``native``: ask the driver first) and note a failure;
        ``points`` are the submissions still pending."""
        from hrx_amdf.constants import QueueState
        from hrx_amdf.errors import AmdfError

        if self.destroyed or self.failure is not None:
            return
        error: BaseException | None = None
        try:
            status = self.queue.refresh() if native else self.queue.status()
            if status.state == QueueState.ACTIVE:
                # an ACTIVE snapshot's frontier covers only submissions that succeeded
                if status.retired_submission > self.retired:
                    self.retired = status.retired_submission
                return
            # failed: a failure at or before a submission is that submission's failure;
            # ask per pending point which retired cleanly before it
            for point in sorted(points):
                try:
                    self.queue.wait(point, 0)
                except AmdfError as exc:
                    error = exc
                    break
                self.retired = max(self.retired, point)
            if error is None:
                error = DeviceError(f"NPU program {self.name!r}: queue {status.state.name}: {status.detail}")
        except AmdfError as exc:
            error = exc
        self.failure = error

    # -- teardown --------------------------------------------------------------------------

    def idle(self) -> bool:
        return self.failure is not None or self.retired >= self.last_point

    def destroy(self) -> bool:
        """Destroy the native objects if the program is idle; False while it is not."""
        from hrx_amdf.errors import AmdfBusy

        if self.destroyed:
            return True
        if not self.idle():
            return False
        try:
            self.queue.destroy()
        except AmdfBusy:
            return False
        self.destroyed = True
        self.device.program_destroyed(self)
        self.device.unregister_simulated(self._simulated)
        errors = []
        for obj in (self.ring, self.instructions, self.hw_context):
            try:
                obj.destroy()
            except Exception as exc:  # noqa: BLE001 - report after the rest is released
                errors.append(exc)
        if errors:
            raise DeviceError(f"NPU program {self.name!r}: releasing its native objects failed: {errors[0]}")
        return True


__all__ = ["XdnaProgram"]
