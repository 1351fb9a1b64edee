"""ResidentStartup and ResidentSession: a GPU participant and an NPU participant that
stay resident on their queues and exchange payloads through coherent shared memory,
with no host round trip between them (see :mod:`hrx_core.resident.protocol`).

Lifecycle (the specification's "Resident GPU-NPU exchange")::

    startup = ResidentStartup(gpu, npu, Layout(...))      # coherent attachment, contracts checked
    session = ResidentSession(startup, gpu_part, npu_part) # participants' contracts checked
    session.submit_npu(); session.submit_gpu()             # either order: both WAIT for RUN
    session.start()                                        # only after both are accepted
    session.send(request); session.receive()               # host feeds and drains the ends
    session.stop()                                         # STOP: drain, both report DONE
    session.close()

``abort()`` is available before RUN: both participants leave without running work.
After RUN a host timeout (``wait``/``stop``/``receive`` with ``timeout=``) raises
``Timeout`` and cancels nothing; the session keeps owning its memory and queues
until both participants report a terminal state and their launches complete.
``close()`` stops the participants (STOP, then ABORT after ``timeout``); if teardown
still cannot be proven, the session is quarantined: its memory (marked quarantined,
its budget charge held) and queues stay alive until the launches complete, then they
are released. At interpreter exit every live session is sent ABORT.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from ..buffer import Buffer, backing_of
from ..completion import Completion
from ..errors import DeviceError, InvalidArgument, Timeout, Unsupported, show
from ..placement import HOST, Fabric, PlacedBuffer, Visibility, visibility
from . import protocol as P

if TYPE_CHECKING:
    from ..budget import MemoryBudget
    from ..device import Device
    from ..stream import Stream

#: What a participant implementing the protocol with system-scope release/acquire does.
SYSTEM_SCOPE = frozenset({"device-release-system", "device-acquire-system"})
#: What the host side of a session does on coherent memory (ordered 8-byte stores/loads).
HOST_ACTIONS = frozenset({"host-store-release", "host-load-acquire"})

_session_ids = itertools.count(1)


def _device_arg(name: str, value: Any) -> Device:
    from ..device import Device

    if not isinstance(value, Device):
        raise InvalidArgument(f"{name}: expected an hrx Device, got {type(value).__name__}")
    if value.closed:
        raise InvalidArgument(f"{name}: {value.name} is closed")
    return value


def _timeout_arg(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidArgument(f"{name}: expected seconds >= 0 or None, got {show(value)}")
    return float(value)


# -- participants ---------------------------------------------------------------------------


class Participant(abc.ABC):
    """One side of a resident exchange: a program implementing the protocol's ``role``
    ("gpu" or "npu") on ``device``, launched once on a queue reserved for the session
    with the session's memory as its only binding. ``actions``: the release/acquire
    actions it performs (checked against the fabric's visibility description)."""

    role: str
    device: Device
    actions: frozenset[str]
    name: str

    def prepare(self, memory: Buffer) -> None:
        """Bind and check everything that depends on the session memory (called when
        the session is built, before any submission)."""

    @abc.abstractmethod
    def launch(self, stream: Stream, memory: Buffer) -> Completion:
        """Launch on ``stream`` (accepted when this returns)."""

    def close(self) -> None:
        """Release what the participant retains (called once the session is torn down)."""


class KernelParticipant(Participant):
    """A participant that is an hrx Kernel taking the session memory as its one buffer
    (the host engine runs its ``host`` source, cuda its ``cuda`` source)."""

    def __init__(self, role: str, device: Device, kernel: Any, *, grid: int = 1, block: int = 1,
                 actions: frozenset[str] = SYSTEM_SCOPE) -> None:
        from ..kernel import Kernel

        if role not in ("gpu", "npu"):
            raise InvalidArgument(f"role: expected 'gpu' or 'npu', got {show(role)}")
        self.device = _device_arg("device", device)
        if not isinstance(kernel, Kernel):
            raise InvalidArgument(f"kernel: expected an hrx Kernel, got {type(kernel).__name__}")
        if len(kernel.buffer_access) != 1 or kernel.scalar_types:
            raise InvalidArgument(f"kernel: a participant kernel takes exactly one buffer (the session memory) and no scalars; "
                                  f"{kernel.name!r} takes {len(kernel.buffer_access)} buffers and {len(kernel.scalar_types)} scalars")
        if not isinstance(actions, frozenset) or not all(isinstance(a, str) for a in actions):
            raise InvalidArgument(f"actions: expected a frozenset of action names, got {show(actions)}")
        self.role = role
        self.kernel = kernel
        self.grid = grid
        self.block = block
        self.actions = actions
        self.name = kernel.name
        kernel.executable(self.device)  # compile and load now: a bad kernel fails before any submission

    def launch(self, stream: Stream, memory: Buffer) -> Completion:
        return stream.dispatch(self.kernel, self.grid, [memory], block=self.block)


# -- startup ------------------------------------------------------------------------------


_DIRECTIONS = (("gpu", "npu"), ("npu", "gpu"), ("host", "gpu"), ("gpu", "host"))


class ResidentStartup:
    """The attachment of a resident exchange: coherent memory chosen with
    ``Fabric.allocation_profiles([gpu, npu], coherent=True)``, holding the control
    block and rings of ``layout``, with every directional memory contract checked
    (GPU->NPU, NPU->GPU, host->GPU, GPU->host: reachable, coherent, 8-byte atomics
    at system scope). Nothing is submitted here.

    ``start_timeout``: how long a participant waits for RUN; ``idle_timeout``: how long
    a running participant goes without progress before it stops (both on the
    participant's own clock); ``spin``: how long after its last progress a participant
    (and the host's send/receive) polls without backing off -- latency against CPU
    time given back."""

    def __init__(self, gpu: Device, npu: Device, layout: P.Layout, *, fabric: Fabric | None = None,
                 budget: MemoryBudget | None = None, start_timeout: float = 10.0, idle_timeout: float = 10.0,
                 spin: float = 50e-6) -> None:
        from ..budget import MemoryBudget

        self.gpu = _device_arg("gpu", gpu)
        self.npu = _device_arg("npu", npu)
        if gpu is npu:
            raise InvalidArgument("npu: the two participants need two devices, got the same device twice")
        if not isinstance(layout, P.Layout):
            raise InvalidArgument(f"layout: expected a resident Layout, got {type(layout).__name__}")
        if fabric is not None and not isinstance(fabric, Fabric):
            raise InvalidArgument(f"fabric: expected a Fabric or None, got {type(fabric).__name__}")
        if budget is not None and not isinstance(budget, MemoryBudget):
            raise InvalidArgument(f"budget: expected a MemoryBudget or None, got {type(budget).__name__}")
        self._start_ns = P._seconds("start_timeout", start_timeout)
        self._idle_ns = P._seconds("idle_timeout", idle_timeout)
        if isinstance(spin, bool) or not isinstance(spin, (int, float)) or not 0 <= spin <= 1:
            raise InvalidArgument(f"spin: expected seconds in [0, 1], got {show(spin)}")
        self.spin_ns = int(spin * 1e9)
        self.layout = layout
        self.fabric = Fabric() if fabric is None else fabric
        profiles = [p for p in self.fabric.allocation_profiles([gpu, npu], coherent=True) if p.host == "coherent"]
        if not profiles:
            raise Unsupported(f"resident exchange: no coherent, host-visible memory reaches both {gpu.name} and {npu.name} "
                              "(Fabric.allocation_profiles(devices, coherent=True) is empty)")
        self.profile = profiles[0]
        self.memory: PlacedBuffer = self.profile.allocate(layout.nbytes, budget=budget, fabric=self.fabric)
        try:
            agents: dict[str, Any] = {"gpu": gpu, "npu": npu, "host": HOST}
            self.contracts: dict[tuple[str, str], Visibility] = {}
            for p, c in _DIRECTIONS:
                vis = visibility(self.memory.buffer, agents[p], agents[c])
                problem = ("unreachable: " + vis.note if not vis.reachable else "not coherent" if not vis.coherent
                           else f"8-byte atomics have {vis.atomic_scopes.get(8)!r} scope, not 'system'"
                           if vis.atomic_scopes.get(8) != "system" else "")
                if problem:
                    raise Unsupported(f"resident exchange: the {p} -> {c} memory contract fails: {problem}")
                self.contracts[(p, c)] = vis
            self.session_id = next(_session_ids)
            host = backing_of(self.memory.buffer.allocation).native.host_view()
            if host is None:
                raise Unsupported("resident exchange: the coherent profile's memory has no host view")
            self._host: np.ndarray = host[: layout.nbytes]
            layout.initialize(self._host, start_timeout_ns=self._start_ns, idle_timeout_ns=self._idle_ns, session=self.session_id,
                              spin_ns=self.spin_ns)
        except BaseException:
            self.memory.close()
            raise
        self.owner: ResidentSession | None = None
        self.closed = False

    def required_actions(self, role: str) -> frozenset[str]:
        """The release actions ``role`` must perform as a producer and the acquire actions
        it must perform as a consumer, from the visibility of every direction it is in."""
        out: set[str] = set()
        for (p, c), vis in self.contracts.items():
            if p == role:
                out.update(vis.release)
            if c == role:
                out.update(vis.acquire)
        return frozenset(out)

    def check(self, participant: Participant) -> None:
        """Check ``participant``'s directional contracts (raises Unsupported)."""
        if not isinstance(participant, Participant):
            raise InvalidArgument(f"participant: expected a resident Participant, got {type(participant).__name__}")
        device = self.gpu if participant.role == "gpu" else self.npu
        if participant.device is not device:
            raise InvalidArgument(f"{participant.role} participant: runs on {participant.device.name}, the startup's "
                                  f"{participant.role} device is {device.name}")
        missing = self.required_actions(participant.role) - participant.actions
        if missing:
            raise Unsupported(f"{participant.role} participant {participant.name!r} does not perform {', '.join(sorted(missing))}, "
                              f"which the {participant.role} side's memory contracts require")
        missing = self.required_actions("host") - HOST_ACTIONS
        if missing:
            raise Unsupported(f"resident exchange: the host side cannot perform {', '.join(sorted(missing))}")

    def close(self) -> None:
        """Free the attachment (only when no session owns it, or its session released it)."""
        if self.owner is not None and not self.owner._releasing:
            raise InvalidArgument("startup: its session still owns the memory; close the session")
        if not self.closed:
            self.closed = True
            self.memory.close()


# -- sessions -----------------------------------------------------------------------------------


#: Sessions with a participant submitted and not yet released: held here so a session
#: dropped without close() stays owned (never freed under a running participant) and
#: is sent ABORT at interpreter exit.
_live: set[ResidentSession] = set()
_quarantine: set[ResidentSession] = set()
_registry_lock = threading.Lock()
_atexit_registered = False


def quarantined_sessions() -> list[ResidentSession]:
    """Sessions whose teardown is not proven yet (their memory and queues are held)."""
    with _registry_lock:
        return list(_quarantine)


def _abort_all_at_exit() -> None:
    sessions = list(_live)
    for s in sessions:
        s._command(P.ABORT)
    deadline = time.monotonic() + 2.0
    for s in sessions:
        for c in s._completions():
            with contextlib.suppress(Exception):  # best effort at exit
                c.wait_quiet(max(0.0, deadline - time.monotonic()))


class ResidentSession:
    """A resident GPU-NPU exchange: owns ``startup``, a GPU participant and an NPU
    participant (see the module docstring for the lifecycle).

    The host is the request ring's only producer and the response ring's only
    consumer: call :meth:`send` from one thread and :meth:`receive` from one thread
    (the same one or another)."""

    def __init__(self, startup: ResidentStartup, gpu: Participant, npu: Participant) -> None:
        global _atexit_registered
        if not isinstance(startup, ResidentStartup):
            raise InvalidArgument(f"startup: expected a ResidentStartup, got {type(startup).__name__}")
        if startup.closed or startup.owner is not None:
            raise InvalidArgument("startup: already owned by a session or closed")
        for name, part, role in (("gpu", gpu, "gpu"), ("npu", npu, "npu")):
            if not isinstance(part, Participant) or part.role != role:
                raise InvalidArgument(f"{name}: expected a {role} Participant, got {show(getattr(part, 'role', type(part).__name__))}")
            startup.check(part)
        prepared: list[Participant] = []
        try:
            for part in (gpu, npu):
                part.prepare(startup.memory.on(part.device))
                prepared.append(part)
        except BaseException:
            for part in prepared:
                part.close()
            raise
        self.startup = startup
        self.layout = startup.layout
        self.participants = {"gpu": gpu, "npu": npu}
        self._memory = startup.memory
        self._host = startup._host
        self._words = self._host[: P.CONTROL_BYTES].view(np.int64)
        self._lock = threading.Lock()
        self._streams: dict[str, Stream] = {}
        self._launched: dict[str, Completion] = {}
        self.started = False
        self.aborted = False
        self.closed = False
        self.released = False
        self._releasing = False
        self.quarantined = False
        self._req_head = 0
        self._rsp_tail = 0
        startup.owner = self
        with _registry_lock:
            if not _atexit_registered:
                atexit.register(_abort_all_at_exit)
                _atexit_registered = True

    def __repr__(self) -> str:
        s = self.states()
        return f"<ResidentSession {self.startup.session_id} gpu {s['gpu']} npu {s['npu']} command {s['command']}>"

    # -- state -----------------------------------------------------------------------------

    def states(self) -> dict[str, str]:
        """Command and participant states, as names."""
        w = self._words
        return {"command": P.COMMAND_NAMES.get(int(w[P.W_COMMAND]), "?"),
                "gpu": P.STATE_NAMES.get(int(w[P.W_GPU_STATE]), "?"), "npu": P.STATE_NAMES.get(int(w[P.W_NPU_STATE]), "?"),
                "gpu_reason": P.REASON_NAMES.get(int(w[P.W_GPU_REASON]), "?"),
                "npu_reason": P.REASON_NAMES.get(int(w[P.W_NPU_REASON]), "?")}

    def counts(self) -> dict[str, int]:
        """Sequence numbers: requests sent, responses received, payloads each side processed."""
        w = self._words
        return {"requests": int(w[P.W_REQ_HEAD]), "responses": int(w[P.W_RSP_TAIL]),
                "gpu": int(w[P.W_GPU_COUNT]), "npu": int(w[P.W_NPU_COUNT])}

    @property
    def accepted(self) -> frozenset[str]:
        """Roles whose participant was submitted and accepted by its queue."""
        return frozenset(self._launched)

    @property
    def owned(self) -> bool:
        """The session still owns its memory and queues (until released)."""
        return not self.released

    def _state(self, role: str) -> int:
        return int(self._words[P.W_GPU_STATE if role == "gpu" else P.W_NPU_STATE])

    def _completions(self) -> list[Completion]:
        return list(self._launched.values())

    def _settled(self) -> bool:
        """Every launched participant returned (it writes its terminal state before it
        returns; a launch that failed is settled too)."""
        return all(done.refresh_quiet() for done in self._launched.values())

    def _check_usable(self, what: str) -> None:
        if self.closed:
            raise InvalidArgument(f"{what}: the session is closed")
        if self.aborted:
            raise InvalidArgument(f"{what}: the session was aborted")

    def _command(self, value: int) -> None:
        self._words[P.W_COMMAND] = value  # an ordered 8-byte store after everything written before it

    # -- submission and start --------------------------------------------------------------------

    def _submit(self, role: str) -> Completion:
        with self._lock:
            self._check_usable(f"submit_{role}")
            if role in self._launched:
                raise InvalidArgument(f"submit_{role}: the {role} participant was already submitted")
            part = self.participants[role]
            stream = self._streams.get(role)
            if stream is None:
                stream = self._streams[role] = _reserved_stream(part.device, "npu" if part.device.info.kind == "npu" else "compute")
            with _registry_lock:
                _live.add(self)
            done = part.launch(stream, self._memory.on(part.device))
            stream.slot.flush()
            self._launched[role] = done
            return done

    def submit_gpu(self) -> Completion:
        """Launch the GPU participant on a queue reserved for the session; it waits for RUN."""
        return self._submit("gpu")

    def submit_npu(self) -> Completion:
        """Launch the NPU participant on a queue reserved for the session; it waits for RUN."""
        return self._submit("npu")

    def start(self) -> None:
        """Publish RUN. Only after both participants are accepted."""
        with self._lock:
            self._check_usable("start")
            if self.started:
                raise InvalidArgument("start: the session is already running")
            missing = {"gpu", "npu"} - set(self._launched)
            if missing:
                raise InvalidArgument(f"start: the {' and '.join(sorted(missing))} participant is not accepted yet; submit it first")
            self.started = True
            self._command(P.RUN)

    def abort(self) -> None:
        """Before RUN: publish ABORT; submitted participants leave without running work."""
        with self._lock:
            if self.closed:
                raise InvalidArgument("abort: the session is closed")
            if self.started:
                raise InvalidArgument("abort: the session is running (after RUN, running work is not cancelled: use stop() or close())")
            self.aborted = True
            self._command(P.ABORT)

    # -- payloads -------------------------------------------------------------------------------

    def _wait_for(self, what: str, ready: Callable[[], bool], timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = P.Backoff(spin_ns=self.startup.spin_ns)
        while not ready():
            gpu = self._state("gpu")
            if gpu in P.TERMINAL:
                raise DeviceError(f"{what}: the GPU participant ended ({self._describe('gpu')})")
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(f"{what}: not ready after {timeout} s (nothing was cancelled)")
            backoff.pause()

    def send(self, payload: Any, *, timeout: float | None = None) -> int:
        """Publish one request (at most ``layout.request_bytes`` bytes; the rest of the
        slot is zeroed); returns its sequence number. Waits while the ring is full."""
        timeout = _timeout_arg("timeout", timeout)
        try:
            data = np.frombuffer(memoryview(payload).cast("B"), np.uint8)
        except (TypeError, ValueError, BufferError):
            raise InvalidArgument(f"payload: expected a bytes-like object or contiguous array, got {type(payload).__name__}") from None
        if data.nbytes > self.layout.request_bytes:
            raise InvalidArgument(f"payload: {data.nbytes} bytes exceeds the request slot ({self.layout.request_bytes} bytes)")
        self._check_usable("send")
        if not self.started:
            raise InvalidArgument("send: the session is not started")
        if self._state("gpu") in P.TERMINAL:
            raise DeviceError(f"send: the GPU participant ended ({self._describe('gpu')})")
        w, seq = self._words, self._req_head
        slots = self.layout.slots
        self._wait_for("send", lambda: seq - int(w[P.W_REQ_TAIL]) < slots, timeout)
        dst = P.slot(self._host, w, 0, seq, self.layout.request_bytes)
        dst[: data.nbytes] = data
        dst[data.nbytes :] = 0
        self._req_head = seq + 1
        w[P.W_REQ_HEAD] = seq + 1  # release: after the slot's bytes
        return seq

    def receive(self, *, timeout: float | None = None) -> np.ndarray:
        """The next response (a copy of its ``layout.response_bytes`` bytes), in order."""
        timeout = _timeout_arg("timeout", timeout)
        if self.closed:
            raise InvalidArgument("receive: the session is closed")
        w, seq = self._words, self._rsp_tail
        if seq >= self._req_head:
            raise InvalidArgument(f"receive: every request sent ({self._req_head}) was received")
        self._wait_for("receive", lambda: int(w[P.W_RSP_HEAD]) > seq, timeout)
        out = P.slot(self._host, w, 3, seq, self.layout.response_bytes).copy()
        self._rsp_tail = seq + 1
        w[P.W_RSP_TAIL] = seq + 1  # release: the slot is read
        return out

    # -- ending ---------------------------------------------------------------------------------

    def _describe(self, role: str) -> str:
        s = self.states()
        reason = s[f"{role}_reason"]
        return s[role] + (f": {reason}" if reason else "")

    def wait(self, timeout: float | None = None) -> dict[str, str]:
        """Wait until every launched participant reports a terminal state and its launch
        completed; returns :meth:`states`. ``Timeout`` cancels nothing."""
        timeout = _timeout_arg("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = P.Backoff(1e-3)
        while not self._settled():
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(f"resident session: participants not done after {timeout} s "
                              f"(gpu {self._describe('gpu')}, npu {self._describe('npu')}); nothing was cancelled")
            backoff.pause()
        for role, done in self._launched.items():
            failure = done.failed
            if failure is not None:
                raise DeviceError(f"resident session: the {role} participant failed: {failure}") from failure
        return self.states()

    def stop(self, timeout: float | None = None) -> dict[str, int]:
        """Publish STOP: the participants drain what was sent and report DONE. Raises
        DeviceError unless both did; Timeout (nothing cancelled) after ``timeout``."""
        with self._lock:
            self._check_usable("stop")
            if not self.started:
                raise InvalidArgument("stop: the session is not started (before RUN, use abort())")
            self._command(P.STOP)
        states = self.wait(timeout)
        if states["gpu"] != "DONE" or states["npu"] != "DONE":
            raise DeviceError(f"resident session: gpu {self._describe('gpu')}, npu {self._describe('npu')}")
        return self.counts()

    def close(self, timeout: float = 2.0) -> bool:
        """Stop the participants (STOP, then ABORT after ``timeout``) and release the
        memory and queues; returns False when teardown could not be proven: the
        session is then quarantined until its launches complete."""
        timeout = _timeout_arg("timeout", timeout) or 0.0
        with self._lock:
            if self.closed:
                return self.released
            self.closed = True
            if self.started and int(self._words[P.W_COMMAND]) == P.RUN:
                self._command(P.STOP)
            elif not self.started:
                self._command(P.ABORT)
        try:
            self.wait(timeout)
        except Timeout:
            self._command(P.ABORT)  # the host can always stop them
            try:
                self.wait(timeout)
            except Timeout:
                pass
            except DeviceError:
                pass
        except DeviceError:
            pass
        if self._settled():
            self._release()
            return True
        self._enter_quarantine()
        return False

    def _enter_quarantine(self) -> None:
        self.quarantined = True
        backing_of(self._memory.buffer.allocation).quarantined += 1
        with _registry_lock:
            _quarantine.add(self)
        pending = [c for c in self._launched.values()]
        for c in pending:
            c.add_done_callback(lambda _c: self._leave_quarantine())
        self._leave_quarantine()

    def _leave_quarantine(self) -> None:
        # from a completion's notifier thread, or now: once, when every launch completed
        with self._lock:
            if not self.quarantined or not all(c.refresh_quiet() for c in self._launched.values()):
                return
            self.quarantined = False
            backing_of(self._memory.buffer.allocation).quarantined -= 1
        self._release()
        with _registry_lock:
            _quarantine.discard(self)

    def _release(self) -> None:
        """Free everything the session owns; ``released`` (``owned`` False) only after."""
        with self._lock:
            if self._releasing:
                return
            self._releasing = True
        for part in self.participants.values():
            part.close()
        for stream in self._streams.values():
            stream.slot.close()
        self._streams.clear()
        self.startup.close()
        self.released = True
        with _registry_lock:
            _live.discard(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reserved_stream(device: Device, family: str) -> Stream:
    """A stream on a native queue of its own (not shared round-robin with other streams):
    a resident participant occupies its queue for the session's life."""
    from ..device import QueueSlot
    from ..stream import Stream

    fam = device.info.family(family)
    if fam is None:
        raise Unsupported(f"resident exchange: {device.name} has no {family!r} queues")
    return Stream(device, QueueSlot(device, family, fam.count - 1))


__all__ = ["HOST_ACTIONS", "SYSTEM_SCOPE", "KernelParticipant", "Participant", "ResidentSession", "ResidentStartup",
           "quarantined_sessions"]
