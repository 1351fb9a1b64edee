"""A small writer of ``.xdna`` images for the tests, independent of the package's.

Every value is written from the layouts ROCm/hrx ``iree/hal/drivers/amd/xdna/image/
format.h`` states (ELF32 LE, machine 264, flags 3; program-header types
0x6C584401..7; the 84-byte LOOM note; 24-byte table headers; 40/56/48-byte entry,
binding and relocation records; 32/24-byte ARRAY/CONTROL headers; 8-byte record
headers) as literal numbers -- never through :mod:`hrx_npu.xdna.format` or
:mod:`hrx_npu.xdna.writer` -- so a wrong constant in the reader is caught.

:class:`Spec` is a mutable description; tests change one field (or the finished
bytes) to break exactly one rule.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

NOTE, ENTRIES, BINDINGS, RELOCATIONS, TILE, ARRAY, CONTROL, FIRMWARE = 4, 0x6C584401, 0x6C584402, 0x6C584403, 0x6C584404, 0x6C584405, 0x6C584406, 0x6C584407
R, W, X = 4, 2, 1
READ, WRITE = 1, 2


def rec(type_: int, body: bytes, flags: int = 0, length: int | None = None) -> bytes:
    """An AIE2P program record: u16 type, u16 flags, u32 byte length, body."""
    return struct.pack("<HHI", type_, flags, 8 + len(body) if length is None else length) + body


def write32(address: int, value: int) -> bytes:
    return rec(1, struct.pack("<II", address, value))


def mask_write32(address: int, mask: int, value: int) -> bytes:
    return rec(2, struct.pack("<III", address, mask, value))


def block_write32(address: int, words: list[int]) -> bytes:
    return rec(3, struct.pack("<II", address, len(words)) + struct.pack(f"<{len(words)}I", *words))


def tile_load(ordinal: int) -> bytes:
    return rec(4, struct.pack("<I", ordinal))


def task_wait(col: int, row: int, direction: int = 0, channel: int = 0, ncols: int = 1, nrows: int = 1) -> bytes:
    return rec(5, bytes([col, row, direction, channel, ncols, nrows, 0, 0]))


def shim_bd(column: int, bd: int) -> int:
    """Register address of shim buffer descriptor ``bd`` of ``column`` (0x1D000 + 0x20 bd)."""
    return (column << 25) | (0x1D000 + 0x20 * bd)


@dataclass
class Segment:
    type: int
    payload: bytes
    flags: int = R
    align: int = 8
    vaddr: int = 0
    paddr: int = 0
    memsz: int | None = None
    name: str = ""
    offset: int | None = None  # force p_offset (breaks layout on purpose)


@dataclass
class Spec:
    """A one-entry (by default) image: NOTE, ENTRIES, BINDINGS, RELOCATIONS, one TILE
    per column, ARRAY, CONTROL -- program headers 0..6+columns-1 in that order."""

    columns: int = 1
    rows: int = 6
    bindings: list[tuple[int, int]] = field(default_factory=lambda: [(4096, READ), (4096, WRITE)])
    entry: str = "copy_i32"
    # note
    abi: tuple[int, int] = (1, 0)
    generation: int = 3
    identity: tuple[int, int, int, int] = (1, 0x1111, 0x2222, 0x3333)
    capabilities: int = 0b11
    origin: tuple[int, int] = (0, 0)
    coordinates: int = 1
    # tables, as fields each test may change
    entry_flags: int = 1
    entry_caps: int = 0
    binding_overrides: dict[int, dict[str, Any]] = field(default_factory=dict)
    relocation_overrides: dict[int, dict[str, Any]] = field(default_factory=dict)
    extra_relocations: list[dict[str, Any]] = field(default_factory=list)
    tile_overrides: dict[str, Any] = field(default_factory=dict)
    array_records: list[bytes] | None = None
    control_records: list[bytes] | None = None
    extra_segments: list[Segment] = field(default_factory=list)
    array_header: dict[str, Any] = field(default_factory=dict)
    control_header: dict[str, Any] = field(default_factory=dict)
    sections: bool = True

    @property
    def first_tile(self) -> int:
        return 4

    @property
    def array_ordinal(self) -> int:
        return 4 + self.columns

    @property
    def control_ordinal(self) -> int:
        return 5 + self.columns

    def note(self) -> bytes:
        rev, profile, firmware, policy = self.identity
        d = struct.pack("<IHHHHI", 0x414E4458, 64, self.abi[0], self.abi[1], self.generation, rev)
        d += struct.pack("<QQQQ", profile, firmware, policy, self.capabilities)
        d += struct.pack("<HHHHB", self.origin[0], self.origin[1], self.columns, self.rows, self.coordinates)
        d += bytes(64 - len(d))
        return struct.pack("<III", 5, 64, 1) + b"LOOM\0" + bytes(3) + d

    def control(self) -> tuple[list[bytes], list[int]]:
        """CONTROL records and the payload offsets of each binding's BD address word."""
        records, sites = [], []
        at = 24
        for i, (length, access) in enumerate(self.bindings):
            col = i % self.columns
            bd = i // self.columns
            records.append(block_write32(shim_bd(col, bd), [length // 4] + [0] * 7))
            sites.append(at + 16 + 4)  # word 1 of the descriptor
            at += len(records[-1])
            records.append(write32((col << 25) | (0x1D204 if access & WRITE else 0x1D214), bd))
            at += len(records[-1])
        for i, (_, access) in enumerate(self.bindings):
            if access & WRITE:
                records.append(task_wait(i % self.columns, 0))
        return records, sites


def table(magic: int, record_size: int, records: list[bytes], aux: bytes = b"", *, aux_offset: int | None = None) -> bytes:
    end = 24 + record_size * len(records)
    aux_at = (end if aux or magic == 0x544E4558 else 0) if aux_offset is None else aux_offset
    return struct.pack("<IHHHHIII", magic, 1, 0, 24, record_size, len(records), end + len(aux), aux_at) + b"".join(records) + aux


def build(spec: Spec) -> bytes:
    """The image bytes of ``spec``."""
    control_records, sites = spec.control()
    if spec.control_records is not None:
        control_records = spec.control_records
    name = spec.entry.encode()
    names_at = 24 + 40
    entry = struct.pack("<8IQ", 0, names_at if name else 0, len(name), spec.array_ordinal, spec.control_ordinal, 0, len(spec.bindings),
                        spec.entry_flags, spec.entry_caps)
    entries = table(0x544E4558, 40, [entry], name)
    bindings = []
    for i, (length, access) in enumerate(spec.bindings):
        b = dict(ordinal=i, entry=0, kind=1, space=1, access=access, usage=1, reserved=0, length=length, align=64, lo=0, hi=2**64 - 1)
        b.update(spec.binding_overrides.get(i, {}))
        bindings.append(struct.pack("<IIHHIII4Q", b["ordinal"], b["entry"], b["kind"], b["space"], b["access"], b["usage"], b["reserved"],
                                    b["length"], b["align"], b["lo"], b["hi"]))
    relocs = []
    for i, offset in enumerate(sites):
        r = dict(target=spec.control_ordinal, offset=offset, binding=i, kind=1, width=8, flags=0, addend=0, lo=0, hi=(1 << 48) - 1, align=4)
        r.update(spec.relocation_overrides.get(i, {}))
        relocs.append(r)
    relocs += spec.extra_relocations
    reloc_bytes = [struct.pack("<IIIHBBqQQQ", r["target"], r["offset"], r["binding"], r["kind"], r["width"], r["flags"], r["addend"], r["lo"], r["hi"], r["align"])
                   for r in relocs]
    segments = [
        Segment(NOTE, spec.note(), align=4, name=".note.loom"),
        Segment(ENTRIES, entries, name=".xdna.entries"),
        Segment(BINDINGS, table(0x444E4258, 56, bindings), name=".xdna.bindings"),
        Segment(RELOCATIONS, table(0x4C455258, 48, reloc_bytes), name=".xdna.relocations"),
    ]
    for c in range(spec.columns):
        t = dict(col=c, row=2, space=1, tflags=0, data=b"AIE2P-CORE" + bytes([c]) + b"\0" * 5, vaddr=0, memsz=None, pflags=R | X)
        t.update(spec.tile_overrides)
        segments.append(Segment(TILE, t["data"], flags=t["pflags"], align=4, vaddr=t["vaddr"],
                                paddr=t["col"] | t["row"] << 8 | t["space"] << 16 | t["tflags"] << 24, memsz=t["memsz"], name=f".xdna.tile{c}"))
    array_records = spec.array_records if spec.array_records is not None else [tile_load(spec.first_tile + c) for c in range(spec.columns)]
    body = b"".join(array_records)
    h = dict(magic=0x52524158, major=1, minor=0, hsize=32, rsize=8, count=len(array_records), length=32 + len(body), flags=0,
             first=spec.first_tile, tiles=spec.columns)
    h.update(spec.array_header)
    array = struct.pack("<IHHHHIIIII", h["magic"], h["major"], h["minor"], h["hsize"], h["rsize"], h["count"], h["length"], h["flags"], h["first"], h["tiles"]) + body
    body = b"".join(control_records)
    h = dict(magic=0x4C544358, major=1, minor=0, hsize=24, rsize=8, count=len(control_records), length=24 + len(body), flags=0)
    h.update(spec.control_header)
    control = struct.pack("<IHHHHIII", h["magic"], h["major"], h["minor"], h["hsize"], h["rsize"], h["count"], h["length"], h["flags"]) + body
    segments += [Segment(ARRAY, array, align=4, name=".xdna.array"), Segment(CONTROL, control, align=4, name=".xdna.control")]
    segments += spec.extra_segments
    return elf(segments, sections=spec.sections)


def elf(segments: list[Segment], *, sections: bool = True, header: dict[str, Any] | None = None) -> bytes:
    """ELF32 LE with ``segments`` as program headers (payloads 8-aligned after the
    directory) and, with ``sections``, a section per named segment plus .shstrtab."""
    at = 52 + 32 * len(segments)
    blob = bytearray()
    offsets = []
    for s in segments:
        while (at + len(blob)) % s.align != s.vaddr % s.align:
            blob += b"\0"
        offsets.append(at + len(blob) if s.offset is None else s.offset)
        blob += s.payload
    shdrs = b""
    shoff = shnum = shstrndx = shentsize = 0
    if sections:
        strtab = b"\0"
        name_at = []
        for s in segments:
            name_at.append(len(strtab))
            strtab += s.name.encode() + b"\0"
        str_name = len(strtab)
        strtab += b".shstrtab\0"
        str_at = at + len(blob)
        blob += strtab
        while (at + len(blob)) % 4:
            blob += b"\0"
        shoff = at + len(blob)
        shdrs = bytes(40) + b"".join(struct.pack("<10I", n, 1, 2, s.vaddr, o, len(s.payload), 0, 0, s.align, 0)
                                     for s, o, n in zip(segments, offsets, name_at))
        shdrs += struct.pack("<10I", str_name, 3, 0, 0, str_at, len(strtab), 0, 0, 1, 0)
        shnum, shstrndx, shentsize = len(segments) + 2, len(segments) + 1, 40
    h = dict(ident=b"\x7fELF\x01\x01\x01\x00\x00" + bytes(7), type=2, machine=264, version=1, entry=0, phoff=52, shoff=shoff, flags=3,
             ehsize=52, phentsize=32, phnum=len(segments), shentsize=shentsize, shnum=shnum, shstrndx=shstrndx)
    h.update(header or {})
    head = h["ident"] + struct.pack("<HHIIIIIHHHHHH", h["type"], h["machine"], h["version"], h["entry"], h["phoff"], h["shoff"], h["flags"],
                                    h["ehsize"], h["phentsize"], h["phnum"], h["shentsize"], h["shnum"], h["shstrndx"])
    phdrs = b"".join(struct.pack("<8I", s.type, o, s.vaddr, s.paddr, len(s.payload), len(s.payload) if s.memsz is None else s.memsz, s.flags, s.align)
                     for s, o in zip(segments, offsets))
    return head + phdrs + bytes(blob) + shdrs


def phdr_offset(index: int) -> int:
    """File offset of program header ``index``."""
    return 52 + 32 * index


def patch_u32(data: bytes, offset: int, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into("<I", out, offset, value)
    return bytes(out)


def payload_offset(data: bytes, index: int) -> int:
    """p_offset of program header ``index``."""
    return struct.unpack_from("<I", data, phdr_offset(index) + 4)[0]
