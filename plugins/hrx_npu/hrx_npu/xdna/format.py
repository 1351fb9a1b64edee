"""Facts of the ``.xdna`` executable image format (version 1.0) and of its AIE2P payloads.

HRX's compiler (Loom) writes NPU programs as ``.xdna`` files: ELF32 little-endian
executables whose *program headers* form the runtime directory (section headers, if
present, are diagnostic names only). The layout is specified by ROCm/hrx
``iree/hal/drivers/amd/xdna/image/format.h`` and ``aie2p/program_format.h``, read
with the ``experimental/xdna`` README, ``executable.c`` and ``prepared_command.c``
at d113ee99 (the loader's image, table and program qualification in ``image/``):

* a ``LOOM`` note (type 1, 84 bytes) with the image ABI version, the target
  generation (AIE2P), device-profile/firmware/policy identities, the loader
  capabilities the image needs and the context size in columns and rows;
* fixed tables with a 24-byte header: ENTRIES (40-byte records: name, ARRAY and
  CONTROL program-header ordinals, the entry's range of bindings), BINDINGS (56-byte
  records: kind, address space, access, usage, minimum length and alignment, legal
  offsets) and RELOCATIONS (48-byte records: target program header and byte offset,
  binding, kind, field width, addend, value range, alignment);
* ARRAY programs (32-byte header: records, TILE program headers used) realise the
  array configuration; CONTROL programs (24-byte header) run once per invocation;
  both hold framed records (u16 type, u16 flags, u32 byte length, 4-byte aligned);
* TILE program headers carry tile-local program or data memory images.

Values here are the format's; the field order inside the AIE2P record bodies is
inferred from the record sizes the header states (register write 16, masked write
20, block-write header 16, tile load 12, DMA task wait 16 bytes) and is this
reader's reading, to be confirmed against an image the compiler wrote.
"""

from __future__ import annotations

import enum

# -- ELF envelope ---------------------------------------------------------------

ELF_HEADER_SIZE = 52
PROGRAM_HEADER_SIZE = 32
SECTION_HEADER_SIZE = 40
MAX_PROGRAM_HEADERS = 4096
MAX_SECTION_HEADERS = 4096
ELF_CLASS_32 = 1
ELF_DATA_LE = 1
ELF_VERSION = 1
ELF_TYPE_EXEC = 2
ELF_MACHINE_AIE = 264
ELF_FLAGS_AIE2P = 3

MAX_TABLE_RECORDS = 65535
MAX_PROGRAM_RECORDS = 65535
MAX_ENTRY_NAME = 4096
MAX_METADATA_TABLE = 16 << 20
MAX_PROGRAM_PAYLOAD = 16 << 20
MAX_PROGRAM_RECORD = 1 << 20


class ProgramType(enum.IntEnum):
    """ELF ``p_type`` roles of the runtime directory."""

    NOTE = 4
    ENTRIES = 0x6C584401
    BINDINGS = 0x6C584402
    RELOCATIONS = 0x6C584403
    TILE = 0x6C584404
    ARRAY = 0x6C584405
    CONTROL = 0x6C584406
    FIRMWARE = 0x6C584407


PF_X, PF_W, PF_R = 0x1, 0x2, 0x4


class Capability(enum.IntFlag):
    RUNTIME_RELOCATIONS = 1 << 0
    CONTROL_PROGRAMS = 1 << 1
    FIRMWARE_PAYLOADS = 1 << 2
    TILE_ZERO_FILL = 1 << 3


KNOWN_CAPABILITIES = int(Capability.RUNTIME_RELOCATIONS | Capability.CONTROL_PROGRAMS | Capability.FIRMWARE_PAYLOADS | Capability.TILE_ZERO_FILL)
TARGET_GENERATION_AIE2P = 3
COORDINATES_CONTEXT_RELATIVE = 1

# -- the LOOM ABI note ----------------------------------------------------------------

NOTE_OWNER = b"LOOM\0"
NOTE_TYPE_ABI = 1
NOTE_SIZE = 84
NOTE_DESCRIPTION_SIZE = 64
NOTE_MAGIC = 0x414E4458
ABI_MAJOR, ABI_MINOR = 1, 0

# -- fixed tables ------------------------------------------------------------------------

TABLE_HEADER_SIZE = 24
TABLE_ABI_MAJOR, TABLE_ABI_MINOR = 1, 0
ENTRY_RECORD_SIZE = 40
BINDING_RECORD_SIZE = 56
RELOCATION_RECORD_SIZE = 48
ENTRY_TABLE_MAGIC = 0x544E4558
BINDING_TABLE_MAGIC = 0x444E4258
RELOCATION_TABLE_MAGIC = 0x4C455258
ENTRY_FLAG_DEFAULT = 1
NO_CONTROL = 0xFFFFFFFF


class BindingKind(enum.IntEnum):
    BUFFER = 1
    SCALAR = 2


class AddressSpace(enum.IntEnum):
    NONE = 0
    GLOBAL = 1
    HOST = 2


BINDING_READ, BINDING_WRITE = 1, 2


class Usage(enum.IntFlag):
    DEVICE_VISIBLE = 1 << 0
    HOST_VISIBLE = 1 << 1
    COHERENT = 1 << 2
    CACHED = 1 << 3


KNOWN_USAGE = int(Usage.DEVICE_VISIBLE | Usage.HOST_VISIBLE | Usage.COHERENT | Usage.CACHED)


class RelocationKind(enum.IntEnum):
    BINDING_ADDRESS = 1
    BINDING_BYTE_LENGTH = 2
    BINDING_BYTE_OFFSET = 3
    SCALAR_VALUE = 4


# -- ARRAY and CONTROL programs -----------------------------------------------------

PROGRAM_ABI_MAJOR, PROGRAM_ABI_MINOR = 1, 0
ARRAY_HEADER_SIZE = 32
CONTROL_HEADER_SIZE = 24
RECORD_HEADER_SIZE = 8
RECORD_ALIGNMENT = 4
ARRAY_MAGIC = 0x52524158
CONTROL_MAGIC = 0x4C544358


class RecordType(enum.IntEnum):
    """AIE2P program records (``aie2p/program_format.h``)."""

    REGISTER_WRITE32 = 1
    REGISTER_MASK_WRITE32 = 2
    REGISTER_BLOCK_WRITE32 = 3
    TILE_PROGRAM_LOAD = 4
    DMA_TASK_WAIT = 5


RECORD_SIZES = {RecordType.REGISTER_WRITE32: 16, RecordType.REGISTER_MASK_WRITE32: 20, RecordType.TILE_PROGRAM_LOAD: 12, RecordType.DMA_TASK_WAIT: 16}
BLOCK_WRITE_HEADER_SIZE = 16

# -- TILE destinations (packed into p_paddr) ------------------------------------------


class TileMemory(enum.IntEnum):
    PROGRAM = 1
    DATA = 2


# -- AIE2P array addressing ----------------------------------------------------------

#: Register addresses: column in bits 25 and up, row in bits 20-24, tile offset below.
COLUMN_SHIFT = 25
ROW_SHIFT = 20
TILE_OFFSET_MASK = (1 << ROW_SHIFT) - 1
#: Rows 2 and up hold compute tiles (row 0: shim, row 1: memory tiles).
FIRST_COMPUTE_ROW = 2
#: Compute-tile memories (AIE2P): program memory at 0x20000 (16 KiB), data memory at 0 (64 KiB).
TILE_MEMORY = {TileMemory.PROGRAM: (0x20000, 16 << 10), TileMemory.DATA: (0x0, 64 << 10)}
#: Shim DMA buffer descriptors: sixteen 32-byte records from 0x1D000; words 1-2 hold
#: the 48-bit address a binding relocation patches (``aie2p/native_image.c``).
SHIM_BD_BASE = 0x1D000
SHIM_BD_STRIDE = 0x20
SHIM_BD_COUNT = 16
SHIM_BD_ADDRESS_WORD = 4
ADDRESS_BITS = 48
#: AIE-RT device generation of AIE2P in transaction headers; memory-tile rows.
TRANSACTION_DEVICE_GENERATION = 4
TRANSACTION_MEMORY_TILE_ROWS = 1


def shim_bd_address_field(address: int) -> bool:
    """Whether the register ``address`` is the address word of one of a shim tile's
    buffer descriptors (row 0 of any column)."""
    offset = address & ((1 << COLUMN_SHIFT) - 1)  # row bits included: shim tiles only
    first = SHIM_BD_BASE + SHIM_BD_ADDRESS_WORD
    return first <= offset <= first + SHIM_BD_STRIDE * (SHIM_BD_COUNT - 1) and (offset - first) % SHIM_BD_STRIDE == 0
