"""The xdna engine on the simulated Strix Halo: selection, device facts, compiled
images, what it writes into provider memory, the window, retirement, time-sharing,
cache maintenance, imports of provider memory, faults and teardown."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import xdna_images as X
from conftest import add_one, numpy_artifact, open_npu, rw_contract

import hrx_core as hrx
from hrx_core.buffer import Allocation, Buffer

hrx_amdf = pytest.importorskip("hrx_amdf")
if os.environ.get("HRX_AMDF_PROVIDER", "fake") != "fake":
    pytest.skip("these tests inspect and inject faults into the simulated Strix Halo (hardware: test_xdna_hardware.py)", allow_module_level=True)
import hrx_npu  # noqa: E402
from hrx_amdf.constants import AddressKind, EngineKind, HostCacheOperation, MemoryAccess, MemoryFlag, StatusDomain, XdnaSchedulingMode  # noqa: E402
from hrx_amdf.errors import AmdfDeviceError  # noqa: E402
from hrx_amdf.fake import SYSTEM_CACHED, SYSTEM_COHERENT  # noqa: E402
from hrx_amdf.fake.npu import parse_transaction  # noqa: E402
from hrx_amdf.provider import DeviceAccess  # noqa: E402
from hrx_npu import BufferContract, KernelContract  # noqa: E402
from hrx_npu.xdna import image_artifact  # noqa: E402


@pytest.fixture
def npu():
    dev = open_npu("xdna")
    yield dev
    dev.close()


def fake(npu):
    return npu.native.provider


def contexts(npu):
    return len(npu.native.xdna._contexts)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def copy_ref(src, dst, *, scratch, column, columns):
    np.copyto(dst, src)


COPY = KernelContract([BufferContract.read(4096), BufferContract.write(4096)])


# -- selection and facts -------------------------------------------------------------------


def test_used_only_when_named_on_the_simulation(monkeypatch):
    monkeypatch.delenv("HRX_NPU_ENGINE", raising=False)
    status = hrx.engine_status()["xdna"]
    assert status.available and not status.default and "not NPU hardware" in status.reason
    assert hrx_npu.best_npu_engine() == "npu-host"
    assert hrx.device().info.engine != "xdna"
    monkeypatch.setenv("HRX_NPU_ENGINE", "xdna")
    assert hrx_npu.best_npu_engine() == "xdna"
    monkeypatch.setenv("HRX_AMDF_PROVIDER", "libamdf")
    monkeypatch.setenv("HRX_AMDF_LIBRARY", "/nonexistent/libamdf.so")
    status = hrx.engine_status()["xdna"]
    assert not status.available and "libamdf" in status.reason


def test_an_explicit_provider_is_probed_instead_of_the_environment(monkeypatch):
    """open_device("xdna", provider="fake") opens the simulation also where
    HRX_AMDF_PROVIDER names a libamdf that is not there (as docs/npu.md does)."""
    monkeypatch.setenv("HRX_AMDF_PROVIDER", "libamdf")
    monkeypatch.setenv("HRX_AMDF_LIBRARY", "/nonexistent/libamdf.so")
    with pytest.raises(hrx.EngineNotFound, match="libamdf"):
        hrx_npu.open_device("xdna")
    with pytest.raises(hrx.EngineNotFound, match="libamdf"):
        hrx_npu.open_device("xdna", provider="libamdf")
    npu = hrx_npu.open_device("xdna", provider="fake")
    try:
        assert npu.info.engine == "xdna" and npu.columns == 8
    finally:
        npu.close()


def test_options_are_validated():
    for options, message in [({"bogus": 1}, "unknown xdna options"), ({"max_pending_invocations": 129}, "at most 128"),
                             ({"npu_queues": 0}, "npu_queues"), ({"provider": 5}, "provider")]:
        with pytest.raises(hrx.InvalidArgument, match=message):
            open_npu("xdna", **options)


def test_device_facts(npu):
    info = npu.info
    assert info.engine == "xdna" and info.kind == "npu" and info.targets[0] == "xdna"
    p = info.properties
    assert (p["columns"], p["rows"], p["max_pending_invocations"]) == (8, 6, 128)
    assert p["target_id"] == "amd.xdna.strix_halo.17f0_11" and p["pci"] == "1022:17f0 rev 11" and p["architecture"] == "AIE2P"
    assert "SPATIAL" in p["scheduling"] and "TIME_SLICED" in p["scheduling"]
    assert "not NPU hardware" in npu.note
    assert npu.columns == 8


# -- images and the contract ------------------------------------------------------------------


def test_compiled_image_runs_through_its_reference(npu, tmp_path):
    path = tmp_path / "copy_i32.xdna"
    path.write_bytes(X.build(X.Spec()))
    art = image_artifact(path, entry="copy_i32", reference=numpy_artifact(copy_ref))
    assert art.target == "xdna"
    prog = npu.load_artifact(art, columns=1, contract=COPY)
    s = npu.stream()
    src = s.allocate_from(np.arange(1024, dtype=np.uint32))
    dst = s.allocate(4096)
    prog.invoke([src, dst], stream=s).wait()
    assert (s.download(dst).view(np.uint32) == np.arange(1024)).all()
    assert prog.name == "copy_i32" and prog.executable.qualified.entry.name == "copy_i32"


def test_loads_are_checked_before_any_device_memory(npu, tmp_path):
    scope = npu.native.scope
    budget = list(scope._budget)
    before = contexts(npu)
    good = X.build(X.Spec())
    ref = numpy_artifact(copy_ref)
    cases = [
        (hrx.ArtifactError, lambda: image_artifact(good[:-200] + bytes(10), reference=ref)),
        (hrx_npu.ColumnError, lambda: npu.load_artifact(image_artifact(good, reference=ref), columns=2, contract=COPY)),
        (hrx_npu.AccessModeError, lambda: npu.load_artifact(image_artifact(good, reference=ref), columns=1,
                                                            contract=KernelContract([BufferContract.read(4096), BufferContract.read(4096)]))),
        (hrx_npu.BindingListError, lambda: npu.load_artifact(image_artifact(good, reference=ref), columns=1,
                                                             contract=KernelContract([BufferContract.read(4096)]))),
        (hrx.Unsupported, lambda: npu.load_artifact(image_artifact(good), columns=1, contract=COPY)),   # the simulation needs a reference
        (hrx.InvalidArgument, lambda: image_artifact(good, reference="nope")),  # type: ignore[arg-type]
        (hrx.ArtifactError, lambda: image_artifact(tmp_path / "missing.xdna")),
        (hrx.ArtifactError, lambda: image_artifact(good, entry="nope")),
    ]
    for error, load in cases:
        with pytest.raises(error):
            load()
    assert contexts(npu) == before and scope._budget == budget and not npu.programs
    assert npu.columns_free == npu.columns


def test_each_invocation_submits_array_then_patched_control_from_private_memory(npu):
    prog = npu.load_artifact(numpy_artifact(add_one), columns=2, contract=rw_contract(4096))
    exe = prog.executable
    s = npu.stream()
    a = s.allocate_from(np.zeros(1024, np.uint32))
    b = s.allocate_from(np.zeros(1024, np.uint32))
    fake(npu).faults.hang_npu(exe.queue)
    try:
        prog.invoke([a], stream=s)
        prog.invoke([b], stream=s)
        assert wait_for(lambda: exe.submitted == 2)
        streams = [exe.instructions.device_view(i * exe.slot_bytes, len(exe.template)).tobytes() for i in range(2)]
    finally:
        fake(npu).faults.release_npu(exe.queue)
    s.synchronize()
    assert exe.instructions.scope is exe.hw_context.memory_scopes()[0]            # the context's private memory
    assert exe.instructions.accesses[0].access & MemoryAccess.EXECUTE
    for stream, buf in zip(streams, (a, b)):
        ops = parse_transaction(stream, 2)
        assert ops[:2] == [("BLOCKWRITE", 0, 2), ("BLOCKWRITE", 1, 2)]             # ARRAY realisation first
        (site,) = exe.sites
        address = int.from_bytes(stream[site.offset : site.offset + 8], "little")
        assert address == buf.allocation.native.dma_address                        # patched per invocation
    assert streams[0] != streams[1]
    assert (s.download(a).view(np.uint32) == 1).all() and (s.download(b).view(np.uint32) == 1).all()


def test_window_is_the_kernel_queue_window(npu):
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(4))
    exe = prog.executable
    s = npu.stream()
    x = s.allocate_from(np.zeros(1, np.uint32))
    inv = prog.invocation([x])
    fake(npu).faults.hang_npu(exe.queue)
    try:
        for _ in range(128):
            inv.launch(s, block=False)
        assert wait_for(lambda: len(exe.queue._pending) == 128)                     # all 128 in the driver's window
        with pytest.raises(hrx.QueueFull):
            inv.launch(s, block=False)
        with pytest.raises(hrx.Timeout):
            inv.launch(s, timeout=0.05)
    finally:
        fake(npu).faults.release_npu(exe.queue)
    s.synchronize()
    assert prog.pending == 0 and s.download(x).view(np.uint32)[0] == 128
    assert npu.native.retirement.credits > 0                                        # completion came through the eventfd


def test_contexts_time_share_the_array_and_state_is_established_each_time(npu):
    def leaky(x, *, scratch, column, columns):
        x.view(np.uint32)[column] = int(scratch.view(np.uint32).sum())
        scratch.view(np.uint32)[:] = 0xDEADBEEF

    art = numpy_artifact(leaky)
    progs = [npu.load_artifact(art, columns=4, contract=rw_contract(16, scratch=256)) for _ in range(3)]
    modes = [p.executable.scheduling for p in progs]
    assert modes == [XdnaSchedulingMode.SPATIAL, XdnaSchedulingMode.SPATIAL, XdnaSchedulingMode.TIME_SLICED]
    switches = npu.native.xdna.context_switches
    s = npu.stream()
    x = s.allocate_from(np.full(4, 7, np.uint32))
    for p in (progs[0], progs[2], progs[1], progs[2], progs[0]):
        p.invoke([x], stream=s).wait()
        assert (s.download(x).view(np.uint32) == 0).all()
    assert npu.native.xdna.context_switches > switches
    assert npu.npu_stats()["time_sliced_invocations"] == 2


def test_host_writes_need_a_flush_and_device_writes_an_invalidate(npu):
    """The simulated NPU does not see host writes still in the host cache; the engine's
    copies and the cache-control protocol publish and acquire them."""
    prog = npu.load_artifact(numpy_artifact(copy_ref), columns=1, contract=COPY)
    src, dst = npu.allocate(4096), npu.allocate(4096)
    native = src.allocation.native
    assert native.cached                                          # ordinary NPU memory: write-back host cache
    native.host_view()[:] = 5                                     # behind hrx's back: no flush
    prog.invoke([src, dst]).wait()
    dst.cache_control("invalidate")
    with dst.map("read") as host:
        assert not host.any()                                     # the NPU read memory, not the host cache
    with src.map("write") as host:
        host[:] = 6
    src.cache_control("flush")
    prog.invoke([src, dst]).wait()
    assert not dst.allocation.native.host_view().any()              # the host cache still holds the old bytes ...
    with pytest.raises(hrx.InvalidArgument, match="INVALIDATE"), dst.map("read"):
        pass
    dst.cache_control("invalidate")                                # ... until invalidated
    with dst.map("read") as host:
        assert (host == 6).all()


def test_instruction_ring_is_flushed_before_submission(npu):
    """Without the flush of the (cacheable) instruction memory the firmware reads stale
    bytes and refuses the submission -- the launch reports it."""
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(64))
    exe = prog.executable
    assert exe._ring_cached
    exe._ring_cached = False
    x = npu.stream().allocate_from(np.zeros(16, np.uint32))
    with pytest.raises(hrx.DeviceError, match="instruction stream"):
        prog.invoke([x]).wait()
    exe._ring_cached = True
    prog.invoke([x]).wait()
    assert (npu.stream().download(x).view(np.uint32) == 1).all()


# -- memory imports ----------------------------------------------------------------------------


class GpuBufferDouble:
    """What an amdgpu native buffer exposes to other engines: its provider memory."""

    def __init__(self, memory):
        self.amdf_memory = memory
        self.nbytes = memory.info.nbytes

    def host_view(self):
        return None


@pytest.mark.parametrize("profile", [SYSTEM_COHERENT, SYSTEM_CACHED], ids=["coherent", "cached"])
def test_imports_gpu_provider_memory_without_host_copies(npu, profile):
    provider = fake(npu)
    gpu = provider.endpoint(EngineKind.GPU).create_gpu_device()
    memory = provider.system_scopes()[0].create(4096, profile=profile, flags=MemoryFlag.SHAREABLE, accesses=[DeviceAccess(gpu)])
    gpu_view = memory.device_view(0, 4096).view(np.uint32)                      # what the GPU sees
    gpu_view[:] = np.arange(1024, dtype=np.uint32)
    try:
        native = npu.native.import_buffer(GpuBufferDouble(memory))
        assert native is not None and native.imported and npu.npu_stats()["imports"] == 1
        assert native.dma_address != memory.address()                          # an XDNA address of the same backing
        shared = profile == SYSTEM_COHERENT
        alias = Buffer(npu, Allocation(npu, native, 4096, shared=shared, external=memory))
        prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(4096))
        prog.invoke([alias]).wait()
        assert (gpu_view == np.arange(1, 1025)).all()                          # the GPU's memory changed in place
        alias.close()
        assert npu.native.import_buffer(object()) is None                       # no provider memory: not reachable
        with pytest.raises(hrx.Unsupported, match="cannot import"):
            hrx.placement.Fabric().adopt(hrx.device("host").allocate_shared(64), npu)
    finally:
        memory.destroy()
        gpu.destroy()


# -- faults and teardown ------------------------------------------------------------------------


def test_firmware_error_fails_the_invocation_and_quarantines_the_program(npu):
    bad = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(64))
    good = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(64))
    s = npu.stream()
    x = s.allocate_from(np.zeros(16, np.uint32))
    fake(npu).faults.npu_error(bad.executable.queue)
    with pytest.raises(hrx.DeviceError, match="injected firmware error") as info:
        bad.invoke([x], stream=s).wait()
    cause = info.value.__cause__ or info.value                       # completions re-raise a copy of the error
    assert isinstance(cause, AmdfDeviceError) and cause.domain == StatusDomain.FIRMWARE
    assert bad.pending == 0
    with pytest.raises(hrx.Quarantined, match="close it"):
        bad.invoke([x], stream=s)
    s2 = npu.stream()
    y = s2.allocate_from(np.zeros(16, np.uint32))
    good.invoke([y], stream=s2).wait()                             # other programs are unaffected
    assert (s2.download(y).view(np.uint32) == 1).all()
    before = contexts(npu)
    bad.close()
    assert contexts(npu) == before - 1 and bad.executable.destroyed


def test_hung_invocation_times_out_and_its_program_is_quarantined_until_idle(npu):
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(64))
    exe = prog.executable
    s = npu.stream()
    x = s.allocate_from(np.zeros(16, np.uint32))
    fake(npu).faults.hang_npu(exe.queue)
    done = prog.invoke([x], stream=s)
    with pytest.raises(hrx.Timeout):
        done.wait(timeout=0.1)
    before = contexts(npu)
    prog.close()                                                     # busy: kept, not leaked
    assert npu.npu_stats()["quarantined_programs"] == 1 and not exe.destroyed and contexts(npu) == before
    fake(npu).faults.release_npu(exe.queue)
    done.wait(timeout=10)
    assert wait_for(lambda: exe.destroyed)                           # proven idle: released
    assert contexts(npu) == before - 1 and npu.npu_stats()["quarantined_programs"] == 0
    assert (s.download(x).view(np.uint32) == 1).all()


def test_lost_device_fails_pending_work_with_a_typed_error(npu):
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(64))
    x = npu.stream().allocate_from(np.zeros(16, np.uint32))
    fake(npu).faults.hang_npu(prog.executable.queue)
    done = prog.invoke([x])
    fake(npu).faults.device_lost(npu.native.xdna)
    with pytest.raises(hrx.DeviceError, match="device lost"):
        done.wait(timeout=10)
    with pytest.raises(hrx.Quarantined):
        prog.invoke([x])
    fake(npu).faults.release_npu(prog.executable.queue)


def test_close_releases_every_native_object():
    npu = open_npu("xdna")
    provider = fake(npu)
    xdna = npu.native.xdna
    progs = [npu.load_artifact(numpy_artifact(add_one), columns=c, contract=rw_contract(64)) for c in (1, 8)]
    x = npu.stream().allocate_from(np.zeros(16, np.uint32))
    for p in progs:
        p.invoke([x]).wait()
    scopes = [p.executable.instructions.scope for p in progs]
    registered = len(provider.npu_programs._programs)
    x.close()
    npu.close()                                                       # programs still loaded: the device closes them
    assert xdna.destroyed and not xdna._contexts
    assert all(not s.live_memories() for s in scopes)
    assert len(provider.npu_programs._programs) == registered - 2
    assert npu.native.live_buffers == 0


def test_images_from_the_image_folder_and_their_contract(npu, tmp_path, monkeypatch):
    """artifact_for takes HRX's compiled <entry>.xdna from HRX_XDNA_IMAGES (on the
    simulation with the host build as reference); contract_of reads the contract."""
    from hrx_npu.programs import artifact_for
    from hrx_npu.xdna import contract_of

    (tmp_path / "copy_i32.xdna").write_bytes(X.build(X.Spec()))
    monkeypatch.setenv("HRX_XDNA_IMAGES", str(tmp_path))
    art = artifact_for(npu, "copy_i32", {"host": copy_ref})
    assert art.target == "xdna" and art.code.reference.target == "host"
    assert contract_of(art) == KernelContract([BufferContract.read(4096, alignment=64), BufferContract.write(4096, alignment=64)])
    prog = npu.load_artifact(art, columns=1, contract=contract_of(art))
    src = npu.stream().allocate_from(np.arange(1024, dtype=np.uint32))
    dst = npu.allocate(4096)
    prog.invoke([src, dst]).wait()
    assert (npu.stream().download(dst).view(np.uint32) == np.arange(1024)).all()
    # without an image the simulation falls back to the host build (a stand-in image)
    assert artifact_for(npu, "other", {"host": copy_ref}).target == "host"
    with pytest.raises(hrx.InvalidArgument):
        contract_of(numpy_artifact(copy_ref))


def test_large_streams_get_a_smaller_window(npu):
    """128 ring slots of a ~600 KiB stream exceed the context's 64 MiB private memory:
    the program gets as many slots as fit, and its window shrinks to match."""
    spec = X.Spec()
    records, sites = spec.control()
    spec.control_records = [X.block_write32(X.shim_bd(0, 0), [0] * 150_000)] + records
    spec.relocation_overrides = {i: dict(offset=off + 16 + 4 * 150_000) for i, off in enumerate(sites)}
    art = image_artifact(X.build(spec), entry="copy_i32", reference=numpy_artifact(copy_ref))
    prog = npu.load_artifact(art, columns=1, contract=COPY)
    exe = prog.executable
    assert exe.slot_count * exe.slot_bytes <= 64 << 20 < 128 * exe.slot_bytes
    assert prog.max_pending == exe.slot_count < 128
    src = npu.stream().allocate_from(np.arange(1024, dtype=np.uint32))
    dst = npu.allocate(4096)
    for _ in range(exe.slot_count + 5):                             # wraps the ring
        prog.invoke([src, dst])
    npu.synchronize()
    assert (npu.stream().download(dst).view(np.uint32) == np.arange(1024)).all()


def test_a_context_that_cannot_be_set_up_fails_typed_and_leaks_nothing(npu, monkeypatch):
    """The driver refuses the kernel queue: the load fails with the typed error and
    the context and its instruction memory are released."""
    from hrx_amdf.errors import AmdfResourceExhausted, error_for, make_status
    from hrx_amdf.fake.npu import FakeXdnaContext

    def refuse(self, family, *, max_pending=0):
        raise error_for("xdna.kernel_queue_create", make_status(5), "no hardware queue left")

    monkeypatch.setattr(FakeXdnaContext, "create_kernel_queue", refuse)
    before = contexts(npu)
    with pytest.raises(AmdfResourceExhausted, match="no hardware queue left") as info:
        npu.load_artifact(numpy_artifact(add_one), columns=2, contract=rw_contract(64))
    assert isinstance(info.value, hrx.DeviceError)
    assert contexts(npu) == before and npu.columns_free == npu.columns and not npu.programs and not npu.native.programs
