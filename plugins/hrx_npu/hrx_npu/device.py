"""The NPU programming model on any NPU engine: NpuDevice, NpuProgram, Invocation.

    npu = hrx_npu.device()                                   # best NPU engine (npu-host here)
    art = hrx.compile(C_SOURCE, target="npu-host-c", entry="scale")
    prog = npu.load_artifact(art, columns=2, contract=KernelContract([BufferContract.read_write(4096)]))
    inv = prog.invocation([x])                               # immutable bindings, checked now
    inv.launch().wait()                                      # or: g.compute(..., lambda r: inv.record(r), lane="npu")

Everything here is policy written once: contract checks, column accounting, the
pending limit's blocking and non-blocking modes. Engines only load programs on the
column range chosen here and run them (:mod:`hrx_npu.seam`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Self

import attrs

import hrx_core as hrx
from hrx_core.buffer import Binding
from hrx_core.completion import Completion
from hrx_core.device import Device
from hrx_core.engine import Artifact
from hrx_core.errors import EngineNotFound, InvalidArgument, Unsupported
from hrx_core.graph import Graph, Node
from hrx_core.budget import MemoryBudget
from hrx_core.kernel import Kernel, code_bytes
from hrx_core.stream import Stream

from .columns import ColumnMap
from .contract import KernelContract
from .errors import ContractViolation
from .pending import DEFAULT_LIMIT
from .seam import NpuEngine, NpuEngineDevice, NpuExecutable

ENV_NPU_ENGINE = "HRX_NPU_ENGINE"


class NpuDevice(Device):
    """An hrx :class:`~hrx_core.Device` of an NPU engine, with the NPU programming
    model on top. Use it as the ``npu=`` device of an execution Runtime."""

    native: NpuEngineDevice

    def __init__(self, engine: Any, native: NpuEngineDevice) -> None:
        if not isinstance(native, NpuEngineDevice):
            raise InvalidArgument(f"native: expected an NPU engine device, got {type(native).__name__}")
        super().__init__(engine, native)
        props = self.info.properties
        self.column_map = ColumnMap(int(props.get("columns", 1)))
        self.max_pending_invocations = int(props.get("max_pending_invocations", DEFAULT_LIMIT))
        self.column_memory_bytes = int(props.get("column_memory_bytes", 0))
        self._default: Stream | None = None
        self._programs_lock = threading.Lock()
        self.programs: list[NpuProgram] = []

    def __repr__(self) -> str:
        return f"<hrx_npu.NpuDevice {self.name} {self.column_map.columns} columns, {len(self.programs)} programs>"

    # -- queues -------------------------------------------------------------------

    def stream(self, family: str = "npu") -> Stream:
        """A new stream on the next NPU queue (round-robin)."""
        return super().stream(family)

    def default_stream(self) -> Stream:
        """The stream :meth:`Invocation.launch` uses when given none."""
        with self._programs_lock:
            if self._default is None:
                self._default = self.stream()
            return self._default

    @property
    def note(self) -> str:
        """What this NPU is, in words (a host reference or a simulation says so)."""
        props = self.info.properties
        return str(props.get("reference") or props.get("note") or self.info.name)

    # -- columns -----------------------------------------------------------------

    @property
    def columns(self) -> int:
        """Columns of the array."""
        return self.column_map.columns

    @property
    def columns_free(self) -> int:
        """Columns no loaded program occupies."""
        return self.column_map.free()

    # -- programs ------------------------------------------------------------------

    def load_artifact(self, artifact: Artifact, *, columns: int, contract: KernelContract, name: str | None = None,
                      budget: Any = None) -> NpuProgram:
        """Load ``artifact`` as a program occupying ``columns`` array columns under
        ``contract``. Raises ColumnError, BindingListError, AlignmentError or
        ContractViolation before anything is loaded.

        ``budget`` (a MemoryBudget) is charged for the program's instruction buffer
        (its image) before it is loaded, until the program closes; BudgetExceeded
        leaves nothing loaded."""
        if not isinstance(artifact, Artifact):
            raise InvalidArgument(f"artifact: expected an hrx Artifact (from hrx_core.compile), got {type(artifact).__name__}")
        if artifact.target not in self.info.targets:
            raise Unsupported(f"artifact: target {artifact.target!r}; {self.name} runs {', '.join(self.info.targets)}")
        if not isinstance(contract, KernelContract):
            raise ContractViolation(f"contract: expected a KernelContract, got {type(contract).__name__}")
        count = self.column_map.check(columns)
        if name is not None and (not isinstance(name, str) or not name):
            raise InvalidArgument(f"name: expected a nonempty str or None, got {type(name).__name__}")
        if budget is not None and not isinstance(budget, MemoryBudget):
            raise InvalidArgument(f"budget: expected a MemoryBudget or None, got {type(budget).__name__}")
        contract.check_image(self.info.limits.alignment)
        if contract.scratch_bytes > self.column_memory_bytes:
            raise ContractViolation(
                f"contract: scratch_bytes={contract.scratch_bytes} exceeds the {self.column_memory_bytes} bytes of tile memory per column"
            )
        label = name or artifact.entry or "program"
        charge = budget.charge(code_bytes(artifact.code), f"instructions of NPU program {label!r}") if budget is not None else None
        ctx, start, count = self.column_map.reserve(count)
        try:
            exe = self.native.load_program(
                artifact, contract, context=ctx, start=start, columns=count, max_pending=self.max_pending_invocations
            )
        except BaseException:
            self.column_map.release(ctx)
            if charge is not None:
                charge.release()
            raise
        program = NpuProgram(self, exe, artifact, contract, label)
        program._charge = charge
        with self._programs_lock:
            self.programs.append(program)
        return program

    def _unloaded(self, program: NpuProgram) -> None:
        self.column_map.release(program.context)
        with self._programs_lock:
            if program in self.programs:
                self.programs.remove(program)

    def npu_stats(self) -> dict[str, Any]:
        """Programs, columns in use, per-column occupancy and engine counters
        (invocations, context switches, state resets, imports)."""
        out: dict[str, Any] = {
            "programs": len(self.programs),
            "columns": self.columns,
            "columns_in_use": self.column_map.in_use(),
            "occupancy": self.column_map.occupancy(),
            "allocations": self.stats.allocations,
        }
        out.update(self.native.counters())
        return out


class _ProgramKernel(Kernel):
    """The hrx Kernel face of a loaded program, so streams and graphs dispatch it."""

    def __init__(self, program: NpuProgram, artifact: Artifact) -> None:
        code = artifact.code
        if not (callable(code) or isinstance(code, (str, bytes))):
            code = getattr(code, "image", artifact.key)  # an .xdna image payload: its bytes
        super().__init__(program.name, buffers=program.contract.accesses, sources={artifact.target: code})
        self._device = program.device
        self._executables[id(program.device)] = program.executable

    def executable(self, device: Device) -> Any:
        if device is not self._device:
            raise Unsupported(f"NPU program {self.name!r} is loaded on {self._device.name}, not {device.name}")
        return self._executables[id(device)]


class NpuProgram:
    """A program loaded into a hardware context: its contract, its columns and its
    pending-invocation limit."""

    def __init__(self, device: NpuDevice, executable: NpuExecutable, artifact: Artifact, contract: KernelContract, name: str) -> None:
        self.device = device
        self.executable = executable
        self.contract = contract
        self.name = name
        self.target = artifact.target
        self.context = executable.context
        self.start_column = executable.start
        self.columns = executable.columns
        self.kernel: Kernel = _ProgramKernel(self, artifact)
        self._charge: Any = None  # the budget charge for the instruction buffer
        self.closed = False

    def __repr__(self) -> str:
        cols = f"columns {self.start_column}..{self.start_column + self.columns - 1}"
        return f"<hrx_npu.NpuProgram {self.name!r} ({self.target}) {cols}, {self.pending} pending>"

    @property
    def pending(self) -> int:
        """Invocations launched and not finished."""
        return self.executable.pending.pending

    @property
    def max_pending(self) -> int:
        return self.executable.pending.limit

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"NPU program {self.name!r} is closed")

    def invocation(self, bindings: Sequence[Any]) -> Invocation:
        """An invocation with immutable bindings, checked against the contract now."""
        self._check_open()
        return Invocation(self, self.contract.check_bindings(bindings, self.device))

    def invoke(self, bindings: Sequence[Any], *, stream: Stream | None = None, block: bool = True, timeout: float | None = None) -> Completion:
        """Check and launch one invocation (see :meth:`Invocation.launch`)."""
        return self.invocation(bindings).launch(stream, block=block, timeout=timeout)

    def record(self, graph: Graph, bindings: Sequence[Any]) -> Node:
        """Record one invocation in ``graph`` (an access graph on an NPU stream, e.g.
        the one a Runtime passes to ``graph.compute(..., lane="npu")``)."""
        return self.invocation(bindings).record(graph)

    def wrap_transaction(self, bindings: Sequence[Any], *, prefix: Sequence[Any] = (), suffix: Sequence[Any] = (),
                         retain: Sequence[Any] = (), command_bytes: int = 0) -> Any:
        """One invocation with ``bindings`` wrapped with prefix/suffix records (invocations
        of other programs on disjoint bytes), ``retain``-ed buffers and ``command_bytes``
        of command storage held until the transaction closes (see :mod:`hrx_npu.transaction`)."""
        from .transaction import Transaction

        return Transaction(self.invocation(bindings), prefix=prefix, suffix=suffix, retain=retain, command_bytes=command_bytes)

    def close(self) -> None:
        """Free the program's columns. Pending invocations still finish."""
        if not self.closed:
            self.closed = True
            # recorded graphs still hold the executable: every later launch is refused
            self.executable.unloaded = True
            self.device._unloaded(self)
            self.device.native.unload_program(self.executable)
            charge, self._charge = self._charge, None
            if charge is not None:
                charge.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@attrs.frozen
class Invocation:
    """One set of bindings for a program, fixed at creation."""

    program: NpuProgram
    bindings: tuple[Binding, ...]

    def launch(self, stream: Stream | None = None, *, block: bool = True, timeout: float | None = None) -> Completion:
        """Launch on ``stream`` (default: the device's default stream). With 128
        invocations of the program pending, waits for one to finish -- or raises
        QueueFull with ``block=False`` (Timeout after ``timeout`` seconds) before
        anything is encoded."""
        program = self.program
        program._check_open()
        stream = program.device.default_stream() if stream is None else stream
        if not isinstance(stream, Stream) or stream.device is not program.device:
            raise InvalidArgument(f"stream: expected a stream of {program.device.name}")
        with program.executable.pending.mode(block=block, timeout=timeout):
            return stream.dispatch(program.kernel, 1, list(self.bindings))

    def record(self, graph: Graph) -> Node:
        """Record this invocation as a node of ``graph``."""
        self.program._check_open()
        if not isinstance(graph, Graph) or graph.device is not self.program.device:
            raise InvalidArgument(f"graph: expected a graph recorded on {self.program.device.name}")
        return graph.dispatch(self.program.kernel, 1, list(self.bindings))


# -- device selection ------------------------------------------------------------------

_devices: dict[tuple[Any, ...], NpuDevice] = {}
_devices_lock = threading.Lock()


def npu_engines() -> dict[str, NpuEngine]:
    """Installed NPU engines by name."""
    return {n: e for n, e in hrx.engines().items() if isinstance(e, NpuEngine)}


def best_npu_engine() -> str:
    """HRX_NPU_ENGINE, else the highest-priority available NPU engine that may be a
    default (an engine on simulated hardware, like xdna on the simulated Strix Halo,
    is used only when named)."""
    forced = os.environ.get(ENV_NPU_ENGINE, "").strip()
    if forced:
        return forced
    status = hrx.engine_status()
    ranked = sorted((e for n, e in npu_engines().items() if status[n].available and status[n].default), key=lambda e: -e.priority)
    if not ranked:
        raise EngineNotFound("no NPU engine is available as a default (install hrx-npu for npu-host; name a simulated one)")
    return ranked[0].name


def open_device(engine: str | None = None, index: int = 0, **options: Any) -> NpuDevice:
    """A new NPU device (its own array, queues and stats)."""
    name = best_npu_engine() if engine is None else engine
    eng = npu_engines().get(name)
    if eng is None:
        raise EngineNotFound(f"NPU engine {name!r} is not installed; NPU engines: {', '.join(sorted(npu_engines())) or 'none'}")
    # an engine whose availability depends on its options (xdna's provider=) probes those
    probe_for = getattr(eng, "probe_for", None)
    status = probe_for(options) if probe_for is not None else eng.probe()
    if not status.available:
        raise EngineNotFound(f"NPU engine {name!r} is unavailable: {status.reason}")
    return NpuDevice(eng, eng.open_device(index, **options))


def device(engine: str | None = None, index: int = 0, **options: Any) -> NpuDevice:
    """The NPU device ``index`` of ``engine`` (default: the best NPU engine), cached
    per (engine, index, options) like :func:`hrx_core.device`."""
    name = best_npu_engine() if engine is None else engine
    key = (name, index, tuple(sorted(options.items())))
    with _devices_lock:
        dev = _devices.get(key)
        if dev is None or dev.closed:
            dev = _devices[key] = open_device(name, index, **options)
        return dev


__all__ = ["Invocation", "NpuDevice", "NpuProgram", "best_npu_engine", "device", "npu_engines", "open_device"]
