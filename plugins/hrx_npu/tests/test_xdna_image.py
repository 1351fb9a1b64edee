"""The .xdna reader and qualification over images the tests build (tests/xdna_images.py):
valid images read and lower as the format says; every rule broken once is an
ArtifactError naming the file, the part of the image and the rule; contract
mismatches are the contract's typed errors."""

from __future__ import annotations

import struct

import pytest
import xdna_images as X
from hrx_npu import AccessModeError, AlignmentError, BindingLengthError, BindingListError, BufferContract, ColumnError, KernelContract
from hrx_npu.xdna import XdnaImageError, read_image
from hrx_npu.xdna.qualify import DeviceLimits, qualify
from hrx_npu.xdna.transaction import lower_entry

import hrx_core as hrx

R, W = X.R, X.W

LIMITS = DeviceLimits(rows=6, columns=8, instruction_max_bytes=64 << 20, instruction_granularity=4)


def contract(*slots):
    return KernelContract([BufferContract(length, access, alignment) for length, access, alignment in slots])


COPY = contract((4096, "read", 64), (4096, "write", 64))


def test_valid_image_reads_with_every_field():
    data = X.build(X.Spec())
    image = read_image(data, "copy_i32.xdna")
    assert image.note.columns == 1 and image.note.rows == 6 and image.note.target_generation == 3
    assert (image.note.device_profile_id, image.note.firmware_abi_id, image.note.policy_id) == (0x1111, 0x2222, 0x3333)
    (entry,) = image.entries
    assert (entry.name, entry.array, entry.control, entry.first_binding, entry.binding_count, entry.default) == ("copy_i32", 5, 6, 0, 2, True)
    assert [(b.access, b.minimum_length, b.minimum_alignment) for b in image.bindings] == [(1, 4096, 64), (2, 4096, 64)]
    assert [(r.target, r.offset, r.binding, r.width) for r in image.relocations] == [(6, 24 + 16 + 4, 0, 8), (6, 24 + 48 + 16 + 16 + 4, 1, 8)]
    assert image.headers[2].label == ".xdna.bindings (program header 2 (BINDINGS))"
    assert image.entry("copy_i32") is entry and image.entry() is entry
    with pytest.raises(XdnaImageError, match="no entry named 'other'"):
        image.entry("other")


def test_lowering_is_an_aie_transaction_with_array_then_control():
    """The lowered stream parses with the simulated NPU's own transaction parser, holds
    the ARRAY realisation (tile loads) before the CONTROL program, and its patch sites
    are the descriptors' address words."""
    from hrx_amdf.fake.npu import parse_transaction

    spec = X.Spec(columns=2, bindings=[(256, X.READ), (256, X.READ), (512, X.READ | X.WRITE)])
    image = read_image(X.build(spec), "three.xdna")
    q = qualify(image, None, contract((256, "read", 64), (256, "read", 64), (512, "read_write", 64)), 2, LIMITS)
    ins = q.instructions
    ops = parse_transaction(ins.template, 2)
    assert ops[:2] == [("BLOCKWRITE", 0, 2), ("BLOCKWRITE", 1, 2)]                 # tile loads (ARRAY)
    assert ops[2:] == [("BLOCKWRITE", 0, 0), ("WRITE", 0, 0), ("BLOCKWRITE", 1, 0), ("WRITE", 1, 0),
                       ("BLOCKWRITE", 0, 0), ("WRITE", 0, 0), ("CUSTOM", 0, 0)]
    assert (ins.array_operations, ins.control_operations) == (2, 7)
    header = struct.unpack_from("<BBBBBBxxII", ins.template)
    assert header == (0, 1, 4, 6, 2, 1, 9, len(ins.template))
    for site in ins.sites:
        # the site is the second word of a block write's data: op header 8, address, count, word 0
        op = site.offset - 8 - 8 - 4
        code, col, row, _, size = struct.unpack_from("<BBBBI", ins.template, op)
        address = struct.unpack_from("<I", ins.template, op + 8)[0]
        assert code == 1 and row == 0 and (address & 0x1FFFFFF) == 0x1D000 + 0x20 * (site.binding // 2)
    assert [s.binding for s in ins.sites] == [0, 1, 2]


def test_valid_variants():
    # no section headers: the program headers alone are the directory
    assert read_image(X.build(X.Spec(sections=False)), "bare.xdna").headers[0].label == "program header 0 (NOTE)"
    # a zero-filled tile tail with the capability, and a data tile
    spec = X.Spec(capabilities=0b1011, tile_overrides=dict(memsz=64))
    image = read_image(X.build(spec), "zf.xdna")
    assert len(image.tiles[4].data) == 64 and image.tiles[4].data.endswith(bytes(48))
    spec = X.Spec(tile_overrides=dict(space=2, pflags=X.R | X.W, vaddr=0x400))
    assert read_image(X.build(spec), "data.xdna").tiles[4].address == (2 << 20) | 0x400
    # masked writes and an entry without name
    spec = X.Spec(entry="", control_records=None)
    spec.array_records = [X.tile_load(4), X.mask_write32((2 << 20) | 0x32000, 0xFF, 1)]
    image = read_image(X.build(spec), "anon.xdna")
    assert image.entry().name == "" and image.programs[5].records[1].mask == 0xFF


# -- one case per rule --------------------------------------------------------------------


def spec_with(**kw):
    return X.build(X.Spec(**kw))


def raw(mutate):
    return lambda: mutate(X.build(X.Spec()))


def set_u32(offset_fn, value):
    return raw(lambda d: X.patch_u32(d, offset_fn(d), value))


def set_byte(offset, value):
    return raw(lambda d: d[:offset] + bytes([value]) + d[offset + 1 :])


def elf_header(**h):
    spec = X.Spec()
    return lambda: X.elf(_segments(spec), header=h)


def _segments(spec):
    # the segments build() makes, rebuilt through build's own output to keep one writer
    data = X.build(spec)
    count = struct.unpack_from("<H", data, 44)[0]
    out = []
    for i in range(count):
        t, off, va, pa, fs, ms, fl, al = struct.unpack_from("<8I", data, X.phdr_offset(i))
        out.append(X.Segment(t, data[off : off + fs], flags=fl, align=al, vaddr=va, paddr=pa, memsz=ms))
    return out


def with_segment(index, **changes):
    spec = X.Spec()

    def make():
        segs = _segments(spec)
        for k, v in changes.items():
            setattr(segs[index], k, v)
        return X.elf(segs)

    return make


def table_field(index, offset, value):
    """Overwrite a u32 at ``offset`` inside program header ``index``'s payload."""
    return raw(lambda d: X.patch_u32(d, X.payload_offset(d, index) + offset, value))


RULES = [
    # ELF envelope
    ("short", raw(lambda d: d[:40]), "ELF header", "fewer than the 52-byte"),
    ("magic", raw(lambda d: b"\x7fELG" + d[4:]), "ELF header", "ELF magic"),
    ("class64", set_byte(4, 2), "ELF header", "ELF32 little-endian"),
    ("big-endian", set_byte(5, 2), "ELF header", "ELF32 little-endian"),
    ("ident-padding", set_byte(12, 1), "ELF header", "padding"),
    ("type", elf_header(type=1), "ELF header", "e_type"),
    ("machine", elf_header(machine=62), "ELF header", "e_machine"),
    ("flags-aie2", elf_header(flags=2), "ELF header", "e_flags"),
    ("entry-point", elf_header(entry=0x100), "ELF header", "e_entry 0"),
    ("phentsize", elf_header(phentsize=56), "program-header directory", "32-byte entries"),
    ("phnum-zero", elf_header(phnum=0), "program-header directory", "1..4096"),
    ("phdrs-past-end", elf_header(phnum=400), "program-header directory", "run past the end"),
    ("shentsize", raw(lambda d: d[:46] + struct.pack("<H", 64) + d[48:]), "section-header directory", "40-byte section headers"),
    # program-header directory
    ("align-not-pow2", with_segment(1, align=12), "program header 1 (ENTRIES)", "p_align"),
    ("offset-vaddr", raw(lambda d: X.patch_u32(d, X.phdr_offset(4) + 8, 2)), ".xdna.tile0", "p_align"),
    ("filesz-gt-memsz", with_segment(4, memsz=4), "program header 4 (TILE)", "exceeds p_memsz"),
    ("unknown-pflags", with_segment(0, flags=R | 0x100), "program header 0 (NOTE)", "unknown permission flags"),
    ("payload-past-end", with_segment(6, offset=1 << 20), "program header 6 (CONTROL)", "run past the end"),
    ("overlaps-elf-header", with_segment(1, offset=8), "program header 1 (ENTRIES)", "overlap the ELF header"),
    ("partial-overlap", raw(lambda d: X.patch_u32(d, X.phdr_offset(2) + 4, X.payload_offset(d, 1) + 8)), "program header", "partially overlap"),
    # metadata program headers
    ("missing-entries", raw(lambda d: X.patch_u32(d, X.phdr_offset(1), X.FIRMWARE + 1)), "program-header directory", "no ENTRIES"),
    ("two-bindings", raw(lambda d: X.patch_u32(d, X.phdr_offset(3), X.BINDINGS)), "BINDINGS", "more than one BINDINGS"),
    ("metadata-writable", with_segment(2, flags=R | W), "program header 2 (BINDINGS)", "read-only"),
    ("metadata-align", with_segment(1, align=4), "program header 1 (ENTRIES)", "ENTRIES requires 8"),
    ("firmware-payload", lambda: X.build(X.Spec(extra_segments=[X.Segment(X.FIRMWARE, b"fw!!", align=4)])), "FIRMWARE", "not supported"),
    # the LOOM note
    ("note-size", with_segment(0, payload=X.Spec().note()[:80], memsz=80), "program header 0 (NOTE)", "ABI note has 80 bytes"),
    ("note-owner", raw(lambda d: d[: X.payload_offset(d, 0) + 12] + b"GNU\0\0" + d[X.payload_offset(d, 0) + 17 :]), ".note.loom", "LOOM ABI note"),
    ("note-padding", raw(lambda d: d[: X.payload_offset(d, 0) + 18] + b"\1" + d[X.payload_offset(d, 0) + 19 :]), ".note.loom", "name padding"),
    ("note-magic", table_field(0, 20, 0x12345678), ".note.loom", "wrong magic"),
    ("abi-major", lambda: spec_with(abi=(2, 0)), ".note.loom", "image ABI 2.0"),
    ("abi-minor", lambda: spec_with(abi=(1, 1)), ".note.loom", "image ABI 1.1"),
    ("identity", lambda: spec_with(identity=(1, 0, 1, 1)), ".note.loom", "identity is incomplete"),
    ("origin", lambda: spec_with(origin=(1, 0)), ".note.loom", "context-relative"),
    ("coordinates", lambda: spec_with(coordinates=2), ".note.loom", "context-relative"),
    ("capabilities", lambda: spec_with(capabilities=0b11 | 1 << 9), ".note.loom", "unknown loader capabilities"),
    # fixed tables
    ("table-magic", table_field(2, 0, 0x41414141), ".xdna.bindings", "table header"),
    ("table-record-size", table_field(2, 8, 24 | 48 << 16), ".xdna.bindings", "table header"),
    ("table-length", table_field(2, 16, 9999), ".xdna.bindings", "table header"),
    ("table-abi", table_field(2, 4, 2), ".xdna.bindings", "table ABI 2.0"),
    ("records-past-table", table_field(3, 12, 9), ".xdna.relocations", "run past the 120-byte table"),
    # entries
    ("entry-ordinal", table_field(1, 24, 1), ".xdna.entries", "entry 0: ordinal"),
    ("entry-flags", lambda: spec_with(entry_flags=4), ".xdna.entries", "entry 0: ordinal, flags"),
    ("entry-caps", lambda: spec_with(entry_caps=0b1000), ".xdna.entries", "capabilities within the note"),
    ("entry-name-offset", table_field(1, 24 + 4, 70), ".xdna.entries", "not packed"),
    ("entry-name-nul", raw(lambda d: d[: X.payload_offset(d, 1) + 64 + 2] + b"\0" + d[X.payload_offset(d, 1) + 64 + 3 :]), ".xdna.entries", "NUL"),
    ("entry-bindings", table_field(1, 24 + 24, 3), ".xdna.entries", "bindings [0, 3)"),
    ("entry-aux", table_field(1, 20, 0), ".xdna.entries", "names right after"),
    # bindings
    ("binding-reserved", lambda: spec_with(binding_overrides={0: dict(reserved=1)}), ".xdna.bindings", "reserved bits"),
    ("binding-ordinal", lambda: spec_with(binding_overrides={1: dict(ordinal=0)}), ".xdna.bindings", "binding 1: ordinal"),
    ("binding-access", lambda: spec_with(binding_overrides={0: dict(access=0)}), ".xdna.bindings", "access"),
    ("binding-usage", lambda: spec_with(binding_overrides={0: dict(usage=1 << 7)}), ".xdna.bindings", "usage"),
    ("binding-alignment", lambda: spec_with(binding_overrides={0: dict(align=48)}), ".xdna.bindings", "power of two"),
    ("binding-offsets", lambda: spec_with(binding_overrides={0: dict(lo=8, hi=4)}), ".xdna.bindings", "reversed"),
    ("binding-no-length", lambda: spec_with(binding_overrides={0: dict(length=0)}), ".xdna.bindings", "nonzero length"),
    ("binding-invisible", lambda: spec_with(binding_overrides={0: dict(usage=2)}), ".xdna.bindings", "DEVICE_VISIBLE"),
    ("binding-space", lambda: spec_with(binding_overrides={0: dict(space=0)}), ".xdna.bindings", "address space"),
    ("scalar-malformed", lambda: spec_with(binding_overrides={0: dict(kind=2, space=0, usage=0, access=1, length=3, align=1, hi=0)}), ".xdna.bindings", "scalar binding"),
    ("binding-kind", lambda: spec_with(binding_overrides={0: dict(kind=7)}), ".xdna.bindings", "unknown binding kind"),
    ("binding-entry", lambda: spec_with(binding_overrides={1: dict(entry=3)}), ".xdna.bindings", "names entry 3"),
    # relocations
    ("reloc-binding", lambda: spec_with(relocation_overrides={0: dict(binding=9)}), ".xdna.relocations", "binding 9 of 2"),
    ("reloc-width", lambda: spec_with(relocation_overrides={0: dict(width=2)}), ".xdna.relocations", "width 2"),
    ("reloc-flags", lambda: spec_with(relocation_overrides={0: dict(flags=1)}), ".xdna.relocations", "flags 1"),
    ("reloc-alignment", lambda: spec_with(relocation_overrides={0: dict(align=0)}), ".xdna.relocations", "alignment 0"),
    ("reloc-range", lambda: spec_with(relocation_overrides={0: dict(lo=10, hi=4)}), ".xdna.relocations", "range"),
    ("reloc-width4-range", lambda: spec_with(relocation_overrides={0: dict(width=4)}), ".xdna.relocations", "width 4"),
    ("reloc-kind", lambda: spec_with(relocation_overrides={0: dict(kind=9)}), ".xdna.relocations", "unknown relocation kind"),
    ("reloc-scalar-on-buffer", lambda: spec_with(relocation_overrides={0: dict(kind=4)}), ".xdna.relocations", "scalar relocation"),
    ("reloc-order", lambda: spec_with(relocation_overrides={1: dict(offset=24 + 20)}), ".xdna.relocations", "not ordered"),
    ("reloc-not-control", lambda: spec_with(relocation_overrides={0: dict(target=5)}), ".xdna.relocations", "not the CONTROL program"),
    ("reloc-length-kind", lambda: spec_with(relocation_overrides={0: dict(kind=2)}), ".xdna.relocations", "64-bit binding-address"),
    ("reloc-not-block-write", lambda: spec_with(relocation_overrides={1: dict(offset=24 + 48 + 8)}), ".xdna.relocations", "not inside a block-write"),
    ("reloc-header", lambda: spec_with(relocation_overrides={0: dict(offset=24 + 8)}), ".xdna.relocations", "not two whole words"),
    ("reloc-misaligned", lambda: spec_with(relocation_overrides={0: dict(offset=24 + 16 + 6)}), ".xdna.relocations", "not two whole words"),
    ("reloc-not-bd-address", lambda: spec_with(relocation_overrides={0: dict(offset=24 + 16 + 8)}), ".xdna.relocations", "buffer-descriptor address"),
    ("reloc-above-48-bits", lambda: spec_with(relocation_overrides={0: dict(lo=1 << 50, hi=1 << 51)}), ".xdna.relocations", "48-bit"),
    # ARRAY and CONTROL programs
    ("program-flags", with_segment(5, flags=R | X.X), ".xdna.array" if False else "program header 5 (ARRAY)", "read-only, unmapped"),
    ("program-align", with_segment(6, align=8), "program header 6 (CONTROL)", "4-byte aligned"),
    ("array-magic", lambda: spec_with(array_header=dict(magic=0x11223344)), ".xdna.array", "magic or framing"),
    ("array-abi", lambda: spec_with(array_header=dict(major=2)), ".xdna.array", "program ABI 2.0"),
    ("array-length", lambda: spec_with(array_header=dict(length=4)), ".xdna.array", "fill the payload"),
    ("array-no-tiles", lambda: spec_with(array_header=dict(tiles=0)), ".xdna.array", "name its TILE headers"),
    ("array-tile-range", lambda: spec_with(array_header=dict(first=2)), ".xdna.array", "not a TILE"),
    ("control-flags", lambda: spec_with(control_header=dict(flags=1)), ".xdna.control", "no flags"),
    ("control-count", lambda: spec_with(control_header=dict(count=9)), ".xdna.control", "header runs past"),
    ("records-short", lambda: spec_with(control_header=dict(count=1)), ".xdna.control", "end at byte"),
    ("record-framing", lambda: spec_with(control_records=[X.rec(1, struct.pack("<II", 0, 0), length=15)]), ".xdna.control", "canonical framing"),
    ("record-past-payload", lambda: spec_with(control_records=[X.rec(1, struct.pack("<II", 0, 0), length=64)]), ".xdna.control", "run past the payload"),
    ("record-type", lambda: spec_with(control_records=[X.rec(9, struct.pack("<II", 0, 0))]), ".xdna.control", "unknown AIE2P record type 9"),
    ("record-flags", lambda: spec_with(control_records=[X.rec(1, struct.pack("<II", 0, 0), flags=2)]), ".xdna.control", "record flags"),
    ("record-size", lambda: spec_with(control_records=[X.rec(1, struct.pack("<III", 0, 0, 0))]), ".xdna.control", "REGISTER_WRITE32 record has 16 bytes"),
    ("block-words", lambda: spec_with(control_records=[X.rec(3, struct.pack("<III", 0x1D000, 3, 0))]), ".xdna.control", "block write of 3 words"),
    ("block-runs-out", lambda: spec_with(control_records=[X.block_write32(0xFFFFC, [1, 2])]), ".xdna.control", "run out of the tile"),
    ("address-outside", lambda: spec_with(control_records=[X.write32(3 << 25, 1)]), ".xdna.control", "outside the 1x6 context"),
    ("tile-load-in-control", lambda: spec_with(control_records=[X.tile_load(4)]), ".xdna.control", "belongs in an ARRAY"),
    ("tile-load-range", lambda: spec_with(array_records=[X.tile_load(6)]), ".xdna.array", "not one of the ARRAY's TILE headers"),
    ("task-wait", lambda: spec_with(control_records=[X.task_wait(0, 0, direction=3)]), ".xdna.control", "DMA task wait"),
    ("task-wait-outside", lambda: spec_with(control_records=[X.task_wait(0, 5, nrows=2)]), ".xdna.control", "DMA task wait"),
    # TILE images
    ("tile-space", lambda: spec_with(tile_overrides=dict(space=3)), ".xdna.tile0", "unknown memory space"),
    ("tile-dest-flags", lambda: spec_with(tile_overrides=dict(tflags=1)), ".xdna.tile0", "nonzero flags"),
    ("tile-permissions", lambda: spec_with(tile_overrides=dict(pflags=R | W)), ".xdna.tile0", "PROGRAM tile image"),
    ("tile-not-compute", lambda: spec_with(tile_overrides=dict(row=1)), ".xdna.tile0", "not a compute tile"),
    ("tile-too-big", lambda: spec_with(tile_overrides=dict(vaddr=16 << 10)), ".xdna.tile0", "do not fit"),
    ("tile-zero-fill", lambda: spec_with(tile_overrides=dict(memsz=64)), ".xdna.tile0", "TILE_ZERO_FILL"),
    ("tile-unused", lambda: spec_with(array_header=dict(first=4, tiles=1), columns=1,
                                     extra_segments=[X.Segment(X.TILE, b"orphan!!", flags=R | X.X, align=4, paddr=2 << 8 | 1 << 16, name=".xdna.orphan")]),
     ".xdna.orphan", "no ARRAY program loads"),
    # cross references
    ("entry-array", table_field(1, 24 + 12, 6), "ENTRIES", "not an ARRAY program"),
    ("entry-control", table_field(1, 24 + 16, 5), "ENTRIES", "not a CONTROL program"),
    ("relocs-no-capability", lambda: spec_with(capabilities=0b10), ".xdna.relocations", "RUNTIME_RELOCATIONS"),
    ("control-no-capability", lambda: spec_with(capabilities=0b01), "ENTRIES", "CONTROL_PROGRAMS"),
]


@pytest.mark.parametrize("make, section, rule", [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_each_broken_rule_is_an_artifact_error_naming_file_section_and_rule(make, section, rule):
    data = make()
    with pytest.raises(XdnaImageError) as info:
        read_image(data, "broken.xdna")
    err = info.value
    assert isinstance(err, hrx.ArtifactError)
    assert err.file == "broken.xdna" and str(err).startswith("broken.xdna: ")
    assert section in err.section, (err.section, section)
    assert rule in err.rule, (err.rule, rule)


def test_rule_cases_are_distinct():
    ids = [r[0] for r in RULES]
    assert len(ids) == len(set(ids)) and len(ids) >= 100


def test_reader_rejects_non_bytes():
    with pytest.raises(hrx.ArtifactError):
        read_image("not bytes", "x.xdna")  # type: ignore[arg-type]


# -- qualification against the device and the contract ----------------------------------


def test_qualification_is_exact():
    image = read_image(X.build(X.Spec()), "copy_i32.xdna")
    assert qualify(image, "copy_i32", COPY, 1, LIMITS).entry.name == "copy_i32"
    # a contract may be stricter than the image (longer, more aligned)
    assert qualify(image, None, contract((8192, "read", 4096), (4096, "write", 64)), 1, LIMITS)
    # trailing unused slots are not in the launch list
    assert qualify(image, None, KernelContract([*COPY.buffers, BufferContract.unused()]), 1, LIMITS)


@pytest.mark.parametrize(
    "spec, columns, bound, error, message",
    [
        (X.Spec(), 2, COPY, ColumnError, "1-column context"),
        (X.Spec(rows=4), 1, COPY, XdnaImageError, "addresses 4 rows"),
        (X.Spec(generation=4), 1, COPY, XdnaImageError, "target generation 4"),
        (X.Spec(), 1, contract((4096, "read", 64)), BindingListError, "takes 2 bindings"),
        (X.Spec(), 1, contract((4096, "write", 64), (4096, "write", 64)), AccessModeError, "binding 0 is read"),
        (X.Spec(), 1, contract((2048, "read", 64), (4096, "write", 64)), BindingLengthError, "needs at least 4096"),
        (X.Spec(), 1, contract((4096, "read", 32), (4096, "write", 64)), AlignmentError, "needs 64"),
        (X.Spec(relocation_overrides={0: dict(align=128)}), 1, COPY, AlignmentError, "relocation 0 needs 128-byte"),
        (X.Spec(relocation_overrides={0: dict(addend=5000)}), 1, COPY, BindingLengthError, "byte 5000"),
        (X.Spec(relocation_overrides={1: dict(binding=0)}), 1, COPY, BindingListError, "binding 1 is never patched"),
        (X.Spec(binding_overrides={0: dict(kind=2, space=0, usage=0, access=1, length=8, align=8, hi=0)},
                relocation_overrides={0: dict(binding=1)}), 1, contract((8, "read", 8), (4096, "write", 64)), XdnaImageError, "binds buffers only"),
    ],
    ids=["columns", "rows", "generation", "binding-count", "access", "length", "alignment", "reloc-alignment", "addend", "unpatched", "scalar"],
)
def test_qualification_errors_are_typed(spec, columns, bound, error, message):
    image = read_image(X.build(spec), "q.xdna")
    with pytest.raises(error, match=message):
        qualify(image, None, bound, columns, LIMITS)


def test_instruction_limits_are_checked():
    image = read_image(X.build(X.Spec()), "q.xdna")
    size = len(lower_entry(image, image.entry()).template)
    with pytest.raises(XdnaImageError, match=f"{size} bytes; the device takes at most {size - 4}"):
        qualify(image, None, COPY, 1, DeviceLimits(rows=6, columns=8, instruction_max_bytes=size - 4, instruction_granularity=4))
    with pytest.raises(XdnaImageError, match=f"in {2 * size}-byte units"):
        qualify(image, None, COPY, 1, DeviceLimits(rows=6, columns=8, instruction_max_bytes=1 << 20, instruction_granularity=2 * size))


def test_package_standin_images_read_like_test_images():
    """The engine's stand-in writer and this test writer agree on the format."""
    from hrx_npu.xdna.writer import Slot, standin_image

    from hrx_core.engine import Access

    data = standin_image("copy_i32", [Slot(4096, Access.READ, 64), Slot(4096, Access.WRITE, 64)], 1, 6, b"id")
    ours = read_image(data, "standin.xdna")
    theirs = read_image(X.build(X.Spec()), "test.xdna")
    assert ours.note.columns == theirs.note.columns and ours.entries[0].binding_count == theirs.entries[0].binding_count
    assert [(b.access, b.minimum_length) for b in ours.bindings] == [(b.access, b.minimum_length) for b in theirs.bindings]
    assert [r.offset for r in ours.relocations] == [r.offset for r in theirs.relocations]
    assert qualify(ours, None, COPY, 1, LIMITS).instructions.bindings_patched() == {0, 1}
