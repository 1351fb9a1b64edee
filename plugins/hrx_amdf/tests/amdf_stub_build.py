"""Build helpers of the binding tests: compile C test doubles of libamdf with ``cc``.

``stub_libamdf.c`` is compiled against ``amdf_cdef.h``, written here from the binding's
own cdef plus one ``_Static_assert`` per size, alignment and field offset/size of
``libamdf-abi.json`` -- so gcc itself checks the declarations the stub and the binding
share. Tests skip cleanly where no C compiler exists.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hrx_amdf.native.cdef import CDEF, load_abi_facts

HERE = Path(__file__).parent
STUB_SOURCE = HERE / "stub_libamdf.c"


def compiler() -> str:
    """The C compiler, or skip the calling test."""
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if found is None:
        pytest.skip("no C compiler (cc) to build the libamdf test double")
    return found


def header_text(facts: dict[str, Any] | None = None) -> str:
    """``amdf_cdef.h``: the binding's declarations and the layout facts as static asserts."""
    facts = load_abi_facts() if facts is None else facts
    lines = ["#pragma once", "#include <stddef.h>", "#include <stdint.h>", CDEF]
    for name, struct in facts["structs"].items():
        lines.append(f'_Static_assert(sizeof({name}) == {struct["size"]}, "sizeof {name}");')
        lines.append(f'_Static_assert(_Alignof({name}) == {struct["align"]}, "alignof {name}");')
        for path, (offset, size) in struct["fields"].items():
            member = path  # offsetof and member access take "a.b" designators
            lines.append(f'_Static_assert(offsetof({name}, {member}) == {offset}, "offsetof {name}.{path}");')
            lines.append(f'_Static_assert(sizeof((({name} *)0)->{member}) == {size}, "sizeof {name}.{path}");')
    return "\n".join(lines) + "\n"


def compile_library(out_dir: Path, source: Path | str, name: str, *defines: str) -> Path:
    """Compile ``source`` (a path, or C text) into ``out_dir/name`` as a shared library."""
    cc = compiler()
    out_dir.mkdir(parents=True, exist_ok=True)
    header = out_dir / "amdf_cdef.h"
    if not header.exists():
        header.write_text(header_text())
    if isinstance(source, str):
        path = out_dir / (Path(name).stem + ".c")
        path.write_text(source)
        source = path
    target = out_dir / name
    command = [cc, "-std=c11", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", f"-I{out_dir}"]
    command += ["-o", str(target), str(source)]
    command += [f"-D{define}" for define in defines]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{done.stderr}")
    return target


def build_stub(out_dir: Path, *defines: str, name: str = "libamdf_stub.so") -> Path:
    """The libamdf test double (``stub_libamdf.c``) compiled with ``defines``."""
    return compile_library(out_dir, STUB_SOURCE, name, *defines)


_built: dict[tuple[str, ...], Path] = {}


@pytest.fixture(scope="session")
def stub_factory(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``stub_factory(*defines) -> Path``: the test double built once per define set."""
    root = tmp_path_factory.mktemp("libamdf_stub")

    def build(*defines: str) -> Path:
        key = tuple(sorted(defines))
        if key not in _built:
            _built[key] = build_stub(root, *key, name=f"libamdf_stub_{len(_built)}.so")
        return _built[key]

    return build


@pytest.fixture(scope="session")
def stub_path(stub_factory: Any) -> Path:
    """The default test double (ABI 5, GPU and XDNA extensions)."""
    return stub_factory()
