"""hrx_core.native: the one way HRX builds host code at run time, and doctor's rows on it."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from hrx_core import native
from hrx_core.errors import CompileError, InvalidArgument

REPO = Path(__file__).resolve().parents[1]
ADD = "int hrx_add(int a, int b) { return a + b; }\n"

needs_cc = pytest.mark.skipif(native.compiler_path("c") is None, reason="no C compiler")
needs_cxx = pytest.mark.skipif(native.compiler_path("c++") is None, reason="no C++ compiler")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HRX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@needs_cc
def test_build_shared_makes_a_loadable_library(tmp_path: Path) -> None:
    out = tmp_path / "lib" / "add.so"
    native.build_shared(ADD, out, flags=("-O2",))
    assert ctypes.CDLL(str(out)).hrx_add(40, 2) == 42
    assert sorted(p.name for p in out.parent.iterdir()) == ["add.so"]  # no build leftovers


@needs_cxx
def test_build_shared_cxx(tmp_path: Path) -> None:
    out = tmp_path / "mul.so"
    native.build_shared('extern "C" int hrx_mul(int a, int b) { return a * b; }', out, language="c++")
    assert ctypes.CDLL(str(out)).hrx_mul(6, 7) == 42


@needs_cc
def test_a_compiler_error_is_a_compile_error_with_the_log(tmp_path: Path) -> None:
    out = tmp_path / "bad.so"
    with pytest.raises(CompileError, match="failed") as info:
        native.build_shared("int f(void) { return 1 + ; }", out)
    assert "error" in info.value.log
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_missing_compiler_is_a_compile_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(CompileError, match=r"no c compiler: '/nonexistent/cc' is not on PATH \(set CC\)"):
        native.build_shared(ADD, tmp_path / "x.so")
    with pytest.raises(CompileError, match=r"set CXX"):
        native.build_shared(ADD, tmp_path / "x.so", language="c++")
    assert list(tmp_path.iterdir()) == []
    rows = dict((item, detail) for _, item, detail in native.doctor_rows())
    assert rows["c compiler"] == "/nonexistent/cc: not found (missing)"


@pytest.mark.parametrize(
    "call",
    [
        lambda p: native.build_shared(b"int x;", p),
        lambda p: native.build_shared(ADD, p, language="fortran"),
        lambda p: native.build_shared(ADD, p, flags="-O2"),
        lambda p: native.build_shared(ADD, p, includes=[1]),
        lambda p: native.cached_shared("../x", ADD),
        lambda p: native.cached_shared("", ADD),
    ],
)
def test_bad_arguments_are_rejected_before_anything_runs(call, tmp_path: Path, cache: Path) -> None:
    with pytest.raises(InvalidArgument):
        call(tmp_path / "x.so")
    assert list(tmp_path.iterdir()) == []


@needs_cc
def test_cached_shared_builds_once_per_content(cache: Path) -> None:
    first = native.cached_shared("add", ADD)
    assert first.is_file() and first.parent.parent == cache / "native"
    mtime = first.stat().st_mtime_ns
    assert native.cached_shared("add", ADD) == first and first.stat().st_mtime_ns == mtime
    other = native.cached_shared("add", ADD, flags=("-O1",))
    assert other != first and ctypes.CDLL(str(other)).hrx_add(1, 2) == 3


@needs_cc
def test_doctor_reports_the_compilers_and_the_cache(cache: Path) -> None:
    from hrx_core.cli import doctor

    extra = [tuple(r) for r in doctor.report()["extra"] if r[0] == "native"]
    items = {item: detail for _, item, detail in extra}
    assert items["c compiler"].startswith(" ".join(native.compiler_command("c")))
    assert items["c compiler"].endswith(": builds")
    assert items["cache"] == str(cache / "native")


# Modules that build host code at run time; each must go through hrx_core.native.
BUILDERS = [
    "hrx_core/hotpath.py",
    "plugins/hrx_tensor/hrx_tensor/native.py",
    "plugins/hrx_image/hrx_image/native.py",
    "plugins/hrx_npu/hrx_npu/compiler.py",
]


def test_host_code_is_built_one_way() -> None:
    """No runtime module runs a compiler itself or builds through cffi/setuptools:
    hrx_core/native.py is the only place a compiler subprocess starts for host code."""
    own_compilers = re.compile(r"subprocess|ffi\.compile\(|distutils|setuptools")
    offenders = []
    for path in [*REPO.glob("hrx_core/**/*.py"), *REPO.glob("plugins/*/hrx_*/**/*.py")]:
        rel = path.relative_to(REPO).as_posix()
        if rel == "hrx_core/native.py" or "/amdgpu/" in rel or "/cuda/" in rel or "/hrx_amdf/" in rel:
            continue  # device compilers (clang for gfx1151, NVRTC) and libamdf are not host builds
        text = path.read_text()
        if own_compilers.search(text):
            offenders.append(rel)
    assert offenders == []
    for rel in BUILDERS:
        assert "native" in (REPO / rel).read_text()
