"""A reader of ``.xdna`` executable images (see :mod:`hrx_npu.xdna.format`).

:func:`read_image` checks an image completely before anything else happens with it:
the ELF32 envelope (read with pyelftools), the program-header directory (ranges in
the file, no partial overlaps, alignment, permissions), the ``LOOM`` ABI note, the
entry, binding and relocation tables with every record rule of the format, the ARRAY
and CONTROL programs with their framed AIE2P records, TILE memory images and every
cross reference between them. A malformed image raises :class:`XdnaImageError` (an
``ArtifactError``) naming the file, the part of the image ("section") and the rule
it breaks. Nothing here touches a device; qualification against a device and a
``KernelContract`` is :mod:`hrx_npu.xdna.qualify`.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence

import attrs

from hrx_core.errors import ArtifactError

from . import format as F


class XdnaImageError(ArtifactError):
    """A malformed ``.xdna`` image: ``file``, ``section`` and ``rule`` say where and why."""

    def __init__(self, file: str, section: str, rule: str) -> None:
        super().__init__(f"{file}: {section}: {rule}")
        self.file = file
        self.section = section
        self.rule = rule


@attrs.frozen
class ProgramHeader:
    ordinal: int
    type: int
    offset: int
    filesz: int
    vaddr: int
    paddr: int
    memsz: int
    flags: int
    align: int
    #: The section that covers the same bytes, if the image names one.
    section: str = ""

    @property
    def role(self) -> str:
        try:
            return F.ProgramType(self.type).name
        except ValueError:
            return f"type {self.type:#010x}"

    @property
    def label(self) -> str:
        where = f"program header {self.ordinal} ({self.role})"
        return f"{self.section} ({where})" if self.section else where


@attrs.frozen
class AbiNote:
    abi_major: int
    abi_minor: int
    target_generation: int
    device_profile_revision: int
    device_profile_id: int
    firmware_abi_id: int
    policy_id: int
    required_capabilities: int
    origin_column: int
    origin_row: int
    columns: int
    rows: int
    coordinate_model: int


@attrs.frozen
class Entry:
    ordinal: int
    name: str
    array: int
    control: int | None
    first_binding: int
    binding_count: int
    flags: int
    capabilities: int

    @property
    def default(self) -> bool:
        return bool(self.flags & F.ENTRY_FLAG_DEFAULT)


@attrs.frozen
class BindingRecord:
    ordinal: int
    entry: int
    kind: int
    address_space: int
    access: int
    usage: int
    minimum_length: int
    minimum_alignment: int
    minimum_offset: int
    maximum_offset: int


@attrs.frozen
class Relocation:
    ordinal: int
    target: int
    offset: int
    binding: int
    kind: int
    width: int
    flags: int
    addend: int
    minimum: int
    maximum: int
    alignment: int


@attrs.frozen
class Record:
    """One framed AIE2P record of an ARRAY or CONTROL program, decoded."""

    index: int
    type: F.RecordType
    #: Byte offset of the record inside its program's payload.
    offset: int
    length: int
    address: int = 0
    value: int = 0
    mask: int = 0
    words: bytes = b""
    tile: int = 0
    wait: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0)


@attrs.frozen
class Program:
    """An ARRAY realisation or a CONTROL program."""

    header: ProgramHeader
    records: tuple[Record, ...]
    first_tile: int = 0
    tile_count: int = 0

    @property
    def kind(self) -> F.ProgramType:
        return F.ProgramType(self.header.type)


@attrs.frozen
class Tile:
    """A tile-local memory image (TILE program header)."""

    header: ProgramHeader
    column: int
    row: int
    memory: F.TileMemory
    data: bytes

    @property
    def address(self) -> int:
        base, _ = F.TILE_MEMORY[self.memory]
        return (self.column << F.COLUMN_SHIFT) | (self.row << F.ROW_SHIFT) | (base + self.header.vaddr)


@attrs.frozen
class XdnaImage:
    """A checked ``.xdna`` image."""

    name: str
    flags: int
    headers: tuple[ProgramHeader, ...]
    note: AbiNote
    entries: tuple[Entry, ...]
    bindings: tuple[BindingRecord, ...]
    relocations: tuple[Relocation, ...]
    programs: dict[int, Program]
    tiles: dict[int, Tile]

    def entry(self, name: str | None = None) -> Entry:
        """The entry called ``name``; without a name the default entry, else the first."""
        if name:
            for entry in self.entries:
                if entry.name == name:
                    return entry
            names = ", ".join(repr(e.name) for e in self.entries if e.name) or "none named"
            raise XdnaImageError(self.name, "ENTRIES", f"no entry named {name!r} (entries: {names})")
        return next((e for e in self.entries if e.default), self.entries[0])

    def entry_bindings(self, entry: Entry) -> tuple[BindingRecord, ...]:
        return self.bindings[entry.first_binding : entry.first_binding + entry.binding_count]

    def entry_relocations(self, entry: Entry) -> tuple[Relocation, ...]:
        return tuple(r for r in self.relocations if r.target == entry.control)


def read_image(data: bytes | bytearray | memoryview, name: str = "<xdna image>") -> XdnaImage:
    """Read and check an ``.xdna`` image (raises :class:`XdnaImageError`)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ArtifactError(f"{name}: expected the bytes of an .xdna image, got {type(data).__name__}")
    if not isinstance(name, str):
        raise ArtifactError(f"name: expected a str naming the image, got {type(name).__name__}")
    return _Reader(bytes(data), name).read()


def _ranges_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    if a[1] == 0 or b[1] == 0:
        return False
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


class _Reader:
    def __init__(self, data: bytes, name: str) -> None:
        self.data = data
        self.name = name

    def fail(self, section: str, rule: str) -> XdnaImageError:
        return XdnaImageError(self.name, section, rule)

    # -- envelope --------------------------------------------------------------

    def read(self) -> XdnaImage:
        flags, phoff, phnum, sh_range, sections = self._envelope()
        headers = self._program_headers(phoff, phnum, sh_range, sections)
        by_type: dict[int, list[ProgramHeader]] = {}
        for h in headers:
            by_type.setdefault(h.type, []).append(h)
        note = self._note(self._metadata(by_type, F.ProgramType.NOTE, 4, F.NOTE_SIZE, required=True))
        entries_h = self._metadata(by_type, F.ProgramType.ENTRIES, 8, F.MAX_METADATA_TABLE, required=True)
        bindings_h = self._metadata(by_type, F.ProgramType.BINDINGS, 8, F.MAX_METADATA_TABLE, required=True)
        relocs_h = self._metadata(by_type, F.ProgramType.RELOCATIONS, 8, F.MAX_METADATA_TABLE, required=False)
        assert entries_h is not None and bindings_h is not None
        bindings = self._bindings(bindings_h)
        entries = self._entries(entries_h, note, len(bindings))
        for entry in entries:
            for b in bindings[entry.first_binding : entry.first_binding + entry.binding_count]:
                if b.entry != entry.ordinal:
                    raise self.fail(bindings_h.label, f"binding {b.ordinal} names entry {b.entry} but lies in entry {entry.ordinal}'s range")
        relocations = self._relocations(relocs_h, bindings) if relocs_h is not None else ()
        for h in by_type.get(F.ProgramType.FIRMWARE, ()):
            raise self.fail(h.label, "FIRMWARE payloads are not supported by this reader (the AIE2P transaction 0.1 lowering has none)")
        tiles = {h.ordinal: self._tile(h, note) for h in by_type.get(F.ProgramType.TILE, ())}
        programs = {}
        for h in headers:
            if h.type in (F.ProgramType.ARRAY, F.ProgramType.CONTROL):
                programs[h.ordinal] = self._program(h, note, headers, tiles)
        self._cross_check(note, headers, entries, relocations, programs, tiles, relocs_h)
        return XdnaImage(self.name, flags, tuple(headers), note, tuple(entries), tuple(bindings), tuple(relocations), programs, tiles)

    def _envelope(self) -> tuple[int, int, int, tuple[int, int], list[tuple[str, int, int]]]:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        data, where = self.data, "ELF header"
        if len(data) < F.ELF_HEADER_SIZE:
            raise self.fail(where, f"the file has {len(data)} bytes, fewer than the {F.ELF_HEADER_SIZE}-byte ELF32 header")
        if data[:4] != b"\x7fELF":
            raise self.fail(where, "the file does not start with the ELF magic")
        ident = (data[4], data[5], data[6], data[7], data[8])
        if ident != (F.ELF_CLASS_32, F.ELF_DATA_LE, F.ELF_VERSION, 0, 0):
            raise self.fail(where, f"identity (class, data, version, OS ABI, ABI version) is {ident}; an .xdna image is ELF32 little-endian, version 1, OS ABI 0")
        if any(data[9:16]):
            raise self.fail(where, "ELF identity padding is not zero")
        try:
            elf = ELFFile(io.BytesIO(data))
            h = elf.header
        except (ELFError, Exception) as exc:  # construct raises its own errors on truncated input
            raise self.fail(where, f"pyelftools cannot parse the header: {exc}") from None
        from elftools.elf import enums

        e_type = h["e_type"] if isinstance(h["e_type"], int) else enums.ENUM_E_TYPE.get(h["e_type"], -1)
        e_machine = h["e_machine"] if isinstance(h["e_machine"], int) else enums.ENUM_E_MACHINE.get(h["e_machine"], -1)
        if e_type != F.ELF_TYPE_EXEC:
            raise self.fail(where, f"e_type is {h['e_type']}; an .xdna image is an executable (ET_EXEC)")
        if e_machine != F.ELF_MACHINE_AIE:
            raise self.fail(where, f"e_machine is {h['e_machine']}; an .xdna image is for the AIE machine ({F.ELF_MACHINE_AIE})")
        if h["e_version"] not in (F.ELF_VERSION, "EV_CURRENT") or h["e_entry"] != 0 or h["e_ehsize"] != F.ELF_HEADER_SIZE:
            raise self.fail(where, "e_version must be 1, e_entry 0 and e_ehsize 52")
        if h["e_flags"] != F.ELF_FLAGS_AIE2P:
            raise self.fail(where, f"e_flags is {h['e_flags']:#x}; this reader takes AIE2P images (flags {F.ELF_FLAGS_AIE2P})")
        phoff, phnum, phentsize = h["e_phoff"], h["e_phnum"], h["e_phentsize"]
        if phoff != F.ELF_HEADER_SIZE or phentsize != F.PROGRAM_HEADER_SIZE or not 0 < phnum <= F.MAX_PROGRAM_HEADERS:
            raise self.fail("program-header directory", f"e_phoff {phoff}, e_phentsize {phentsize}, e_phnum {phnum}: the directory follows the ELF header with 1..{F.MAX_PROGRAM_HEADERS} 32-byte entries")
        if phoff + phnum * phentsize > len(data):
            raise self.fail("program-header directory", f"{phnum} program headers run past the end of the {len(data)}-byte file")
        shoff, shnum, shentsize, shstrndx = h["e_shoff"], h["e_shnum"], h["e_shentsize"], h["e_shstrndx"]
        has_sections = bool(shoff or shnum or shentsize or shstrndx)
        sh_range = (shoff, shnum * shentsize if has_sections else 0)
        sections: list[tuple[str, int, int]] = []
        if has_sections:
            if not shoff or shentsize != F.SECTION_HEADER_SIZE or not 0 < shnum <= F.MAX_SECTION_HEADERS or shstrndx >= shnum or shoff % 4:
                raise self.fail("section-header directory", f"e_shoff {shoff}, e_shentsize {shentsize}, e_shnum {shnum}, e_shstrndx {shstrndx} do not describe a directory of 40-byte section headers")
            if shoff + sh_range[1] > len(data):
                raise self.fail("section-header directory", f"{shnum} section headers run past the end of the {len(data)}-byte file")
            if _ranges_overlap((0, F.ELF_HEADER_SIZE), sh_range) or _ranges_overlap((phoff, phnum * phentsize), sh_range):
                raise self.fail("section-header directory", "it overlaps the ELF header or the program-header directory")
            try:  # diagnostic names only: an image whose names cannot be read still loads
                for section in elf.iter_sections():
                    size = int(section["sh_size"])
                    if section.name and size:
                        sections.append((section.name, int(section["sh_offset"]), size))
            except Exception:  # noqa: BLE001
                sections = []
        return int(h["e_flags"]), phoff, phnum, sh_range, sections

    def _program_headers(self, phoff: int, phnum: int, sh_range: tuple[int, int], sections: list[tuple[str, int, int]]) -> list[ProgramHeader]:
        raw = struct.Struct("<8I")
        names = {(off, size): name for name, off, size in sections}
        headers = []
        for i in range(phnum):
            p_type, off, vaddr, paddr, filesz, memsz, flags, align = raw.unpack_from(self.data, phoff + i * F.PROGRAM_HEADER_SIZE)
            headers.append(ProgramHeader(i, p_type, off, filesz, vaddr, paddr, memsz, flags, align, names.get((off, filesz), "")))
        directory = (phoff, phnum * F.PROGRAM_HEADER_SIZE)
        for h in headers:
            if not h.align or h.align & (h.align - 1) or h.offset % h.align != h.vaddr % h.align:
                raise self.fail(h.label, f"p_align {h.align} is not a power of two that p_offset {h.offset} and p_vaddr {h.vaddr} agree with")
            if h.filesz > h.memsz:
                raise self.fail(h.label, f"p_filesz {h.filesz} exceeds p_memsz {h.memsz}")
            if h.flags & ~(F.PF_R | F.PF_W | F.PF_X):
                raise self.fail(h.label, f"unknown permission flags {h.flags & ~7:#x}")
            if h.offset + h.filesz > len(self.data):
                raise self.fail(h.label, f"bytes [{h.offset}, {h.offset + h.filesz}) run past the end of the {len(self.data)}-byte file")
            span = (h.offset, h.filesz)
            if _ranges_overlap(span, (0, F.ELF_HEADER_SIZE)) or _ranges_overlap(span, directory) or _ranges_overlap(span, sh_range):
                raise self.fail(h.label, "its bytes overlap the ELF header or a header directory")
        ordered = sorted((h for h in headers if h.filesz), key=lambda h: (h.offset, -h.filesz, h.ordinal))
        active: ProgramHeader | None = None
        for h in ordered:
            if active is not None and _ranges_overlap((active.offset, active.filesz), (h.offset, h.filesz)):
                if (active.offset, active.filesz) != (h.offset, h.filesz):
                    raise self.fail(h.label, f"its bytes partially overlap program header {active.ordinal}'s")
            else:
                active = h
        return headers

    def _payload(self, h: ProgramHeader) -> bytes:
        return self.data[h.offset : h.offset + h.filesz]

    # -- metadata --------------------------------------------------------------------

    def _metadata(self, by_type: dict[int, list[ProgramHeader]], kind: F.ProgramType, align: int, maximum: int, *, required: bool) -> ProgramHeader | None:
        found = by_type.get(kind, [])
        if len(found) > 1:
            raise self.fail(found[1].label, f"the image has more than one {kind.name} program header")
        if not found:
            if required:
                raise self.fail("program-header directory", f"the image has no {kind.name} program header (required)")
            return None
        h = found[0]
        if h.flags != F.PF_R or h.vaddr or h.paddr or not h.filesz or h.memsz != h.filesz:
            raise self.fail(h.label, "metadata is read-only (PF_R), unmapped (p_vaddr = p_paddr = 0) and nonempty with p_memsz = p_filesz")
        if h.align != align:
            raise self.fail(h.label, f"p_align is {h.align}; {kind.name} requires {align}")
        if h.filesz > maximum:
            raise self.fail(h.label, f"{h.filesz} bytes exceed the {maximum}-byte limit")
        return h

    def _note(self, h: ProgramHeader | None) -> AbiNote:
        assert h is not None
        b = self._payload(h)
        if len(b) != F.NOTE_SIZE:
            raise self.fail(h.label, f"the ABI note has {len(b)} bytes, not {F.NOTE_SIZE}")
        namesz, descsz, ntype = struct.unpack_from("<3I", b)
        if (namesz, descsz, ntype) != (len(F.NOTE_OWNER), F.NOTE_DESCRIPTION_SIZE, F.NOTE_TYPE_ABI) or b[12:17] != F.NOTE_OWNER:
            raise self.fail(h.label, "the note envelope is not a LOOM ABI note (owner LOOM, type 1, 64-byte description)")
        if any(b[17:20]):
            raise self.fail(h.label, "note name padding is not zero")
        d = b[20:]
        magic, size = struct.unpack_from("<IH", d)
        if magic != F.NOTE_MAGIC or size != F.NOTE_DESCRIPTION_SIZE:
            raise self.fail(h.label, "the note description has the wrong magic or size")
        if any(d[57:]):
            raise self.fail(h.label, "note description padding is not zero")
        major, minor, gen, rev = struct.unpack_from("<HHHI", d, 6)
        profile, firmware, policy, caps = struct.unpack_from("<4Q", d, 16)
        ocol, orow, cols, rows = struct.unpack_from("<4H", d, 48)
        note = AbiNote(major, minor, gen, rev, profile, firmware, policy, caps, ocol, orow, cols, rows, d[56])
        if major != F.ABI_MAJOR or minor > F.ABI_MINOR:
            raise self.fail(h.label, f"image ABI {major}.{minor}; this reader takes {F.ABI_MAJOR}.0 to {F.ABI_MAJOR}.{F.ABI_MINOR}")
        if not (gen and rev and profile and firmware and policy and cols and rows) or cols > 256 or rows > 256:
            raise self.fail(h.label, "the identity is incomplete (target generation, profile revision and ids, firmware ABI and policy ids nonzero; 1..256 columns and rows)")
        if note.coordinate_model != F.COORDINATES_CONTEXT_RELATIVE or ocol or orow:
            raise self.fail(h.label, "coordinates must be context-relative with origin (0, 0)")
        if caps & ~F.KNOWN_CAPABILITIES:
            raise self.fail(h.label, f"the image requires unknown loader capabilities {caps & ~F.KNOWN_CAPABILITIES:#x}")
        return note

    def _table(self, h: ProgramHeader, magic: int, record_size: int) -> tuple[bytes, int, int, int]:
        b = self._payload(h)
        if len(b) < F.TABLE_HEADER_SIZE:
            raise self.fail(h.label, f"{len(b)} bytes cannot hold the {F.TABLE_HEADER_SIZE}-byte table header")
        t_magic, major, minor, hsize, rsize, count, length, aux = struct.unpack_from("<IHHHHIII", b)
        if t_magic != magic or hsize != F.TABLE_HEADER_SIZE or rsize != record_size or count > F.MAX_TABLE_RECORDS or length != len(b):
            raise self.fail(h.label, f"table header (magic {t_magic:#x}, header {hsize}, record size {rsize}, {count} records, {length} bytes) "
                            f"does not frame {record_size}-byte records filling this {len(b)}-byte program header")
        if major != F.TABLE_ABI_MAJOR or minor > F.TABLE_ABI_MINOR:
            raise self.fail(h.label, f"table ABI {major}.{minor} is not supported")
        end = F.TABLE_HEADER_SIZE + count * record_size
        if end > length:
            raise self.fail(h.label, f"{count} records of {record_size} bytes run past the {length}-byte table")
        return b, count, end, aux

    def _entries(self, h: ProgramHeader, note: AbiNote, binding_count: int) -> list[Entry]:
        b, count, end, aux = self._table(h, F.ENTRY_TABLE_MAGIC, F.ENTRY_RECORD_SIZE)
        if count == 0 or aux != end:
            raise self.fail(h.label, "the entry table needs at least one entry and its names right after the records")
        entries, name_at, next_binding, defaults = [], aux, 0, 0
        for i in range(count):
            fields = struct.unpack_from("<8IQ", b, F.TABLE_HEADER_SIZE + i * F.ENTRY_RECORD_SIZE)
            ordinal, name_off, name_len, array, control, first, nbind, flags, caps = fields
            where = f"entry {i}"
            if ordinal != i or flags & ~F.ENTRY_FLAG_DEFAULT or caps & ~note.required_capabilities:
                raise self.fail(h.label, f"{where}: ordinal, flags or capabilities are invalid (ordinal must be {i}, capabilities within the note's)")
            defaults += bool(flags & F.ENTRY_FLAG_DEFAULT)
            if name_len == 0:
                if name_off:
                    raise self.fail(h.label, f"{where}: unnamed but has a name offset")
                name = ""
            else:
                if name_len > F.MAX_ENTRY_NAME or name_off != name_at or name_off + name_len > len(b) or b"\0" in b[name_off : name_off + name_len]:
                    raise self.fail(h.label, f"{where}: its name is not packed right after the previous one, or holds a NUL")
                try:
                    name = b[name_off : name_off + name_len].decode("utf-8")
                except UnicodeDecodeError:
                    raise self.fail(h.label, f"{where}: its name is not UTF-8") from None
                name_at = name_off + name_len
            if first != next_binding or first + nbind > binding_count:
                raise self.fail(h.label, f"{where}: bindings [{first}, {first + nbind}) are not packed after the previous entry's within the {binding_count} bindings")
            next_binding = first + nbind
            entries.append(Entry(i, name, array, None if control == F.NO_CONTROL else control, first, nbind, flags, caps))
        if name_at != len(b) or next_binding != binding_count or defaults > 1:
            raise self.fail(h.label, "trailing name bytes, bindings no entry owns, or more than one default entry")
        return entries

    def _bindings(self, h: ProgramHeader) -> list[BindingRecord]:
        b, count, end, aux = self._table(h, F.BINDING_TABLE_MAGIC, F.BINDING_RECORD_SIZE)
        if aux or end != len(b):
            raise self.fail(h.label, "the binding table has trailing or auxiliary bytes")
        out = []
        for i in range(count):
            at = F.TABLE_HEADER_SIZE + i * F.BINDING_RECORD_SIZE
            ordinal, entry, kind, space, access, usage, reserved = struct.unpack_from("<IIHHIII", b, at)
            length, align, lo, hi = struct.unpack_from("<4Q", b, at + 24)
            where = f"binding {i}"
            if reserved:
                raise self.fail(h.label, f"{where}: reserved bits are set")
            if ordinal != i or not access or access & ~(F.BINDING_READ | F.BINDING_WRITE) or usage & ~F.KNOWN_USAGE:
                raise self.fail(h.label, f"{where}: ordinal, access or usage is invalid (ordinal {ordinal}, access {access:#x}, usage {usage:#x})")
            if not align or align & (align - 1) or lo > hi:
                raise self.fail(h.label, f"{where}: minimum alignment {align} is not a power of two, or offsets [{lo}, {hi}] are reversed")
            if length > 2**64 - 1 - lo:
                raise self.fail(h.label, f"{where}: its range overflows")
            if kind == F.BindingKind.BUFFER:
                if space not in (F.AddressSpace.GLOBAL, F.AddressSpace.HOST) or not length or not usage & F.Usage.DEVICE_VISIBLE:
                    raise self.fail(h.label, f"{where}: a buffer binding needs a global or host address space, a nonzero length and DEVICE_VISIBLE usage")
            elif kind == F.BindingKind.SCALAR:
                if space or usage or access != F.BINDING_READ or length not in (1, 2, 4, 8) or align != length or lo or hi:
                    raise self.fail(h.label, f"{where}: a scalar binding is a read-only 1, 2, 4 or 8-byte value aligned to its size")
            else:
                raise self.fail(h.label, f"{where}: unknown binding kind {kind}")
            out.append(BindingRecord(i, entry, kind, space, access, usage, length, align, lo, hi))
        return out

    def _relocations(self, h: ProgramHeader, bindings: Sequence[BindingRecord]) -> list[Relocation]:
        b, count, end, aux = self._table(h, F.RELOCATION_TABLE_MAGIC, F.RELOCATION_RECORD_SIZE)
        if count == 0 or aux or end != len(b):
            raise self.fail(h.label, "the relocation table is empty or has trailing bytes")
        out: list[Relocation] = []
        for i in range(count):
            at = F.TABLE_HEADER_SIZE + i * F.RELOCATION_RECORD_SIZE
            target, offset, binding, kind, width, flags = struct.unpack_from("<IIIHBB", b, at)
            addend, lo, hi, align = struct.unpack_from("<qQQQ", b, at + 16)
            where = f"relocation {i}"
            if binding >= len(bindings) or width not in (4, 8) or flags or not align or align & (align - 1) or lo > hi or (width == 4 and hi > 0xFFFFFFFF):
                raise self.fail(h.label, f"{where}: binding {binding} of {len(bindings)}, width {width}, flags {flags}, alignment {align} or range [{lo:#x}, {hi:#x}] is invalid")
            record = Relocation(i, target, offset, binding, kind, width, flags, addend, lo, hi, align)
            bkind = bindings[binding].kind
            if kind in (F.RelocationKind.BINDING_ADDRESS, F.RelocationKind.BINDING_BYTE_LENGTH, F.RelocationKind.BINDING_BYTE_OFFSET):
                if bkind != F.BindingKind.BUFFER:
                    raise self.fail(h.label, f"{where}: kind {F.RelocationKind(kind).name} needs a buffer binding")
            elif kind == F.RelocationKind.SCALAR_VALUE:
                if bkind != F.BindingKind.SCALAR or bindings[binding].minimum_length != width:
                    raise self.fail(h.label, f"{where}: a scalar relocation needs a scalar binding of its width")
            else:
                raise self.fail(h.label, f"{where}: unknown relocation kind {kind}")
            if out:
                prev = out[-1]
                if target < prev.target or (target == prev.target and offset < prev.offset + prev.width):
                    raise self.fail(h.label, f"{where}: relocations overlap or are not ordered by target and offset")
            out.append(record)
        return out

    # -- programs -----------------------------------------------------------------

    def _tile(self, h: ProgramHeader, note: AbiNote) -> Tile:
        column, row, space, tflags = h.paddr & 0xFF, (h.paddr >> 8) & 0xFF, (h.paddr >> 16) & 0xFF, h.paddr >> 24
        if space not in (F.TileMemory.PROGRAM, F.TileMemory.DATA) or tflags:
            raise self.fail(h.label, f"destination {h.paddr:#010x}: unknown memory space {space} or nonzero flags")
        memory = F.TileMemory(space)
        want = F.PF_R | (F.PF_X if memory == F.TileMemory.PROGRAM else F.PF_W)
        if h.flags != want:
            raise self.fail(h.label, f"a {memory.name} tile image has flags {want:#x} (R{'X' if want & 1 else 'W'}), not {h.flags:#x}")
        if column >= note.columns or not F.FIRST_COMPUTE_ROW <= row < note.rows:
            raise self.fail(h.label, f"tile ({column}, {row}) is not a compute tile of the {note.columns}x{note.rows} context")
        _, capacity = F.TILE_MEMORY[memory]
        padded = -(-h.memsz // 4) * 4
        if h.vaddr % 4 or h.vaddr + padded > capacity:
            raise self.fail(h.label, f"bytes [{h.vaddr}, {h.vaddr + padded}) do not fit the tile's {capacity}-byte {memory.name} memory word-aligned")
        if h.memsz > h.filesz and not note.required_capabilities & F.Capability.TILE_ZERO_FILL:
            raise self.fail(h.label, "a zero-filled tail needs the TILE_ZERO_FILL capability in the ABI note")
        return Tile(h, column, row, memory, self._payload(h) + bytes(h.memsz - h.filesz))

    def _program(self, h: ProgramHeader, note: AbiNote, headers: Sequence[ProgramHeader], tiles: dict[int, Tile]) -> Program:
        kind = F.ProgramType(h.type)
        if h.flags != F.PF_R or h.vaddr or h.paddr or not h.filesz or h.memsz != h.filesz:
            raise self.fail(h.label, "a program payload is read-only, unmapped and nonempty with p_memsz = p_filesz")
        if h.align != F.RECORD_ALIGNMENT:
            raise self.fail(h.label, f"p_align is {h.align}; programs are {F.RECORD_ALIGNMENT}-byte aligned")
        if h.filesz > F.MAX_PROGRAM_PAYLOAD:
            raise self.fail(h.label, f"{h.filesz} bytes exceed the {F.MAX_PROGRAM_PAYLOAD}-byte limit")
        b = self._payload(h)
        size = F.ARRAY_HEADER_SIZE if kind == F.ProgramType.ARRAY else F.CONTROL_HEADER_SIZE
        if len(b) < size:
            raise self.fail(h.label, f"{len(b)} bytes cannot hold the {size}-byte {kind.name} header")
        magic, major, minor, hsize, rsize, count, length, pflags = struct.unpack_from("<IHHHHIII", b)
        want_magic = F.ARRAY_MAGIC if kind == F.ProgramType.ARRAY else F.CONTROL_MAGIC
        if magic != want_magic or hsize != size or rsize != F.RECORD_HEADER_SIZE:
            raise self.fail(h.label, f"the {kind.name} header magic or framing is invalid")
        if major != F.PROGRAM_ABI_MAJOR or minor > F.PROGRAM_ABI_MINOR:
            raise self.fail(h.label, f"program ABI {major}.{minor} is not supported")
        first_tile = tile_count = 0
        if kind == F.ProgramType.ARRAY:
            first_tile, tile_count = struct.unpack_from("<II", b, 24)
        if length != len(b) or pflags or not 0 < count <= F.MAX_PROGRAM_RECORDS or (kind == F.ProgramType.ARRAY and not tile_count):
            raise self.fail(h.label, f"header says {length} bytes, flags {pflags}, {count} records"
                            + (f", {tile_count} TILE headers" if kind == F.ProgramType.ARRAY else "")
                            + f": it must fill the payload, have no flags and 1..{F.MAX_PROGRAM_RECORDS} records" + (" and name its TILE headers" if kind == F.ProgramType.ARRAY else ""))
        if kind == F.ProgramType.ARRAY:
            for o in range(first_tile, first_tile + tile_count):
                if o >= len(headers) or headers[o].type != F.ProgramType.TILE:
                    raise self.fail(h.label, f"TILE headers [{first_tile}, {first_tile + tile_count}) include program header {o}, which is not a TILE")
        records = []
        at = size
        for i in range(count):
            if len(b) - at < F.RECORD_HEADER_SIZE:
                raise self.fail(h.label, f"record {i} at byte {at}: its header runs past the payload")
            rtype, rflags, rlen = struct.unpack_from("<HHI", b, at)
            if not rtype or rlen < F.RECORD_HEADER_SIZE or rlen > F.MAX_PROGRAM_RECORD or rlen % F.RECORD_ALIGNMENT:
                raise self.fail(h.label, f"record {i} at byte {at}: type {rtype}, {rlen} bytes is not canonical framing (nonzero type, 8..{F.MAX_PROGRAM_RECORD} bytes, 4-byte multiple)")
            if rlen > len(b) - at:
                raise self.fail(h.label, f"record {i} at byte {at}: {rlen} bytes run past the payload")
            records.append(self._record(h, kind, i, at, rtype, rflags, b[at : at + rlen], note, first_tile, tile_count, tiles))
            at += rlen
        if at != len(b):
            raise self.fail(h.label, f"{count} records end at byte {at}, the payload has {len(b)}")
        return Program(h, tuple(records), first_tile, tile_count)

    def _record(self, h: ProgramHeader, kind: F.ProgramType, i: int, at: int, rtype: int, rflags: int, body: bytes,
                note: AbiNote, first_tile: int, tile_count: int, tiles: dict[int, Tile]) -> Record:
        where = f"record {i} at byte {at}"
        try:
            t = F.RecordType(rtype)
        except ValueError:
            raise self.fail(h.label, f"{where}: unknown AIE2P record type {rtype}") from None
        if rflags:
            raise self.fail(h.label, f"{where}: record flags {rflags:#x} are not zero")
        want = F.RECORD_SIZES.get(t)
        if want is not None and len(body) != want:
            raise self.fail(h.label, f"{where}: a {t.name} record has {want} bytes, not {len(body)}")

        def tile_address(address: int) -> int:
            column, row = address >> F.COLUMN_SHIFT, (address >> F.ROW_SHIFT) & 0x1F
            if column >= note.columns or row >= note.rows:
                raise self.fail(h.label, f"{where}: register address {address:#x} is tile ({column}, {row}), outside the {note.columns}x{note.rows} context")
            return address

        if t == F.RecordType.REGISTER_WRITE32:
            address, value = struct.unpack_from("<II", body, 8)
            return Record(i, t, at, len(body), tile_address(address), value)
        if t == F.RecordType.REGISTER_MASK_WRITE32:
            address, mask, value = struct.unpack_from("<III", body, 8)
            return Record(i, t, at, len(body), tile_address(address), value, mask)
        if t == F.RecordType.REGISTER_BLOCK_WRITE32:
            if len(body) < F.BLOCK_WRITE_HEADER_SIZE + 4:
                raise self.fail(h.label, f"{where}: a block write holds at least one word")
            address, words = struct.unpack_from("<II", body, 8)
            if len(body) != F.BLOCK_WRITE_HEADER_SIZE + 4 * words or address % 4:
                raise self.fail(h.label, f"{where}: a block write of {words} words at {address:#x} is {F.BLOCK_WRITE_HEADER_SIZE + 4 * words} bytes at a word address")
            tile_address(address)
            if (address & F.TILE_OFFSET_MASK) + 4 * words > F.TILE_OFFSET_MASK + 1:
                raise self.fail(h.label, f"{where}: {words} words from {address:#x} run out of the tile")
            return Record(i, t, at, len(body), address, words=body[F.BLOCK_WRITE_HEADER_SIZE:])
        if t == F.RecordType.TILE_PROGRAM_LOAD:
            (ordinal,) = struct.unpack_from("<I", body, 8)
            if kind != F.ProgramType.ARRAY:
                raise self.fail(h.label, f"{where}: TILE_PROGRAM_LOAD belongs in an ARRAY program")
            if not first_tile <= ordinal < first_tile + tile_count or ordinal not in tiles:
                raise self.fail(h.label, f"{where}: program header {ordinal} is not one of the ARRAY's TILE headers [{first_tile}, {first_tile + tile_count})")
            return Record(i, t, at, len(body), tiles[ordinal].address, tile=ordinal)
        col, row, direction, channel, ncols, nrows = body[8:14]
        if body[14:16] != b"\0\0" or direction not in (0, 1) or not ncols or not nrows or col + ncols > note.columns or row + nrows > note.rows:
            raise self.fail(h.label, f"{where}: DMA task wait on columns [{col}, {col + ncols}) rows [{row}, {row + nrows}), direction {direction}: outside the context or malformed")
        return Record(i, t, at, len(body), wait=(col, row, direction, channel, ncols, nrows))

    def _cross_check(self, note: AbiNote, headers: Sequence[ProgramHeader], entries: Sequence[Entry], relocations: Sequence[Relocation],
                     programs: dict[int, Program], tiles: dict[int, Tile], relocs_h: ProgramHeader | None) -> None:
        table = "ENTRIES"
        controls: dict[int, Entry] = {}
        for e in entries:
            array = programs.get(e.array)
            if array is None or array.kind != F.ProgramType.ARRAY:
                raise self.fail(table, f"entry {e.ordinal} ({e.name!r}): program header {e.array} is not an ARRAY program")
            if e.control is not None:
                control = programs.get(e.control)
                if control is None or control.kind != F.ProgramType.CONTROL:
                    raise self.fail(table, f"entry {e.ordinal} ({e.name!r}): program header {e.control} is not a CONTROL program")
                if e.control in controls:
                    raise self.fail(table, f"entries {controls[e.control].ordinal} and {e.ordinal} share CONTROL program header {e.control}")
                controls[e.control] = e
            elif e.binding_count:
                raise self.fail(table, f"entry {e.ordinal} ({e.name!r}) has bindings but no CONTROL program to patch them into")
        if relocations and not note.required_capabilities & F.Capability.RUNTIME_RELOCATIONS:
            raise self.fail(relocs_h.label if relocs_h else "RELOCATIONS", "relocations need the RUNTIME_RELOCATIONS capability in the ABI note")
        if controls and not note.required_capabilities & F.Capability.CONTROL_PROGRAMS:
            raise self.fail(table, "CONTROL programs need the CONTROL_PROGRAMS capability in the ABI note")
        label = relocs_h.label if relocs_h else "RELOCATIONS"
        for r in relocations:
            where = f"relocation {r.ordinal}"
            owner = controls.get(r.target)
            if owner is None:
                raise self.fail(label, f"{where}: target program header {r.target} is not the CONTROL program of an entry "
                                "(AIE2P transaction 0.1 lowering patches CONTROL programs only)")
            if r.kind != F.RelocationKind.BINDING_ADDRESS or r.width != 8:
                raise self.fail(label, f"{where}: AIE2P transaction 0.1 lowering takes 64-bit binding-address relocations only")
            if not owner.first_binding <= r.binding < owner.first_binding + owner.binding_count:
                raise self.fail(label, f"{where}: binding {r.binding} belongs to another entry than entry {owner.ordinal}")
            if r.minimum > (1 << F.ADDRESS_BITS) - 1:
                raise self.fail(label, f"{where}: its value range [{r.minimum:#x}, ...] lies above the 48-bit DMA address space")
            program = programs[r.target]
            record = next((x for x in program.records if x.offset <= r.offset < x.offset + x.length), None)
            if record is None or record.type != F.RecordType.REGISTER_BLOCK_WRITE32:
                raise self.fail(label, f"{where}: byte {r.offset} of program header {r.target} is not inside a block-write record")
            word = r.offset - record.offset - F.BLOCK_WRITE_HEADER_SIZE
            if word < 0 or word % 4 or r.offset + r.width > record.offset + record.length:
                raise self.fail(label, f"{where}: the 8-byte field at byte {r.offset} is not two whole words of the block write's data")
            if not F.shim_bd_address_field(record.address + word):
                raise self.fail(label, f"{where}: register {record.address + word:#x} is not a shim DMA buffer-descriptor address field")
        used_tiles = {rec.tile for p in programs.values() for rec in p.records if rec.type == F.RecordType.TILE_PROGRAM_LOAD}
        for ordinal, tile in tiles.items():
            if ordinal not in used_tiles:
                raise self.fail(tile.header.label, "no ARRAY program loads this TILE image")


__all__ = ["AbiNote", "BindingRecord", "Entry", "Program", "ProgramHeader", "Record", "Relocation", "Tile", "XdnaImage", "XdnaImageError", "read_image"]
