"""hrx_amdf.codeobject: AMDGPU code objects read with pyelftools and msgpack.

Code objects are made here by clang (HIP device code and assembler ``.amdhsa_kernel``
directives, so LLVM's own encoder writes the descriptors we decode); tests that need
clang skip with the reason where none exists (CI installs clang-19 and lld-19). Facts
are cross-checked against independent sources: tinygrad's autogen of LLVM's
AMDHSAKernelDescriptor.h and ``llvm-readelf``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from hrx_core.errors import ArtifactError, InvalidArgument

co_mod = pytest.importorskip("hrx_amdf.codeobject", reason="hrx-amdf is not installed (pip install -e 'plugins/hrx_amdf[test]')")
from hrx_amdf.codeobject import (  # noqa: E402
    DESCRIPTOR_OFFSETS,
    KERNEL_CODE_PROPERTIES,
    KERNEL_CODE_PROPERTIES_RESERVED,
    KERNARG_PRELOAD_FIELDS,
    RSRC1_FIELDS,
    RSRC2_FIELDS,
    RSRC3_FIELDS,
    CodeObject,
    KernelDescriptor,
    UserSgpr,
)

# -- building code objects -------------------------------------------------------------------


def _find_clang() -> str | None:
    forced = os.environ.get("HRX_CLANG", "").strip()
    for name in (forced,) if forced else ("clang-19", "clang-18", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def clang(tmp_path_factory) -> str:
    path = _find_clang()
    if path is None:
        pytest.skip("no clang found (HRX_CLANG, clang-19, clang-18, clang): apt-get install clang-19 lld-19")
    probe = tmp_path_factory.mktemp("probe")
    try:
        _build(path, probe, 'extern "C" __attribute__((global)) void k() {}', "hip")
    except AssertionError as exc:
        pytest.skip(f"{path} cannot link gfx1151 code objects (needs lld): {exc}")
    return path


def _build(clang: str, workdir: Path, source: str, lang: str, mcpu: str = "gfx1151") -> bytes:
    src = workdir / ("k.hip" if lang == "hip" else "k.s")
    out = workdir / "k.co"
    src.write_text(source)
    if lang == "hip":
        cmd = [clang, "-x", "hip", f"--offload-arch={mcpu}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
               "--no-gpu-bundle-output", "-O3", "-mcode-object-version=5", str(src), "-o", str(out)]
    else:
        cmd = [clang, "--target=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-mcode-object-version=5", str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


@pytest.fixture
def build(clang, tmp_path):
    def run(source: str, lang: str = "hip", mcpu: str = "gfx1151") -> bytes:
        return _build(clang, tmp_path, source, lang, mcpu)

    return run


HIP = r"""
#define G extern "C" __attribute__((global))
G void add_u32(unsigned int* data, unsigned int value, unsigned int n) {
    unsigned int i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x()
                     + __builtin_amdgcn_workitem_id_x();
    if (i < n) data[i] += value;
}
G void __attribute__((amdgpu_flat_work_group_size(1, 256))) lds_scratch(float* out, int n, double d, char c) {
    __attribute__((shared)) float tile[300];
    volatile int buf[64];
    for (int i = 0; i < 64; ++i) buf[i] = i * n;
    tile[__builtin_amdgcn_workitem_id_x()] = (float)buf[n & 63] + (float)d + c;
    __builtin_amdgcn_s_barrier();
    out[0] = tile[n & 255] + *(const int*)__builtin_amdgcn_dispatch_ptr();
}
"""

RELOCS = r"""
#define DEV __attribute__((device))
__attribute__((visibility("default"))) DEV int dtable[4] = {11, 22, 33, 44};
__attribute__((visibility("default"))) DEV int* dptrs[2] = {&dtable[0], &dtable[2]};
DEV int ptable[2] = {5, 6};
DEV int* pptrs[2] = {&ptable[0], &ptable[1]};
extern "C" __attribute__((global)) void rel(int* out) {
    unsigned int t = __builtin_amdgcn_workitem_id_x() & 1;
    out[0] = *dptrs[t] + *pptrs[t];
}
"""


def _asm(mcpu: str, directives: str, sgprs: str = "", extra_meta: str = "") -> str:
    return f"""
.amdgcn_target "amdgcn-amd-amdhsa--{mcpu}"
.text
.globl asmk
.p2align 8
.type asmk,@function
asmk:
  s_endpgm
.Lasmk_end:
.size asmk, .Lasmk_end-asmk
.rodata
.p2align 6
.amdhsa_kernel asmk
{directives}
  .amdhsa_next_free_vgpr 40
  .amdhsa_next_free_sgpr 20
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--{mcpu}
amdhsa.kernels:
  - .name: asmk
    .symbol: asmk.kd
    .kernarg_segment_size: 48
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 1234
    .private_segment_fixed_size: 96
    .wavefront_size: 32
    .sgpr_count: 22
    .vgpr_count: 40
    .max_flat_workgroup_size: 256
    .uses_dynamic_stack: true
{extra_meta}    .args:
      - {{ .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global, .access: read_only }}
      - {{ .offset: 8, .size: 4, .value_kind: by_value }}
      - {{ .offset: 16, .size: 8, .value_kind: hidden_global_offset_x }}
...
.end_amdgpu_metadata
"""


COMMON_DIRECTIVES = """
  .amdhsa_group_segment_fixed_size 1234
  .amdhsa_private_segment_fixed_size 96
  .amdhsa_kernarg_size 48
  .amdhsa_wavefront_size32 1
  .amdhsa_uses_dynamic_stack 1
  .amdhsa_system_sgpr_workgroup_id_y 1
  .amdhsa_system_vgpr_workitem_id 2
  .amdhsa_ieee_mode 0
"""

# -- independent facts: tinygrad's autogen of AMDHSAKernelDescriptor.h -----------------------

#: Qualifiers under which tinygrad (LLVM) names fields that exist on gfx11.
_GFX11_QUALIFIERS = ("", "GFX6_GFX11_", "GFX9_PLUS_", "GFX10_PLUS_", "GFX10_GFX11_", "GFX11_", "GFX11_PLUS_")


def _tinygrad_field(kd, register: str, name: str) -> tuple[int, int]:
    found = [
        (getattr(kd, f"{register}_{q}{name.upper()}_SHIFT"), getattr(kd, f"{register}_{q}{name.upper()}_WIDTH"))
        for q in _GFX11_QUALIFIERS
        if hasattr(kd, f"{register}_{q}{name.upper()}_SHIFT")
    ]
    assert len(found) == 1, f"{register} {name}: {found}"
    return found[0]


def test_descriptor_layout_matches_tinygrad_autogen():
    kd = pytest.importorskip("tinygrad.runtime.autogen.amdgpu_kd", reason="tinygrad (hrx-amdf[test]) not installed")
    assert kd.llvm_amdhsa_kernel_descriptor_t.SIZE == co_mod.KERNEL_DESCRIPTOR_SIZE == 64
    for name, offset in DESCRIPTOR_OFFSETS.items():
        assert getattr(kd, f"{name.upper()}_OFFSET") == offset, name
    for name, bit in KERNEL_CODE_PROPERTIES.items():
        assert getattr(kd, f"KERNEL_CODE_PROPERTY_{name.upper()}_SHIFT") == bit, name
        assert getattr(kd, f"KERNEL_CODE_PROPERTY_{name.upper()}_WIDTH") == 1, name
    assert kd.KERNEL_CODE_PROPERTY_RESERVED0 | kd.KERNEL_CODE_PROPERTY_RESERVED1 == KERNEL_CODE_PROPERTIES_RESERVED
    for name, field in KERNARG_PRELOAD_FIELDS.items():
        assert (getattr(kd, f"{name.upper()}_SHIFT"), getattr(kd, f"{name.upper()}_WIDTH")) == field, name
    for register, fields in (("COMPUTE_PGM_RSRC1", RSRC1_FIELDS), ("COMPUTE_PGM_RSRC2", RSRC2_FIELDS),
                             ("COMPUTE_PGM_RSRC3", RSRC3_FIELDS)):
        for name, field in fields.items():
            assert _tinygrad_field(kd, register, name) == field, (register, name)


def test_descriptor_encode_decode_round_trip():
    d = KernelDescriptor(
        group_segment_fixed_size=1, private_segment_fixed_size=2, kernarg_size=3, kernel_code_entry_byte_offset=-256,
        compute_pgm_rsrc3=4, compute_pgm_rsrc1=5, compute_pgm_rsrc2=6, kernel_code_properties=0x40F,
        kernarg_preload=(3 << 7) | 2,
    )
    raw = d.encode()
    assert len(raw) == 64 and KernelDescriptor.decode(raw) == d
    assert struct.unpack_from("<q", raw, DESCRIPTOR_OFFSETS["kernel_code_entry_byte_offset"])[0] == -256
    assert d.kernarg_preload_spec_length == 2 and d.kernarg_preload_spec_offset == 3
    assert [s.name for s in d.user_sgprs()] == [
        "private_segment_buffer", "dispatch_ptr", "queue_ptr", "kernarg_segment_ptr", "preloaded_kernargs"]
    with pytest.raises(ArtifactError, match="reserved bytes are zero"):
        KernelDescriptor.decode(raw[:12] + b"\1" + raw[13:])
    with pytest.raises(ArtifactError, match="reserved bits are zero"):
        KernelDescriptor.decode(raw[:56] + struct.pack("<H", 0x80) + raw[58:])
    with pytest.raises(ArtifactError, match="64 bytes"):
        KernelDescriptor.decode(raw[:63])


# -- code objects made by clang ----------------------------------------------------------------


def test_hip_kernels(build):
    data = build(HIP)
    co = CodeObject(data, target="gfx1151")
    assert co.target == "gfx1151" and co.target_id == "amdgcn-amd-amdhsa--gfx1151"
    assert co.version == 5 and co.metadata_version == (1, 2)
    assert list(co.kernels) == ["add_u32", "lds_scratch"]

    add = co.kernel("add_u32")
    assert add.symbol == "add_u32.kd"
    assert [(a.value_kind, a.offset, a.size) for a in add.explicit_args] == [
        ("global_buffer", 0, 8), ("by_value", 8, 4), ("by_value", 12, 4)]
    assert add.explicit_args[0].address_space == "global"
    hidden = {a.value_kind: a for a in add.hidden_args}
    assert hidden["hidden_block_count_x"].offset == 16 and hidden["hidden_group_size_x"].size == 2
    assert add.hidden_arg("hidden_group_size_x").offset == 16 + 12
    assert add.kernarg_segment_size == add.descriptor.kernarg_size
    assert add.wavefront_size == 32 and add.descriptor.enable_wavefront_size32
    assert add.user_sgprs == (UserSgpr("kernarg_segment_ptr", 2),)
    assert add.user_sgpr_count == add.descriptor.user_sgpr_count == 2
    assert add.user_sgpr("kernarg_segment_ptr") == (0, 2) and add.user_sgpr("dispatch_ptr") is None
    assert add.descriptor.rsrc2("enable_sgpr_workgroup_id_x") == 1
    assert add.max_flat_workgroup_size == 1024 and add.uniform_work_group_size

    k = co.kernel("lds_scratch")
    assert k.max_flat_workgroup_size == 256
    assert [(a.value_kind, a.offset, a.size) for a in k.explicit_args] == [
        ("global_buffer", 0, 8), ("by_value", 8, 4), ("by_value", 16, 8), ("by_value", 24, 1)]
    assert k.group_segment_fixed_size == k.descriptor.group_segment_fixed_size >= 1200
    assert k.private_segment_fixed_size == k.descriptor.private_segment_fixed_size >= 256
    assert k.descriptor.rsrc2("enable_private_segment") == 1
    assert [s.name for s in k.user_sgprs] == ["dispatch_ptr", "kernarg_segment_ptr"]
    assert k.user_sgpr("kernarg_segment_ptr") == (2, 2) and k.user_sgpr("dispatch_ptr") == (0, 2)

    base = 0x7F12_3456_0000
    for kern in co.kernels.values():
        assert kern.descriptor_address(base) == base + kern.descriptor_offset
        assert kern.entry_address(base) == base + kern.descriptor_offset + kern.descriptor.kernel_code_entry_byte_offset
        assert kern.entry_address(base) % 256 == 0
    image = co.load_image(base)
    assert len(image) == co.image_size
    raw = image[add.descriptor_offset : add.descriptor_offset + 64]
    assert KernelDescriptor.decode(raw) == add.descriptor and add.descriptor.encode() == raw


def _readelf() -> str | None:
    return shutil.which("llvm-readelf-19") or shutil.which("llvm-readelf")


def test_metadata_matches_llvm_readelf(build, tmp_path):
    readelf = _readelf()
    if readelf is None:
        pytest.skip("llvm-readelf not installed (Debian: llvm-19)")
    yaml = pytest.importorskip("yaml", reason="PyYAML reads llvm-readelf's metadata dump")
    data = build(HIP)
    path = tmp_path / "hip.co"
    path.write_bytes(data)
    out = subprocess.run([readelf, "--notes", "--elf-output-style=JSON", str(path)], capture_output=True, text=True,
                         check=True).stdout
    notes = [n for s in json.loads(out)[0]["NoteSections"] for n in s["NoteSection"]["Notes"]]
    (note,) = [n for n in notes if n["Owner"] == "AMDGPU"]
    assert note["Type"].startswith("NT_AMDGPU_METADATA")
    assert yaml.safe_load(note["AMDGPU Metadata"]) == CodeObject(data).metadata
    header = subprocess.run([readelf, "-h", str(path)], capture_output=True, text=True, check=True).stdout
    assert "gfx1151" in header and "AMDGPU - HSA" in header and "EM_AMDGPU" in header


@pytest.mark.parametrize("mcpu,directives,expected", [
    ("gfx1151", """
  .amdhsa_user_sgpr_dispatch_ptr 1
  .amdhsa_user_sgpr_queue_ptr 1
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_user_sgpr_dispatch_id 1
  .amdhsa_user_sgpr_private_segment_size 1
""", [("dispatch_ptr", 0, 2), ("queue_ptr", 2, 2), ("kernarg_segment_ptr", 4, 2), ("dispatch_id", 6, 2),
      ("private_segment_size", 8, 1)]),
    ("gfx1151", """
  .amdhsa_user_sgpr_queue_ptr 1
  .amdhsa_user_sgpr_dispatch_id 1
""", [("queue_ptr", 0, 2), ("dispatch_id", 2, 2)]),
    # private segment buffer and flat scratch init exist up to gfx10
    ("gfx1030", """
  .amdhsa_user_sgpr_private_segment_buffer 1
  .amdhsa_user_sgpr_dispatch_ptr 1
  .amdhsa_user_sgpr_queue_ptr 1
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_user_sgpr_dispatch_id 1
  .amdhsa_user_sgpr_flat_scratch_init 1
  .amdhsa_user_sgpr_private_segment_size 1
""", [("private_segment_buffer", 0, 4), ("dispatch_ptr", 4, 2), ("queue_ptr", 6, 2), ("kernarg_segment_ptr", 8, 2),
      ("dispatch_id", 10, 2), ("flat_scratch_init", 12, 2), ("private_segment_size", 14, 1)]),
])
def test_descriptor_written_by_llvm_assembler(build, mcpu, directives, expected):
    """LLVM's assembler encodes .amdhsa_kernel directives and counts the user SGPRs itself."""
    # RSRC2 bit 0 (scratch): its directive differs between gfx10 and gfx11
    scratch = ".amdhsa_system_sgpr_private_segment_wavefront_offset 1" if mcpu == "gfx1030" else \
        ".amdhsa_enable_private_segment 1"
    data = build(_asm(mcpu, directives + COMMON_DIRECTIVES + "  " + scratch + "\n"), lang="asm", mcpu=mcpu)
    co = CodeObject(data)
    assert co.target == mcpu
    k = co.kernel("asmk")
    d = k.descriptor
    assert [(name, *k.user_sgpr(name)) for name, _ in k.user_sgprs] == expected
    assert [(s.name, s.count) for s in k.user_sgprs] == [(n, c) for n, _, c in expected]
    assert d.user_sgpr_count == sum(c for _, _, c in expected)  # the assembler's count
    assert (d.group_segment_fixed_size, d.private_segment_fixed_size, d.kernarg_size) == (1234, 96, 48)
    assert d.enable_wavefront_size32 and d.uses_dynamic_stack and k.uses_dynamic_stack
    assert d.rsrc2("enable_private_segment") == 1
    assert d.rsrc2("enable_sgpr_workgroup_id_y") == 1 and d.rsrc2("enable_sgpr_workgroup_id_z") == 0
    assert d.rsrc2("enable_vgpr_workitem_id") == 2
    assert d.rsrc1("enable_ieee_mode") == 0
    names = {n for n, _, _ in expected}
    for flag, prop in (("dispatch_ptr", d.enable_sgpr_dispatch_ptr), ("queue_ptr", d.enable_sgpr_queue_ptr),
                       ("dispatch_id", d.enable_sgpr_dispatch_id),
                       ("private_segment_buffer", d.enable_sgpr_private_segment_buffer),
                       ("flat_scratch_init", d.enable_sgpr_flat_scratch_init),
                       ("kernarg_segment_ptr", d.enable_sgpr_kernarg_segment_ptr),
                       ("private_segment_size", d.enable_sgpr_private_segment_size)):
        assert prop == (flag in names), flag
    assert k.explicit_args[0].access == "read_only"
    assert [a.value_kind for a in k.hidden_args] == ["hidden_global_offset_x"]


def test_relocations_applied_for_the_base(build, tmp_path):
    data = build(RELOCS)
    co = CodeObject(data, target="gfx1151")
    kinds = sorted({r.type for r in co.relocations})
    assert kinds == [co_mod.R_AMDGPU_ABS64, co_mod.R_AMDGPU_RELATIVE64]
    symbols = {}
    from elftools.elf.elffile import ELFFile

    for sym in ELFFile(io.BytesIO(data)).get_section_by_name(".dynsym").iter_symbols():
        symbols[sym.name] = sym["st_value"]
    base = 0x1234_5600_0000
    image = co.load_image(base)
    unrelocated = co.load_image(0) if not co.relocations else None
    assert unrelocated is None
    word = lambda img, off: struct.unpack_from("<Q", img, off)[0]  # noqa: E731
    # dptrs (ABS64 against dtable) and pptrs (RELATIVE64) point into the loaded image
    assert word(image, symbols["dptrs"]) == base + symbols["dtable"]
    assert word(image, symbols["dptrs"] + 8) == base + symbols["dtable"] + 8
    assert word(image, symbols["pptrs"]) == base + symbols["ptable"]
    assert word(image, symbols["pptrs"] + 8) == base + symbols["ptable"] + 4
    assert struct.unpack_from("<4i", image, symbols["dtable"]) == (11, 22, 33, 44)
    for rel in co.relocations:
        assert word(image, rel.offset) == rel.value(base)
    # every other byte is the file's (segments) or zero (bss, gaps)
    patched = {r.offset + i for r in co.relocations for i in range(8)}
    expected = bytearray(co.image_size)
    for s in co.segments:
        expected[s.vaddr : s.vaddr + s.filesz] = data[s.offset : s.offset + s.filesz]
    assert all(image[i] == expected[i] for i in range(co.image_size) if i not in patched)
    readelf = _readelf()
    if readelf is not None:
        path = tmp_path / "rel.co"
        path.write_bytes(data)
        out = subprocess.run([readelf, "-r", str(path)], capture_output=True, text=True, check=True).stdout
        listed = [line.split() for line in out.splitlines() if "R_AMDGPU_" in line]
        assert sorted((int(f[0], 16), f[2]) for f in listed) == sorted(
            (r.offset, co_mod.RELOCATION_NAMES[r.type]) for r in co.relocations)


def test_load_image_base_is_checked(build):
    co = CodeObject(build(HIP))
    with pytest.raises(InvalidArgument, match="aligned"):
        co.load_image(0x1000 + 8)
    with pytest.raises(InvalidArgument):
        co.load_image(-4096)
    with pytest.raises(InvalidArgument):
        co.load_image(2**64 - 4096)
    with pytest.raises(InvalidArgument):
        co.load_image("0x1000")  # type: ignore[arg-type]


# -- malformed input: each rule named ------------------------------------------------------------


def _dynsym(data: bytes):
    from elftools.elf.elffile import ELFFile

    return ELFFile(io.BytesIO(data)).get_section_by_name(".dynsym")


def _note_offset(data: bytes) -> int:
    """File offset of the AMDGPU note's header (namesz, descsz, type)."""
    from elftools.elf.elffile import ELFFile

    sec = ELFFile(io.BytesIO(data)).get_section_by_name(".note")
    return sec["sh_offset"]


def _patch(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new):]


def _kd_file_offset(data: bytes, name: str) -> int:
    co = CodeObject(data)
    k = co.kernel(name)
    seg = next(s for s in co.segments if s.vaddr <= k.descriptor_offset < s.vaddr + s.filesz)
    return seg.offset + (k.descriptor_offset - seg.vaddr)


@pytest.fixture
def good(build) -> bytes:
    return build(HIP)


def test_truncated(good):
    for size in (0, 10, 63, 100, len(good) // 2, len(good) - 1):
        with pytest.raises(ArtifactError, match="code object: "):
            CodeObject(good[:size])


def test_header_rules(good):
    cases = [
        (_patch(good, 4, b"\x01"), "ELF64"),
        (_patch(good, 5, b"\x02"), "little endian"),
        (_patch(good, 18, struct.pack("<H", 62)), "e_machine is EM_AMDGPU"),
        (_patch(good, 7, b"\x00"), "OS ABI is AMDGPU HSA"),
        (_patch(good, 8, b"\x02"), "code object v5"),
        (_patch(good, 16, struct.pack("<H", 1)), "ET_DYN"),
        (_patch(good, 48, struct.pack("<I", 0x041)), "amdhsa.target agrees with e_flags"),
        (_patch(good, 48, struct.pack("<I", 0x0FE)), "known AMDGPU processor"),
        (b"\x7fELF" + b"\0" * 12, "ELF file"),
        (b"not an elf at all" * 8, "ELF file"),
    ]
    for data, rule in cases:
        with pytest.raises(ArtifactError, match=rule):
            CodeObject(data)
    with pytest.raises(ArtifactError, match="code object for gfx1100"):
        CodeObject(good, target="gfx1100")
    with pytest.raises(InvalidArgument):
        CodeObject("text")  # type: ignore[arg-type]


def test_missing_metadata_note(good):
    off = _note_offset(good)
    namesz, descsz, ntype = struct.unpack_from("<III", good, off)
    assert ntype == co_mod.NT_AMDGPU_METADATA and good[off + 12 : off + 12 + namesz] == b"AMDGPU\0"
    with pytest.raises(ArtifactError, match="one NT_AMDGPU_METADATA"):
        CodeObject(_patch(good, off + 8, struct.pack("<I", 33)))
    with pytest.raises(ArtifactError, match="one NT_AMDGPU_METADATA"):
        CodeObject(_patch(good, off + 12, b"AMDGPX"))


def test_bad_msgpack(good):
    off = _note_offset(good)
    namesz = struct.unpack_from("<I", good, off)[0]
    desc = off + 12 + ((namesz + 3) & ~3)
    with pytest.raises(ArtifactError, match="valid msgpack"):
        CodeObject(_patch(good, desc, b"\xc1"))  # 0xc1 is never used by msgpack
    descsz = struct.unpack_from("<I", good, off + 4)[0]
    with pytest.raises(ArtifactError, match="msgpack map"):  # one bin object filling the note
        CodeObject(_patch(good, desc, b"\xc5" + struct.pack(">H", descsz - 3)))
    # a wrong amdhsa.version: the map's keys are in the note, so patch the version array
    version = good.index(b"\xaeamdhsa.version") + 15
    assert good[version : version + 3] == b"\x92\x01\x02"
    with pytest.raises(ArtifactError, match=r"amdhsa.version \[1, 2\]"):
        CodeObject(_patch(good, version, b"\x92\x01\x01"))


def test_missing_kd_symbol(good):
    renamed = good.replace(b"add_u32.kd\0", b"add_u32.kx\0")
    assert renamed != good
    with pytest.raises(ArtifactError, match=r"every kernel has its .kd descriptor symbol"):
        CodeObject(renamed)


def test_descriptor_rules(good):
    kd = _kd_file_offset(good, "add_u32")
    with pytest.raises(ArtifactError, match="reserved bytes are zero"):
        CodeObject(_patch(good, kd + 12, b"\x01"))
    with pytest.raises(ArtifactError, match="kernarg_size .* vs .kernarg_segment_size"):
        CodeObject(_patch(good, kd + 8, struct.pack("<I", 8)))
    rsrc2 = struct.unpack_from("<I", good, kd + 52)[0]
    with pytest.raises(ArtifactError, match="add up to COMPUTE_PGM_RSRC2.USER_SGPR"):
        CodeObject(_patch(good, kd + 52, struct.pack("<I", rsrc2 + (1 << 1))))
    props = struct.unpack_from("<H", good, kd + 56)[0]
    with pytest.raises(ArtifactError, match="wavefront_size"):
        CodeObject(_patch(good, kd + 56, struct.pack("<H", props & ~(1 << 10))))
    entry = struct.unpack_from("<q", good, kd + 16)[0]
    with pytest.raises(ArtifactError, match="256-byte aligned"):
        CodeObject(_patch(good, kd + 16, struct.pack("<q", entry + 4)))
    with pytest.raises(ArtifactError, match="points into executable code"):
        CodeObject(_patch(good, kd + 16, struct.pack("<q", 0)))


def test_relocation_rules(build):
    data = build(RELOCS)
    co = CodeObject(data)
    from elftools.elf.elffile import ELFFile

    rela = ELFFile(io.BytesIO(data)).get_section_by_name(".rela.dyn")
    first = rela["sh_offset"]
    info = struct.unpack_from("<Q", data, first + 8)[0]
    sym, rtype = info >> 32, info & 0xFFFFFFFF
    assert rtype in (co_mod.R_AMDGPU_ABS64, co_mod.R_AMDGPU_RELATIVE64) and co.relocations
    with pytest.raises(ArtifactError, match="R_AMDGPU_RELATIVE64 or R_AMDGPU_ABS64: R_AMDGPU_ABS32"):
        CodeObject(_patch(data, first + 8, struct.pack("<Q", (sym << 32) | 6)))
    with pytest.raises(ArtifactError, match="outside every PT_LOAD"):
        CodeObject(_patch(data, first, struct.pack("<Q", 1 << 40)))
    # an ABS64 against an undefined symbol
    abs_entries = [i for i in range(rela.num_relocations())
                   if rela.get_relocation(i)["r_info_type"] == co_mod.R_AMDGPU_ABS64]
    assert abs_entries
    target = rela.get_relocation(abs_entries[0])["r_info_sym"]
    dynsym = _dynsym(data)
    st_shndx = dynsym["sh_offset"] + target * dynsym["sh_entsize"] + 6
    with pytest.raises(ArtifactError, match="refers to a defined symbol"):
        CodeObject(_patch(data, st_shndx, struct.pack("<H", 0)))
