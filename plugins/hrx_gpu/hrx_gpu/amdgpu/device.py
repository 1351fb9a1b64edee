"""One gfx1151 GPU of the amdgpu engine, through an hrx_amdf provider.

The device opens the provider's GPU endpoint, picks its queue families (PM4 compute
by default, AQL as the ``compute_engine="aql"`` option; SDMA for copies) and its
memory profiles (cacheable and coherent GTT; the VRAM carve-out is reported), and
owns what its queues share: signal slabs for timelines and retire counters, the
publisher thread that drains queue backlogs, and deferred releases.

On the simulated Strix Halo it also tells the simulation what it loads (code objects
with their host references, kernel-argument extents); on libamdf nothing of that
happens.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import attrs

from hrx_amdf.constants import AddressKind, CommandType, EngineKind, MemoryAccess, MemoryFlag, PublicationMode
from hrx_amdf.errors import AmdfBusy, AmdfError
from hrx_amdf.provider import DeviceAccess, Provider, Scratch
from hrx_core.engine import (
    Artifact,
    DeviceInfo,
    EngineDevice,
    Executable,
    GraphNode,
    KernelArg,
    Limits,
    NativeBuffer,
    NativeGraph,
    NativeQueue,
    PreparedDispatch,
    QueueFamily,
    Timeline,
)
from hrx_core.errors import DeviceError, InvalidArgument, Unsupported

from .encode import sdma
from .graph import AmdgpuGraph
from .kernel import AmdgpuExecutable, AmdgpuPreparedDispatch
from .memory import RWX, AmdgpuBuffer, Arena
from .queue import AmdgpuQueue
from .timeline import AmdgpuTimeline, SignalSlab

TARGET = "gfx1151"
#: DLPack device type of ROCm memory (kDLROCM).
DLPACK_ROCM = 10
ARENA_BYTES = 1 << 20
COMPUTE_QUEUES = 4
COPY_QUEUES = 2
#: Explicit kernel argument bytes a dispatch passes (its kernarg block adds the hidden
#: arguments): HIP's 4 KiB, which every ROCm release takes.
MAX_KERNEL_ARG_BYTES = 4096


def memory_domain(provider: Provider) -> str:
    """Engines on one provider instance share memory through export/import."""
    return f"hrx_amdf:{provider.name}:{id(provider):x}"


def _profile(scope: Any, coherent: bool) -> int:
    for profile in scope.profiles():
        if bool(profile.guaranteed_flags & MemoryFlag.HOST_COHERENT) == coherent and profile.guaranteed_flags & MemoryFlag.HOST_VISIBLE:
            return profile.ordinal
    raise Unsupported(f"the system memory scope has no {'coherent' if coherent else 'cacheable'} host-visible profile")


class Publisher:
    """Drains queue backlogs in the background, so ``submit`` never blocks."""

    def __init__(self, device: AmdgpuDevice) -> None:
        self._device = weakref.ref(device)
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=f"hrx-amdgpu-publisher-{device.index}", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _run(self) -> None:
        pause = 20e-6
        while True:
            device = self._device()
            if device is None or self._stop:
                return
            waiting = [q for q in device._live_queues() if q._backlog]
            progressed = False
            for queue in waiting:
                try:
                    progressed = queue.pump() or progressed
                except Exception as exc:  # a failure while publishing fails the queue, never this thread
                    queue._failed(DeviceError(f"{queue.name}: publishing failed: {exc}"))
                if queue._backlog and queue.failure is None:
                    queue.check()
            device._reclaim()
            del device
            with self._cond:
                if self._stop:
                    return
                if not waiting:
                    self._cond.wait(0.05)
                    pause = 20e-6
                elif not progressed:
                    self._cond.wait(pause)
                    pause = min(pause * 2, 2e-3)
                else:
                    pause = 20e-6

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)


class AmdgpuDevice(EngineDevice):
    """A gfx1151 GPU (see the module docstring)."""

    OPTIONS = frozenset({"provider", "compute_engine", "max_private_bytes", "max_transfer_bytes", "compute_queues", "copy_queues"})

    def __init__(
        self,
        provider: Provider,
        index: int,
        *,
        compute_engine: str = "pm4",
        max_private_bytes: int = 0,
        max_transfer_bytes: int | None = None,
        compute_queues: int | None = None,
        copy_queues: int | None = None,
    ) -> None:
        self.provider = provider
        self.index = index
        self.simulated = provider.name == "fake"
        self.wants_host_reference = self.simulated
        self.endpoint = provider.endpoint(EngineKind.GPU, index)
        gpu_info = self.endpoint.gpu_info()
        if gpu_info.target != TARGET:
            raise Unsupported(f"amdgpu: endpoint {index} is {gpu_info.target}; this engine drives {TARGET}")
        families = {}
        for command in (CommandType.GPU_PM4, CommandType.GPU_SDMA, CommandType.GPU_AQL):
            family = self.endpoint.family(command, PublicationMode.USER)
            if family is not None:
                families[command] = family
        compute = CommandType.GPU_AQL if compute_engine == "aql" else CommandType.GPU_PM4
        if compute not in families or CommandType.GPU_SDMA not in families:
            raise Unsupported(f"amdgpu: the endpoint lacks a {compute.name} or GPU_SDMA user-queue family")
        self.compute_kind = "aql" if compute == CommandType.GPU_AQL else "pm4"
        self._families = families
        self.gpu = self.endpoint.create_gpu_device()
        self._lock = threading.RLock()
        self.closed = False
        self._system = provider.system_scopes()[0]
        self._cached_profile = _profile(self._system, False)
        self._coherent_profile = _profile(self._system, True)
        local = self.gpu.memory_scopes()
        vram = local[0].profiles()[0].maximum_bytes if local else 0
        gtt = self._system.profiles()[self._cached_profile].maximum_bytes
        self.apertures = (getattr(provider, "shared_aperture", 0), getattr(provider, "private_aperture", 0))
        self._queues: weakref.WeakSet[AmdgpuQueue] = weakref.WeakSet()
        self._timelines: weakref.WeakSet[AmdgpuTimeline] = weakref.WeakSet()
        self._slabs: list[SignalSlab] = []
        self._retiring_slots: list[tuple[SignalSlab, int, int, list[AmdgpuQueue]]] = []
        self._deferred: list[Any] = []  # releases waiting for the queues they may involve
        self._scratch: Scratch | None = None
        if max_private_bytes:
            if self.compute_kind != "aql":
                raise InvalidArgument("max_private_bytes: scratch is supported on AQL compute queues (compute_engine='aql')")
            waves = gpu_info.compute_unit_count * gpu_info.max_scratch_waves_per_cu
            nbytes = max_private_bytes * gpu_info.wavefront_size * waves
            memory = self._create_memory(nbytes, coherent=True)
            self._scratch = Scratch(memory, 0, nbytes, max_private_bytes, waves)
        sdma_limit = sdma.MAX_BYTES
        transfer = sdma_limit if max_transfer_bytes is None else max_transfer_bytes
        if not 1 <= transfer <= sdma_limit:
            raise InvalidArgument(f"max_transfer_bytes: expected 1..{sdma_limit} (one SDMA COPY_LINEAR), got {transfer}")
        info = self.endpoint.info
        self.info = DeviceInfo(
            engine="amdgpu",
            index=index,
            name=info.name,
            kind="gpu",
            queue_families=(
                QueueFamily("compute", compute_queues or COMPUTE_QUEUES),
                QueueFamily("copy", copy_queues or COPY_QUEUES, frozenset({"copy", "fill"})),
            ),
            limits=Limits(
                max_transfer_bytes=transfer,
                alignment=256,
                fill_pattern_sizes=(1, 2, 4),
                max_grid=(2**31 - 1, 65535, 65535),
                max_block=(1024, 1024, 1024),
                max_threads_per_block=1024,
                max_allocation_bytes=gtt,
                max_kernel_arg_bytes=MAX_KERNEL_ARG_BYTES,
            ),
            targets=(TARGET,),
            memory_bytes=gtt,
            coherent_shared_memory=True,
            host_mappable=True,
            native_graphs=True,
            dlpack_device_type=DLPACK_ROCM,
            imports_host_memory=False,
            memory_domain=memory_domain(provider),
            properties={
                "target": TARGET,
                "gfx_ip": ".".join(str(v) for v in gpu_info.gfx_ip),
                "compute_units": gpu_info.compute_unit_count,
                "wave_size": gpu_info.wavefront_size,
                "lds_bytes": gpu_info.lds_bytes,
                "xccs": gpu_info.xcc_count,
                "shader_engines": gpu_info.shader_engines_per_xcc,
                "vram_carveout_bytes": vram,
                "gtt_bytes": gtt,
                "compute_engine": f"{self.compute_kind.upper()} (user queues)",
                "copy_engine": "SDMA (user queues)",
                "provider": provider.name,
                "simulated": self.simulated,
                "pci": f"{info.pci.vendor_id:04x}:{info.pci.device_id:04x} rev {info.pci.revision_id:02x}",
                # gfx1151: a floating-point atomic max does not update coherent memory
                # (the specification's Shared memory section); placement.visibility reports it.
                "coherent_unsupported_atomics": ("float-max",),
            },
        )
        self._publisher = Publisher(self)

    # -- memory ---------------------------------------------------------------------------------

    def _create_memory(self, nbytes: int, *, coherent: bool) -> Any:
        profile = self._coherent_profile if coherent else self._cached_profile
        return self._system.create(max(nbytes, 1), profile=profile, accesses=[DeviceAccess(self.gpu, RWX)], flags=MemoryFlag.SHAREABLE)

    def allocate(self, nbytes: int, *, shared: bool = False) -> NativeBuffer:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise InvalidArgument(f"nbytes: expected an int >= 0, got {nbytes!r}")
        self._check_open()
        self._reclaim()
        memory = self._create_memory(nbytes, coherent=shared)
        return AmdgpuBuffer(self, memory, nbytes, coherent=shared)

    def import_buffer(self, other: NativeBuffer) -> NativeBuffer | None:
        memory = getattr(other, "amdf_memory", None)
        if memory is None or getattr(memory, "provider", self.provider) is not self.provider:
            return None
        try:
            external = memory.export()
        except AmdfError:
            return None
        try:
            imported = self._system.import_memory(external, profile=self._coherent_profile, accesses=[DeviceAccess(self.gpu, RWX)])
        except AmdfError:
            return None
        finally:
            external.release()  # a no-op once imported (the import consumed it); else frees the dma-buf
        coherent = bool(imported.info.flags & MemoryFlag.HOST_COHERENT)
        return AmdgpuBuffer(self, imported, other.nbytes, coherent=coherent, imported=other)

    def _release_buffer(self, buffer: AmdgpuBuffer) -> None:
        self._defer(buffer._destroy)

    def _release_executable(self, executable: AmdgpuExecutable) -> None:
        self._defer(executable.memory.destroy)

    def _release_graph_memory(self, copies: Sequence[Any]) -> None:
        for copy in copies:
            self._defer(copy.destroy)

    def _defer(self, release: Any) -> None:
        """Run ``release`` now if every queue is idle, else once they are."""
        if self.closed or all(q.idle() for q in self._live_queues()):
            release()
        else:
            with self._lock:
                self._deferred.append(release)

    def _reclaim(self) -> None:
        if not self._deferred and not self._retiring_slots:
            return
        if not all(q.idle() for q in self._live_queues()):
            return
        with self._lock:
            deferred, self._deferred = self._deferred, []
            slots, self._retiring_slots = self._retiring_slots, []
        for release in deferred:
            try:
                release()
            except AmdfError:
                pass
        for slab, slot, _, _ in slots:
            slab.release(slot)

    # -- signals ---------------------------------------------------------------------------------

    def _signal_slot(self) -> tuple[SignalSlab, int]:
        with self._lock:
            for slab in self._slabs:
                slot = slab.acquire()
                if slot is not None:
                    return slab, slot
            slab = SignalSlab(self)
            self._slabs.append(slab)
            slot = slab.acquire()
            assert slot is not None
            return slab, slot

    def _retire_signal_slot(self, slab: SignalSlab, slot: int, max_signaled: int, queues: list[AmdgpuQueue]) -> None:
        with self._lock:
            self._retiring_slots.append((slab, slot, max_signaled, queues))
        self._reclaim()

    # -- queues ------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise InvalidArgument(f"amdgpu:{self.index}: device is closed")

    def create_queue(self, family: str, index: int) -> NativeQueue:
        self._check_open()
        fam = self.info.family(family)
        if fam is None:
            raise InvalidArgument(f"family: expected compute or copy, got {family!r}")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < fam.count:
            raise InvalidArgument(f"index: {family} has {fam.count} queues, got {index!r}")
        queue = AmdgpuQueue(self, family, index, self.compute_kind if family == "compute" else "sdma")
        self._queues.add(queue)
        return queue

    def _create_native_queue(self, kind: str) -> Any:
        command = {"pm4": CommandType.GPU_PM4, "sdma": CommandType.GPU_SDMA, "aql": CommandType.GPU_AQL}[kind]
        family = self._families[command]
        ring = family.maximum_ring_bytes if kind == "aql" else 0
        return self.gpu.create_user_queue(family.ordinal, ring_bytes=ring, scratch=self._scratch if kind == "aql" else None)

    def _create_arena(self) -> Arena:
        return Arena(self, ARENA_BYTES)

    def _discard_native_queue(self, native: Any, ring: Any, arena: Arena) -> None:
        """Release a failed hardware queue; a provider that refuses (work it will never
        consume) leaves it to process exit, as libamdf documents for failed cleanup."""
        try:
            ring.destroy()
            native.destroy()
            arena.destroy()
        except AmdfError:
            pass

    def _live_queues(self) -> list[AmdgpuQueue]:
        return [q for q in list(self._queues) if not q.closed]

    def _queue_failed(self, queue: AmdgpuQueue, failure: DeviceError) -> None:
        for timeline in list(self._timelines):
            if id(queue) in timeline._signalers:
                timeline.fail(failure)

    def _close_queue(self, queue: AmdgpuQueue) -> None:
        deadline = time.monotonic() + 10
        while queue._backlog and queue.failure is None and time.monotonic() < deadline:
            queue.pump()
            queue.wait_published(0.005)
            queue.check()
        while not queue.idle() and queue.failure is None and time.monotonic() < deadline:
            queue.wait_published(0.005)
            queue.check()
        try:
            queue.ring.destroy()
            queue.native.destroy()
            queue.arena.destroy()
        except (AmdfBusy, AmdfError):
            pass  # still busy after the grace period: left to the provider's teardown
        queue._retire_slab.release(queue._retire_slot)
        self._queues.discard(queue)

    # -- timelines, code, graphs -----------------------------------------------------------------------

    def create_timeline(self) -> Timeline:
        self._check_open()
        timeline = AmdgpuTimeline(self)
        self._timelines.add(timeline)
        return timeline

    def load_executable(self, artifact: Artifact) -> Executable:
        self._check_open()
        return AmdgpuExecutable(self, artifact)

    def _register_code(self, executable: AmdgpuExecutable, code: bytes, artifact: Artifact) -> None:
        if not self.simulated:
            return
        from hrx_amdf.fake import KernelReference

        references = {}
        if artifact.reference is not None:
            ref = artifact.reference
            references[artifact.entry] = KernelReference.of(ref.function, [int(a) for a in ref.buffers], list(ref.scalars))
        self.provider.register_code_object(executable.memory, 0, code, references)  # type: ignore[attr-defined]

    def _describe_kernargs(self, address: int, extents: list[tuple[int, int]]) -> None:
        if self.simulated:
            self.provider.describe_kernargs(address, extents)  # type: ignore[attr-defined]

    def prepare_dispatch(self, executable: Executable, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[KernelArg]) -> PreparedDispatch:
        if not isinstance(executable, AmdgpuExecutable):
            raise InvalidArgument(f"executable: expected an amdgpu executable, got {type(executable).__name__}")
        return AmdgpuPreparedDispatch(executable, grid, block, args)

    def build_graph(self, nodes: Sequence[GraphNode]) -> NativeGraph:
        self._check_open()
        return AmdgpuGraph(self, nodes)

    # -- lifetime ------------------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        for queue in self._live_queues():
            queue.close()
        self._publisher.stop()
        self._reclaim()
        with self._lock:
            deferred, self._deferred = self._deferred, []
        for release in deferred:
            try:
                release()
            except AmdfError:
                pass
        self.closed = True
        for timeline in list(self._timelines):
            timeline.closed = True
        for slab in self._slabs:
            try:
                slab.destroy()
            except AmdfError:
                pass
        if self._scratch is not None:
            try:
                self._scratch.memory.destroy()
            except AmdfError:
                pass
        try:
            self.gpu.destroy()
        except AmdfError:
            pass

    def __repr__(self) -> str:
        return f"<AmdgpuDevice {self.info.name} ({self.provider.name})>"


__all__ = ["AmdgpuDevice", "TARGET", "DLPACK_ROCM"]

_ = (attrs, MemoryAccess, AddressKind)
