"""User queues of the simulated GPU: rings, indices, doorbells and command processors.

Each user queue has a command-processor thread. Writing the doorbell wakes it; it
checks the publication (write index stored first, the queue format's alignment and
capacity rules), then consumes the ring from its read index, executing one packet at
a time and advancing the read index as it goes:

* PM4 -- write index: monotonic dwords; read index: dwords wrapping at the ring's
  capacity; publications end on eight-dword boundaries; one dword always stays free.
* SDMA -- both indices monotonic bytes; the producer never runs more than the ring's
  capacity ahead.
* AQL -- 64-byte packet slots; the doorbell carries the index of the last published
  packet; processed slots are reset to INVALID and the read index advances.

A packet never straddles the end of the ring. Any violation, a malformed packet, a
memory fault or a failing kernel puts the queue in the FAILED state with a sticky
terminal status and a description (``UserQueueStatus.detail``); the read index stops
there. Blocking waits (WAIT_REG_MEM, POLL_REGMEM, barrier packets) park the thread
until memory satisfies them; writes by other queues wake it at once, host writes are
noticed by polling.
"""

from __future__ import annotations

import collections
import errno
import itertools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..constants import (
    AddressKind,
    CommandType,
    MemoryAccess,
    ProducerMode,
    QueuePriority,
    QueueState,
    StatusCode,
    StatusDomain,
)
from ..errors import error_for, make_status
from ..provider import (
    Doorbell,
    QueueFamilyInfo,
    Scratch,
    UserQueue,
    UserQueueInfo,
    UserQueueMapping,
    UserQueueMappingInfo,
    UserQueueStatus,
)
from .aql import INVALID, PACKET_BYTES, SIGNAL_KIND_USER, SIGNAL_VALUE, AqlInterpreter
from .kernels import Dispatch, KernelFault, check_loaded, execute
from .memory import MemoryFault, device_bytes, fail
from .pm4 import PacketFault, Pm4Interpreter, wall_clock
from .pm4 import header as pm4_header
from .sdma import SdmaInterpreter
from .sdma import packet as sdma_packet

if TYPE_CHECKING:
    from . import FakeGpuDevice, FakeProvider

#: Terminal statuses the simulation reports.
STATUS_PACKET = make_status(1, StatusDomain.FIRMWARE)  # malformed or unsupported command
STATUS_KERNEL = make_status(2, StatusDomain.FIRMWARE)  # a dispatch the hardware would not run / a kernel fault
STATUS_INJECTED = make_status(3, StatusDomain.FIRMWARE)  # fault injected by a test
STATUS_MEMORY = make_status(errno.EFAULT, StatusDomain.ERRNO)  # GPU VM fault
STATUS_DEVICE_LOST = make_status(StatusCode.DEVICE_LOST)


class InjectedFault(Exception):
    """A failure a test asked for (see :class:`hrx_amdf.fake.faults.Faults`)."""

    def __init__(self, detail: str, status: int = STATUS_INJECTED) -> None:
        super().__init__(detail)
        self.status = status


class _Stopped(Exception):
    """The queue is being destroyed or its device was lost."""


class FakeDoorbell(Doorbell):
    def __init__(self, queue: FakeUserQueue) -> None:
        self._queue = queue

    def write(self, value: int) -> None:
        self._queue._ring_doorbell(int(value))


class FakeUserQueueMapping(UserQueueMapping):
    def __init__(self, queue: FakeUserQueue) -> None:
        self._queue = queue
        self.ring = queue._ring
        self.read_index = queue._control[0:1]
        self.write_index = queue._control[1:2]
        self.doorbell = FakeDoorbell(queue)
        self.info = UserQueueMappingInfo(
            ring_address=queue._ring_address,
            ring_bytes=queue.info.ring_bytes,
            read_index_address=queue._control_address,
            write_index_address=queue._control_address + 8,
            doorbell_address=queue._doorbell_address,
            index_bits=64,
            doorbell_bits=64,
        )
        self._destroyed = False

    def destroy(self) -> None:
        if self._destroyed:
            raise fail("user_queue_mapping_destroy", StatusCode.INVALID_ARGUMENT, "mapping already destroyed")
        self._destroyed = True
        self._queue._mappings.discard(self)


class FakeUserQueue(UserQueue):
    """A user queue with its command-processor thread."""

    _ids = itertools.count(1)

    def __init__(self, provider: FakeProvider, device: FakeGpuDevice, family: QueueFamilyInfo, ring_bytes: int, priority: QueuePriority, producer: ProducerMode, scratch: Scratch | None) -> None:
        self.provider = provider
        self.device = device
        self.family = family
        self.kind = family.command_type
        qid = next(self._ids)
        self.name = f"{CommandType(self.kind).name.lower()}-{qid}"
        self.info = UserQueueInfo(
            queue_id=qid.to_bytes(16, "little"),
            family=family.ordinal,
            command_type=CommandType(self.kind),
            format_version=family.format_version,
            format_features=family.format_features,
            producer_mode=producer,
            priority=priority,
            roles=family.roles,
            ring_bytes=ring_bytes,
        )
        self.scratch = scratch
        self.max_private_bytes = scratch.max_private_bytes if scratch else 0
        # Queue-owned storage: ring and control page in coherent system memory.
        self._ring_memory = provider._internal_memory(device, ring_bytes)
        self._control_memory = provider._internal_memory(device, 4096)
        self._ring = self._ring_memory.device_view(0, ring_bytes)
        self._control = self._control_memory.device_view(0, 16).view(np.uint64)
        self._control_words = self._control.data  # the doorbell's check reads it: no NumPy scalar
        self._ring_address = self._ring_memory.address()
        self._control_address = self._control_memory.address()
        self._doorbell_address = provider._next_doorbell()
        if self.kind == CommandType.GPU_AQL:
            # Every slot starts INVALID, as the packet processor expects.
            slots = self._ring.view(np.uint16).reshape(-1, PACKET_BYTES // 2)
            slots[:, 0] = INVALID
        self._mappings: set[FakeUserQueueMapping] = set()
        self._cond = threading.Condition()
        self._bell = -1 if self.kind == CommandType.GPU_AQL else 0  # last published value
        self._consumed = 0  # monotonic consumed frontier (format units)
        self.state = QueueState.ACTIVE
        self.terminal = 0
        self.detail = ""
        self._hint = ""
        self._stopping = False
        self._destroyed = False
        self.log: collections.deque[str] = collections.deque(maxlen=4096)
        self.executed = 0  # packets executed
        self.interrupts: list[int] = []
        self.cache_operations: list[tuple[str, int]] = []
        self.pm4 = Pm4Interpreter(self)
        self.sdma = SdmaInterpreter(self, family.format_features)
        self.aql = AqlInterpreter(self, self.pm4)
        self._thread = threading.Thread(target=self._run, name=f"hrx-fake-cp-{self.name}", daemon=True)
        self._thread.start()

    # -- UserQueue API ------------------------------------------------------------------

    def map(self) -> FakeUserQueueMapping:
        if self._destroyed:
            raise fail("user_queue_map", StatusCode.INVALID_ARGUMENT, "queue destroyed")
        mapping = FakeUserQueueMapping(self)
        self._mappings.add(mapping)
        return mapping

    def status(self) -> UserQueueStatus:
        if self._destroyed:
            raise fail("user_queue_query_status", StatusCode.INVALID_ARGUMENT, "queue destroyed")
        with self._cond:
            return UserQueueStatus(
                state=self.state,
                reset_epoch=self.device.reset_epoch,
                producer_index=int(self._control[1]),
                consumed_index=self._consumed,
                terminal=self.terminal,
                detail=self.detail,
            )

    def wait_consumed(self, index: int, timeout_ns: int, poll_ns: int = 0) -> None:
        call = "user_queue_wait_consumed"
        if self._destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "queue destroyed")
        deadline = None if timeout_ns >= 2**64 - 1 else time.monotonic() + timeout_ns / 1e9
        target = index + 1 if self.kind == CommandType.GPU_AQL else index
        with self._cond:
            while self._consumed < target:
                if self.state != QueueState.ACTIVE:
                    raise error_for(call, self.terminal, self.detail)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise fail(call, StatusCode.DEADLINE_EXCEEDED, f"{self.name} consumed {self._consumed}, waiting for {target}")
                self._cond.wait(remaining if remaining is not None else 0.1)

    def destroy(self) -> None:
        call = "user_queue_destroy"
        if self._destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "queue already destroyed")
        with self._cond:
            if self._mappings:
                raise fail(call, StatusCode.BUSY, f"{len(self._mappings)} mapping(s) still live")
            published = self._published_target()
            if self.state == QueueState.ACTIVE and self._consumed < published:
                raise fail(call, StatusCode.BUSY, f"{self.name}: published work not consumed ({self._consumed} of {published})")
            self._stopping = True
            self._cond.notify_all()
        self.provider._wake_waiters()
        self._thread.join(timeout=5)
        self._destroyed = True
        self._ring_memory.destroy()
        self._control_memory.destroy()
        self.device._queues.discard(self)

    # -- publication --------------------------------------------------------------------

    def _published_target(self) -> int:
        return self._bell + 1 if self.kind == CommandType.GPU_AQL else self._bell

    def _ring_doorbell(self, value: int) -> None:
        with self._cond:
            if self.state != QueueState.ACTIVE or self._destroyed:
                return  # a failed queue ignores its doorbell, as hardware does
            problem = self._check_publication(value)
            if problem:
                self._fail_locked(STATUS_PACKET, f"doorbell {value}: {problem}")
                return
            self._bell = value
            self._cond.notify_all()

    def _check_publication(self, value: int) -> str:
        write_index: int = self._control_words[1]
        if self.kind == CommandType.GPU_AQL:
            capacity = self.info.ring_bytes // PACKET_BYTES
            if value < self._bell:
                return f"went backwards from {self._bell}"
            if value >= write_index:
                return f"names packet {value} but the write index reserved only up to {write_index - 1}"
            if value + 1 - self._consumed > capacity:
                return f"publishes {value + 1 - self._consumed} packets into a {capacity}-slot ring"
            return ""
        if value != write_index:
            return f"differs from the write index {write_index} (store the write index, then the doorbell)"
        if value < self._bell:
            return f"went backwards from {self._bell}"
        if self.kind == CommandType.GPU_PM4:
            capacity = self.info.ring_bytes // 4
            if value % 8:
                return "a PM4 publication must end on an eight-dword boundary (pad with NOP packets)"
            if value - self._consumed > capacity - 1:
                return f"{value - self._consumed} dwords outstanding in a {capacity}-dword ring (one must stay free)"
        else:
            if value % 4:
                return "SDMA publications are dword granular"
            if value - self._consumed > self.info.ring_bytes:
                return f"{value - self._consumed} bytes outstanding in a {self.info.ring_bytes}-byte ring"
        return ""

    # -- the command processor ----------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (self.state != QueueState.ACTIVE or self._consumed >= self._published_target()):
                    self._cond.wait()
                if self._stopping:
                    return
                target = self._published_target()
            try:
                self._consume(target)
            except _Stopped:
                return
            except PacketFault as exc:
                self._fail(STATUS_PACKET, str(exc))
            except MemoryFault as exc:
                self._fail(STATUS_MEMORY, f"memory fault: {exc}")
            except KernelFault as exc:
                self._fail(STATUS_KERNEL, str(exc))
            except InjectedFault as exc:
                self._fail(exc.status, str(exc))
            except Exception as exc:  # a bug in the simulation must still fail the queue, not hang it
                self._fail(STATUS_PACKET, f"simulation error: {type(exc).__name__}: {exc}")

    def _fail(self, status: int, detail: str) -> None:
        with self._cond:
            self._fail_locked(status, detail)

    def _fail_locked(self, status: int, detail: str) -> None:
        if self.state != QueueState.ACTIVE:
            return
        if self._hint:
            detail = f"{detail} [{self._hint}]"
        self.state = QueueState.DEVICE_LOST if status == STATUS_DEVICE_LOST else QueueState.FAILED
        self.terminal = status
        self.detail = f"{self.name}: {detail}"
        self._cond.notify_all()
        self.provider._wake_waiters()

    def _advance(self, consumed: int) -> None:
        with self._cond:
            self._consumed = consumed
            if self.kind == CommandType.GPU_PM4:
                self._control[0] = consumed % (self.info.ring_bytes // 4)  # native index wraps
            else:
                self._control[0] = consumed
            self._cond.notify_all()

    def _consume(self, target: int) -> None:
        if self.kind == CommandType.GPU_PM4:
            ring = self._ring.view(np.uint32)
            capacity = len(ring)
            while self._consumed < target:
                self._check_live()
                pos = self._consumed % capacity
                _, length = pm4_header(int(ring[pos]))
                if pos + length > capacity:
                    raise PacketFault(f"packet at ring dword {pos} ({length} dwords) straddles the end of the {capacity}-dword ring")
                if self._consumed + length > target:
                    raise PacketFault(f"packet at ring dword {pos} runs past the published write index {target}")
                self.provider.faults.before_packet(self)
                self.pm4.execute(ring[pos : pos + length].copy())
                self.executed += 1
                self._advance(self._consumed + length)
        elif self.kind == CommandType.GPU_SDMA:
            ring = self._ring.view(np.uint32)
            capacity = len(ring)
            while self._consumed < target:
                self._check_live()
                pos = (self._consumed % self.info.ring_bytes) // 4
                limit = min(capacity - pos, (target - self._consumed) // 4)
                name, length = sdma_packet(ring, pos, limit)
                self.provider.faults.before_packet(self)
                self.sdma.execute(name, ring[pos : pos + length].copy())
                self.executed += 1
                self._advance(self._consumed + 4 * length)
        else:
            slots = self.info.ring_bytes // PACKET_BYTES
            while self._consumed < target:
                self._check_live()
                slot = self._consumed % slots
                raw = self._ring[slot * PACKET_BYTES : (slot + 1) * PACKET_BYTES]
                self.provider.faults.before_packet(self)
                self.aql.execute(raw.tobytes())
                raw.view(np.uint16)[0] = INVALID  # the slot is free again
                self.executed += 1
                self._advance(self._consumed + 1)

    def _check_live(self) -> None:
        if self._stopping:
            raise _Stopped()
        if self.device.lost:
            raise InjectedFault("device lost", STATUS_DEVICE_LOST)

    # -- services the interpreters use ---------------------------------------------------

    def note(self, name: str) -> None:
        self.log.append(name)

    def hint(self, text: str) -> None:
        self._hint = text

    def note_cache_operation(self, kind: str, control: int) -> None:
        self.cache_operations.append((kind, control))

    def interrupt(self, context: int) -> None:
        self.interrupts.append(context)
        self.provider._wake_waiters()

    def clock(self) -> int:
        return wall_clock()

    def read(self, address: int, nbytes: int, *, what: str, alignment: int = 1, access: MemoryAccess = MemoryAccess.READ) -> np.ndarray:
        self.provider.faults.check_address(address, nbytes, what)
        return device_bytes(self.provider, AddressKind.GPU, address, nbytes, device=self.device, need=access, alignment=alignment, what=what)

    def write(self, address: int, data: bytes, *, what: str, alignment: int = 1) -> None:
        self.provider.faults.check_address(address, len(data), what)
        view = device_bytes(self.provider, AddressKind.GPU, address, len(data), device=self.device, need=MemoryAccess.WRITE, alignment=alignment, what=what)
        view[:] = np.frombuffer(data, dtype=np.uint8)
        self.provider._wake_waiters()

    def _block_until(self, check: Callable[[], bool], label: str) -> None:
        while True:
            self._check_live()
            if not self.provider.faults.hangs(self) and check():
                return
            self.provider._wait_for_memory(self.provider.options.poll_seconds)
            if self._stopping:
                raise _Stopped()

    def wait_memory(self, address: int, width: int, predicate: Callable[[int], bool], label: str) -> None:
        view = self.read(address, width, what=label, alignment=width)
        dtype = np.uint32 if width == 4 else np.uint64
        self._block_until(lambda: predicate(int(view.view(dtype)[0])), label)

    def _signal_value(self, address: int, what: str) -> np.ndarray:
        view = self.read(address, 16, what=what, alignment=64, access=MemoryAccess.READ | MemoryAccess.WRITE).view(np.int64)
        if int(view[0]) != SIGNAL_KIND_USER:
            raise PacketFault(f"{what}: {address:#x} is not an amd_signal_t of kind USER (kind {int(view[0])})")
        return view[SIGNAL_VALUE // 8 : SIGNAL_VALUE // 8 + 1]

    def wait_signal(self, address: int, predicate: Callable[[int], bool], label: str) -> None:
        value = self._signal_value(address, label)
        self._block_until(lambda: predicate(int(value[0])), label)

    def wait_any_signal(self, addresses: list[int], label: str) -> None:
        values = [self._signal_value(a, label) for a in addresses]
        self._block_until(lambda: any(int(v[0]) == 0 for v in values), label)

    def signal_decrement(self, address: int) -> None:
        value = self._signal_value(address, "completion signal")
        value[0] -= 1
        self.provider._wake_waiters()

    def check_code(self, loaded: Any) -> None:
        check_loaded(self.provider, loaded, self.device)

    def dispatch(self, dispatch: Dispatch) -> None:
        execute(self.provider, self.device, dispatch)
        self.provider._wake_waiters()


__all__ = ["FakeUserQueue", "FakeUserQueueMapping", "FakeDoorbell", "InjectedFault"]
