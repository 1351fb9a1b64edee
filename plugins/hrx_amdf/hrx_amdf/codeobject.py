"""AMDGPU code objects (``amdgcn-amd-amdhsa``, code object v5), read for loading.

A code object is an ELF64 shared object that clang/ld.lld produce for an AMDGPU
target. :class:`CodeObject` reads one with pyelftools (ELF header, program headers,
dynamic symbols and relocations, notes) and msgpack (the ``NT_AMDGPU_METADATA`` note
of the ``AMDGPU`` owner), and gives what an engine and the simulated Strix Halo need:

* the target (``gfx1151``), from the ``e_flags`` machine and the metadata, which must agree;
* every kernel (:class:`CodeObjectKernel`): its 64-byte kernel descriptor decoded
  (:class:`KernelDescriptor`), its argument list (explicit and hidden), segment sizes,
  register counts, wavefront size, and the user-SGPR layout the descriptor implies
  (:class:`UserSgpr`, in the order of the AMDGPU ABI);
* the loaded image: :meth:`CodeObject.load_image` lays the ``PT_LOAD`` segments out at a
  base address (zero-filled ``bss``) and applies the dynamic relocations for that base.

Layouts follow LLVM's AMDGPUUsage document ("Code Object V5 Metadata", "Kernel
Descriptor", "Initial Kernel Execution State") and ``llvm/Support/AMDHSAKernelDescriptor.h``;
the tests check the descriptor offsets and bit positions against tinygrad's independent
autogen of that header, and the metadata against ``llvm-readelf --notes``.

Malformed input raises :class:`hrx_core.errors.ArtifactError` whose message names the
rule it breaks.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator, Mapping
from typing import Any, cast

import attrs
import msgpack
from elftools.elf import enums as elf_enums
from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationTable, RelrRelocationTable
from elftools.elf.segments import NoteSegment

from hrx_core.errors import ArtifactError, InvalidArgument

# -- ELF facts (LLVM BinaryFormat/ELF.h) ----------------------------------------------------

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
#: EI_ABIVERSION of each code object version (ELFABIVERSION_AMDGPU_HSA_V4/V5/V6).
ABI_VERSIONS = {2: 4, 3: 5, 4: 6}
#: Code object versions this reader accepts, with their ``amdhsa.version``.
SUPPORTED_VERSIONS = {5: (1, 2)}
NOTE_OWNER = "AMDGPU"
NT_AMDGPU_METADATA = 32
EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_FEATURE_XNACK = 0x300
EF_AMDGPU_FEATURE_SRAMECC = 0xC00
#: ``EF_AMDGPU_MACH_AMDGCN_*`` values by processor name (each checked against
#: ``llvm-readelf -h`` of a clang-19 code object).
MACHS: Mapping[str, int] = {
    "gfx900": 0x02C, "gfx906": 0x02F, "gfx908": 0x030, "gfx90a": 0x03F,
    "gfx940": 0x040, "gfx941": 0x04B, "gfx942": 0x04C,
    "gfx1010": 0x033, "gfx1030": 0x036, "gfx1031": 0x037,
    "gfx1100": 0x041, "gfx1101": 0x046, "gfx1102": 0x047, "gfx1103": 0x044,
    "gfx1150": 0x043, "gfx1151": 0x04A, "gfx1152": 0x055,
    "gfx1200": 0x048, "gfx1201": 0x04E,
}
_MACH_NAMES = {v: k for k, v in MACHS.items()}
_FEATURE_STATES = {0x000: "unsupported", 0x100: "any", 0x200: "off", 0x300: "on"}

#: AMDGPU relocation types (``R_AMDGPU_*``); the loader applies RELATIVE64 and ABS64.
R_AMDGPU_NONE = 0
R_AMDGPU_ABS64 = 3
R_AMDGPU_RELATIVE64 = 13
RELOCATION_NAMES: Mapping[int, str] = {
    0: "R_AMDGPU_NONE", 1: "R_AMDGPU_ABS32_LO", 2: "R_AMDGPU_ABS32_HI", 3: "R_AMDGPU_ABS64",
    4: "R_AMDGPU_REL32", 5: "R_AMDGPU_REL64", 6: "R_AMDGPU_ABS32", 7: "R_AMDGPU_GOTPCREL",
    8: "R_AMDGPU_GOTPCREL32_LO", 9: "R_AMDGPU_GOTPCREL32_HI", 10: "R_AMDGPU_REL32_LO",
    11: "R_AMDGPU_REL32_HI", 13: "R_AMDGPU_RELATIVE64", 14: "R_AMDGPU_REL16",
}

# -- kernel descriptor (llvm/Support/AMDHSAKernelDescriptor.h) -------------------------------

KERNEL_DESCRIPTOR_SIZE = 64
#: The descriptor's fields in order, with their struct formats (little endian).
DESCRIPTOR_FIELDS: tuple[tuple[str, str], ...] = (
    ("group_segment_fixed_size", "I"),
    ("private_segment_fixed_size", "I"),
    ("kernarg_size", "I"),
    ("reserved0", "4s"),
    ("kernel_code_entry_byte_offset", "q"),
    ("reserved1", "20s"),
    ("compute_pgm_rsrc3", "I"),
    ("compute_pgm_rsrc1", "I"),
    ("compute_pgm_rsrc2", "I"),
    ("kernel_code_properties", "H"),
    ("kernarg_preload", "H"),
    ("reserved3", "4s"),
)
_DESCRIPTOR = struct.Struct("<" + "".join(f for _, f in DESCRIPTOR_FIELDS))
#: Byte offset of each descriptor field.
DESCRIPTOR_OFFSETS: Mapping[str, int] = {
    name: struct.calcsize("<" + "".join(f for _, f in DESCRIPTOR_FIELDS[:i])) for i, (name, _) in enumerate(DESCRIPTOR_FIELDS)
}

#: kernel_code_properties: bit of each flag (bits 7-9 and 12-15 are reserved).
KERNEL_CODE_PROPERTIES: Mapping[str, int] = {
    "enable_sgpr_private_segment_buffer": 0,
    "enable_sgpr_dispatch_ptr": 1,
    "enable_sgpr_queue_ptr": 2,
    "enable_sgpr_kernarg_segment_ptr": 3,
    "enable_sgpr_dispatch_id": 4,
    "enable_sgpr_flat_scratch_init": 5,
    "enable_sgpr_private_segment_size": 6,
    "enable_wavefront_size32": 10,
    "uses_dynamic_stack": 11,
}
KERNEL_CODE_PROPERTIES_RESERVED = 0b1111_0011_1000_0000
#: kernarg_preload: (shift, width) of each field.
KERNARG_PRELOAD_FIELDS: Mapping[str, tuple[int, int]] = {
    "kernarg_preload_spec_length": (0, 7),
    "kernarg_preload_spec_offset": (7, 9),
}
#: COMPUTE_PGM_RSRC1 fields (shift, width); names as in LLVM, gfx10/gfx11 meanings.
RSRC1_FIELDS: Mapping[str, tuple[int, int]] = {
    "granulated_workitem_vgpr_count": (0, 6),
    "granulated_wavefront_sgpr_count": (6, 4),
    "priority": (10, 2),
    "float_round_mode_32": (12, 2),
    "float_round_mode_16_64": (14, 2),
    "float_denorm_mode_32": (16, 2),
    "float_denorm_mode_16_64": (18, 2),
    "priv": (20, 1),
    "enable_dx10_clamp": (21, 1),
    "debug_mode": (22, 1),
    "enable_ieee_mode": (23, 1),
    "bulky": (24, 1),
    "cdbg_user": (25, 1),
    "fp16_ovfl": (26, 1),
    "wgp_mode": (29, 1),
    "mem_ordered": (30, 1),
    "fwd_progress": (31, 1),
}
#: COMPUTE_PGM_RSRC2 fields (shift, width).
RSRC2_FIELDS: Mapping[str, tuple[int, int]] = {
    "enable_private_segment": (0, 1),
    "user_sgpr_count": (1, 5),
    "enable_trap_handler": (6, 1),
    "enable_sgpr_workgroup_id_x": (7, 1),
    "enable_sgpr_workgroup_id_y": (8, 1),
    "enable_sgpr_workgroup_id_z": (9, 1),
    "enable_sgpr_workgroup_info": (10, 1),
    "enable_vgpr_workitem_id": (11, 2),
    "enable_exception_address_watch": (13, 1),
    "enable_exception_memory": (14, 1),
    "granulated_lds_size": (15, 9),
    "enable_exception_ieee_754_fp_invalid_operation": (24, 1),
    "enable_exception_fp_denormal_source": (25, 1),
    "enable_exception_ieee_754_fp_division_by_zero": (26, 1),
    "enable_exception_ieee_754_fp_overflow": (27, 1),
    "enable_exception_ieee_754_fp_underflow": (28, 1),
    "enable_exception_ieee_754_fp_inexact": (29, 1),
    "enable_exception_int_divide_by_zero": (30, 1),
}
#: COMPUTE_PGM_RSRC3 fields on gfx10/gfx11 (shift, width).
RSRC3_FIELDS: Mapping[str, tuple[int, int]] = {
    "shared_vgpr_count": (0, 4),
    "inst_pref_size": (4, 6),
    "trap_on_start": (10, 1),
    "trap_on_end": (11, 1),
    "image_op": (31, 1),
}

#: User SGPRs in the order the AMDGPU ABI assigns them ("Initial Kernel Execution
#: State"): (name, kernel_code_properties flag enabling it, SGPRs it takes).
USER_SGPR_ORDER: tuple[tuple[str, str, int], ...] = (
    ("private_segment_buffer", "enable_sgpr_private_segment_buffer", 4),
    ("dispatch_ptr", "enable_sgpr_dispatch_ptr", 2),
    ("queue_ptr", "enable_sgpr_queue_ptr", 2),
    ("kernarg_segment_ptr", "enable_sgpr_kernarg_segment_ptr", 2),
    ("dispatch_id", "enable_sgpr_dispatch_id", 2),
    ("flat_scratch_init", "enable_sgpr_flat_scratch_init", 2),
    ("private_segment_size", "enable_sgpr_private_segment_size", 1),
)

#: Argument value kinds of code object v5 metadata.
EXPLICIT_VALUE_KINDS = frozenset(
    {"by_value", "global_buffer", "dynamic_shared_pointer", "sampler", "image", "pipe", "queue"}
)
HIDDEN_VALUE_KINDS = frozenset(
    {
        "hidden_global_offset_x", "hidden_global_offset_y", "hidden_global_offset_z", "hidden_none",
        "hidden_printf_buffer", "hidden_hostcall_buffer", "hidden_default_queue", "hidden_completion_action",
        "hidden_multigrid_sync_arg", "hidden_block_count_x", "hidden_block_count_y", "hidden_block_count_z",
        "hidden_group_size_x", "hidden_group_size_y", "hidden_group_size_z", "hidden_remainder_x",
        "hidden_remainder_y", "hidden_remainder_z", "hidden_grid_dims", "hidden_heap_v1",
        "hidden_dynamic_lds_size", "hidden_private_base", "hidden_shared_base", "hidden_queue_ptr",
    }
)


def _fail(rule: str, detail: str) -> ArtifactError:
    return ArtifactError(f"code object: {rule}: {detail}")


def _bits(value: int, field: tuple[int, int]) -> int:
    shift, width = field
    return (value >> shift) & ((1 << width) - 1)


# -- records ----------------------------------------------------------------------------------


@attrs.frozen
class UserSgpr:
    """``count`` consecutive user SGPRs holding ``name``; in a layout they follow the
    SGPRs of the entries before them, from ``s0`` (``for name, count in layout``).

    A record rather than a NamedTuple: a ``count`` field would shadow ``tuple.count``."""

    name: str
    count: int

    def __iter__(self) -> Iterator[str | int]:
        """``name, count = sgpr``."""
        return iter((self.name, self.count))


@attrs.frozen
class KernelDescriptor:
    """The 64-byte amdhsa kernel descriptor, decoded."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    #: Byte offset of the kernel's first instruction from the descriptor (signed).
    kernel_code_entry_byte_offset: int
    compute_pgm_rsrc3: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int

    @classmethod
    def decode(cls, raw: bytes) -> KernelDescriptor:
        """Decode 64 bytes; reserved bytes and bits must be zero (ArtifactError otherwise)."""
        if len(raw) != KERNEL_DESCRIPTOR_SIZE:
            raise _fail("kernel descriptor is 64 bytes", f"got {len(raw)}")
        values = dict(zip((n for n, _ in DESCRIPTOR_FIELDS), _DESCRIPTOR.unpack(raw)))
        for name in ("reserved0", "reserved1", "reserved3"):
            if any(values[name]):
                raise _fail("kernel descriptor reserved bytes are zero", f"{name} = {values[name].hex()}")
        if values["kernel_code_properties"] & KERNEL_CODE_PROPERTIES_RESERVED:
            raise _fail(
                "kernel_code_properties reserved bits are zero", f"0x{values['kernel_code_properties']:04x}"
            )
        return cls(**{k: v for k, v in values.items() if not k.startswith("reserved")})

    def encode(self) -> bytes:
        """The 64 descriptor bytes (reserved bytes zero)."""
        values = attrs.asdict(self)
        return _DESCRIPTOR.pack(
            *(b"\0" * struct.calcsize(f) if n.startswith("reserved") else values[n] for n, f in DESCRIPTOR_FIELDS)
        )

    def _flag(self, name: str) -> bool:
        return bool(self.kernel_code_properties >> KERNEL_CODE_PROPERTIES[name] & 1)

    @property
    def enable_sgpr_private_segment_buffer(self) -> bool:
        return self._flag("enable_sgpr_private_segment_buffer")

    @property
    def enable_sgpr_dispatch_ptr(self) -> bool:
        return self._flag("enable_sgpr_dispatch_ptr")

    @property
    def enable_sgpr_queue_ptr(self) -> bool:
        return self._flag("enable_sgpr_queue_ptr")

    @property
    def enable_sgpr_kernarg_segment_ptr(self) -> bool:
        return self._flag("enable_sgpr_kernarg_segment_ptr")

    @property
    def enable_sgpr_dispatch_id(self) -> bool:
        return self._flag("enable_sgpr_dispatch_id")

    @property
    def enable_sgpr_flat_scratch_init(self) -> bool:
        return self._flag("enable_sgpr_flat_scratch_init")

    @property
    def enable_sgpr_private_segment_size(self) -> bool:
        return self._flag("enable_sgpr_private_segment_size")

    @property
    def enable_wavefront_size32(self) -> bool:
        return self._flag("enable_wavefront_size32")

    @property
    def uses_dynamic_stack(self) -> bool:
        return self._flag("uses_dynamic_stack")

    @property
    def wavefront_size(self) -> int:
        return 32 if self.enable_wavefront_size32 else 64

    @property
    def kernarg_preload_spec_length(self) -> int:
        return _bits(self.kernarg_preload, KERNARG_PRELOAD_FIELDS["kernarg_preload_spec_length"])

    @property
    def kernarg_preload_spec_offset(self) -> int:
        return _bits(self.kernarg_preload, KERNARG_PRELOAD_FIELDS["kernarg_preload_spec_offset"])

    def rsrc1(self, field: str) -> int:
        """A COMPUTE_PGM_RSRC1 field by name (:data:`RSRC1_FIELDS`)."""
        return _bits(self.compute_pgm_rsrc1, RSRC1_FIELDS[field])

    def rsrc2(self, field: str) -> int:
        """A COMPUTE_PGM_RSRC2 field by name (:data:`RSRC2_FIELDS`)."""
        return _bits(self.compute_pgm_rsrc2, RSRC2_FIELDS[field])

    def rsrc3(self, field: str) -> int:
        """A COMPUTE_PGM_RSRC3 field by name (:data:`RSRC3_FIELDS`, gfx10/gfx11)."""
        return _bits(self.compute_pgm_rsrc3, RSRC3_FIELDS[field])

    @property
    def user_sgpr_count(self) -> int:
        """COMPUTE_PGM_RSRC2.USER_SGPR: how many user SGPRs the dispatch initialises."""
        return self.rsrc2("user_sgpr_count")

    def user_sgprs(self) -> tuple[UserSgpr, ...]:
        """The user SGPRs the descriptor enables, in ABI order, then preloaded kernargs."""
        out = [UserSgpr(name, count) for name, flag, count in USER_SGPR_ORDER if self._flag(flag)]
        if self.kernarg_preload_spec_length:
            out.append(UserSgpr("preloaded_kernargs", self.kernarg_preload_spec_length))
        return tuple(out)


@attrs.frozen
class KernelArg:
    """One kernel argument from the metadata (explicit, or hidden: ``hidden_*``)."""

    offset: int
    size: int
    value_kind: str
    address_space: str | None = None
    access: str | None = None
    actual_access: str | None = None
    name: str | None = None
    type_name: str | None = None
    pointee_align: int | None = None
    is_const: bool = False
    is_restrict: bool = False
    is_volatile: bool = False

    @property
    def hidden(self) -> bool:
        return self.value_kind.startswith("hidden_")


@attrs.frozen
class CodeObjectKernel:
    """A kernel of a code object: descriptor, arguments and resource facts."""

    name: str
    symbol: str
    descriptor: KernelDescriptor
    #: Image offset (p_vaddr space) of the kernel descriptor and of the first instruction.
    descriptor_offset: int
    entry_offset: int
    args: tuple[KernelArg, ...]
    kernarg_segment_size: int
    kernarg_segment_align: int
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    wavefront_size: int
    sgpr_count: int
    vgpr_count: int
    max_flat_workgroup_size: int
    uniform_work_group_size: bool
    uses_dynamic_stack: bool
    #: User SGPRs the descriptor implies, in ABI order.
    user_sgprs: tuple[UserSgpr, ...]
    #: The kernel's whole metadata map, as msgpack decoded it.
    metadata: Mapping[str, Any] = attrs.field(eq=False, hash=False, repr=False)

    @property
    def explicit_args(self) -> tuple[KernelArg, ...]:
        return tuple(a for a in self.args if not a.hidden)

    @property
    def hidden_args(self) -> tuple[KernelArg, ...]:
        return tuple(a for a in self.args if a.hidden)

    def hidden_arg(self, value_kind: str) -> KernelArg | None:
        """The hidden argument of ``value_kind`` (e.g. ``hidden_block_count_x``), or None."""
        return next((a for a in self.args if a.value_kind == value_kind), None)

    @property
    def user_sgpr_count(self) -> int:
        return sum(s.count for s in self.user_sgprs)

    def user_sgpr(self, name: str) -> tuple[int, int] | None:
        """``(first, count)``: the user SGPRs ``s[first]..`` (``COMPUTE_USER_DATA_<first>..``)
        holding ``name`` (e.g. ``kernarg_segment_ptr``), or None when it is not enabled."""
        first = 0
        for sgpr in self.user_sgprs:
            if sgpr.name == name:
                return first, sgpr.count
            first += sgpr.count
        return None

    def descriptor_address(self, base: int) -> int:
        """Address of the kernel descriptor when the image is loaded at ``base``."""
        return base + self.descriptor_offset

    def entry_address(self, base: int) -> int:
        """Address of the first instruction when the image is loaded at ``base`` (256-byte aligned)."""
        return base + self.entry_offset


@attrs.frozen
class LoadSegment:
    """A ``PT_LOAD`` segment: ``filesz`` bytes from ``offset`` at ``vaddr``, zero-filled to ``memsz``."""

    vaddr: int
    memsz: int
    filesz: int
    offset: int
    flags: int
    align: int


@attrs.frozen
class Relocation:
    """A dynamic relocation the loader applies (``R_AMDGPU_RELATIVE64`` or ``R_AMDGPU_ABS64``)."""

    offset: int
    type: int
    addend: int
    #: For ABS64: the defined symbol's name and image offset.
    symbol: str | None = None
    symbol_value: int = 0

    def value(self, base: int) -> int:
        """The 64-bit value written at ``base + offset`` for an image loaded at ``base``."""
        if self.type == R_AMDGPU_RELATIVE64:
            return (base + self.addend) & (2**64 - 1)
        return (base + self.symbol_value + self.addend) & (2**64 - 1)


# -- the reader -------------------------------------------------------------------------------


class CodeObject:
    """An AMDGPU code object (code object v5), validated and decoded.

    ``CodeObject(data, target="gfx1151")`` reads ``data`` and, when ``target`` is given,
    requires the code object to be for that processor. Attributes: ``target``
    (``"gfx1151"``), ``target_id`` (``"amdgcn-amd-amdhsa--gfx1151"``), ``xnack`` and
    ``sramecc`` (feature states from ``e_flags``), ``version`` (5), ``metadata_version``,
    ``metadata`` (the whole decoded note), ``kernels`` (by name, in metadata order),
    ``segments``, ``relocations``, ``image_size`` and ``image_align``.
    """

    def __init__(self, data: bytes | bytearray | memoryview, *, target: str | None = None) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidArgument(f"data: expected bytes, got {type(data).__name__}")
        self.data = bytes(data)
        try:
            self._read(target)
        except ArtifactError:
            raise
        except Exception as exc:  # noqa: BLE001 - ELFError, construct's StreamError, struct.error, ...
            raise _fail("well-formed ELF", f"{type(exc).__name__}: {exc}") from None

    def __repr__(self) -> str:
        return f"<CodeObject {self.target} v{self.version} kernels={','.join(self.kernels)} size={self.image_size}>"

    def kernel(self, name: str) -> CodeObjectKernel:
        """The kernel ``name``; ArtifactError naming the kernels there are when absent."""
        found = self.kernels.get(name)
        if found is None:
            raise _fail("kernel present", f"no kernel {name!r} (kernels: {', '.join(self.kernels) or 'none'})")
        return found

    # -- header ---------------------------------------------------------------------------

    def _read(self, target: str | None) -> None:
        if len(self.data) < 64 or self.data[:4] != b"\x7fELF":
            raise _fail("ELF file", f"{len(self.data)} bytes without a complete ELF header")
        elf = ELFFile(io.BytesIO(self.data))
        ident = elf["e_ident"]
        if ident["EI_CLASS"] != "ELFCLASS64":
            raise _fail("ELF64", f"EI_CLASS is {ident['EI_CLASS']}")
        if ident["EI_DATA"] != "ELFDATA2LSB":
            raise _fail("little endian", f"EI_DATA is {ident['EI_DATA']}")
        if _enum_value(elf_enums.ENUM_E_MACHINE, elf["e_machine"]) != EM_AMDGPU:
            raise _fail(f"e_machine is EM_AMDGPU ({EM_AMDGPU})", f"got {elf['e_machine']}")
        if _enum_value(elf_enums.ENUM_EI_OSABI, ident["EI_OSABI"]) != ELFOSABI_AMDGPU_HSA:
            raise _fail(f"OS ABI is AMDGPU HSA ({ELFOSABI_AMDGPU_HSA})", f"got {ident['EI_OSABI']}")
        for table, offset, count, size in (
            ("program header", elf["e_phoff"], elf["e_phnum"], elf["e_phentsize"]),
            ("section header", elf["e_shoff"], elf["e_shnum"], elf["e_shentsize"]),
        ):
            if offset + count * size > len(self.data):
                raise _fail(f"the {table} table lies inside the file", f"it ends at {offset + count * size}, "
                            f"the file has {len(self.data)} bytes")
        if elf["e_type"] != "ET_DYN":
            raise _fail("a linked code object (ET_DYN)", f"e_type is {elf['e_type']}")
        version = ABI_VERSIONS.get(ident["EI_ABIVERSION"])
        if version not in SUPPORTED_VERSIONS:
            raise _fail(
                "code object v5",
                f"EI_ABIVERSION {ident['EI_ABIVERSION']} is "
                + (f"code object v{version}" if version else "no known code object version"),
            )
        self.version = version
        flags = elf["e_flags"]
        mach = flags & EF_AMDGPU_MACH
        self.e_flags = flags
        self.target = _MACH_NAMES.get(mach, "")
        if not self.target:
            raise _fail("e_flags names a known AMDGPU processor", f"EF_AMDGPU_MACH 0x{mach:03x}")
        if target is not None and self.target != target:
            raise _fail(f"code object for {target}", f"e_flags machine is {self.target} (0x{mach:03x})")
        self.xnack = _FEATURE_STATES[flags & EF_AMDGPU_FEATURE_XNACK]
        self.sramecc = _FEATURE_STATES[flags & EF_AMDGPU_FEATURE_SRAMECC]
        self._read_metadata(elf)
        self._read_segments(elf)
        self._read_dynamic(elf)
        self._read_kernels()

    # -- metadata note ----------------------------------------------------------------------

    def _read_metadata(self, elf: ELFFile) -> None:
        notes = []
        for segment in elf.iter_segments():
            # pyelftools makes every PT_NOTE segment a NoteSegment (the one with iter_notes).
            if segment["p_type"] == "PT_NOTE" and isinstance(segment, NoteSegment):
                for note in segment.iter_notes():
                    n_type = _enum_value(elf_enums.ENUM_NOTE_N_TYPE, note["n_type"])
                    if note["n_name"] == NOTE_OWNER and n_type == NT_AMDGPU_METADATA:
                        notes.append(note)
        if len(notes) != 1:
            raise _fail(
                f"one NT_AMDGPU_METADATA ({NT_AMDGPU_METADATA}) note of owner {NOTE_OWNER}", f"found {len(notes)}"
            )
        desc = notes[0]["n_desc"]
        if not isinstance(desc, bytes):
            raise _fail("metadata note holds msgpack bytes", f"pyelftools decoded it as {type(desc).__name__}")
        try:
            meta = msgpack.unpackb(desc, raw=False, strict_map_key=False)
        except Exception as exc:  # noqa: BLE001 - every msgpack failure is a malformed note
            raise _fail("metadata note is valid msgpack", f"{type(exc).__name__}: {exc}") from None
        if not isinstance(meta, dict):
            raise _fail("metadata is a msgpack map", f"got {type(meta).__name__}")
        mversion = meta.get("amdhsa.version")
        if not (isinstance(mversion, list) and len(mversion) == 2 and all(isinstance(v, int) for v in mversion)):
            raise _fail("amdhsa.version is [major, minor]", f"got {mversion!r}")
        expected = SUPPORTED_VERSIONS[self.version]
        if tuple(mversion) != expected:
            raise _fail(
                f"amdhsa.version {list(expected)} for code object v{self.version}", f"got {mversion!r}"
            )
        self.metadata_version: tuple[int, int] = (mversion[0], mversion[1])
        target_id = meta.get("amdhsa.target")
        if not isinstance(target_id, str) or not target_id.startswith("amdgcn-amd-amdhsa--"):
            raise _fail("amdhsa.target is amdgcn-amd-amdhsa--<processor>", f"got {target_id!r}")
        processor = target_id[len("amdgcn-amd-amdhsa--"):].split(":")[0]
        if processor != self.target:
            raise _fail("amdhsa.target agrees with e_flags", f"{target_id!r} vs {self.target}")
        self.target_id = target_id
        kernels = meta.get("amdhsa.kernels")
        if not isinstance(kernels, list) or not all(isinstance(k, dict) for k in kernels):
            raise _fail("amdhsa.kernels is a list of maps", f"got {type(kernels).__name__}")
        self.metadata: dict[str, Any] = meta

    # -- segments and dynamic section ---------------------------------------------------------

    def _read_segments(self, elf: ELFFile) -> None:
        segments = []
        for seg in elf.iter_segments():
            if seg["p_type"] != "PT_LOAD":
                continue
            s = LoadSegment(
                vaddr=seg["p_vaddr"], memsz=seg["p_memsz"], filesz=seg["p_filesz"], offset=seg["p_offset"],
                flags=seg["p_flags"], align=seg["p_align"],
            )
            if s.filesz > s.memsz:
                raise _fail("PT_LOAD p_filesz <= p_memsz", f"segment at 0x{s.vaddr:x}: {s.filesz} > {s.memsz}")
            if s.offset + s.filesz > len(self.data):
                raise _fail("PT_LOAD lies inside the file", f"segment at 0x{s.vaddr:x} ends at {s.offset + s.filesz}")
            if s.align > 1 and (s.align & (s.align - 1) or (s.vaddr - s.offset) % s.align):
                raise _fail("PT_LOAD p_vaddr = p_offset modulo a power-of-two p_align", f"segment at 0x{s.vaddr:x}")
            segments.append(s)
        if not segments:
            raise _fail("at least one PT_LOAD segment", "found none")
        ordered = sorted(segments, key=lambda s: s.vaddr)
        for a, b in zip(ordered, ordered[1:]):
            if a.vaddr + a.memsz > b.vaddr:
                raise _fail("PT_LOAD segments do not overlap", f"0x{a.vaddr:x}+{a.memsz} and 0x{b.vaddr:x}")
        self.segments: tuple[LoadSegment, ...] = tuple(ordered)
        self.image_size = max(s.vaddr + s.memsz for s in ordered)
        self.image_align = max([s.align for s in ordered] + [1])
        image = bytearray(self.image_size)
        for s in ordered:
            image[s.vaddr : s.vaddr + s.filesz] = self.data[s.offset : s.offset + s.filesz]
        self._image = bytes(image)

    def _segment_of(self, offset: int, size: int) -> LoadSegment | None:
        return next((s for s in self.segments if s.vaddr <= offset and offset + size <= s.vaddr + s.memsz), None)

    def _read_dynamic(self, elf: ELFFile) -> None:
        dynamic = [seg for seg in elf.iter_segments() if isinstance(seg, DynamicSegment)]
        if len(dynamic) != 1:
            raise _fail("one PT_DYNAMIC segment", f"found {len(dynamic)}")
        dyn = dynamic[0]
        self._symbols: dict[str, tuple[int, int, str, str]] = {}
        for sym in dyn.iter_symbols():
            if sym.name:
                self._symbols[sym.name] = (
                    sym["st_value"], sym["st_size"], sym["st_info"]["type"], str(sym["st_shndx"])
                )
        relocations = []
        # A TypedDict of the table kinds; its items() only promises object values.
        tables = cast("Mapping[str, RelocationTable | RelrRelocationTable]", dyn.get_relocation_tables())
        for kind, table in tables.items():
            entries = list(table.iter_relocations())
            if kind != "RELA" and entries:
                raise _fail("dynamic relocations are RELA", f"{len(entries)} {kind} entries")
            for rel in entries:
                relocations.append(self._relocation(dyn, rel))
        self.relocations: tuple[Relocation, ...] = tuple(r for r in relocations if r.type != R_AMDGPU_NONE)

    def _relocation(self, dyn: DynamicSegment, rel: Any) -> Relocation:
        rtype, offset, addend = rel["r_info_type"], rel["r_offset"], rel["r_addend"]
        name = RELOCATION_NAMES.get(rtype, f"type {rtype}")
        if rtype == R_AMDGPU_NONE:
            return Relocation(offset, rtype, addend)
        if rtype not in (R_AMDGPU_RELATIVE64, R_AMDGPU_ABS64):
            raise _fail(
                "dynamic relocations are R_AMDGPU_RELATIVE64 or R_AMDGPU_ABS64", f"{name} at 0x{offset:x}"
            )
        if self._segment_of(offset, 8) is None:
            raise _fail("relocations patch loaded bytes", f"{name} at 0x{offset:x} lies outside every PT_LOAD")
        if rtype == R_AMDGPU_RELATIVE64:
            return Relocation(offset, rtype, addend)
        sym = dyn.get_symbol(rel["r_info_sym"])
        if sym["st_shndx"] == "SHN_UNDEF":
            raise _fail("R_AMDGPU_ABS64 refers to a defined symbol", f"{sym.name!r} is undefined (at 0x{offset:x})")
        if sym["st_shndx"] == "SHN_ABS":
            raise _fail("R_AMDGPU_ABS64 refers to a symbol of the image", f"{sym.name!r} is absolute")
        return Relocation(offset, rtype, addend, symbol=sym.name, symbol_value=sym["st_value"])

    # -- kernels ----------------------------------------------------------------------------

    def _read_kernels(self) -> None:
        kernels: dict[str, CodeObjectKernel] = {}
        for index, meta in enumerate(self.metadata["amdhsa.kernels"]):
            kernel = self._kernel(index, meta)
            if kernel.name in kernels:
                raise _fail("kernel names are unique", f"{kernel.name!r} appears twice")
            kernels[kernel.name] = kernel
        self.kernels: Mapping[str, CodeObjectKernel] = kernels

    def _kernel(self, index: int, meta: dict[str, Any]) -> CodeObjectKernel:
        where = f"amdhsa.kernels[{index}]"
        name = _field(meta, ".name", str, where)
        where = f"kernel {name!r}"
        symbol = _field(meta, ".symbol", str, where)
        if symbol != name + ".kd":
            raise _fail("a kernel's .symbol is <name>.kd", f"{where}: {symbol!r}")
        found = self._symbols.get(symbol)
        if found is None:
            raise _fail("every kernel has its .kd descriptor symbol", f"{where}: no dynamic symbol {symbol!r}")
        kd_offset, kd_size, kd_type, kd_section = found
        if kd_type != "STT_OBJECT" or kd_size != KERNEL_DESCRIPTOR_SIZE or kd_section == "SHN_UNDEF":
            raise _fail(
                "the .kd symbol is a defined 64-byte object", f"{symbol}: {kd_type}, {kd_size} bytes, {kd_section}"
            )
        if self._segment_of(kd_offset, KERNEL_DESCRIPTOR_SIZE) is None or kd_offset % 64:
            raise _fail("the kernel descriptor is loaded and 64-byte aligned", f"{symbol} at 0x{kd_offset:x}")
        desc = KernelDescriptor.decode(self._image[kd_offset : kd_offset + KERNEL_DESCRIPTOR_SIZE])
        entry = kd_offset + desc.kernel_code_entry_byte_offset
        code_segment = self._segment_of(entry, 4)
        if code_segment is None or not code_segment.flags & 0x1:  # PF_X
            raise _fail("kernel_code_entry_byte_offset points into executable code", f"{where}: 0x{entry:x}")
        if entry % 256:
            raise _fail("the kernel entry is 256-byte aligned", f"{where}: 0x{entry:x}")
        func = self._symbols.get(name)
        if func is not None and func[0] != entry:
            raise _fail(
                "kernel_code_entry_byte_offset reaches the kernel's code symbol",
                f"{where}: entry 0x{entry:x}, symbol at 0x{func[0]:x}",
            )
        args = tuple(_arg(a, f"{where} .args[{i}]") for i, a in enumerate(_field(meta, ".args", list, where, [])))
        kernarg_size = _field(meta, ".kernarg_segment_size", int, where)
        for i, arg in enumerate(args):
            if arg.offset + arg.size > kernarg_size:
                raise _fail(
                    "arguments lie inside the kernarg segment",
                    f"{where} .args[{i}] ends at {arg.offset + arg.size} > {kernarg_size}",
                )
        record = CodeObjectKernel(
            name=name,
            symbol=symbol,
            descriptor=desc,
            descriptor_offset=kd_offset,
            entry_offset=entry,
            args=args,
            kernarg_segment_size=kernarg_size,
            kernarg_segment_align=_field(meta, ".kernarg_segment_align", int, where),
            group_segment_fixed_size=_field(meta, ".group_segment_fixed_size", int, where),
            private_segment_fixed_size=_field(meta, ".private_segment_fixed_size", int, where),
            wavefront_size=_field(meta, ".wavefront_size", int, where),
            sgpr_count=_field(meta, ".sgpr_count", int, where),
            vgpr_count=_field(meta, ".vgpr_count", int, where),
            max_flat_workgroup_size=_field(meta, ".max_flat_workgroup_size", int, where),
            uniform_work_group_size=bool(_field(meta, ".uniform_work_group_size", (int, bool), where, 0)),
            uses_dynamic_stack=bool(_field(meta, ".uses_dynamic_stack", bool, where, False)),
            user_sgprs=desc.user_sgprs(),
            metadata=meta,
        )
        _check_agreement(record, where)
        return record

    # -- loading ------------------------------------------------------------------------------

    def load_image(self, base: int) -> bytes:
        """The image to place at ``base``: segments at ``base + p_vaddr``, bss zeroed,
        dynamic relocations applied for ``base`` (``image_size`` bytes)."""
        if isinstance(base, bool) or not isinstance(base, int):
            raise InvalidArgument(f"base: expected an int address, got {type(base).__name__}")
        if base < 0 or base + self.image_size > 2**64:
            raise InvalidArgument(f"base: 0x{base:x} does not fit {self.image_size} bytes below 2**64")
        if base % self.image_align:
            raise InvalidArgument(f"base: 0x{base:x} is not aligned to the segments' {self.image_align} bytes")
        if not self.relocations:
            return self._image
        image = bytearray(self._image)
        for rel in self.relocations:
            struct.pack_into("<Q", image, rel.offset, rel.value(base))
        return bytes(image)


def _enum_value(enum: Mapping[str, int], decoded: Any) -> int | None:
    """pyelftools gives a name for values it knows (and the int otherwise)."""
    if isinstance(decoded, int):
        return decoded
    return enum.get(decoded)


_MISSING = object()


def _field(meta: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = _MISSING) -> Any:
    value = meta.get(key, default)
    if value is _MISSING:
        raise _fail("kernel metadata is complete", f"{where}: no {key}")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _fail("kernel metadata has the documented types", f"{where}: {key} is {value!r}")
    if kind is int and isinstance(value, int) and value < 0:
        raise _fail("kernel metadata sizes are not negative", f"{where}: {key} is {value}")
    return value


def _arg(meta: Any, where: str) -> KernelArg:
    if not isinstance(meta, dict):
        raise _fail("kernel arguments are maps", f"{where}: {type(meta).__name__}")
    kind = _field(meta, ".value_kind", str, where)
    if kind not in EXPLICIT_VALUE_KINDS and kind not in HIDDEN_VALUE_KINDS:
        raise _fail("argument value kinds are those of code object v5", f"{where}: {kind!r}")
    optional_str = {k: meta.get(k) for k in (".address_space", ".access", ".actual_access", ".name", ".type_name")}
    for key, value in optional_str.items():
        if value is not None and not isinstance(value, str):
            raise _fail("kernel metadata has the documented types", f"{where}: {key} is {value!r}")
    pointee = meta.get(".pointee_align")
    if pointee is not None and (not isinstance(pointee, int) or isinstance(pointee, bool)):
        raise _fail("kernel metadata has the documented types", f"{where}: .pointee_align is {pointee!r}")
    return KernelArg(
        offset=_field(meta, ".offset", int, where),
        size=_field(meta, ".size", int, where),
        value_kind=kind,
        address_space=optional_str[".address_space"],
        access=optional_str[".access"],
        actual_access=optional_str[".actual_access"],
        name=optional_str[".name"],
        type_name=optional_str[".type_name"],
        pointee_align=pointee,
        is_const=bool(meta.get(".is_const", False)),
        is_restrict=bool(meta.get(".is_restrict", False)),
        is_volatile=bool(meta.get(".is_volatile", False)),
    )


def _check_agreement(k: CodeObjectKernel, where: str) -> None:
    """The descriptor and the metadata describe the same kernel."""
    d = k.descriptor
    pairs = (
        ("kernarg_size", d.kernarg_size, ".kernarg_segment_size", k.kernarg_segment_size),
        ("group_segment_fixed_size", d.group_segment_fixed_size, ".group_segment_fixed_size", k.group_segment_fixed_size),
        (
            "private_segment_fixed_size", d.private_segment_fixed_size,
            ".private_segment_fixed_size", k.private_segment_fixed_size,
        ),
        ("enable_wavefront_size32", d.wavefront_size, ".wavefront_size", k.wavefront_size),
        ("uses_dynamic_stack", d.uses_dynamic_stack, ".uses_dynamic_stack", k.uses_dynamic_stack),
    )
    for dname, dvalue, mname, mvalue in pairs:
        if dvalue != mvalue:
            raise _fail("the kernel descriptor agrees with the metadata", f"{where}: {dname} {dvalue} vs {mname} {mvalue}")
    implied = sum(s.count for s in k.user_sgprs)
    if implied != d.user_sgpr_count:
        raise _fail(
            "the enabled user SGPRs add up to COMPUTE_PGM_RSRC2.USER_SGPR",
            f"{where}: {implied} implied ({', '.join(s.name for s in k.user_sgprs) or 'none'}) vs {d.user_sgpr_count}",
        )
    if k.kernarg_segment_align & (k.kernarg_segment_align - 1) or k.kernarg_segment_align == 0:
        raise _fail("kernarg_segment_align is a power of two", f"{where}: {k.kernarg_segment_align}")


__all__ = [
    "CodeObject",
    "CodeObjectKernel",
    "KernelArg",
    "KernelDescriptor",
    "UserSgpr",
    "LoadSegment",
    "Relocation",
    "EM_AMDGPU",
    "ELFOSABI_AMDGPU_HSA",
    "NT_AMDGPU_METADATA",
    "MACHS",
    "KERNEL_DESCRIPTOR_SIZE",
    "DESCRIPTOR_FIELDS",
    "DESCRIPTOR_OFFSETS",
    "KERNEL_CODE_PROPERTIES",
    "KERNARG_PRELOAD_FIELDS",
    "RSRC1_FIELDS",
    "RSRC2_FIELDS",
    "RSRC3_FIELDS",
    "USER_SGPR_ORDER",
    "R_AMDGPU_ABS64",
    "R_AMDGPU_RELATIVE64",
]
