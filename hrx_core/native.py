"""Native host code built at run time: the one way HRX compiles C and C++ for the CPU.

Every piece of host-side native code (the hot-path cffi extensions of
:mod:`hrx_core.hotpath`, the host engine's BF16 GEMV in hrx_tensor, the CPU build of
the image kernels' CUDA sources in hrx_image, the NPU programs' ``npu-host-c`` builds
in hrx_npu) goes through :func:`build_shared`: the system compiler run as a
subprocess, the source written to a private temporary directory, the shared library
renamed into place when it is complete (concurrent builders never see half a file),
failures raised as :class:`~hrx_core.errors.CompileError` with the compiler's first
lines of diagnostics. :func:`cached_shared` adds a content-keyed cache under
``hrx_core.compiler.cache_dir()/native``. Callers load the result as they need
(a cffi extension module, ``cffi`` ABI mode, ``ctypes``); nothing links against a
driver.

The compilers: ``CC`` for C (else the interpreter's own ``CC``, else ``cc``) and
``CXX`` for C++ (else ``c++``, ``g++`` or ``clang++``, the first on ``PATH``).
``hrx doctor`` reports both, whether a trivial build works, and the cache directory
(:func:`doctor_rows`).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

from .errors import CompileError, InvalidArgument, show

#: Bumped when the way libraries are built changes (part of every cache key).
BUILDER_VERSION = "1"
#: Longest a compiler run may take (seconds).
COMPILE_TIMEOUT = 300.0
LANGUAGES = ("c", "c++")

_version_lock = threading.Lock()
_versions: dict[tuple[str, ...], str] = {}


def _split(value: str) -> list[str]:
    try:
        words = shlex.split(value)
    except ValueError:
        words = [value]
    if any("\x00" in w for w in words):
        raise CompileError(f"compiler command {value!r} contains a NUL byte")
    return words


def _check_language(language: str) -> None:
    if language not in LANGUAGES:
        raise InvalidArgument(f"language: expected one of {', '.join(LANGUAGES)}, got {show(language)}")


def compiler_command(language: str = "c") -> list[str]:
    """The compiler command line for ``language`` ("c" or "c++"); it may not exist."""
    _check_language(language)
    if language == "c":
        value = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
        return _split(value) or ["cc"]
    value = os.environ.get("CXX", "").strip()
    if value:
        return _split(value) or ["c++"]
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name):
            return [name]
    return ["c++"]


def compiler_path(language: str = "c") -> str | None:
    """The compiler executable for ``language`` found on ``PATH``, or None."""
    return shutil.which(compiler_command(language)[0])


def compiler_version(language: str = "c") -> str:
    """The first line of ``<compiler> --version`` (cached per command line)."""
    argv = tuple(compiler_command(language))
    with _version_lock:
        known = _versions.get(argv)
    if known is not None:
        return known
    try:
        out = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=30, check=False)
        text = (out.stdout or out.stderr).strip()
        version = text.splitlines()[0] if text else "?"
    except (OSError, subprocess.SubprocessError) as exc:
        version = f"unavailable ({exc})"
    with _version_lock:
        _versions[argv] = version
    return version


def _check_strings(label: str, values: Sequence[str]) -> tuple[str, ...]:
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InvalidArgument(f"{label}: expected a sequence of str, got {show(values)}")
    return tuple(values)


def build_shared(
    source: str,
    output: str | os.PathLike[str],
    *,
    language: str = "c",
    flags: Sequence[str] = (),
    includes: Sequence[str] = (),
) -> str:
    """Compile ``source`` into the shared library ``output``; return the compiler's log.

    The library appears at ``output`` only when complete (built beside it and renamed).
    Raises :class:`CompileError` (with the diagnostics as ``log``) when there is no
    compiler or it fails, :class:`InvalidArgument` for arguments of the wrong type.
    """
    if not isinstance(source, str):
        raise InvalidArgument(f"source: expected C/C++ text (str), got {type(source).__name__}")
    _check_language(language)
    flags = _check_strings("flags", flags)
    includes = _check_strings("includes", includes)
    target = Path(output)
    argv = compiler_command(language)
    if shutil.which(argv[0]) is None:
        variable = "CC" if language == "c" else "CXX"
        raise CompileError(f"no {language} compiler: {argv[0]!r} is not on PATH (set {variable})")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".build-{target.name}-", dir=target.parent))
    try:
        src = work / ("source.c" if language == "c" else "source.cpp")
        lib = work / target.name
        src.write_text(source)
        command = [*argv, "-shared", "-fPIC", *flags, *(f"-I{p}" for p in includes), str(src), "-o", str(lib)]
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{argv[0]} ran past {COMPILE_TIMEOUT:.0f} s") from None
        except OSError as exc:
            raise CompileError(f"running {argv[0]} failed: {exc}", log=str(exc)) from None
        log = (out.stdout + out.stderr).strip()
        if out.returncode != 0 or not lib.is_file():
            raise CompileError(f"{argv[0]} failed (exit status {out.returncode})", log=log)
        os.replace(lib, target)
        return log
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cache_root() -> Path:
    """Where :func:`cached_shared` keeps libraries: ``hrx_core.compiler.cache_dir()/native``."""
    from .compiler import cache_dir

    return cache_dir() / "native"


def cache_key(source: str, *, language: str = "c", flags: Sequence[str] = (), includes: Sequence[str] = ()) -> str:
    """The digest a cached library is kept under: builder, compiler, flags and source."""
    parts = (BUILDER_VERSION, language, " ".join(compiler_command(language)), compiler_version(language),
             *flags, "\1", *includes, "\1", source)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cached_shared(
    name: str,
    source: str,
    *,
    language: str = "c",
    flags: Sequence[str] = (),
    includes: Sequence[str] = (),
    suffix: str = ".so",
) -> Path:
    """The library built from ``source``, from the cache or built into it now.

    Kept at ``cache_root()/<digest[:16]>/<name><suffix>``; raises like
    :func:`build_shared`.
    """
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise InvalidArgument(f"name: expected a file name, got {show(name)}")
    if not isinstance(source, str):
        raise InvalidArgument(f"source: expected C/C++ text (str), got {type(source).__name__}")
    _check_language(language)
    flags = _check_strings("flags", flags)
    includes = _check_strings("includes", includes)
    path = cache_root() / cache_key(source, language=language, flags=flags, includes=includes)[:16] / f"{name}{suffix}"
    if not path.is_file():
        build_shared(source, path, language=language, flags=flags, includes=includes)
    return path


def probe(language: str = "c") -> str:
    """'' when a trivial library builds with the ``language`` compiler, else why not."""
    text = "int hrx_probe(void) { return 1; }\n"
    if language == "c++":
        text = 'extern "C" ' + text
    with tempfile.TemporaryDirectory(prefix="hrx-native-probe-") as tmp:
        try:
            build_shared(text, Path(tmp) / f"probe-{uuid.uuid4().hex[:8]}.so", language=language)
        except CompileError as exc:
            return str(exc)
    return ""


def doctor_rows() -> list[tuple[str, str, str]]:
    """``hrx doctor`` rows: each compiler, whether it builds, and the cache directory."""
    rows = []
    for language in LANGUAGES:
        argv = compiler_command(language)
        found = shutil.which(argv[0])
        if found is None:
            rows.append(("native", f"{language} compiler", f"{' '.join(argv)}: not found (missing)"))
            continue
        why = probe(language)
        state = "builds" if not why else f"does not build (missing): {why}"
        rows.append(("native", f"{language} compiler", f"{' '.join(argv)}, {compiler_version(language)}: {state}"))
    try:
        rows.append(("native", "cache", str(cache_root())))
    except Exception as exc:  # noqa: BLE001 - no home directory
        rows.append(("native", "cache", f"unavailable: {exc}"))
    return rows


__all__ = [
    "COMPILE_TIMEOUT",
    "LANGUAGES",
    "build_shared",
    "cache_key",
    "cache_root",
    "cached_shared",
    "compiler_command",
    "compiler_path",
    "compiler_version",
    "doctor_rows",
    "probe",
]
