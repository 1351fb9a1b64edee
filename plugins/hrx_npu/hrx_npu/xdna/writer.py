"""Writing ``.xdna`` images: the format's encoders, and the stand-in images the
simulation uses for programs that exist only as host builds.

HRX's compiler writes real images. On the simulated Strix Halo the xdna engine also
runs npu-host programs (C or numpy): it writes a *stand-in* image for the program's
contract with :func:`standin_image` and loads it through the same reader and the
same qualification as a compiled image. A stand-in holds no AIE code: its TILE
images carry an identity of the host program (so the simulation recognises which
program a stream belongs to), its ARRAY realisation loads them, and its CONTROL
program programs one shim DMA buffer descriptor per used binding (the address words
patched per invocation), starts the descriptor's channel, and waits for the task of
every binding the program writes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import attrs

from hrx_core.engine import Access

from . import format as F

_ACCESS_BITS = {Access.READ: F.BINDING_READ, Access.WRITE: F.BINDING_WRITE, Access.READ_WRITE: F.BINDING_READ | F.BINDING_WRITE}
#: Shim DMA task queues: S2MM channel 0 (device writes memory), MM2S channel 0 (device reads memory).
SHIM_S2MM0_TASK_QUEUE = 0x1D204
SHIM_MM2S0_TASK_QUEUE = 0x1D214


@attrs.frozen
class Segment:
    """One program header and its payload."""

    type: int
    payload: bytes
    flags: int = F.PF_R
    align: int = 8
    vaddr: int = 0
    paddr: int = 0
    memsz: int | None = None
    name: str = ""


def record(type: int, body: bytes) -> bytes:
    """A framed AIE2P program record."""
    return struct.pack("<HHI", type, 0, F.RECORD_HEADER_SIZE + len(body)) + body


def write32(address: int, value: int) -> bytes:
    return record(F.RecordType.REGISTER_WRITE32, struct.pack("<II", address, value))


def block_write32(address: int, words: Sequence[int]) -> bytes:
    return record(F.RecordType.REGISTER_BLOCK_WRITE32, struct.pack(f"<II{len(words)}I", address, len(words), *words))


def tile_load(ordinal: int) -> bytes:
    return record(F.RecordType.TILE_PROGRAM_LOAD, struct.pack("<I", ordinal))


def dma_task_wait(column: int, row: int, direction: int, channel: int = 0, columns: int = 1, rows: int = 1) -> bytes:
    return record(F.RecordType.DMA_TASK_WAIT, bytes([column, row, direction, channel, columns, rows, 0, 0]))


def array_program(records: Sequence[bytes], first_tile: int, tile_count: int) -> bytes:
    body = b"".join(records)
    return struct.pack("<IHHHHIIIII", F.ARRAY_MAGIC, F.PROGRAM_ABI_MAJOR, F.PROGRAM_ABI_MINOR, F.ARRAY_HEADER_SIZE, F.RECORD_HEADER_SIZE,
                       len(records), F.ARRAY_HEADER_SIZE + len(body), 0, first_tile, tile_count) + body


def control_program(records: Sequence[bytes]) -> bytes:
    body = b"".join(records)
    return struct.pack("<IHHHHIII", F.CONTROL_MAGIC, F.PROGRAM_ABI_MAJOR, F.PROGRAM_ABI_MINOR, F.CONTROL_HEADER_SIZE, F.RECORD_HEADER_SIZE,
                       len(records), F.CONTROL_HEADER_SIZE + len(body), 0) + body


def abi_note(columns: int, rows: int, capabilities: int, *, profile: int, firmware: int, policy: int) -> bytes:
    desc = struct.pack("<IHHHHIQQQQHHHHB", F.NOTE_MAGIC, F.NOTE_DESCRIPTION_SIZE, F.ABI_MAJOR, F.ABI_MINOR, F.TARGET_GENERATION_AIE2P, 1,
                       profile, firmware, policy, capabilities, 0, 0, columns, rows, F.COORDINATES_CONTEXT_RELATIVE)
    desc += bytes(F.NOTE_DESCRIPTION_SIZE - len(desc))
    return struct.pack("<III", len(F.NOTE_OWNER), F.NOTE_DESCRIPTION_SIZE, F.NOTE_TYPE_ABI) + F.NOTE_OWNER + bytes(3) + desc


def table(magic: int, record_size: int, records: Sequence[bytes], aux: bytes = b"") -> bytes:
    end = F.TABLE_HEADER_SIZE + record_size * len(records)
    header = struct.pack("<IHHHHIII", magic, F.TABLE_ABI_MAJOR, F.TABLE_ABI_MINOR, F.TABLE_HEADER_SIZE, record_size, len(records),
                         end + len(aux), end if aux else 0)
    return header + b"".join(records) + aux


def entry_table(entries: Sequence[tuple[str, int, int | None, int, int, int]]) -> bytes:
    """(name, ARRAY ordinal, CONTROL ordinal or None, first binding, binding count, flags) per entry."""
    names = b""
    end = F.TABLE_HEADER_SIZE + F.ENTRY_RECORD_SIZE * len(entries)
    records = []
    for i, (name, array, control, first, count, flags) in enumerate(entries):
        raw = name.encode()
        offset = end + len(names) if raw else 0
        names += raw
        records.append(struct.pack("<8IQ", i, offset, len(raw), array, F.NO_CONTROL if control is None else control, first, count, flags, 0))
    body = table(F.ENTRY_TABLE_MAGIC, F.ENTRY_RECORD_SIZE, records, names)
    if not names:  # the name range starts right after the records even when it is empty
        body = body[:20] + struct.pack("<I", end) + body[24:]
    return body


def binding_record(ordinal: int, entry: int, access: Access, length: int, alignment: int) -> bytes:
    return struct.pack("<IIHHIII4Q", ordinal, entry, F.BindingKind.BUFFER, F.AddressSpace.GLOBAL, _ACCESS_BITS[access], F.Usage.DEVICE_VISIBLE, 0,
                       length, alignment, 0, 2**64 - 1)


def relocation_record(target: int, offset: int, binding: int, alignment: int = 4, addend: int = 0) -> bytes:
    return struct.pack("<IIIHBBqQQQ", target, offset, binding, F.RelocationKind.BINDING_ADDRESS, 8, 0, addend, 0, (1 << F.ADDRESS_BITS) - 1, alignment)


def assemble(segments: Sequence[Segment]) -> bytes:
    """An ELF32 image with ``segments`` as its program headers (payloads after the
    directory, each at its alignment) and a section per named segment."""
    phoff = F.ELF_HEADER_SIZE
    at = phoff + F.PROGRAM_HEADER_SIZE * len(segments)
    payloads = bytearray()
    placed = []
    for seg in segments:
        start = at + len(payloads)
        # p_offset and p_vaddr agree modulo the alignment
        pad = (seg.vaddr - start) % seg.align
        payloads += bytes(pad)
        placed.append(at + len(payloads))
        payloads += seg.payload
    names = [seg.name for seg in segments]
    shstrtab = b"\0"
    name_offsets = []
    for name in names + [".shstrtab"]:
        name_offsets.append(len(shstrtab))
        shstrtab += name.encode() + b"\0"
    strtab_at = at + len(payloads)
    payloads += shstrtab
    payloads += bytes(-(at + len(payloads)) % 4)
    shoff = at + len(payloads)
    sections = [bytes(F.SECTION_HEADER_SIZE)]
    for seg, off, noff in zip(segments, placed, name_offsets):
        kind = 7 if seg.type == F.ProgramType.NOTE else 1  # SHT_NOTE / SHT_PROGBITS
        sections.append(struct.pack("<10I", noff, kind, 2, seg.vaddr, off, len(seg.payload), 0, 0, seg.align, 0))
    sections.append(struct.pack("<10I", name_offsets[-1], 3, 0, 0, strtab_at, len(shstrtab), 0, 0, 1, 0))
    header = b"\x7fELF" + bytes([F.ELF_CLASS_32, F.ELF_DATA_LE, F.ELF_VERSION, 0, 0]) + bytes(7)
    header += struct.pack("<HHIIIIIHHHHHH", F.ELF_TYPE_EXEC, F.ELF_MACHINE_AIE, F.ELF_VERSION, 0, phoff, shoff, F.ELF_FLAGS_AIE2P,
                          F.ELF_HEADER_SIZE, F.PROGRAM_HEADER_SIZE, len(segments), F.SECTION_HEADER_SIZE, len(sections), len(sections) - 1)
    phdrs = b"".join(
        struct.pack("<8I", seg.type, off, seg.vaddr, seg.paddr, len(seg.payload), len(seg.payload) if seg.memsz is None else seg.memsz, seg.flags, seg.align)
        for seg, off in zip(segments, placed)
    )
    return header + phdrs + bytes(payloads) + b"".join(sections)


@attrs.frozen
class Slot:
    """One used binding of a stand-in: length, access, alignment."""

    length: int
    access: Access
    alignment: int


def standin_image(entry: str, slots: Sequence[Slot], columns: int, rows: int, identity: bytes) -> bytes:
    """A stand-in ``.xdna`` image for a host-built program (see the module docstring).

    ``identity`` (any bytes) becomes the TILE images' contents, so stand-ins of
    different host programs differ in their instruction streams."""
    digest = hashlib.sha256(identity).digest()
    caps = int(F.Capability.RUNTIME_RELOCATIONS | F.Capability.CONTROL_PROGRAMS)
    tiles_at = 4
    array_at = tiles_at + columns
    control_at = array_at + 1
    segments = [
        Segment(F.ProgramType.NOTE, abi_note(columns, rows, caps, profile=0x5354414E44494E31, firmware=1, policy=1), align=4, name=".note.loom"),
        Segment(F.ProgramType.ENTRIES, entry_table([(entry, array_at, control_at, 0, len(slots), F.ENTRY_FLAG_DEFAULT)]), name=".xdna.entries"),
        Segment(F.ProgramType.BINDINGS, table(F.BINDING_TABLE_MAGIC, F.BINDING_RECORD_SIZE,
                                              [binding_record(i, 0, s.access, s.length, s.alignment) for i, s in enumerate(slots)]), name=".xdna.bindings"),
    ]
    control: list[bytes] = []
    relocations: list[bytes] = []
    offset = F.CONTROL_HEADER_SIZE
    for i, slot in enumerate(slots):
        column, bd = i % columns, i // columns
        base = (column << F.COLUMN_SHIFT) | (F.SHIM_BD_BASE + F.SHIM_BD_STRIDE * bd)
        words = [slot.length // 4, 0, 0, 0, 0, 0, 0, 0]
        relocations.append(relocation_record(control_at, offset + F.BLOCK_WRITE_HEADER_SIZE + 4, i, alignment=4))
        control.append(block_write32(base, words))
        offset += len(control[-1])
        queue = SHIM_S2MM0_TASK_QUEUE if slot.access & Access.WRITE else SHIM_MM2S0_TASK_QUEUE
        control.append(write32((column << F.COLUMN_SHIFT) | queue, bd))
        offset += len(control[-1])
    for i, slot in enumerate(slots):
        if slot.access & Access.WRITE:
            control.append(dma_task_wait(i % columns, 0, 0))
    if len(slots) > F.SHIM_BD_COUNT * columns:
        raise ValueError(f"a stand-in programs at most {F.SHIM_BD_COUNT} descriptors per column")
    segments.append(Segment(F.ProgramType.RELOCATIONS, table(F.RELOCATION_TABLE_MAGIC, F.RELOCATION_RECORD_SIZE, relocations), name=".xdna.relocations"))
    for c in range(columns):
        program = digest + struct.pack("<II", c, columns)
        segments.append(Segment(F.ProgramType.TILE, program, flags=F.PF_R | F.PF_X, align=4, vaddr=0,
                                paddr=c | (F.FIRST_COMPUTE_ROW << 8) | (F.TileMemory.PROGRAM << 16), name=f".xdna.tile.{c}"))
    segments.append(Segment(F.ProgramType.ARRAY, array_program([tile_load(tiles_at + c) for c in range(columns)], tiles_at, columns), align=4, name=".xdna.array"))
    segments.append(Segment(F.ProgramType.CONTROL, control_program(control), align=4, name=".xdna.control"))
    return assemble(segments)


__all__ = [
    "Segment", "Slot", "abi_note", "array_program", "assemble", "binding_record", "block_write32", "control_program", "dma_task_wait",
    "entry_table", "record", "relocation_record", "standin_image", "table", "tile_load", "write32",
]
