"""The binding's declarations are checked against libamdf's ABI facts, not trusted.

``libamdf-abi.json`` (shipped with the package; a copy of
``shared/reference/libamdf-abi.json``) holds what gcc computed from libamdf's public
headers for x86_64-linux-gnu. Every struct, field and constant the binding declares
is compared with it through cffi (``ffi.sizeof``/``alignof``/``offsetof``), and gcc
compiles the same declarations with a static assertion per fact. Mutated
declarations prove the checks fail when the layout is wrong.
"""

from __future__ import annotations

import enum
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from amdf_stub_build import compile_library, compiler, header_text
from hrx_amdf import constants
from hrx_amdf.native import cdef
from hrx_amdf.native.cdef import (
    CDEF,
    HEADER_COMMITS,
    HEADER_REPOSITORY,
    STRUCTURE_TYPES,
    constant_mismatches,
    ffi,
    layout_mismatches,
    load_abi_facts,
    make_ffi,
    struct_layout,
)

FACTS = load_abi_facts()
SHARED_FACTS = Path(__file__).resolve().parents[3].parent / "shared" / "reference" / "libamdf-abi.json"


def only(name: str) -> dict[str, Any]:
    return {"structs": {name: FACTS["structs"][name]}, "opaque": []}


# ------------------------------------------------------------------- structs


def test_facts_cover_the_public_headers() -> None:
    assert len(FACTS["structs"]) == 69
    assert FACTS["target"].startswith("x86_64-linux-gnu")
    assert FACTS["source"]["repo"] == HEADER_REPOSITORY
    assert FACTS["source"]["files"] == HEADER_COMMITS
    assert cdef.ABI_VERSION == constants.TARGET_ABI_VERSION == 5


@pytest.mark.parametrize("name", sorted(FACTS["structs"]))
def test_struct_matches_facts(name: str) -> None:
    expected = FACTS["structs"][name]
    got = struct_layout(ffi, name)
    assert ffi.sizeof(name) == got["size"] == expected["size"]
    assert ffi.alignof(name) == got["align"] == expected["align"]
    assert got["order"] == expected["order"]
    assert list(got["fields"]) == list(expected["fields"])  # nested order too
    for field, (offset, size) in expected["fields"].items():
        if "." not in field:
            assert ffi.offsetof(name, field) == offset, field
        assert got["fields"][field] == [offset, size], field
    assert layout_mismatches(ffi, only(name)) == []


def test_whole_cdef_matches_facts() -> None:
    assert layout_mismatches() == []


@pytest.mark.parametrize("name", FACTS["opaque"])
def test_handles_stay_opaque(name: str) -> None:
    ctype = ffi.typeof(name)
    with pytest.raises(ValueError, match="unknown size"):
        ffi.sizeof(ctype)


def test_tables_are_function_pointers_after_the_header() -> None:
    for table in ("amdf_api_t", "amdf_gpu_api_t", "amdf_xdna_api_t"):
        fields = ffi.typeof(table).fields
        header = [name for name, _ in fields[:2]]
        assert header in (["structure_size", "abi_version"], ["structure_size", "extension_version"])
        assert all(field.type.kind == "function" for _, field in fields[2:]), table
    assert ffi.typeof("amdf_query_api_fn_t").kind == "function"


# The mutations below each break one fact; the same checking function must see it.
MUTATIONS = {
    "field widened": (
        "  amdf_memory_map_flags_t flags;\n} amdf_memory_map_info_t;",
        "  uint64_t flags;\n} amdf_memory_map_info_t;",
    ),
    "fields swapped": (
        "  amdf_queue_producer_modes_t producer_modes;\n  amdf_queue_priority_capabilities_t priority_capabilities;",
        "  amdf_queue_priority_capabilities_t priority_capabilities;\n  amdf_queue_producer_modes_t producer_modes;",
    ),
    "nested field narrowed": (
        "    uint64_t local_data_share_byte_length;",
        "    uint32_t local_data_share_byte_length;",
    ),
    "union member lost": (
        "    amdf_host_mapping_t* host_mapping;\n  } value;\n} amdf_memory_site_t;",
        "  } value;\n} amdf_memory_site_t;",
    ),
    "table entry missing": (
        "  amdf_status_t (*kernel_queue_refresh_status)(amdf_kernel_queue_t* queue,"
        " amdf_kernel_queue_status_t* out_status);\n",
        "",
    ),
    "table entry renamed": ("  amdf_status_t (*kernel_queue_wait)(", "  amdf_status_t (*kernel_queue_wait_for)("),
    "struct renamed": ("} amdf_atomic_reach_t;", "} amdf_atomic_reach2_t;"),
    "handle made concrete": (
        "typedef struct amdf_memory_t amdf_memory_t;",
        "typedef struct amdf_memory_t { uint64_t id; } amdf_memory_t;",
    ),
}

EXPECTED_PROBLEM = {
    "field widened": "amdf_memory_map_info_t",
    "fields swapped": "amdf_queue_family_info_t.producer_modes",
    "nested field narrowed": "amdf_gpu_endpoint_info_t",
    "union member lost": "amdf_memory_site_t",
    "table entry missing": "amdf_api_t",
    "table entry renamed": "amdf_api_t.kernel_queue_wait",
    "struct renamed": "amdf_atomic_reach_t",
    "handle made concrete": "amdf_memory_t",
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_wrong_declarations_are_detected(mutation: str) -> None:
    old, new = MUTATIONS[mutation]
    assert CDEF.count(old) == 1, "the mutation must apply to exactly one place"
    wrong = CDEF.replace(old, new)
    if mutation == "struct renamed":
        wrong = wrong.replace("amdf_atomic_reach_t atomic_reach;", "amdf_atomic_reach2_t atomic_reach;")
    problems = layout_mismatches(make_ffi(wrong), FACTS)
    assert problems, mutation
    assert any(EXPECTED_PROBLEM[mutation] in problem for problem in problems), problems


def test_wrong_facts_are_detected() -> None:
    facts = json.loads(json.dumps(FACTS))
    facts["structs"]["amdf_kernel_queue_status_t"]["fields"]["terminal_status"] = [40, 8]
    facts["structs"]["amdf_native_event_t"]["size"] = 24
    problems = layout_mismatches(ffi, facts)
    assert any("amdf_kernel_queue_status_t.terminal_status" in p for p in problems)
    assert any("amdf_native_event_t: size" in p for p in problems)


# ------------------------------------------------------------ gcc agrees too


def test_gcc_compiles_the_cdef_with_every_fact_asserted(tmp_path: Path) -> None:
    compile_library(tmp_path, "int amdf_facts_hold(void) { return 1; }\n", "facts.so")


def test_gcc_rejects_a_wrong_fact(tmp_path: Path) -> None:
    cc = compiler()
    facts = json.loads(json.dumps(FACTS))
    facts["structs"]["amdf_user_queue_mapping_info_t"]["fields"]["doorbell_bits"] = [120, 4]
    (tmp_path / "amdf_cdef.h").write_text(header_text(facts))
    source = tmp_path / "t.c"
    source.write_text('#include "amdf_cdef.h"\n')
    done = subprocess.run([cc, "-std=c11", "-c", f"-I{tmp_path}", "-o", str(tmp_path / "t.o"), str(source)],
                          capture_output=True, text=True)
    assert done.returncode != 0
    assert "amdf_user_queue_mapping_info_t.doorbell_bits" in done.stderr


# ----------------------------------------------------------------- constants


def enum_mismatches(enum_type: type[enum.Enum], prefix: str, facts: dict[str, Any]) -> list[str]:
    """Members of ``enum_type`` whose ``AMDF_<prefix>_<NAME>`` value differs from the facts."""
    known = {**facts["enums"], **facts["defines"]}
    problems = []
    for member in enum_type:
        cname = f"AMDF_{prefix}_{member.name}"
        if cname not in known:
            problems.append(f"{cname}: not in the ABI facts")
        elif known[cname] != member.value:
            problems.append(f"{cname}: {member.value} != {known[cname]}")
    return problems


@pytest.mark.parametrize("enum_type", list(constants.C_NAMES), ids=lambda e: e.__name__)
def test_enum_values_match_headers(enum_type: type[enum.Enum]) -> None:
    assert enum_mismatches(enum_type, constants.C_NAMES[enum_type], FACTS) == []


def test_defines_match_headers() -> None:
    known = {**FACTS["enums"], **FACTS["defines"]}
    for cname, value in constants.C_DEFINES.items():
        assert known[cname] == value, cname


def test_binding_constants_match_headers() -> None:
    assert constant_mismatches() == []
    for ctype, (cname, value) in STRUCTURE_TYPES.items():
        fields = [name for name, _ in ffi.typeof(ctype).fields[:2]]
        assert fields == ["type", "structure_size"], ctype
        assert cname.startswith("AMDF_STRUCTURE_TYPE_")
    assert len({value for _, value in STRUCTURE_TYPES.values()}) == len(STRUCTURE_TYPES)


def test_wrong_constants_are_detected() -> None:
    class Wrong(enum.IntEnum):
        BUSY = 7

    assert enum_mismatches(Wrong, "STATUS_CODE", FACTS) == ["AMDF_STATUS_CODE_BUSY: 7 != 6"]
    facts = json.loads(json.dumps(FACTS))
    facts["enums"]["AMDF_STRUCTURE_TYPE_MEMORY_SITE"] = 99
    facts["defines"]["AMDF_STRUCTURE_TYPE_GPU_DEVICE_INFO"] = 1
    problems = constant_mismatches(facts)
    assert len(problems) == 2 and all("binding uses" in p for p in problems)


# ---------------------------------------------------------------- the copy


def test_shipped_facts_equal_the_shared_reference() -> None:
    if not SHARED_FACTS.exists():
        pytest.skip(f"{SHARED_FACTS} is absent (a fresh clone without ../shared)")
    assert load_abi_facts(SHARED_FACTS) == FACTS
    assert cdef.ABI_FACTS_PATH.read_bytes() == SHARED_FACTS.read_bytes()


def test_facts_ship_as_package_data() -> None:
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert "native/libamdf-abi.json" in pyproject.read_text()
    assert cdef.ABI_FACTS_PATH.is_file()
