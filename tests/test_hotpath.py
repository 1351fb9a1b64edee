"""hrx_core.hotpath: cffi API-mode extensions built on first use into the compile cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hrx_core import hotpath
from hrx_core.errors import InvalidArgument

CDEF = "int hrx_test_add(int a, int b);"
SOURCE = "int hrx_test_add(int a, int b) { return a + b; }"


def _can_build() -> str:
    """Why extensions cannot be built here ('' when they can)."""
    cc = hotpath.compiler_command()[0]
    import shutil

    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    if not any((Path(p) / "Python.h").is_file() for p in hotpath._python_include()):
        return "no Python headers"
    try:
        import cffi  # noqa: F401
    except ImportError:
        return "no cffi"
    return ""


needs_compiler = pytest.mark.skipif(bool(_can_build()), reason=_can_build() or "can build")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh compile cache and no memory of earlier loads."""
    monkeypatch.setenv("HRX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HRX_HOT_PATH", raising=False)
    hotpath.forget()
    yield tmp_path / "cache"
    hotpath.forget()


def _entries(cache: Path) -> list[str]:
    root = cache / "hot"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


@needs_compiler
def test_builds_once_then_loads_from_memory_and_cache(cache: Path) -> None:
    before = hotpath.builds
    mod = hotpath.load("hrx_test", CDEF, SOURCE)
    assert mod.compiled and mod.lib.hrx_test_add(2, 40) == 42
    assert mod.status == {"compiled": True, "reason": mod.reason, "path": mod.path}
    assert mod.reason.startswith("built with ")
    assert hotpath.builds == before + 1
    digest = hotpath.digest("hrx_test", CDEF, SOURCE)
    assert _entries(cache) == [digest]  # nothing else left behind
    library = Path(mod.path)
    assert library.parent == cache / "hot" / digest and library.is_file()
    mtime = library.stat().st_mtime_ns
    # second use in the process: the same module, no build
    assert hotpath.load("hrx_test", CDEF, SOURCE) is mod
    # a new process (forget) loads from the cache
    hotpath.forget()
    again = hotpath.load("hrx_test", CDEF, SOURCE)
    assert again.compiled and again.reason == "loaded from the cache" and again.lib.hrx_test_add(1, 1) == 2
    assert hotpath.builds == before + 1 and library.stat().st_mtime_ns == mtime
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout.strip().splitlines()[-1])
    assert status["compiled"] and status["reason"] == "loaded from the cache" and status["builds"] == 0
    # another source is another extension
    other = hotpath.load("hrx_test", CDEF, SOURCE.replace("a + b", "a - b"))
    assert other.compiled and other.lib.hrx_test_add(2, 40) == -38 and other.path != mod.path


_SCRIPT = f"""
import json
from hrx_core import hotpath
mod = hotpath.load("hrx_test", {CDEF!r}, {SOURCE!r})
print(json.dumps({{**mod.status, "builds": hotpath.builds, "sum": mod.lib.hrx_test_add(3, 4) if mod.compiled else None}}))
"""


def test_hrx_hot_path_0_forces_the_fallback(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("0", "off", "false", "no", " 0 "):
        monkeypatch.setenv("HRX_HOT_PATH", value)
        assert not hotpath.enabled()
        mod = hotpath.load("hrx_test", CDEF, SOURCE)
        assert mod.status == {"compiled": False, "reason": f"disabled by HRX_HOT_PATH={value}", "path": None}
        assert mod.lib is None and mod.ffi is None
    assert _entries(cache) == []
    monkeypatch.setenv("HRX_HOT_PATH", "1")
    assert hotpath.enabled()


def test_missing_compiler_falls_back_with_the_reason(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with caplog.at_level("WARNING", logger="hrx.kernels"):
        mod = hotpath.load("hrx_test", CDEF, SOURCE)
        assert not mod.compiled and mod.path is None
        assert mod.reason == "no C compiler: '/nonexistent/cc' not found (set CC)"
        assert hotpath.load("hrx_test", CDEF, SOURCE) is mod  # remembered: no second attempt
    (record,) = [r for r in caplog.records if r.name == "hrx.kernels"]  # the fallback, said once
    assert "hot path 'hrx_test': not compiled (no C compiler" in record.getMessage()
    assert "pure-Python path runs instead" in record.getMessage()
    assert _entries(cache) == []


@needs_compiler
def test_a_compiler_error_falls_back_and_leaves_nothing(cache: Path) -> None:
    mod = hotpath.load("hrx_test", CDEF, "int hrx_test_add(int a, int b) { return a + ; }")
    assert not mod.compiled
    assert "failed" in mod.reason and "error" in mod.reason
    assert _entries(cache) == []


def test_missing_headers_and_cffi_fall_back(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hotpath, "_python_include", lambda: ["/nonexistent/include"])
    monkeypatch.setenv("CC", sys.executable)  # any program that exists
    mod = hotpath.load("hrx_test", CDEF, SOURCE)
    assert not mod.compiled and mod.reason == "no Python headers (Python.h not in /nonexistent/include)"
    hotpath.forget()
    monkeypatch.setitem(sys.modules, "cffi", None)  # import cffi raises ImportError
    mod = hotpath.load("hrx_test", CDEF, SOURCE)
    assert not mod.compiled and mod.reason == "cffi is not installed"


def test_unwritable_cache_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if _can_build():
        pytest.skip(_can_build())
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("HRX_CACHE_DIR", str(blocker))
    monkeypatch.delenv("HRX_HOT_PATH", raising=False)
    hotpath.forget()
    mod = hotpath.load("hrx_test", CDEF, SOURCE)
    assert not mod.compiled and mod.reason.startswith("cache not writable")
    hotpath.forget()


def test_bad_arguments_are_typed(cache: Path) -> None:
    for name in ("", "1abc", "a-b", "x" * 65, None, b"abc"):
        with pytest.raises(InvalidArgument, match="name"):
            hotpath.load(name, CDEF, SOURCE)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="cdef"):
        hotpath.load("ok", b"int f(void);", SOURCE)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="source"):
        hotpath.load("ok", CDEF, None)  # type: ignore[arg-type]


@needs_compiler
def test_bad_declarations_fall_back(cache: Path) -> None:
    mod = hotpath.load("hrx_test", "int this is not C;", SOURCE)
    assert not mod.compiled and mod.reason.startswith("build failed: ")
    assert _entries(cache) == []


@needs_compiler
def test_damaged_cache_entry_is_rebuilt(cache: Path) -> None:
    mod = hotpath.load("hrx_test", CDEF, SOURCE)
    # damaged by replacing the file: writing into it in place would change the pages of
    # the library this process has loaded (SIGBUS at exit), which no build ever does
    damaged = Path(mod.path).with_name("damaged.tmp")
    damaged.write_bytes(b"not a shared library")
    os.replace(damaged, mod.path)
    # a new process finds the damaged file, builds again and replaces it
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, env=dict(os.environ), check=False)
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout.strip().splitlines()[-1])
    assert status["compiled"] and status["reason"].startswith("built with ") and status["sum"] == 7
    assert not [p for p in _entries(cache) if p.startswith(".")]


@needs_compiler
def test_concurrent_builds_in_threads(cache: Path) -> None:
    before = hotpath.builds
    results: list[hotpath.HotModule] = []
    barrier = threading.Barrier(8)

    def build() -> None:
        barrier.wait(10)
        results.append(hotpath.load("hrx_test", CDEF, SOURCE))

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads) and len(results) == 8
    assert all(m is results[0] for m in results) and results[0].compiled
    assert hotpath.builds == before + 1
    assert _entries(cache) == [hotpath.digest("hrx_test", CDEF, SOURCE)]


@needs_compiler
def test_concurrent_builds_in_processes(cache: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    statuses = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    assert all(s["compiled"] and s["sum"] == 7 for s in statuses), statuses
    paths = {s["path"] for s in statuses}
    assert len(paths) == 1
    # every process either built or found the winner's; only one directory remains
    assert _entries(cache) == [hotpath.digest("hrx_test", CDEF, SOURCE)]
    assert Path(paths.pop()).is_file()


@needs_compiler
def test_a_builder_that_loses_the_race_uses_the_winners_build(cache: Path, tmp_path: Path) -> None:
    mod = hotpath.load("hrx_test", CDEF, SOURCE)
    final = Path(mod.path).parent
    loser = tmp_path / "loser"
    loser.mkdir()
    (loser / "x.so").write_bytes(b"late")
    hotpath._publish(loser, final, replace=False)  # the rename fails: final exists
    assert loser.is_dir() and Path(mod.path).is_file()  # the caller removes its copy
    with pytest.raises(OSError):
        hotpath._publish(loser, tmp_path / "missing" / "deeper", replace=False)


@needs_compiler
def test_a_build_loads_even_if_another_process_pulls_the_cache_entry_away(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process replacing what it took for a damaged entry renames the cache
    directory away and deletes it, at any moment: a build that was just published must
    still load (it loads from its private build directory, before publishing)."""
    real = hotpath._publish
    pulled: list[Path] = []

    def publish_then_pulled_away(built: Path, final: Path, *, replace: bool) -> None:
        real(built, final, replace=replace)
        trash = final.with_name(".stale-by-another-process")
        os.rename(final, trash)
        import shutil

        shutil.rmtree(trash)
        pulled.append(final)

    monkeypatch.setattr(hotpath, "_publish", publish_then_pulled_away)
    mod = hotpath.load("hrx_test", CDEF, SOURCE)
    assert pulled and mod.compiled, mod.reason
    assert mod.reason.startswith("built with ") and mod.lib.hrx_test_add(3, 4) == 7
    assert mod.path == str(pulled[0] / Path(mod.path).name) and not Path(mod.path).exists()
    assert not [p for p in _entries(cache) if p.startswith(".")]


def test_doctor_row_says_compiled_fallback_or_what_the_status_raised():
    compiled = {"compiled": True, "reason": "built", "path": "/x.so"}
    assert hotpath.doctor_row("core", "thing", lambda: compiled) == ("core", "thing", "compiled, built (/x.so)")
    fallback = {"compiled": False, "reason": "no compiler", "path": None}
    assert hotpath.doctor_row("cuda", "hot path", lambda: fallback) == ("cuda", "hot path", "fallback (Python): no compiler")

    def broken():
        raise ImportError("no cffi")

    assert hotpath.doctor_row("core", "thing", broken) == ("core", "thing", "fallback (Python): ImportError: no cffi")


def test_a_digest_is_computed_once_a_text() -> None:
    """Looking a built module up again (each graph's first compiled use does) hashes none
    of its source again: the digest is remembered, the same string as computed."""
    source = "int hrx_digest_probe(void) { return %d; }" % os.getpid()
    first = hotpath.digest("hrx_probe", "int hrx_digest_probe(void);", source)
    before = hotpath.digest.cache_info().hits
    assert hotpath.digest("hrx_probe", "int hrx_digest_probe(void);", source) == first
    assert hotpath.digest.cache_info().hits == before + 1
    assert hotpath.digest("hrx_probe", "int hrx_digest_probe(void);", source + " ") != first
