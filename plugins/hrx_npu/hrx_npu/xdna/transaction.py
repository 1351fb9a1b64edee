"""Lowering an image entry to the instruction stream one invocation submits.

An XDNA kernel queue (libamdf ABI 5) publishes opaque instruction ranges: an AIE
transaction, format 0.1, in the context's private memory. Every invocation submits
the entry's ARRAY realisation followed by its CONTROL program, so each invocation
establishes the state of its columns -- also when contexts time-share the array --
before it runs (the original's runner, too, realises the ARRAY before each CONTROL).

Transaction framing (as the simulated NPU parses it, :mod:`hrx_amdf.fake.npu`): a
16-byte header (major 0, minor 1, device generation, rows, columns, memory-tile rows,
two pad bytes, operation count, total bytes) and operations with an 8-byte header
(opcode, column, row, reserved, u32 size including the header). The operations are
those of the AIE-RT transaction opcodes: WRITE (0), BLOCKWRITE (1), MASKWRITE (3)
and the task-completion-token wait custom operation (128). Their bodies:

* WRITE: u32 register address, u32 value;
* MASKWRITE: u32 register address, u32 value, u32 mask, u32 zero;
* BLOCKWRITE: u32 register address, u32 word count, the words -- a TILE image load
  is a block write of the (word-padded) image to the tile's memory;
* TCT wait: column, row, direction, channel, column count, row count, two zeros.

A relocation that targets byte ``o`` of a CONTROL block-write record's words becomes
a patch site at the same word of the lowered BLOCKWRITE (the lowering the original's
``aie2p/native_image.c`` performs). How real firmware frames these bodies is for an
NPU to confirm; the structure (order, tiles, sizes, patch sites) is what this checks.
"""

from __future__ import annotations

import struct

import attrs

from . import format as F
from .image import Entry, Program, Record, XdnaImage

TXN_HEADER = struct.Struct("<BBBBBBxxII")
OP_HEADER = struct.Struct("<BBBBI")
OP_WRITE, OP_BLOCKWRITE, OP_MASKWRITE, OP_TCT = 0, 1, 3, 128
ADDRESS_MASK = (1 << F.ADDRESS_BITS) - 1


@attrs.frozen
class Site:
    """One 64-bit binding address patched into every invocation's stream."""

    offset: int
    #: Entry-relative binding index (the position in the launch list).
    binding: int
    addend: int
    minimum: int
    maximum: int
    alignment: int
    relocation: int


@attrs.frozen
class Instructions:
    """The stream template of one entry and where bindings are patched into it."""

    template: bytes
    sites: tuple[Site, ...]
    array_operations: int
    control_operations: int
    columns: int
    rows: int

    def bindings_patched(self) -> frozenset[int]:
        return frozenset(s.binding for s in self.sites)


def _tile_of(address: int) -> tuple[int, int]:
    return address >> F.COLUMN_SHIFT, (address >> F.ROW_SHIFT) & 0x1F


def _op(code: int, column: int, row: int, body: bytes) -> bytes:
    return OP_HEADER.pack(code, column, row, 0, OP_HEADER.size + len(body)) + body


def _lower(image: XdnaImage, record: Record) -> bytes:
    t = record.type
    if t == F.RecordType.REGISTER_WRITE32:
        return _op(OP_WRITE, *_tile_of(record.address), struct.pack("<II", record.address, record.value))
    if t == F.RecordType.REGISTER_MASK_WRITE32:
        return _op(OP_MASKWRITE, *_tile_of(record.address), struct.pack("<IIII", record.address, record.value, record.mask, 0))
    if t == F.RecordType.REGISTER_BLOCK_WRITE32:
        return _op(OP_BLOCKWRITE, *_tile_of(record.address), struct.pack("<II", record.address, len(record.words) // 4) + record.words)
    if t == F.RecordType.TILE_PROGRAM_LOAD:
        tile = image.tiles[record.tile]
        data = tile.data + bytes(-len(tile.data) % 4)
        return _op(OP_BLOCKWRITE, tile.column, tile.row, struct.pack("<II", tile.address, len(data) // 4) + data)
    col, row, direction, channel, ncols, nrows = record.wait
    return _op(OP_TCT, col, row, bytes([col, row, direction, channel, ncols, nrows, 0, 0]))


def lower_entry(image: XdnaImage, entry: Entry) -> Instructions:
    """The transaction (ARRAY then CONTROL) of ``entry`` and its patch sites."""
    note = image.note
    body = bytearray()
    count = 0
    array: Program = image.programs[entry.array]
    for record in array.records:
        body += _lower(image, record)
        count += 1
    array_ops = count
    sites: list[Site] = []
    if entry.control is not None:
        control = image.programs[entry.control]
        relocations = sorted(image.entry_relocations(entry), key=lambda r: r.offset)
        for record in control.records:
            at = TXN_HEADER.size + len(body)
            body += _lower(image, record)
            count += 1
            for r in relocations:
                if record.offset <= r.offset < record.offset + record.length:
                    word = r.offset - record.offset - F.BLOCK_WRITE_HEADER_SIZE
                    # the lowered block write has the same 16-byte header before its words
                    sites.append(Site(at + OP_HEADER.size + 8 + word, r.binding - entry.first_binding, r.addend,
                                      r.minimum, min(r.maximum, ADDRESS_MASK), max(r.alignment, 4), r.ordinal))
    header = TXN_HEADER.pack(0, 1, F.TRANSACTION_DEVICE_GENERATION, note.rows, note.columns, F.TRANSACTION_MEMORY_TILE_ROWS,
                             count, TXN_HEADER.size + len(body))
    return Instructions(header + bytes(body), tuple(sites), array_ops, count - array_ops, note.columns, note.rows)


def patch(template: bytes, sites: tuple[Site, ...], addresses: list[int]) -> bytes:
    """The stream with each site's binding address (plus addend) in its 48-bit field;
    the upper 16 bits of a field keep the template's descriptor bits. The caller
    checked every value against its site (see ``XdnaProgram``)."""
    stream = bytearray(template)
    for site in sites:
        old = int.from_bytes(stream[site.offset : site.offset + 8], "little")
        value = (old & ~ADDRESS_MASK) | ((addresses[site.binding] + site.addend) & ADDRESS_MASK)
        stream[site.offset : site.offset + 8] = value.to_bytes(8, "little")
    return bytes(stream)


__all__ = ["Instructions", "Site", "lower_entry", "patch", "TXN_HEADER", "OP_HEADER"]
