"""Kernel dispatch on the simulated GPU: PM4 DISPATCH_DIRECT and AQL kernel dispatch.

Code objects come from clang (``clang-19``/``clang`` with the amdgcn target, as CI
installs); the tests skip when it is missing. Dispatch words are written from the
register addresses libamdf's conformance tests use (ROCm/hrx-system 659c2333,
libamdf/cts/gpu/pm4/encoding/commands.cc, BindCompute/DispatchWave32), never through
an engine's encoder.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

pytest.importorskip("elftools", reason="pyelftools is not installed (pip install -e 'plugins/hrx_amdf[test]')")
from fakekit import Producer, aql_dispatch, hi, lo, memory, pm4, set_sh_reg, wait_failed  # noqa: E402
from hrx_amdf.codeobject import CodeObject  # noqa: E402
from hrx_amdf.constants import MemoryAccess, StatusDomain  # noqa: E402
from hrx_amdf.errors import AmdfInvalidArgument  # noqa: E402
from hrx_amdf.fake import SYSTEM_COHERENT, KernelReference  # noqa: E402
from hrx_amdf.provider import DeviceAccess, Scratch  # noqa: E402

SOURCE = r"""
#define __global__ __attribute__((global))
extern "C" __global__ void add_u32(unsigned* data, unsigned value, unsigned n) {
  unsigned i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x();
  if (i < n) data[i] += value;
}
extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(1, 256))) void lds_rev(unsigned* data) {
  __attribute__((shared)) unsigned tile[256];
  unsigned t = __builtin_amdgcn_workitem_id_x();
  tile[t] = data[t]; __builtin_amdgcn_s_barrier(); data[t] = tile[255 - t];
}
extern "C" __global__ void spill(unsigned* data) {
  volatile unsigned tmp[64];  // private (scratch) memory
  unsigned t = __builtin_amdgcn_workitem_id_x();
  for (int k = 0; k < 64; k++) tmp[k] = data[k] + t;
  data[64 + t] = tmp[t & 63];
}
extern "C" __global__ void scalar_first(unsigned value, unsigned* data) {
  data[__builtin_amdgcn_workitem_id_x()] += value;
}
extern "C" __global__ void lds_arg(unsigned* data, __attribute__((address_space(3))) unsigned* tile) {
  unsigned t = __builtin_amdgcn_workitem_id_x();
  tile[t] = data[t]; data[t] = tile[t ^ 1];
}
extern "C" __global__ void ptr32(__attribute__((address_space(6))) const unsigned* src, unsigned* data) {
  data[__builtin_amdgcn_workitem_id_x()] = src[0];
}
"""


def _clang() -> str | None:
    for name in ("clang-19", "clang-18", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def code(tmp_path_factory) -> bytes:
    clang = _clang()
    if clang is None:
        pytest.skip("no clang with the amdgcn target (CI installs clang-19 and lld-19)")
    d = tmp_path_factory.mktemp("co")
    (d / "k.hip").write_text(SOURCE)
    out = d / "k.co"
    result = subprocess.run(
        [clang, "-x", "hip", "--offload-arch=gfx1151", "-nogpulib", "-nogpuinc", "--cuda-device-only", "--no-gpu-bundle-output", "-O3", "-o", str(out), str(d / "k.hip")],
        capture_output=True,
        text=True,
    )
    if result.returncode:
        pytest.skip(f"clang cannot build gfx1151 code objects here: {result.stderr[-400:]}")
    return out.read_bytes()


def _add_u32(data, value, n):
    data.view(np.uint32)[:n] += value


def _lds_rev(data):
    data.view(np.uint32)[:256] = data.view(np.uint32)[:256][::-1].copy()


def _spill(data, block):
    lanes = np.arange(block[0], dtype=np.uint32)
    words = data.view(np.uint32)
    words[64 : 64 + block[0]] = words[lanes & 63] + lanes


REFERENCES = {
    "add_u32": KernelReference.of(_add_u32, [3], [np.uint32, np.uint32]),
    "lds_rev": KernelReference.of(_lds_rev, [3], []),
    "spill": KernelReference.of(_spill, [3], []),
}


class Loaded:
    def __init__(self, provider, gpu, code: bytes, references=REFERENCES):
        self.co = CodeObject(code)
        scope = provider.system_scopes()[0]
        self.memory = scope.create(
            -(-self.co.image_size // 4096) * 4096, profile=SYSTEM_COHERENT,
            accesses=[DeviceAccess(gpu, MemoryAccess.READ | MemoryAccess.WRITE | MemoryAccess.EXECUTE)],
        )
        self.base = self.memory.address()
        image = self.co.load_image(self.base)
        self.memory.device_view(0, len(image))[:] = np.frombuffer(image, np.uint8)
        provider.register_code_object(self.memory, 0, code, references)

    def kernel(self, name):
        return self.co.kernels[name]


def kernargs(provider, gpu, kernel, values: dict[int, bytes], grid_items, block, dims=1):
    """A kernarg block: explicit values by offset, hidden arguments as the dispatch needs."""
    mem = memory(provider, gpu, 4096)
    raw = bytearray(kernel.kernarg_segment_size)
    for offset, blob in values.items():
        raw[offset : offset + len(blob)] = blob
    expected = {
        "hidden_block_count_x": grid_items[0] // block[0], "hidden_block_count_y": grid_items[1] // block[1], "hidden_block_count_z": grid_items[2] // block[2],
        "hidden_group_size_x": block[0], "hidden_group_size_y": block[1], "hidden_group_size_z": block[2],
        "hidden_remainder_x": grid_items[0] % block[0], "hidden_remainder_y": grid_items[1] % block[1], "hidden_remainder_z": grid_items[2] % block[2],
        "hidden_grid_dims": dims,
    }
    for arg in kernel.args:
        if arg.value_kind in expected:
            raw[arg.offset : arg.offset + arg.size] = expected[arg.value_kind].to_bytes(arg.size, "little")
    mem.device_view(0, len(raw))[:] = np.frombuffer(bytes(raw), np.uint8)
    return mem, raw


def pm4_dispatch(kernel, base, kernarg_address, groups, block, *, rsrc1=None, initiator=0x8025, lds_units=None, program=None,
                 rsrc2_xor=0, rsrc3_xor=0, start=(0, 0, 0), user_data=()):
    """BindCompute + DispatchWave32 of libamdf's CTS (thread dimensions); ``user_data``
    follows the kernarg pointer in COMPUTE_USER_DATA_2.."""
    kd = kernel.descriptor
    entry = program if program is not None else kernel.entry_address(base)
    units = lds_units if lds_units is not None else (kd.group_segment_fixed_size + 511) // 512
    rsrc2 = ((kd.compute_pgm_rsrc2 & ~0x00FF8000) | (units << 15)) ^ rsrc2_xor
    words = set_sh_reg(0x2E0C, [lo(entry >> 8), hi(entry >> 8)])
    words += set_sh_reg(0x2E12, [kd.compute_pgm_rsrc1 if rsrc1 is None else rsrc1, rsrc2])
    words += set_sh_reg(0x2E28, [kd.compute_pgm_rsrc3 ^ rsrc3_xor])
    words += set_sh_reg(0x2E04, [*start, block[0], block[1], block[2]])
    words += set_sh_reg(0x2E40, [lo(kernarg_address), hi(kernarg_address), *user_data])
    words += pm4(0x15, [groups[0] * block[0], groups[1] * block[1], groups[2] * block[2], initiator], compute=True)
    return words


@pytest.fixture
def loaded(provider, gpu, code):
    return Loaded(provider, gpu, code)


def add_setup(provider, gpu, loaded, n=1000, value=7, block=256):
    kernel = loaded.kernel("add_u32")
    data = memory(provider, gpu, 8192)
    data.device_view(0, 4 * n).view(np.uint32)[:] = np.arange(n)
    groups = -(-n // block)
    args, raw = kernargs(
        provider, gpu, kernel,
        {0: data.address().to_bytes(8, "little"), 8: value.to_bytes(4, "little"), 12: n.to_bytes(4, "little")},
        (groups * block, 1, 1), (block, 1, 1),
    )
    return kernel, data, args, groups


def test_pm4_dispatch_runs_the_reference(provider, gpu, loaded):
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1)))
    assert np.array_equal(data.device_view(0, 4000).view(np.uint32), np.arange(1000) + 7)
    assert "DISPATCH_DIRECT" in q.queue.log


def test_described_kernarg_extents_bound_the_views(provider, gpu, loaded):
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    provider.describe_kernargs(args.address(), [(data.address(), 4000)])
    Producer(gpu.create_user_queue(0)).pm4(pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1)))
    assert np.array_equal(data.device_view(0, 4000).view(np.uint32), np.arange(1000) + 7)
    provider.describe_kernargs(args.address(), [(data.address() + 64, 100)])
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1)), wait=False)
    assert "engine packed" in wait_failed(q.queue).detail


def test_aql_dispatch_runs_the_reference_and_signals(provider, gpu, loaded):
    kernel, data, args, groups = add_setup(provider, gpu, loaded, value=3)
    sig = memory(provider, gpu, 4096)
    sig.device_view(0, 16).view(np.int64)[:] = [1, 1]
    q = Producer(gpu.create_user_queue(2))
    q.aql(aql_dispatch(kernel.descriptor_address(loaded.base), args.address(), (256, 1, 1), (groups * 256, 1, 1), 1, completion=sig.address()))
    assert np.array_equal(data.device_view(0, 4000).view(np.uint32), np.arange(1000) + 3)
    assert int(sig.device_view(8, 8).view(np.int64)[0]) == 0


def test_lds_kernel_needs_its_lds_allocation(provider, gpu, loaded):
    kernel = loaded.kernel("lds_rev")
    assert kernel.group_segment_fixed_size == 1024
    data = memory(provider, gpu)
    data.device_view(0, 1024).view(np.uint32)[:] = np.arange(256)
    args, _ = kernargs(provider, gpu, kernel, {0: data.address().to_bytes(8, "little")}, (256, 1, 1), (256, 1, 1))
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (1, 1, 1), (256, 1, 1)))
    assert np.array_equal(data.device_view(0, 1024).view(np.uint32), np.arange(256)[::-1])
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (1, 1, 1), (256, 1, 1), lds_units=1), wait=False)
    assert "LDS_SIZE" in wait_failed(q.queue).detail
    q2 = Producer(gpu.create_user_queue(2))
    q2.aql(aql_dispatch(kernel.descriptor_address(loaded.base), args.address(), (256, 1, 1), (256, 1, 1), 1, group=512), wait=False)
    assert "group_segment_size 512" in wait_failed(q2.queue).detail


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(rsrc1=0x12345678), "COMPUTE_PGM_RSRC1"),
        (dict(program=0x1000), "no loaded kernel"),
        (dict(initiator=0x8024), "COMPUTE_SHADER_EN"),
        (dict(initiator=0x0025), "CS_W32_EN"),
        (dict(initiator=0x8027), "reserved bits"),
        (dict(rsrc2_xor=1 << 0), "COMPUTE_PGM_RSRC2"),  # SCRATCH_EN
        (dict(rsrc2_xor=1 << 7), "COMPUTE_PGM_RSRC2"),  # TGID_X_EN
        (dict(rsrc3_xor=1 << 0), "COMPUTE_PGM_RSRC3"),
        (dict(start=(1, 0, 0)), "COMPUTE_START_X is not zero"),
        (dict(start=(0, 0, 5)), "COMPUTE_START_Z is not zero"),
    ],
    ids=["rsrc1", "program-address", "shader-en", "wave32", "initiator-bits", "rsrc2-scratch", "rsrc2-tgid", "rsrc3", "start-x", "start-z"],
)
def test_pm4_dispatch_must_match_the_descriptor(provider, gpu, loaded, change, message):
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1), **change), wait=False)
    assert message in wait_failed(q.queue).detail
    assert int(data.device_view(0, 4).view(np.uint32)[0]) == 0, "nothing ran"


def test_missing_user_data_faults(provider, gpu, loaded):
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    words = pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1))
    # drop the SET_SH_REG of USER_DATA_0/1 (the fifth packet: 4 + 4 + 3 + 8 dwords in)
    cut = 4 + 4 + 3 + 8
    words = words[:cut] + words[cut + 4 :]
    q = Producer(gpu.create_user_queue(0))
    q.pm4(words, wait=False)
    assert "never set" in wait_failed(q.queue).detail


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda raw, k: raw.__setitem__(slice(16, 20), (99).to_bytes(4, "little")), "hidden_block_count_x"),
        (lambda raw, k: raw.__setitem__(slice(28, 30), (128).to_bytes(2, "little")), "hidden_group_size_x"),
        (lambda raw, k: raw.__setitem__(slice(0, 8), (0xDEAD000000).to_bytes(8, "little")), "pointer argument 0"),
        (lambda raw, k: raw.__setitem__(slice(80, 82), (0).to_bytes(2, "little")), "hidden_grid_dims"),
        (lambda raw, k: raw.__setitem__(slice(56, 64), (4).to_bytes(8, "little")), "hidden_global_offset_x"),
    ],
    ids=["block-count", "group-size", "pointer", "grid-dims", "global-offset"],
)
def test_kernarg_layout_is_checked_against_the_metadata(provider, gpu, loaded, corrupt, message):
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    raw = bytearray(args.device_view(0, kernel.kernarg_segment_size).tobytes())
    corrupt(raw, kernel)
    args.device_view(0, len(raw))[:] = np.frombuffer(bytes(raw), np.uint8)
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1)), wait=False)
    assert message in wait_failed(q.queue).detail


def test_freed_buffer_and_read_only_access(provider, gpu, loaded):
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    data.destroy()
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1)), wait=False)
    assert "pointer argument 0" in wait_failed(q.queue).detail
    ro = provider.system_scopes()[0].create(8192, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu, MemoryAccess.READ)])
    args2, _ = kernargs(provider, gpu, kernel, {0: ro.address().to_bytes(8, "little"), 8: b"\1\0\0\0", 12: b"\4\0\0\0"}, (256, 1, 1), (256, 1, 1))
    q2 = Producer(gpu.create_user_queue(0))
    q2.pm4(pm4_dispatch(kernel, loaded.base, args2.address(), (1, 1, 1), (256, 1, 1)), wait=False)
    assert "grants" in wait_failed(q2.queue).detail


def test_overwritten_code_is_caught(provider, gpu, loaded):
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    loaded.memory.device_view(kernel.entry_offset, 4)[:] ^= 0xFF
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1)), wait=False)
    assert "load image" in wait_failed(q.queue).detail


def test_registration_checks_the_load(provider, gpu, code):
    co = CodeObject(code)
    scope = provider.system_scopes()[0]
    rw = scope.create(-(-co.image_size // 4096) * 4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu)])
    with pytest.raises(AmdfInvalidArgument, match="needs"):  # no EXECUTE access
        provider.register_code_object(rw, 0, code, REFERENCES)
    rwx = scope.create(-(-co.image_size // 4096) * 4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu, MemoryAccess.READ | MemoryAccess.EXECUTE)])
    with pytest.raises(AmdfInvalidArgument, match="load image"):  # nothing copied there
        provider.register_code_object(rwx, 0, code, REFERENCES)


def test_kernel_without_reference_and_failing_reference(provider, gpu, code):
    def boom(data, value, n):
        raise FloatingPointError("nan in lane 3")

    loaded = Loaded(provider, gpu, code, {"add_u32": KernelReference.of(boom, [3], [np.uint32, np.uint32])})
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1)), wait=False)
    assert "nan in lane 3" in wait_failed(q.queue).detail
    lds = loaded.kernel("lds_rev")
    q2 = Producer(gpu.create_user_queue(0))
    q2.pm4(pm4_dispatch(lds, loaded.base, args.address(), (1, 1, 1), (256, 1, 1)), wait=False)
    assert "no reference" in wait_failed(q2.queue).detail


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(dims=2), "hidden_block_count_y"),
        (dict(dims=1, grid_y=2), "dimension 1 is unused"),
        (dict(block=(2048, 1, 1)), "max_flat_workgroup_size"),
        (dict(kernarg_offset=8), "16-byte aligned"),
        (dict(descriptor_offset=8), "not a loaded kernel descriptor"),
        (dict(grid_in_groups=True), "hidden_block_count_x"),
    ],
    ids=["dims", "unused-dim", "block", "kernarg-align", "descriptor", "grid-in-groups"],
)
def test_aql_dispatch_faults(provider, gpu, loaded, kw, message):
    import re

    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    block = kw.get("block", (256, 1, 1))
    grid = (groups, 1, 1) if kw.get("grid_in_groups") else (groups * 256, 1, 1)
    dims = kw.get("dims", 1)
    if dims == 2:
        grid, block = (groups * 256, 2, 1), (256, 1, 1)
    if kw.get("grid_y"):
        grid = (grid[0], kw["grid_y"], 1)
    q = Producer(gpu.create_user_queue(2))
    q.aql(aql_dispatch(kernel.descriptor_address(loaded.base) + kw.get("descriptor_offset", 0), args.address() + kw.get("kernarg_offset", 0), block, grid, dims), wait=False)
    detail = wait_failed(q.queue).detail
    assert re.search(message, detail), detail


def run_pm4(provider, gpu, loaded, name, values, block=(64, 1, 1)):
    """Dispatch ``name`` (one workgroup of ``block``) with explicit kernarg ``values``; the queue."""
    kernel = loaded.kernel(name)
    args, _ = kernargs(provider, gpu, kernel, values, block, block)
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (1, 1, 1), block), wait=False)
    return q.queue, args


def test_pm4_block_within_max_flat_workgroup_size(provider, gpu, loaded):
    assert loaded.kernel("lds_rev").max_flat_workgroup_size == 256
    data = memory(provider, gpu)
    data.device_view(0, 2048).view(np.uint32)[:] = np.arange(512)
    queue, _ = run_pm4(provider, gpu, loaded, "lds_rev", {0: data.address().to_bytes(8, "little")}, (512, 1, 1))
    assert "block (512, 1, 1) exceeds max_flat_workgroup_size 256" in wait_failed(queue).detail
    assert np.array_equal(data.device_view(0, 2048).view(np.uint32), np.arange(512)), "nothing ran"


def spill_setup(provider, gpu, loaded, lanes=64):
    kernel = loaded.kernel("spill")
    assert kernel.private_segment_fixed_size > 0 and kernel.descriptor.private_segment_fixed_size == kernel.private_segment_fixed_size
    data = memory(provider, gpu)
    data.device_view(0, 256).view(np.uint32)[:] = np.arange(64) * 10
    args, _ = kernargs(provider, gpu, kernel, {0: data.address().to_bytes(8, "little")}, (lanes, 1, 1), (lanes, 1, 1))
    return kernel, data, args


def scratch(provider, gpu, max_private_bytes=512):
    return Scratch(memory(provider, gpu, 1 << 20), 0, 1 << 20, max_private_bytes, 32)


def spilled(data, lanes=64):
    return np.array_equal(data.device_view(256, 4 * lanes).view(np.uint32), np.arange(lanes) * 11)


def test_pm4_private_memory_needs_queue_scratch(provider, gpu, loaded):
    kernel, data, args = spill_setup(provider, gpu, loaded)
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (1, 1, 1), (64, 1, 1)), wait=False)
    assert f"needs {kernel.private_segment_fixed_size} private bytes per lane, the queue has no scratch" in wait_failed(q.queue).detail
    assert not spilled(data)
    with_scratch = Producer(gpu.create_user_queue(0, scratch=scratch(provider, gpu)))
    with_scratch.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (1, 1, 1), (64, 1, 1)))
    assert spilled(data)


def test_aql_private_segment_size_is_checked(provider, gpu, loaded):
    kernel, data, args = spill_setup(provider, gpu, loaded)
    need = kernel.private_segment_fixed_size
    descriptor = kernel.descriptor_address(loaded.base)
    below = Producer(gpu.create_user_queue(2, scratch=scratch(provider, gpu)))
    below.aql(aql_dispatch(descriptor, args.address(), (64, 1, 1), (64, 1, 1), 1, private=need - 16), wait=False)
    assert f"private_segment_size {need - 16} below the descriptor's {need}" in wait_failed(below.queue).detail
    above = Producer(gpu.create_user_queue(2, scratch=scratch(provider, gpu, max_private_bytes=need)))
    above.aql(aql_dispatch(descriptor, args.address(), (64, 1, 1), (64, 1, 1), 1, private=need + 16), wait=False)
    assert f"private_segment_size {need + 16} exceeds the queue's scratch ({need} per lane)" in wait_failed(above.queue).detail
    assert not spilled(data)
    ok = Producer(gpu.create_user_queue(2, scratch=scratch(provider, gpu, max_private_bytes=need)))
    ok.aql(aql_dispatch(descriptor, args.address(), (64, 1, 1), (64, 1, 1), 1, private=need))
    assert spilled(data)


def test_aql_private_segment_without_queue_scratch(provider, gpu, loaded):
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    q = Producer(gpu.create_user_queue(2))
    q.aql(aql_dispatch(kernel.descriptor_address(loaded.base), args.address(), (256, 1, 1), (groups * 256, 1, 1), 1, private=16), wait=False)
    assert "private_segment_size 16 exceeds the queue's scratch (0 per lane)" in wait_failed(q.queue).detail
    assert int(data.device_view(4, 4).view(np.uint32)[0]) == 1, "nothing ran"


# Kernel descriptor layout (LLVM AMDGPUUsage, "Kernel Descriptor for GFX6-GFX12"): byte 52
# COMPUTE_PGM_RSRC2 (USER_SGPR_COUNT in bits 1-5), byte 56 kernel_code_properties
# (bit 3 ENABLE_SGPR_KERNARG_SEGMENT_PTR), byte 58 kernarg_preload (bits 0-6
# KERNARG_PRELOAD_SPEC_LENGTH). No compiler emits these for gfx1151, so the test edits them.
def patched_descriptor(code: bytes, name: str, *, clear_kernarg_ptr=False, preload=0) -> bytes:
    co = CodeObject(code)
    kernel = co.kernels[name]
    descriptor = co.load_image(0)[kernel.descriptor_offset : kernel.descriptor_offset + 64]
    at = code.find(descriptor)
    assert at >= 0 and code.find(descriptor, at + 1) < 0, "the descriptor's file bytes are not unique"
    rsrc2, properties, kernarg_preload = (int.from_bytes(descriptor[o : o + n], "little") for o, n in ((52, 4), (56, 2), (58, 2)))
    user_sgprs = (rsrc2 >> 1) & 0x1F
    if clear_kernarg_ptr:
        assert properties & (1 << 3)
        properties &= ~(1 << 3)
        user_sgprs -= 2
    if preload:
        kernarg_preload = (kernarg_preload & ~0x7F) | preload
        user_sgprs += preload
    rsrc2 = (rsrc2 & ~(0x1F << 1)) | (user_sgprs << 1)
    out = bytearray(code)
    out[at + 52 : at + 56] = rsrc2.to_bytes(4, "little")
    out[at + 56 : at + 58] = properties.to_bytes(2, "little")
    out[at + 58 : at + 60] = kernarg_preload.to_bytes(2, "little")
    return bytes(out)


def test_preloaded_kernel_arguments_are_refused(provider, gpu, code):
    patched = Loaded(provider, gpu, patched_descriptor(code, "add_u32", preload=2))
    kernel, data, args, groups = add_setup(provider, gpu, patched)
    assert [(s.name, s.count) for s in kernel.user_sgprs] == [("kernarg_segment_ptr", 2), ("preloaded_kernargs", 2)]
    q = Producer(gpu.create_user_queue(0))
    # USER_DATA_2/3 hold what a preloading engine would put there: the first kernarg dwords
    q.pm4(pm4_dispatch(kernel, patched.base, args.address(), (groups, 1, 1), (256, 1, 1), user_data=(lo(data.address()), hi(data.address()))), wait=False)
    assert "preloaded kernel arguments are not modelled" in wait_failed(q.queue).detail
    assert int(data.device_view(4, 4).view(np.uint32)[0]) == 1, "nothing ran"


def test_kernargs_need_the_kernarg_pointer(provider, gpu, code):
    patched = Loaded(provider, gpu, patched_descriptor(code, "add_u32", clear_kernarg_ptr=True))
    kernel, data, args, groups = add_setup(provider, gpu, patched)
    assert kernel.user_sgprs == () and kernel.kernarg_segment_size > 0
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, patched.base, args.address(), (groups, 1, 1), (256, 1, 1)), wait=False)
    status = wait_failed(q.queue)
    assert f"takes {kernel.kernarg_segment_size} kernarg bytes but enables no kernarg pointer" in status.detail
    assert status.terminal >> 32 == StatusDomain.FIRMWARE


def _ran(*args, **kwargs):
    _ran.calls += 1


@pytest.mark.parametrize(
    "name, references, message",
    [
        ("scalar_first", {"scalar_first": KernelReference.of(_ran, [3], [np.uint32])}, "HRX kernels take buffers first, then scalars"),
        ("lds_arg", {"lds_arg": KernelReference.of(_ran, [3], [])}, "unsupported argument kinds ['dynamic_shared_pointer']"),
        ("ptr32", {"ptr32": KernelReference.of(_ran, [1, 3], [])}, "pointer argument 0 is 4 bytes"),
        ("add_u32", {"add_u32": KernelReference.of(_ran, [3, 3], [np.uint32])}, "the code object takes 1 pointers and 2 values, its reference 2 buffers and 1 scalars"),
        ("add_u32", {"add_u32": KernelReference.of(_ran, [3], [np.uint32])}, "the code object takes 1 pointers and 2 values, its reference 1 buffers and 1 scalars"),
        ("add_u32", {"add_u32": KernelReference.of(_ran, [3], [np.uint16, np.uint32])}, "value argument 0 is 4 bytes, the scalar is uint16"),
    ],
    ids=["scalar-first", "lds-pointer", "pointer-size", "reference-buffers", "reference-scalars", "scalar-size"],
)
def test_kernel_arguments_must_fit_the_reference(provider, gpu, code, name, references, message):
    _ran.calls = 0
    loaded = Loaded(provider, gpu, code, references)
    data = memory(provider, gpu, 8192)
    kernel = loaded.kernel(name)
    pointer = data.address().to_bytes(8, "little")
    values = {arg.offset: pointer[: arg.size] if arg.value_kind == "global_buffer" else (1).to_bytes(arg.size, "little") for arg in kernel.args if not arg.value_kind.startswith("hidden_")}
    block = (256, 1, 1) if name == "add_u32" else (64, 1, 1)
    queue, _ = run_pm4(provider, gpu, loaded, name, values, block)
    status = wait_failed(queue)
    assert message in status.detail, status.detail
    assert status.terminal >> 32 == StatusDomain.FIRMWARE and status.terminal & 0xFFFFFFFF == 2
    assert _ran.calls == 0


def test_described_extents_must_count_the_pointers(provider, gpu, loaded):
    kernel, data, args, groups = add_setup(provider, gpu, loaded)
    provider.describe_kernargs(args.address(), [(data.address(), 4000), (data.address(), 4000)])
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, args.address(), (groups, 1, 1), (256, 1, 1)), wait=False)
    assert "2 pointer extents described" in wait_failed(q.queue).detail
    assert int(data.device_view(4, 4).view(np.uint32)[0]) == 1, "nothing ran"


@pytest.mark.parametrize("where", ["unmapped", "misaligned"])
def test_kernarg_segment_faults_are_kernel_faults(provider, gpu, loaded, where):
    kernel = loaded.kernel("lds_rev")  # no hidden arguments: the segment is first read when the kernel runs
    data = memory(provider, gpu)
    args, _ = kernargs(provider, gpu, kernel, {0: data.address().to_bytes(8, "little")}, (256, 1, 1), (256, 1, 1))
    address = args.address() + (1 << 20) if where == "unmapped" else args.address() + 4
    q = Producer(gpu.create_user_queue(0))
    q.pm4(pm4_dispatch(kernel, loaded.base, address, (1, 1, 1), (256, 1, 1)), wait=False)
    status = wait_failed(q.queue)
    expected = "no GPU mapping" if where == "unmapped" else f"not {kernel.kernarg_segment_align}-byte aligned"
    assert "kernel 'lds_rev': kernarg segment" in status.detail and expected in status.detail, status.detail
    assert status.terminal >> 32 == StatusDomain.FIRMWARE and status.terminal & 0xFFFFFFFF == 2


def test_code_object_base_must_lie_in_the_registered_memory(provider, gpu, code):
    co = CodeObject(code)
    scope = provider.system_scopes()[0]
    size = -(-co.image_size // 4096) * 4096
    rx = DeviceAccess(gpu, MemoryAccess.READ | MemoryAccess.EXECUTE)
    named = scope.create(size, profile=SYSTEM_COHERENT, accesses=[rx])
    actual = scope.create(size, profile=SYSTEM_COHERENT, accesses=[rx])
    image = co.load_image(actual.address())
    actual.device_view(0, len(image))[:] = np.frombuffer(image, np.uint8)
    # the offset reaches past the named memory's guard gap into another allocation
    with pytest.raises(AmdfInvalidArgument, match="does not lie in the registered memory"):
        provider.register_code_object(named, actual.address() - named.address(), code, REFERENCES)
    assert provider.code_objects.by_descriptor(co.kernels["add_u32"].descriptor_address(actual.address())) is None
