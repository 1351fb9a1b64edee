"""The npu-host engine and its device."""

from __future__ import annotations

import os
import threading
from typing import Any

from hrx_core.engine import (
    Artifact,
    DeviceInfo,
    EngineStatus,
    Executable,
    Limits,
    NativeBuffer,
    NativeQueue,
    QueueFamily,
)
from hrx_core.errors import InvalidArgument, show
from hrx_core.host.engine import DEFAULT_MAX_TRANSFER, HostDevice

from ..compiler import TARGET as C_TARGET
from ..contract import KernelContract
from ..pending import DEFAULT_LIMIT
from ..seam import NpuEngine, NpuEngineDevice, NpuExecutable
from .array import HostArray
from .program import HostProgram, NpuImage
from .queue import NpuHostQueue

#: The reference hardware (XDNA NPU5): 8 columns; 512 KiB of memory-tile storage each.
DEFAULT_COLUMNS = 8
DEFAULT_COLUMN_MEMORY = 512 << 10
ALIGNMENT = 256
REFERENCE_NOTE = "host reference of the NPU programming model on CPU threads -- not NPU hardware"


def _positive(name: str, value: Any, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise InvalidArgument(f"{name}: expected an int in 1..{limit}, got {show(value)}")
    return value


#: Bounds of the simulated array (far above the reference hardware's 8 columns).
MAX_COLUMNS = 64
MAX_COLUMN_MEMORY = 64 << 20


class NpuHostDevice(HostDevice, NpuEngineDevice):
    """An NPU device simulated on the host: host memory, worker-thread queues
    (the host engine's), an array of columns run by CPU threads."""

    def __init__(
        self,
        index: int,
        *,
        columns: int = DEFAULT_COLUMNS,
        column_memory_bytes: int = DEFAULT_COLUMN_MEMORY,
        max_pending_invocations: int = DEFAULT_LIMIT,
        npu_queues: int = 2,
        max_transfer_bytes: int = DEFAULT_MAX_TRANSFER,
        jitter_us: int = 0,
    ) -> None:
        _positive("columns", columns, MAX_COLUMNS)
        _positive("column_memory_bytes", column_memory_bytes, MAX_COLUMN_MEMORY)
        _positive("max_pending_invocations", max_pending_invocations, 1 << 16)
        _positive("npu_queues", npu_queues, 64)
        super().__init__(index, max_transfer_bytes=max_transfer_bytes, jitter_us=jitter_us)
        self.array = HostArray(columns, column_memory_bytes)
        self._imports_lock = threading.Lock()
        self.imports = 0
        self.info = DeviceInfo(
            engine="npu-host",
            index=index,
            name=f"npu-host reference NPU ({columns} columns on {os.cpu_count()} CPU threads)",
            kind="npu",
            queue_families=(QueueFamily("npu", npu_queues),),
            limits=Limits(max_transfer_bytes=max_transfer_bytes, alignment=ALIGNMENT, max_grid=(1, 1, 1), max_block=(1, 1, 1), max_threads_per_block=1),
            targets=(C_TARGET, "host"),
            memory_bytes=self.info.memory_bytes,
            coherent_shared_memory=True,
            host_mappable=True,
            native_graphs=False,
            dlpack_device_type=1,
            imports_host_memory=True,
            properties={
                "columns": columns,
                "column_memory_bytes": column_memory_bytes,
                "max_pending_invocations": max_pending_invocations,
                "reference": REFERENCE_NOTE,
            },
        )

    def create_queue(self, family: str, index: int) -> NativeQueue:
        return NpuHostQueue(self, family, index)

    def load_executable(self, artifact: Artifact) -> Executable:
        if artifact.target not in self.info.targets:
            raise InvalidArgument(f"npu-host loads {', '.join(self.info.targets)} artifacts, got target {artifact.target!r}")
        return NpuImage(artifact)

    def load_program(
        self, artifact: Artifact, contract: KernelContract, *, context: int, start: int, columns: int, max_pending: int
    ) -> NpuExecutable:
        return HostProgram(self.array, artifact, contract, context=context, start=start, columns=columns, max_pending=max_pending)

    def import_buffer(self, other: NativeBuffer) -> NativeBuffer | None:
        imported = super().import_buffer(other)
        if imported is None:
            return None  # device-only memory of another engine: not reachable from the host
        with self._imports_lock:
            self.imports += 1
        return imported

    def build_graph(self, nodes):  # type: ignore[no-untyped-def]
        from hrx_core.errors import Unsupported

        raise Unsupported("npu-host has no native graphs")

    def counters(self) -> dict[str, Any]:
        a = self.array
        return {"invocations": a.invocations, "context_switches": a.context_switches,
                "state_resets": a.state_resets, "imports": self.imports}


class NpuHostEngine(NpuEngine):
    name = "npu-host"
    #: never the default device of ``hrx.device()``: it is an NPU, not a GPU
    priority = -10

    def probe(self) -> EngineStatus:
        return EngineStatus(True, REFERENCE_NOTE, 1)

    def open_device(self, index: int, **options: Any) -> NpuHostDevice:
        if index != 0:
            raise InvalidArgument(f"index: the npu-host engine has one device, asked for {index}")
        known = {"columns", "column_memory_bytes", "max_pending_invocations", "npu_queues", "max_transfer_bytes", "jitter_us"}
        unknown = set(options) - known
        if unknown:
            raise InvalidArgument(f"options: unknown npu-host options {sorted(unknown)}; known: {sorted(known)}")
        return NpuHostDevice(index, **options)

    def prepare(self) -> list[str]:
        from ..compiler import c_compiler

        cc = c_compiler()
        note = f"C programs build with {cc}" if cc else "no C compiler on PATH: numpy programs only"
        return [f"npu-host: {REFERENCE_NOTE}; {note}"]
