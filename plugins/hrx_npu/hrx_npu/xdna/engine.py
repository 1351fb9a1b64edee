"""The ``xdna`` engine: the Strix Halo NPU5 through libamdf's XDNA extension.

The provider (:mod:`hrx_amdf`) is libamdf on a Strix Halo, or the simulated Strix
Halo when ``HRX_AMDF_PROVIDER=fake`` (or ``open_device("xdna", provider="fake")``).
On the simulation the engine is available but never a default: it is used only
when named (``HRX_NPU_ENGINE=xdna``, ``hrx_npu.device("xdna")``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from hrx_core.engine import Artifact, DeviceInfo, EngineStatus, Executable, Limits, NativeBuffer, NativeQueue, QueueFamily, Timeline
from hrx_core.errors import InvalidArgument, Unsupported
from hrx_core.host.timeline import HostTimeline

from ..compiler import TARGET as C_TARGET
from ..contract import KernelContract
from ..pending import DEFAULT_LIMIT
from ..seam import NpuEngine, NpuEngineDevice, NpuExecutable
from .artifact import TARGET, image_of
from .image import XdnaImage, read_image
from .memory import HostArrayBuffer, XdnaBuffer
from .qualify import DeviceLimits, qualify

SIM_NOTE = ("simulated NPU5 of the simulated Strix Halo (HRX_AMDF_PROVIDER=fake): a test fixture that checks the XDNA "
            "commands this engine writes and runs programs through their host references -- not NPU hardware")
HARDWARE_NOTE = "AMD NPU5 through libamdf -- nothing in HRX for Python has run on an NPU yet; see docs/npu.md"
#: AIE2P memory tiles: 512 KiB per column (what a contract's scratch may ask).
COLUMN_MEMORY_BYTES = 512 << 10
ALIGNMENT = 256
MAX_TRANSFER = 1 << 30
HOST_TARGETS = (C_TARGET, "host")


def _provider(spec: Any) -> Any:
    from hrx_amdf.provider import Provider
    from hrx_amdf.select import shared_provider

    if spec is None or isinstance(spec, str):
        return shared_provider(spec)
    if isinstance(spec, Provider):
        return spec
    raise InvalidArgument(f"provider: expected 'libamdf', 'fake' or a hrx_amdf Provider, got {type(spec).__name__}")


class XdnaImageExecutable(Executable):
    """An image loaded without a contract (``Kernel.executable``, ``hrx prepare``): it
    was read and checked, but launches need ``NpuDevice.load_artifact``."""

    def __init__(self, artifact: Artifact, image: XdnaImage | None) -> None:
        self.name = artifact.entry or "program"
        self.target = artifact.target
        self.image = image


class XdnaDevice(NpuEngineDevice):
    """One NPU5 (an XDNA endpoint of the provider) as an hrx NPU engine device."""

    def __init__(self, index: int, provider: Any, *, npu_queues: int = 2, max_pending_invocations: int = DEFAULT_LIMIT) -> None:
        from hrx_amdf.constants import CommandType, EngineKind, MemoryFlag, ProfileRole, PublicationMode

        from .retire import Retirement

        for name, value in (("npu_queues", npu_queues), ("max_pending_invocations", max_pending_invocations)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"{name}: expected an int >= 1, got {value!r}")
        if max_pending_invocations > DEFAULT_LIMIT:
            raise InvalidArgument(f"max_pending_invocations: at most {DEFAULT_LIMIT} (the XDNA kernel queue window), got {max_pending_invocations}")
        self.provider = provider
        self.simulated = provider.name == "fake"
        endpoint = provider.endpoint(EngineKind.XDNA, index)
        family = endpoint.family(CommandType.XDNA, PublicationMode.KERNEL)
        if family is None:
            raise Unsupported(f"{endpoint.info.name}: no kernel-mediated XDNA queue family")
        self.queue_family = family.ordinal
        self.endpoint = endpoint
        self.xdna_endpoint = endpoint.xdna_info()
        self.xdna = endpoint.create_xdna_device()
        info = self.xdna.info
        window = max_pending_invocations
        self.scope = provider.system_scopes()[0]
        profiles = self.scope.profiles()

        def pick(coherent: bool) -> int:
            for p in profiles:
                if p.roles & ProfileRole.CREATE and p.roles & ProfileRole.HOST_MAP and p.guaranteed_flags & MemoryFlag.HOST_VISIBLE \
                        and bool(p.guaranteed_flags & MemoryFlag.HOST_COHERENT) == coherent:
                    return p.ordinal
            raise Unsupported(f"{endpoint.info.name}: no host-visible {'coherent' if coherent else 'cacheable'} system memory profile")

        try:
            self.cached_profile, self.coherent_profile = pick(False), pick(True)
        except BaseException:
            self.xdna.destroy()
            raise
        # allocations start at the profiles' minimum alignment (a page): what contracts may ask
        alignment = max(ALIGNMENT, min(profiles[self.cached_profile].minimum_alignment, profiles[self.coherent_profile].minimum_alignment))
        self._lock = threading.Lock()
        self._last_context = [0] * info.column_count
        self.invocations = 0
        self.context_switches = 0
        self.state_resets = 0
        self.time_sliced_invocations = 0
        self.imports = 0
        self.live_buffers = 0
        self.programs: set[Any] = set()
        self.closed = False
        self._destroy_pending = False
        self.retirement = Retirement(f"{index}")
        pci = endpoint.info.pci
        note = SIM_NOTE if self.simulated else HARDWARE_NOTE
        self.info = DeviceInfo(
            engine="xdna",
            index=index,
            name=f"{endpoint.info.name}" + ("" if self.simulated else " via libamdf"),
            kind="npu",
            queue_families=(QueueFamily("npu", npu_queues),),
            limits=Limits(max_transfer_bytes=MAX_TRANSFER, alignment=alignment, max_grid=(1, 1, 1), max_block=(1, 1, 1), max_threads_per_block=1),
            targets=(TARGET, *HOST_TARGETS) if self.simulated else (TARGET,),
            memory_bytes=max((p.maximum_bytes for p in profiles), default=0),
            coherent_shared_memory=True,
            host_mappable=True,
            native_graphs=False,
            # buffers' native address is the XDNA DMA address, not a host pointer: DLPack
            # consumers see an extension device (kDLExtDev), not CPU memory
            dlpack_device_type=12,
            imports_host_memory=False,
            # engines on one provider instance share memory by export/import (dma-buf)
            memory_domain=f"hrx_amdf:{provider.name}:{id(provider):x}",
            properties={
                "columns": info.column_count,
                "rows": info.row_count,
                "column_memory_bytes": COLUMN_MEMORY_BYTES,
                "max_pending_invocations": window,
                "provider": "the simulated Strix Halo (fake)" if self.simulated else f"libamdf, ABI {provider.abi_version}",
                "pci": f"{pci.vendor_id:04x}:{pci.device_id:04x} rev {pci.revision_id:02x}",
                "architecture": self.xdna_endpoint.architecture.name,
                "target_id": self.xdna_endpoint.target_id,
                "scheduling": info.scheduling_modes.name or str(int(info.scheduling_modes)),
                "instructions": f"format {info.instruction_format} v{info.instruction_format_version}, at most {info.instruction_max_bytes} bytes, "
                                f"{info.instruction_alignment}-byte aligned, {info.instruction_granularity}-byte units",
                "reference" if self.simulated else "note": note,
            },
        )
        self.limits = DeviceLimits(rows=info.row_count, columns=info.column_count, instruction_max_bytes=info.instruction_max_bytes,
                                   instruction_granularity=max(info.instruction_granularity, 1))

    # -- memory -----------------------------------------------------------------

    def allocate(self, nbytes: int, *, shared: bool = False) -> NativeBuffer:
        from hrx_amdf.constants import AddressKind, MemoryAccess, MemoryFlag
        from hrx_amdf.provider import DeviceAccess

        memory = self.scope.create(
            nbytes, profile=self.coherent_profile if shared else self.cached_profile, flags=MemoryFlag.SHAREABLE,
            accesses=[DeviceAccess(self.xdna, MemoryAccess.READ | MemoryAccess.WRITE, address_kinds=frozenset({AddressKind.XDNA_DMA}))],
        )
        return self._adopt(XdnaBuffer(memory, owner=self))

    def _adopt(self, buffer: XdnaBuffer) -> XdnaBuffer:
        with self._lock:
            self.live_buffers += 1
        return buffer

    def _buffer_freed(self, buffer: XdnaBuffer) -> None:
        with self._lock:
            self.live_buffers -= 1
            retry = self._destroy_pending and not self.live_buffers
        if retry:
            self._destroy_native()

    def import_buffer(self, other: NativeBuffer) -> NativeBuffer | None:
        """Import another engine's provider-backed buffer (its ``amdf_memory``): export
        it (a dma-buf) and import it with an XDNA_DMA access. Host memory that no
        provider memory backs is not reachable (None)."""
        from hrx_amdf.constants import AddressKind, MemoryAccess, MemoryFlag
        from hrx_amdf.provider import DeviceAccess

        memory = getattr(other, "amdf_memory", None)
        if memory is None or getattr(memory, "provider", self.provider) is not self.provider:
            return None
        coherent = bool(memory.info.flags & MemoryFlag.HOST_COHERENT)
        external = memory.export()
        try:
            imported = self.scope.import_memory(
                external, profile=self.coherent_profile if coherent else self.cached_profile,
                accesses=[DeviceAccess(self.xdna, MemoryAccess.READ | MemoryAccess.WRITE, address_kinds=frozenset({AddressKind.XDNA_DMA}))],
            )
        except BaseException:
            external.release()
            raise
        buffer = self._adopt(XdnaBuffer(imported, imported=True, owner=self))
        with self._lock:
            self.imports += 1
        return buffer

    def wrap_host(self, array: Any) -> NativeBuffer | None:
        # the queues move bytes with the CPU: they read and write host memory directly
        return HostArrayBuffer(array)

    # -- queues -------------------------------------------------------------------

    def create_queue(self, family: str, index: int) -> NativeQueue:
        from .queue import XdnaQueue

        return XdnaQueue(self, family, index)

    def create_timeline(self) -> Timeline:
        return HostTimeline()

    # -- programs -------------------------------------------------------------------

    def _image(self, artifact: Artifact, contract: KernelContract | None, columns: int | None) -> tuple[XdnaImage, Artifact | None]:
        from .writer import Slot, standin_image

        if artifact.target == TARGET:
            data, name, reference = image_of(artifact)
            return read_image(data, name), reference
        if self.simulated and artifact.target in HOST_TARGETS:
            if contract is None or columns is None:
                return None, artifact  # type: ignore[return-value]
            slots = [Slot(b.length, b.access, b.alignment) for b in contract.used]  # type: ignore[arg-type]
            identity = f"{artifact.target}|{artifact.key}|{artifact.entry}|{contract.scratch_bytes}".encode()
            entry = artifact.entry or "program"
            data = standin_image(entry, slots, columns, self.limits.rows, identity)
            return read_image(data, f"stand-in image of {entry!r} ({artifact.target})"), artifact
        raise Unsupported(f"xdna loads {', '.join(self.info.targets)} artifacts, got target {artifact.target!r}")

    def load_executable(self, artifact: Artifact) -> Executable:
        image, _ = self._image(artifact, None, None)
        return XdnaImageExecutable(artifact, image)

    def load_program(self, artifact: Artifact, contract: KernelContract, *, context: int, start: int, columns: int, max_pending: int) -> NpuExecutable:
        from .program import XdnaProgram

        if self.closed:
            raise InvalidArgument(f"{self.info.name} is closed")
        # everything is checked before any device memory is touched
        image, reference = self._image(artifact, contract, columns)
        qualified = qualify(image, artifact.entry or None, contract, columns, self.limits)
        if self.simulated and reference is None:
            raise Unsupported(f"{image.name}: the simulated NPU runs a program through its host build; "
                              "make the artifact with hrx_npu.xdna.image_artifact(..., reference=<npu-host-c or host artifact>)")
        if reference is not None and self.simulated:
            from ..host.program import HostEntry

            HostEntry(reference)  # a host build that cannot load fails now, not on the simulated array
        name = qualified.entry.name or artifact.entry or "program"
        program = XdnaProgram(self, qualified, contract, name=name, target=artifact.target, context=context, start=start,
                              columns=columns, max_pending=min(max_pending, self.info.properties["max_pending_invocations"]),
                              reference=reference)
        with self._lock:
            self.programs.add(program)
        return program

    def register_simulated(self, program: Any, reference: Artifact | None) -> Any:
        from .simulation import register

        assert reference is not None
        return register(self.provider, program, program.contract, reference)

    def unregister_simulated(self, registration: Any) -> None:
        from .simulation import unregister

        if self.simulated:
            unregister(self.provider, registration)

    def program_destroyed(self, program: Any) -> None:
        with self._lock:
            self.programs.discard(program)

    def unload_program(self, executable: NpuExecutable) -> None:
        from .program import XdnaProgram

        if isinstance(executable, XdnaProgram):
            executable.closing = True
            self.retirement.close_program(executable)

    def note_invocation(self, program: Any, time_sliced: bool) -> None:
        with self._lock:
            self.invocations += 1
            self.state_resets += program.columns
            self.time_sliced_invocations += time_sliced
            for c in range(program.start, min(program.start + program.columns, len(self._last_context))):
                if self._last_context[c] != program.context:
                    self._last_context[c] = program.context
                    self.context_switches += 1

    def counters(self) -> dict[str, Any]:
        return {
            "invocations": self.invocations,
            "context_switches": self.context_switches,
            "state_resets": self.state_resets,
            "time_sliced_invocations": self.time_sliced_invocations,
            "imports": self.imports,
            "quarantined_programs": len(self.retirement.quarantined()),
            "live_buffers": self.live_buffers,
        }

    def quarantined(self) -> list[Any]:
        """Programs closed while busy and not yet proven idle (their native objects live)."""
        return self.retirement.quarantined()

    def build_graph(self, nodes):  # type: ignore[no-untyped-def]
        raise Unsupported("xdna has no native graphs")

    # -- teardown ------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with self._lock:
            programs = list(self.programs)
        for program in programs:
            program.closing = True
            self.retirement.close_program(program)
        self.retirement.drain(2.0)
        self.retirement.stop()
        if not self.retirement.quarantined():
            self._destroy_native()
        else:
            self._destroy_pending = True  # a hung program keeps its context; reported by counters()

    def _destroy_native(self) -> None:
        from hrx_amdf.errors import AmdfBusy, AmdfInvalidArgument

        try:
            self.xdna.destroy()
            self._destroy_pending = False
        except AmdfBusy:
            self._destroy_pending = True
        except AmdfInvalidArgument:
            self._destroy_pending = False  # already destroyed


class XdnaEngine(NpuEngine):
    """The ``xdna`` NPU engine (see the module docstring)."""

    name = "xdna"
    #: above npu-host: on a Strix Halo with libamdf the real NPU is the best NPU engine
    priority = 10

    def probe(self) -> EngineStatus:
        return self._probe(None)

    def probe_for(self, options: Mapping[str, Any]) -> EngineStatus:
        """:meth:`probe` for a device opened with ``options``: an explicit ``provider``
        (``"fake"``, ``"libamdf"`` or a Provider) is probed instead of ``HRX_AMDF_PROVIDER``."""
        spec = options.get("provider")
        if spec is None or isinstance(spec, str):
            return self._probe(spec)
        return EngineStatus(True, SIM_NOTE if getattr(spec, "name", None) == "fake" else HARDWARE_NOTE, 1)

    def _probe(self, requested: str | None) -> EngineStatus:
        try:
            from hrx_amdf.select import provider_kind
        except ImportError:
            return EngineStatus(False, "hrx-amdf is not installed (pip install -e plugins/hrx_amdf)")
        try:
            kind = provider_kind(requested)
        except InvalidArgument as exc:
            return EngineStatus(False, str(exc))
        if kind == "fake":
            return EngineStatus(True, SIM_NOTE, 1, default=False)
        try:
            from hrx_amdf.constants import EngineKind
            from hrx_amdf.native import probe
            from hrx_amdf.select import shared_provider

            ok, reason, _ = probe()
            if not ok:
                return EngineStatus(False, f"libamdf: {reason}")
            count = sum(1 for e in shared_provider("libamdf").endpoints() if e.info.engine_kind == EngineKind.XDNA)
        except Exception as exc:  # noqa: BLE001 - probe never raises
            return EngineStatus(False, f"libamdf: {type(exc).__name__}: {exc}")
        if not count:
            return EngineStatus(False, "libamdf found no XDNA endpoint (is the amdxdna driver loaded and /dev/accel readable?)")
        return EngineStatus(True, HARDWARE_NOTE, count)

    def open_device(self, index: int, **options: Any) -> XdnaDevice:
        known = {"provider", "npu_queues", "max_pending_invocations"}
        unknown = set(options) - known
        if unknown:
            raise InvalidArgument(f"options: unknown xdna options {sorted(unknown)}; known: {sorted(known)}")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise InvalidArgument(f"index: expected an int >= 0, got {index!r}")
        provider = _provider(options.pop("provider", None))
        return XdnaDevice(index, provider, **options)

    def prepare(self) -> list[str]:
        status = self.probe()
        if not status.available:
            return [f"xdna: unavailable: {status.reason}"]
        return [f"xdna: {status.reason}"]


__all__ = ["SIM_NOTE", "XdnaDevice", "XdnaEngine", "XdnaImageExecutable"]

