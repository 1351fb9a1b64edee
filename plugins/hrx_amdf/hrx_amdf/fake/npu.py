"""The simulated NPU5: contexts on an eight-column array and kernel-mediated queues.

libamdf publishes opaque instruction ranges (AIE transaction streams) from memory of
the context's private scope; whoever builds the stream patches buffer addresses
into it. The simulation checks what a submission carries and then runs the program's
reference on the bound buffers:

* the command: memory of *this* context's private scope, EXECUTE access, range inside
  the allocation, address alignment and length granularity, at most the device's
  instruction limit;
* the stream: an AIE transaction header of version 0.1 whose size is the range's,
  column count within the context, operations that parse to exactly that size;
* the program: the stream must match a program registered with the simulation
  (:meth:`FakeProvider.register_npu_program`) at every byte that is not a binding
  patch site; each patch site holds the XDNA DMA address of one binding, which must
  resolve to memory the NPU may access as the program's contract declares, for the
  contract's length, at the contract's alignment -- and the stream carries exactly
  the contract's used bindings;
* the window: at most ``maximum_pending`` accepted, unretired submissions; a full
  window is BUSY after one progress check.

Submissions complete in order on a worker per queue. What this cannot show:
firmware acceptance of real transactions, tile state and caches, time-sliced context
switches on the array -- only an NPU can (docs/amd.md).
"""

from __future__ import annotations

import collections
import itertools
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ..constants import (
    AddressKind,
    MemoryAccess,
    QueueState,
    StatusCode,
    StatusDomain,
    XdnaBinaryFormat,
    XdnaSchedulingMode,
)
from ..errors import error_for, make_status
from ..provider import (
    KernelCommand,
    KernelQueue,
    KernelQueueInfo,
    KernelQueueStatus,
    MemoryScope,
    XdnaContext,
    XdnaContextInfo,
)
from . import facts
from .memory import FakeMemory, MemoryFault, fail, resolve

if TYPE_CHECKING:
    from . import FakeProvider, FakeXdnaDevice

STATUS_NPU_FIRMWARE = make_status(0x10, StatusDomain.FIRMWARE)
STATUS_NPU_PROGRAM = make_status(0x11, StatusDomain.FIRMWARE)

#: AIE transaction header (version 0.1): major, minor, device generation, rows,
#: columns, memory-tile rows, (pad), operation count, total size in bytes.
TXN_HEADER = struct.Struct("<BBBBBBxxII")
TXN_MAJOR, TXN_MINOR = 0, 1
#: Operation header: opcode, column, row, reserved; then the operation's size in
#: bytes (header included) as a u32 for every operation this simulation parses.
OP_HEADER = struct.Struct("<BBBBI")
#: Transaction operations the simulation parses (opcode -> name).
OPS = {0: "WRITE", 1: "BLOCKWRITE", 3: "MASKWRITE", 4: "MASKPOLL", 5: "NOOP", 128: "CUSTOM"}


@attrs.frozen
class NpuBinding:
    """One buffer slot of a registered program's contract."""

    length: int
    access: int  # MemoryAccess bits the program needs (0: unused slot)
    alignment: int = 64


@attrs.frozen
class NpuProgram:
    """A program the simulation recognises in instruction streams."""

    name: str
    template: bytes
    #: (byte offset in the stream, binding index) of each 64-bit address patch site.
    patches: tuple[tuple[int, int], ...]
    bindings: tuple[NpuBinding, ...]
    #: Runs the program on one view per binding (unused slots get None).
    reference: Callable[[list[np.ndarray | None]], None]
    columns: int = 1

    def matches(self, stream: bytes) -> bool:
        if len(stream) != len(self.template):
            return False
        masked = bytearray(stream)
        for offset, _ in self.patches:
            masked[offset : offset + 8] = self.template[offset : offset + 8]
        return bytes(masked) == self.template


class NpuPrograms:
    def __init__(self) -> None:
        self._programs: list[NpuProgram] = []
        self._lock = threading.Lock()

    def register(self, program: NpuProgram) -> None:
        with self._lock:
            self._programs.append(program)

    def unregister(self, program: NpuProgram) -> None:
        with self._lock:
            if program in self._programs:
                self._programs.remove(program)

    def find(self, stream: bytes) -> NpuProgram | None:
        with self._lock:
            candidates = list(self._programs)
        return next((p for p in candidates if p.matches(stream)), None)


class NpuFault(Exception):
    def __init__(self, detail: str, status: int = STATUS_NPU_PROGRAM) -> None:
        super().__init__(detail)
        self.status = status


def parse_transaction(stream: bytes, columns: int) -> list[tuple[str, int, int]]:
    """Check a transaction stream's structure; returns its operations (name, col, row)."""
    if len(stream) < TXN_HEADER.size:
        raise NpuFault(f"instruction stream of {len(stream)} bytes has no transaction header")
    major, minor, _gen, rows, cols, _mem_rows, count, size = TXN_HEADER.unpack_from(stream)
    if (major, minor) != (TXN_MAJOR, TXN_MINOR):
        raise NpuFault(f"transaction version {major}.{minor}; the device takes {TXN_MAJOR}.{TXN_MINOR}")
    if size != len(stream):
        raise NpuFault(f"transaction header says {size} bytes, the command range has {len(stream)}")
    if cols > columns or cols == 0:
        raise NpuFault(f"transaction spans {cols} columns, the context has {columns}")
    if rows != facts.NPU_ROWS:
        raise NpuFault(f"transaction describes {rows} rows, the array has {facts.NPU_ROWS}")
    ops = []
    pos = TXN_HEADER.size
    for index in range(count):
        if pos + OP_HEADER.size > size:
            raise NpuFault(f"operation {index} header runs past the stream")
        code, col, row, _reserved, op_size = OP_HEADER.unpack_from(stream, pos)
        name = OPS.get(code)
        if name is None:
            raise NpuFault(f"operation {index} at byte {pos}: unknown opcode {code}")
        if op_size < OP_HEADER.size or op_size % 4 or pos + op_size > size:
            raise NpuFault(f"operation {index} at byte {pos}: size {op_size} is not a dword multiple inside the stream")
        if col >= cols or row >= rows:
            raise NpuFault(f"operation {index} ({name}) addresses tile ({col}, {row}) outside {cols}x{rows}")
        ops.append((name, col, row))
        pos += op_size
    if pos != size:
        raise NpuFault(f"{count} operations end at byte {pos}, the stream has {size}")
    return ops


class _Submission:
    __slots__ = ("point", "program", "views", "done", "status", "detail")

    def __init__(self, point: int, program: NpuProgram, views: list[np.ndarray | None]) -> None:
        self.point = point
        self.program = program
        self.views = views
        self.done = False
        self.status = 0
        self.detail = ""


class FakeNpuQueue(KernelQueue):
    """A kernel-mediated XDNA queue with an in-order worker."""

    _ids = itertools.count(1)

    def __init__(self, provider: FakeProvider, context: FakeXdnaContext, family: int, max_pending: int) -> None:
        self.provider = provider
        self.context = context
        self.name = f"xdna-{next(self._ids)}"
        self.info = KernelQueueInfo(
            family=family,
            command_type=provider.npu_families()[family].command_type,
            maximum_pending=max_pending,
            maximum_commands=1,
            notification_types=1 << 1,  # eventfd
        )
        self._next_point = 1
        self._pending: collections.deque[_Submission] = collections.deque()
        self._retired = 0
        self._failed_point = 0  # first submission that failed (0: none)
        self.state = QueueState.ACTIVE
        self.terminal = 0
        self.detail = ""
        self._cond = threading.Condition()
        self._stopping = False
        self._destroyed = False
        self._notifications: list[tuple[int, int]] = []
        self.completed = 0
        self._thread = threading.Thread(target=self._run, name=f"hrx-fake-{self.name}", daemon=True)
        self._thread.start()

    # -- submission ---------------------------------------------------------------------

    def submit(self, commands: Sequence[KernelCommand]) -> int:
        call = "xdna.kernel_queue_submit"
        if self._destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "queue destroyed")
        if len(commands) != 1:
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"{len(commands)} commands; this queue takes {self.info.maximum_commands} per submission")
        stream, program, views = self._validate(commands[0])
        with self._cond:
            if self.state != QueueState.ACTIVE:
                raise error_for(call, self.terminal, self.detail)
            if len(self._pending) >= self.info.maximum_pending:
                self._reclaim_locked()
                if len(self._pending) >= self.info.maximum_pending:
                    raise fail(call, StatusCode.BUSY, f"{self.info.maximum_pending} submissions pending")
            point = self._next_point
            self._next_point += 1
            self._pending.append(_Submission(point, program, views))
            self._cond.notify_all()
        return point

    def _validate(self, command: KernelCommand) -> tuple[bytes, NpuProgram, list[np.ndarray | None]]:
        call = "xdna.kernel_queue_submit"
        device = self.context.device
        info = device.info
        memory = command.memory
        if not isinstance(memory, FakeMemory) or not memory.alive:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "command memory is not live memory of this provider")
        if getattr(memory, "scope", None) is not self.context.scope:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "command memory does not come from this context's private scope")
        if not 0 <= command.access_ordinal < len(memory.accesses):
            raise fail(call, StatusCode.OUT_OF_RANGE, f"access ordinal {command.access_ordinal}")
        access = memory.accesses[command.access_ordinal]
        if not access.access & MemoryAccess.EXECUTE:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "command memory lacks EXECUTE access")
        if command.nbytes <= 0 or command.offset < 0 or command.offset + command.nbytes > memory.info.nbytes:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"command range [{command.offset}, +{command.nbytes}) outside {memory.info.nbytes} bytes")
        address = access.addresses[AddressKind.XDNA_FIRMWARE] + command.offset
        if address % info.instruction_alignment:
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"instruction address {address:#x} not {info.instruction_alignment}-byte aligned")
        if command.nbytes % info.instruction_granularity or command.nbytes > info.instruction_max_bytes:
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"instruction length {command.nbytes} (granularity {info.instruction_granularity}, max {info.instruction_max_bytes})")
        # The firmware reads the stream at submission; later host writes must not change it.
        stream = memory.device_view(command.offset, command.nbytes).tobytes()
        try:
            parse_transaction(stream, self.context.info.columns)
        except NpuFault as exc:
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"instruction stream: {exc}") from None
        program = self.provider.npu_programs.find(stream)
        if program is None:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "instruction stream matches no registered program (bytes outside patch sites differ)")
        if program.columns > self.context.info.columns:
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"program {program.name!r} needs {program.columns} columns, the context has {self.context.info.columns}")
        patched = {index for _, index in program.patches}
        used = {i for i, b in enumerate(program.bindings) if b.access}
        if patched != used:
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"program {program.name!r}: stream patches bindings {sorted(patched)}, its contract uses {sorted(used)}")
        views: list[np.ndarray | None] = [None] * len(program.bindings)
        for offset, index in program.patches:
            binding = program.bindings[index]
            dma = int.from_bytes(stream[offset : offset + 8], "little")
            try:
                target, target_offset = resolve(
                    self.provider, AddressKind.XDNA_DMA, dma, binding.length, device=device, need=MemoryAccess(binding.access),
                    alignment=binding.alignment, what=f"binding {index}",
                )
            except MemoryFault as exc:
                raise fail(call, StatusCode.INVALID_ARGUMENT, f"program {program.name!r}: {exc}") from None
            view = target.device_view(target_offset, binding.length)
            if not binding.access & MemoryAccess.WRITE:
                view = view.view()
                view.flags.writeable = False
            views[index] = view
        return stream, program, views

    # -- retirement ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not any(not s.done for s in self._pending):
                    self._cond.wait()
                if self._stopping:
                    return
                submission = next(s for s in self._pending if not s.done)
            hang = self.provider.faults.npu_hangs(self)
            while hang and not self._stopping:
                time.sleep(0.01)
                hang = self.provider.faults.npu_hangs(self)
            if self._stopping:
                return
            status, detail = 0, ""
            try:
                self.provider.faults.before_npu(self)
                self.context.device.run_on_array(self.context, lambda: submission.program.reference(submission.views))
            except NpuFault as exc:
                status, detail = exc.status, str(exc)
            except Exception as exc:  # the program's failure is a firmware error, never a crash
                status, detail = STATUS_NPU_FIRMWARE, f"program {submission.program.name!r} failed: {type(exc).__name__}: {exc}"
            with self._cond:
                submission.done, submission.status, submission.detail = True, status, detail
                self.completed += 1
                if status and self.state == QueueState.ACTIVE:
                    self.state, self.terminal, self.detail = QueueState.FAILED, status, f"{self.name}: {detail}"
                    self._failed_point = submission.point
                self._cond.notify_all()
            self._deliver_notifications()

    def _reclaim_locked(self) -> None:
        while self._pending and self._pending[0].done:
            self._retired = self._pending.popleft().point

    def _deliver_notifications(self) -> None:
        with self._cond:
            self._reclaim_locked()
            frontier = self._completed_frontier_locked()
            ready = [(p, fd) for p, fd in self._notifications if p <= frontier]
            self._notifications = [(p, fd) for p, fd in self._notifications if p > frontier]
        for _, fd in ready:
            try:
                os.eventfd_write(fd, 1)
            except OSError:
                pass

    def _completed_frontier_locked(self) -> int:
        frontier = self._retired
        for s in self._pending:
            if not s.done:
                break
            frontier = s.point
        return frontier

    def status(self) -> KernelQueueStatus:
        if self._destroyed:
            raise fail("kernel_queue_query_status", StatusCode.INVALID_ARGUMENT, "queue destroyed")
        with self._cond:
            return KernelQueueStatus(retired_submission=self._retired, state=self.state, terminal=self.terminal, detail=self.detail)

    def refresh(self) -> KernelQueueStatus:
        if self._destroyed:
            raise fail("kernel_queue_refresh_status", StatusCode.INVALID_ARGUMENT, "queue destroyed")
        with self._cond:
            self._reclaim_locked()
            return KernelQueueStatus(retired_submission=self._retired, state=self.state, terminal=self.terminal, detail=self.detail)

    def wait(self, submission: int, timeout_ns: int, poll_ns: int = 0) -> None:
        call = "kernel_queue_wait"
        if self._destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "queue destroyed")
        if submission <= 0 or submission >= self._next_point:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"submission {submission} was not accepted by this queue")
        deadline = None if timeout_ns >= 2**64 - 1 else time.monotonic() + timeout_ns / 1e9
        with self._cond:
            while True:
                self._reclaim_locked()
                # a failure at or before this submission is its failure (the queue is
                # in order); a failure after it does not concern it
                if (self._failed_point and self._failed_point <= submission) or (self.state != QueueState.ACTIVE and self._retired < submission):
                    raise error_for(call, self.terminal, self.detail)
                if self._retired >= submission:
                    return
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise fail(call, StatusCode.DEADLINE_EXCEEDED, f"{self.name}: submission {submission} not retired")
                self._cond.wait(remaining if remaining is not None else 0.1)

    def request_notification(self, submission: int, eventfd: int) -> None:
        call = "kernel_queue_request_notification"
        if submission <= 0:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "point zero")
        if submission >= self._next_point:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"submission {submission} not accepted")
        with self._cond:
            self._notifications.append((submission, eventfd))
        self._deliver_notifications()

    def destroy(self) -> None:
        call = "kernel_queue_destroy"
        if self._destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "queue already destroyed")
        with self._cond:
            self._reclaim_locked()
            if self.state == QueueState.ACTIVE and self._pending:
                raise fail(call, StatusCode.BUSY, f"{len(self._pending)} submission(s) not retired")
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self._destroyed = True
        self.context._queues.discard(self)


class FakeXdnaContext(XdnaContext):
    _ids = itertools.count(1)

    def __init__(self, provider: FakeProvider, device: FakeXdnaDevice, columns: int, mode: XdnaSchedulingMode, origin: int) -> None:
        self.provider = provider
        self.device = device
        cid = next(self._ids)
        self.info = XdnaContextInfo(
            id=cid.to_bytes(16, "little"),
            device_id=device.info.id,
            reset_epoch=device.info.reset_epoch,
            scheduling_mode=mode,
            columns=columns,
            rows=facts.NPU_ROWS,
        )
        self.origin = origin
        self._queues: set[FakeNpuQueue] = set()
        self._destroyed = False
        from . import FakeScope  # noqa: PLC0415 (cycle)

        self.scope: MemoryScope = FakeScope.private_for(provider, self)

    def placement(self) -> tuple[int, int]:
        return self.origin, facts.NPU_COLUMNS

    def memory_scopes(self) -> list[MemoryScope]:
        return [self.scope]

    def create_kernel_queue(self, family: int, *, max_pending: int = 0) -> FakeNpuQueue:
        call = "xdna.kernel_queue_create"
        if self._destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "context destroyed")
        families = self.provider.npu_families()
        if not 0 <= family < len(families):
            raise fail(call, StatusCode.OUT_OF_RANGE, f"queue family {family} of {len(families)}")
        if max_pending < 0:
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"max_pending {max_pending}")
        pending = max_pending or facts.NPU_MAX_PENDING
        if pending > facts.NPU_MAX_PENDING:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"max_pending {pending} over the device's {facts.NPU_MAX_PENDING}")
        queue = FakeNpuQueue(self.provider, self, family, pending)
        self._queues.add(queue)
        return queue

    def destroy(self) -> None:
        call = "xdna.context_destroy"
        if self._destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "context already destroyed")
        if self._queues:
            raise fail(call, StatusCode.BUSY, f"{len(self._queues)} queue(s) still live")
        if self.scope.live_memories():  # type: ignore[attr-defined]
            raise fail(call, StatusCode.BUSY, "private memory of the context is still live")
        self._destroyed = True
        self.device._release_context(self)


__all__ = ["NpuProgram", "NpuBinding", "NpuPrograms", "FakeNpuQueue", "FakeXdnaContext", "parse_transaction", "TXN_HEADER", "OP_HEADER", "OPS"]

_ = XdnaBinaryFormat
