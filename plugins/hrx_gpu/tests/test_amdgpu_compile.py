"""The gfx1151 compiler (hrx_gpu.amdgpu): every HRX kernel's CUDA source compiles to a
gfx1151 code object whose metadata agrees with the kernel's declared parameters.

Kernels are collected programmatically (every module of hrx_core, hrx_tensor,
hrx_image, hrx_models and the hrx_npu examples, the kernels plugins provide through
``hrx_kernels``, and tests/kernels.py), so a new kernel is covered without editing this
file. Tests that need clang skip with the reason where none is usable; CI installs
clang-19 and lld-19 (.ci/run), so there they run.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core import plugins
from hrx_core.kernel import argument_alignment
from hrx_core.engine import Access
from hrx_core.kernel import Kernel
from hrx_gpu.amdgpu import compiler as amd

REPO = Path(__file__).resolve().parents[3]
#: Packages whose modules hold kernels (walked recursively).
KERNEL_PACKAGES = ("hrx_core", "hrx_tensor", "hrx_image", "hrx_models", "hrx_npu.examples")


def _kernels_in(value: object) -> list[Kernel]:
    if isinstance(value, Kernel):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, Kernel)]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, Kernel)]
    return []


def collect_cuda_kernels() -> dict[str, Kernel]:
    """Every kernel with a ``cuda`` source, by entry name (one Kernel object per entry)."""
    modules = []
    for name in KERNEL_PACKAGES:
        package = importlib.import_module(name)
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            modules.append(importlib.import_module(info.name))
    spec = importlib.util.spec_from_file_location("hrx_repo_test_kernels", REPO / "tests" / "kernels.py")
    if spec is not None and spec.loader is not None and (REPO / "tests" / "kernels.py").is_file():
        test_kernels = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(test_kernels)
        modules.append(test_kernels)
    found: list[Kernel] = []
    for module in modules:
        for value in vars(module).values():
            found.extend(_kernels_in(value))
    found.extend(plugins.kernels("cuda").values())
    out: dict[str, Kernel] = {}
    for kernel in found:
        if "cuda" not in kernel.sources:
            continue
        other = out.setdefault(kernel.entry, kernel)
        assert other.sources["cuda"] == kernel.sources["cuda"], f"two different kernels named {kernel.entry}"
    return out


KERNELS = collect_cuda_kernels()
#: Kernels the collection must find (it finds more as they are added).
KNOWN = {
    "add_u32", "xor_bytes", "inc_bytes", "empty", "sleepy", "axpy",
    "hrx_tensor_linear", "hrx_tensor_linear_b8", "hrx_tensor_gather",
    "hrx_image_normalize", "hrx_image_patchify", "hrx_image_resize", "hrx_image_affine", "hrx_image_composite",
    "hrx_gpt2_embed_ln", "hrx_gpt2_residual_ln", "hrx_gpt2_attention", "hrx_gpt2_bias_gelu", "hrx_gpt2_argmax",
    "hrx_gpt2_advance",
    "int_transform", "to_bf16", "epilogue",
}


@pytest.fixture(scope="module")
def clang() -> amd.Clang:
    try:
        return amd.find_clang()
    except hrx.CompileError as exc:
        pytest.skip(f"no usable clang for gfx1151: {exc}")


@pytest.fixture(scope="module")
def gfx_device():
    """A stand-in device running target gfx1151, so Kernel.executable takes its real path."""
    return SimpleNamespace(
        name="gfx1151-compile-test",
        info=SimpleNamespace(targets=("gfx1151",)),
        native=SimpleNamespace(compile_options=lambda target: (), load_executable=lambda artifact: artifact),
    )


@pytest.fixture(scope="module")
def codeobject():
    return pytest.importorskip("hrx_amdf.codeobject", reason="hrx-amdf (the code object reader) is not installed")


def test_collection_finds_every_known_kernel():
    assert KNOWN <= set(KERNELS), sorted(KNOWN - set(KERNELS))


def test_compiler_registered_through_the_hook():
    compiler = plugins.registry().compilers()["gfx1151"]
    assert compiler.persistent and compiler.source == "cuda" and compiler.source_target == "cuda"
    assert "prelude=" in compiler.salt() and "clang=" in compiler.salt()
    for kernel in KERNELS.values():
        assert kernel.source_for(("gfx1151",)) == ("gfx1151", "cuda")


@pytest.mark.parametrize("entry", sorted(KERNELS))
def test_kernel_compiles_for_gfx1151(entry, clang, gfx_device):
    kernel = KERNELS[entry]
    artifact = kernel.executable(gfx_device)  # the core's path: compiler hook, disk cache
    assert artifact.target == "gfx1151" and artifact.code[:4] == b"\x7fELF"
    assert (kernel.entry + ".kd").encode() in artifact.code


@pytest.mark.parametrize("entry", sorted(KERNELS))
def test_kernel_code_object_agrees_with_the_declaration(entry, clang, gfx_device, codeobject):
    kernel = KERNELS[entry]
    co = codeobject.CodeObject(kernel.executable(gfx_device).code, target="gfx1151")
    k = co.kernel(kernel.entry)

    # explicit arguments: one global_buffer pointer per buffer, then one by_value per
    # scalar with the scalar's size, in order, laid out as C lays out a struct
    declared = [("global_buffer", 8)] * len(kernel.buffer_access) + [("by_value", t.itemsize) for t in kernel.scalar_types]
    explicit = k.explicit_args
    assert [(a.value_kind, a.size) for a in explicit] == declared
    assert k.args[: len(explicit)] == explicit, "hidden arguments follow the explicit ones"
    offset = 0
    aligns = [8] * len(kernel.buffer_access) + [argument_alignment(t) for t in kernel.scalar_types]
    for arg, align in zip(explicit, aligns):
        offset = -(-offset // align) * align
        assert arg.offset == offset, (arg, offset)
        offset += arg.size
    assert offset == kernel.argument_bytes  # what the device limit is checked against
    assert all(a.value_kind.startswith("hidden_") and a.offset >= offset for a in k.hidden_args)
    assert all(a.address_space == "global" for a in explicit[: len(kernel.buffer_access)])

    # the compiler's own inference (.actual_access, where it could prove one: it cannot
    # for pointers that may alias, i.e. without __restrict__) agrees with the declared
    # buffer accesses: a buffer declared "read" is not written, a written one is writable
    for i, (access, arg) in enumerate(zip(kernel.buffer_access, explicit)):
        if access == Access.READ:
            assert arg.actual_access in (None, "read_only"), f"buffer {i} is declared read but the kernel writes it"
        if arg.actual_access == "write_only":
            assert access & Access.WRITE, f"buffer {i} is written but not declared writable"

    # the reader's facts are consistent
    d = k.descriptor
    assert d.kernarg_size == k.kernarg_segment_size
    assert k.user_sgpr_count == d.user_sgpr_count == d.rsrc2("user_sgpr_count")
    assert k.wavefront_size == 32 and d.enable_wavefront_size32
    assert k.user_sgpr("kernarg_segment_ptr") is not None or not k.args
    assert d.group_segment_fixed_size == k.group_segment_fixed_size <= 64 * 1024
    # (a second argument, CUDA's minimum blocks an SM, does not change the group size)
    bounds = re.search(r"__launch_bounds__\((\d+)(?:\s*,\s*\d+)?\)\s*" + re.escape(kernel.entry) + r"\s*\(",
                       kernel.sources["cuda"])
    assert k.max_flat_workgroup_size == (int(bounds.group(1)) if bounds else 1024)
    assert k.entry_address(0x10000) % 256 == 0


# -- the prelude --------------------------------------------------------------------------------

PRELUDE_EVERYTHING = r"""
template <typename T> __device__ void use(T* out, T v) { out[threadIdx.x] = v; }
extern "C" __global__ void everything(float* f, unsigned int* u, int* i, double* d, unsigned long long* q,
                                      __nv_bfloat16* b, float x, unsigned int n) {
    __shared__ float tile[64];
    const dim3 t = threadIdx, g = gridDim, bd = blockDim, bi = blockIdx;
    const uint3 t3 = threadIdx;
    tile[t.x & 63u] = x;
    __syncthreads(); __syncwarp(); __threadfence_block(); __threadfence(); __threadfence_system();
    float s = tile[(t.x + 1u) & 63u] + (float)(g.x + g.y + g.z + bd.x + bd.y + bd.z + bi.x + bi.y + bi.z + t3.z);
    s = __shfl_sync(0xffffffffu, s, 3) + __shfl_up_sync(0xffffffffu, s, 1) + __shfl_down_sync(0xffffffffu, s, 2, 16)
        + __shfl_xor_sync(0xffffffffu, s, 4, 8) + (float)__shfl_xor_sync(0xffffffffu, d[0], 1)
        + (float)__shfl_down_sync(0xffffffffu, (unsigned short)n, 1);
    unsigned int bal = __ballot_sync(0xffffffffu, s > 0.f) + __activemask() + __any_sync(~0u, n) + __all_sync(~0u, n)
        + __reduce_add_sync(~0u, n) + __reduce_min_sync(0xffu, n) + __reduce_max_sync(~0u, n)
        + (unsigned int)__reduce_add_sync(0x0fu, (int)n) + (unsigned int)__reduce_min_sync(~0u, (int)n)
        + (unsigned int)__reduce_max_sync(~0u, (int)n)
        + __reduce_and_sync(~0u, n) + __reduce_or_sync(~0u, n) + __reduce_xor_sync(~0u, n) + __lane_id() + warpSize;
    atomicAdd(u, bal); atomicAdd(f, s); atomicAdd(q, 1ull); atomicAdd_block(i, 1); atomicAdd_system(u + 1, 2u);
    atomicSub(u, 1u); atomicExch(u, 3u); atomicExch(f, 1.f); atomicMin(i, -1); atomicMax(u, 7u); atomicMin(q, 5ull);
    atomicAnd(u, 1u); atomicOr(u, 2u); atomicXor(u, 4u); atomicCAS(u, 1u, 2u); atomicCAS_block(q, 1ull, 2ull);
    atomicCAS_system(i, 1, 2); atomicInc(u, 9u); atomicDec(u, 9u);
    const uint4 v4 = __ldcs(reinterpret_cast<const uint4*>(u)) ;
    s += (float)(__ldg(u) + __ldcg(u) + __ldca(u) + __ldlu(u) + __ldcv(u) + v4.w + make_uint4(1, 2, 3, 4).z);
    s += __fadd_rn(x, s) + __fsub_rn(x, s) + __fmul_rn(x, s) + __fdiv_rn(x, s) + __fmaf_rn(x, s, x) + __fsqrt_rn(x)
        + __frcp_rn(x) + (float)(__dadd_rn(d[0], 1.0) + __dsub_rn(d[0], 1.0) + __dmul_rn(d[0], 2.0)
        + __ddiv_rn(d[0], 3.0) + __fma_rn(d[0], 2.0, 1.0));
    s += __uint_as_float(__float_as_uint(x)) + __int_as_float(__float_as_int(x))
        + (float)__longlong_as_double(__double_as_longlong(d[0]));
    n += __popc(n) + __popcll(q[0]) + __clz((int)n) + __clzll((long long)q[0]) + __ffs((int)n) + __ffsll((long long)q[0])
        + __brev(n) + (unsigned int)__brevll(q[0]) + (unsigned int)__mulhi((int)n, 3) + __umulhi(n, 5u)
        + (unsigned int)__mul64hi((long long)q[0], 7) + (unsigned int)__umul64hi(q[0], 9ull);
    i[1] = __float2int_rn(x) + __float2int_rz(x) + (int)__float2uint_rn(x) + (int)__float2uint_rz(x);
    s += __int2float_rn((int)n) + __uint2float_rn(n);
    s += fabsf(x) + floorf(x) + ceilf(x) + truncf(x) + rintf(x) + nearbyintf(x) + roundf(x) + fminf(x, s) + fmaxf(x, s)
        + fmaf(x, s, x) + copysignf(x, s) + sqrtf(x) + ldexpf(x, 3) + expf(x) + exp2f(x) + exp10f(x) + logf(x)
        + log2f(x) + log10f(x) + rsqrtf(x) + __expf(x) + __logf(x) + __saturatef(x) + tanhf(x)
        + min(x, s) + max(x, s) + (float)(min(1, (int)n) + max(2u, n) + min(3ll, (long long)n) + max(4ull, q[0]));
    d[1] = fabs(d[0]) + floor(d[0]) + ceil(d[0]) + trunc(d[0]) + rint(d[0]) + sqrt(d[0]) + fma(d[0], d[0], 1.0)
        + fmin(d[0], 1.0) + fmax(d[0], 2.0) + min(d[0], 3.0) + max(d[0], 4.0);
    q[1] = (unsigned long long)clock64() + (unsigned long long)clock() + wall_clock64();
    const __nv_bfloat16 h = __float2bfloat16(s);
    const __nv_bfloat162 h2 = __floats2bfloat162_rn(s, x);
    const float2 f2 = __bfloat1622float2(__float22bfloat162_rn(make_float2(s, x)));
    b[0] = __hadd(h, __low2bfloat16(h2));
    b[1] = __hsub(__hmul(h, __high2bfloat16(h2)), __hdiv(h, __hmax(h, __hmin(h, __hneg(h)))));
    b[2] = __float2bfloat16_rn(__low2float(h2) + __high2float(h2) + f2.x + __bfloat162float(__ushort_as_bfloat16(
        __bfloat16_as_ushort(__float2bfloat16_rz(s)))));
    b[3] = __halves2bfloat162(h, h).y;
    nv_bfloat16 implicit = s;
    use(f, s + (float)implicit);
    use(u, n);
}
"""


def test_every_prelude_function_compiles_and_links(clang):
    """Every name the prelude lists lowers to instructions: a libcall would be an
    undefined symbol at link time, and that fails the compile."""
    code, _ = amd.compile_gfx1151(PRELUDE_EVERYTHING, "everything", ())
    assert code[:4] == b"\x7fELF"


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    from ml_dtypes import bfloat16

    with np.errstate(invalid="ignore"):  # NaN inputs
        return values.astype(bfloat16).view(np.uint16)


def test_bf16_round_to_nearest_even_matches_ml_dtypes(clang):
    """__float2bfloat16 is evaluated by clang at compile time (static_assert) and must
    give ml_dtypes' round-to-nearest-even bits for ties, carries, infinities and NaN."""
    bits = np.array(
        [0x3F800000, 0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0x3FFF8000, 0x7F7FFFFF, 0x7F7F8000,
         0x7F800000, 0xFF800000, 0x00000001, 0x80008000, 0x00018000, 0xC2F6E979, 0x7FC00000, 0x7F800001,
         0xFFFFFFFF],
        dtype=np.uint32,
    )
    floats = bits.view(np.float32)
    expected = _bf16_bits(floats)
    checks = []
    for b, f, e in zip(bits, floats, expected):
        if np.isnan(f):  # any NaN stays a NaN: exponent all ones, nonzero mantissa, sign kept
            checks.append(f"static_assert((__hrx_f32_to_bf16_rn(__builtin_bit_cast(float, 0x{b:08x}u)) & 0x7fffu) > 0x7f80u"
                          f" && (__hrx_f32_to_bf16_rn(__builtin_bit_cast(float, 0x{b:08x}u)) >> 15) == {b >> 31}u);")
        else:
            checks.append(f"static_assert(__hrx_f32_to_bf16_rn(__builtin_bit_cast(float, 0x{b:08x}u)) == 0x{e:04x}u);")
    source = "\n".join(checks) + '\nextern "C" __global__ void bf16_checks() {}\n'
    amd.compile_gfx1151(source, "bf16_checks", ())


def _objdump() -> str | None:
    return shutil.which("llvm-objdump-19") or shutil.which("llvm-objdump")


def _disassemble(code: bytes, tmp_path: Path) -> str:
    tool = _objdump()
    if tool is None:
        pytest.skip("llvm-objdump not installed (Debian: llvm-19)")
    path = tmp_path / "k.co"
    path.write_bytes(code)
    return subprocess.run([tool, "-d", str(path)], capture_output=True, text=True, check=True).stdout


def test_rn_intrinsics_are_never_contracted(clang, tmp_path):
    source = r"""
extern "C" __global__ void contract(float* y, const float* a, const float* b, const float* c) {
    const unsigned int i = threadIdx.x;
    y[i] = %s;
}
"""
    fused = _disassemble(amd.compile_gfx1151(source % "a[i] * b[i] + c[i]", "contract", ())[0], tmp_path)
    assert re.search(r"v_fma", fused), "plain a*b+c contracts (as NVCC's default --fmad=true)"
    exact = _disassemble(amd.compile_gfx1151(source % "__fadd_rn(__fmul_rn(a[i], b[i]), c[i])", "contract", ())[0],
                         tmp_path)
    assert not re.search(r"v_fma", exact) and "v_mul_f32" in exact and "v_add_f32" in exact
    nofmad = _disassemble(amd.compile_gfx1151(source % "a[i] * b[i] + c[i]", "contract", ("--fmad=false",))[0], tmp_path)
    assert not re.search(r"v_fma", nofmad)


def test_indices_read_the_v5_implicit_arguments(clang, codeobject):
    source = r"""
extern "C" __global__ void dims(unsigned int* out) {
    out[0] = gridDim.x + gridDim.y + gridDim.z;
    out[1] = blockDim.x + blockDim.y + blockDim.z;
}
"""
    co = codeobject.CodeObject(amd.compile_gfx1151(source, "dims", ())[0])
    k = co.kernel("dims")
    kinds = {a.value_kind for a in k.hidden_args}
    assert {"hidden_block_count_x", "hidden_block_count_y", "hidden_block_count_z",
            "hidden_group_size_x", "hidden_group_size_y", "hidden_group_size_z"} <= kinds
    assert not k.descriptor.enable_sgpr_dispatch_ptr  # nothing read from the dispatch packet


def _llvm_ir(clang: amd.Clang, source: str, tmp_path: Path) -> str:
    src = tmp_path / "ir.hip"
    src.write_text(source)
    prelude = tmp_path / "prelude.h"
    prelude.write_text(amd.prelude_text())
    args = [a for a in amd.BASE_ARGS if a != "--no-gpu-bundle-output"]
    return subprocess.run([clang.path, *args, "-include", str(prelude), "-S", "-emit-llvm", str(src), "-o", "-"],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("axis", "xyz")
def test_grid_and_block_dims_read_the_hidden_arguments_llvm_describes(axis, clang, codeobject, tmp_path):
    """gridDim/blockDim load from the implicit argument block exactly where the code
    object's own metadata puts hidden_block_count_<axis> and hidden_group_size_<axis>."""
    for name, kind in (("gridDim", "hidden_block_count"), ("blockDim", "hidden_group_size")):
        source = f'extern "C" __global__ void one(unsigned int* out) {{ out[0] = {name}.{axis}; }}\n'
        co = codeobject.CodeObject(amd.compile_gfx1151(source, "one", ())[0])
        k = co.kernel("one")
        arg = k.hidden_arg(f"{kind}_{axis}")
        implicit_base = k.hidden_args[0].offset  # the implicit argument pointer points at the first
        ir = _llvm_ir(clang, source, tmp_path)
        loads = re.findall(r"getelementptr inbounds i8, ptr addrspace\(4\) %\d+, i64 (\d+)\n\s*%\d+ = load i(\d+)", ir)
        if arg.offset == implicit_base:  # offset 0: a load straight from the pointer
            loads = loads or [("0", m) for m in re.findall(r"load i(\d+), ptr addrspace\(4\) %\d+", ir)]
        assert loads == [(str(arg.offset - implicit_base), str(8 * arg.size))], (name, axis, loads, ir)


# -- options, errors, discovery ------------------------------------------------------------------


def test_option_translation():
    assert amd.translate_options(["--fmad=false", "-DX=1", "--define-macro=Y", "-UZ", "--std=c++20", "-O2",
                                  "-ffast-math", "-Wno-unused", "-I/tmp/inc", "--include-path=/opt/inc"]) == (
        "-ffp-contract=off", "-DX=1", "-DY", "-UZ", "-std=c++20", "-O2", "-ffast-math", "-Wno-unused", "-I/tmp/inc",
        "-I/opt/inc")
    for bad in ("--gpu-architecture=sm_90", "-arch=sm_80", "-mcode-object-version=4", "--offload-arch=gfx90a",
                "-fgpu-rdc", "-o", "bogus", "-x"):
        with pytest.raises(hrx.CompileError):
            amd.translate_options([bad])


def test_compile_errors_carry_clangs_log(clang):
    with pytest.raises(hrx.CompileError) as info:
        amd.compile_gfx1151('extern "C" __global__ void broken(int* p) { p[0] = undeclared; }', "broken", ())
    assert "undeclared" in info.value.log and "kernel.hip" in info.value.log
    with pytest.raises(hrx.CompileError, match="undefined"):  # no device library behind a libm call
        amd.compile_gfx1151('extern "C" __device__ float sinf(float);\n'
                            'extern "C" __global__ void k(float* p) { p[0] = sinf(p[1]); }', "k", ())
    with pytest.raises(hrx.CompileError, match="expected CUDA C"):
        amd.compile_gfx1151(12345, "k", ())


def test_missing_entry_is_named(clang, codeobject):
    with pytest.raises(hrx.CompileError, match=r"no kernel 'other' \(kernels: present\)"):
        amd.compile_gfx1151('extern "C" __global__ void present() {}', "other", ())


def test_no_clang_is_reported_with_what_to_do(monkeypatch):
    monkeypatch.setenv(amd.ENV_CLANG, "/nonexistent/clang-99")
    amd.reset_for_tests()
    try:
        with pytest.raises(hrx.CompileError, match="HRX_CLANG=/nonexistent/clang-99.*apt-get install clang-19 lld-19"):
            amd.find_clang()
        (row,) = amd.doctor_rows()
        assert row[:2] == ("amdgpu", "gfx1151 compiler") and "HRX_CLANG" in row[2]
        assert "clang=none" in amd.salt()
    finally:
        monkeypatch.delenv(amd.ENV_CLANG)
        amd.reset_for_tests()


def test_doctor_names_the_clang(clang):
    (row,) = amd.doctor_rows()
    assert row == ("amdgpu", "gfx1151 compiler", clang.describe())
    assert row[2].startswith(f"{clang.command} {clang.version}")
    rows = [r for result in plugins.plugin_manager().hook.hrx_doctor() for r in result]
    assert row in rows  # through hrx_gpu's hrx_doctor hook, as `hrx doctor` shows it


def test_disk_cache_is_used(clang, tmp_path, monkeypatch):
    monkeypatch.setenv("HRX_CACHE_DIR", str(tmp_path))
    cache = plugins.registry().compile_cache
    source = 'extern "C" __global__ void cached(int* p) { p[threadIdx.x] = 42; }\n'
    first = plugins.compile(source, target="gfx1151", entry="cached")
    assert list((tmp_path / "gfx1151").glob("*.bin"))
    cache.clear()
    disk_hits = cache.disk_hits
    again = plugins.compile(source, target="gfx1151", entry="cached")
    assert cache.disk_hits == disk_hits + 1 and again.code == first.code
