"""The ``gfx1151`` compiler: HRX's CUDA-dialect kernel sources -> AMDGPU code objects.

A kernel's ``cuda`` source is compiled by clang in HIP mode for ``amdgcn-amd-amdhsa``
(gfx1151, wave32, code object v5), device code only, linked by ld.lld into a code
object (an ELF shared object), with :file:`prelude.h` included first in place of the
CUDA/HIP headers (no ROCm installation is needed: ``-nogpuinc -nogpulib``).

clang is ``HRX_CLANG`` (a path or a command name), else the first of ``clang-19``,
``clang-18``, ``clang`` on PATH; it is accepted once it links a probe kernel for
gfx1151 (which also proves that ld.lld is found). Debian: ``apt-get install clang-19
lld-19``.

Options: the kernel's ``cuda`` options are NVRTC options and are translated
(``--fmad=false`` -> ``-ffp-contract=off``, ``-D``/``-U``/``-I``/``-std``); clang
options (``-O``, ``-f``, ``-W``, ``-D``, ``-U``, ``-I``, ``-std=``) pass through; anything
else is refused, so nothing a kernel asks for is silently dropped. The cache salt names
the clang version and the prelude's digest, so changing either recompiles.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from hrx_core.compiler import Compiler
from hrx_core.errors import CompileError

#: The device target this compiler produces code objects for.
TARGET = "gfx1151"
#: Environment variable naming the clang to use (path or command name).
ENV_CLANG = "HRX_CLANG"
#: Commands tried on PATH when HRX_CLANG is not set, in order.
CANDIDATES = ("clang-19", "clang-18", "clang")
#: Seconds one clang run may take.
TIMEOUT_S = 300.0

#: Fixed clang arguments: HIP language, device code only, one linked code object.
BASE_ARGS = (
    "-x", "hip",
    f"--offload-arch={TARGET}",
    "-nogpulib",
    "-nogpuinc",
    "--cuda-device-only",
    "--no-gpu-bundle-output",
    "-mcode-object-version=5",
    "-std=c++17",
    "-O3",
    # like NVCC's default --fmad=true, while __fmul_rn & co. (pragma contract(off)) stay unfused
    "-ffp-contract=fast-honor-pragmas",
)

_PROBE = 'extern "C" __global__ void hrx_probe(unsigned int* p) { p[threadIdx.x] = blockDim.x; }\n'


@attrs.frozen
class Clang:
    """A clang that links gfx1151 code objects."""

    path: str
    command: str
    version: str

    def describe(self) -> str:
        return f"{self.command} {self.version} ({self.path})"


def prelude_text() -> str:
    """The prelude included before every kernel source."""
    return resources.files(__package__).joinpath("prelude.h").read_text()


@functools.lru_cache(maxsize=1)
def prelude_digest() -> str:
    return hashlib.sha256(prelude_text().encode()).hexdigest()[:16]


def _version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"clang version (\S+)", out)
    if match is None:
        raise CompileError(f"{path} --version does not name a clang version: {out.strip()[:200]!r}")
    return match.group(1)


def _run_clang(path: str, source: str, options: Sequence[str], workdir: Path) -> tuple[bytes, str]:
    src = workdir / "kernel.hip"
    out = workdir / "kernel.co"
    prelude = workdir / "hrx_prelude.h"
    src.write_text(source)
    prelude.write_text(prelude_text())
    cmd = [path, *BASE_ARGS, *options, "-include", str(prelude), str(src), "-o", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=workdir)
    except subprocess.TimeoutExpired:
        raise CompileError(f"{TARGET}: clang ran longer than {TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise CompileError(f"{TARGET}: cannot run {path}: {exc}") from None
    log = (proc.stdout + proc.stderr).replace(str(workdir) + os.sep, "")
    if proc.returncode != 0 or not out.is_file():
        raise CompileError(f"{TARGET}: clang failed (exit {proc.returncode})", log)
    return out.read_bytes(), log


def _probe(path: str) -> str | None:
    """None when ``path`` links a gfx1151 code object, else why not."""
    try:
        with tempfile.TemporaryDirectory(prefix="hrx-gfx-probe-") as d:
            _run_clang(path, _PROBE, (), Path(d))
    except CompileError as exc:
        return str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else "clang failed"
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


@functools.lru_cache(maxsize=1)
def _find() -> Clang | str:
    forced = os.environ.get(ENV_CLANG, "").strip()
    candidates = (forced,) if forced else CANDIDATES
    why: list[str] = []
    for name in candidates:
        path = shutil.which(name) if os.sep not in name else (name if os.access(name, os.X_OK) else None)
        if path is None:
            why.append(f"{name}: not found")
            continue
        try:
            version = _version(path)
        except Exception as exc:  # noqa: BLE001
            why.append(f"{name}: {exc}")
            continue
        problem = _probe(path)
        if problem is not None:
            why.append(f"{name} {version}: cannot link a gfx1151 code object ({problem})")
            continue
        return Clang(path=path, command=Path(name).name, version=version)
    source = f"{ENV_CLANG}={forced}" if forced else "PATH (" + ", ".join(CANDIDATES) + ")"
    return (
        f"no clang for {TARGET} in {source}: " + "; ".join(why)
        + f". Install clang and lld 18 or newer (Debian: apt-get install clang-19 lld-19) "
        f"or set {ENV_CLANG} to such a clang"
    )


def find_clang() -> Clang:
    """The clang used for gfx1151, or CompileError saying why none is usable and what to do."""
    found = _find()
    if isinstance(found, str):
        raise CompileError(found)
    return found


def reset_for_tests() -> None:
    """Forget the clang found (after HRX_CLANG changes)."""
    _find.cache_clear()
    salt.cache_clear()


_NVRTC_FLAGS = {
    "--fmad=false": ("-ffp-contract=off",),
    "-fmad=false": ("-ffp-contract=off",),
    "--fmad=true": ("-ffp-contract=fast-honor-pragmas",),
    "-fmad=true": ("-ffp-contract=fast-honor-pragmas",),
    "--use_fast_math": ("-ffast-math",),
    "-use_fast_math": ("-ffast-math",),
}
_NVRTC_VALUED = {
    "--define-macro=": "-D", "-D": "-D",
    "--undefine-macro=": "-U", "-U": "-U",
    "--include-path=": "-I", "-I": "-I",
    "--std=": "-std=", "-std=": "-std=",
}
_CLANG_PREFIXES = ("-O", "-f", "-W", "-D", "-U", "-I", "-std=")
_REFUSED = ("-fgpu-rdc", "-mcode-object-version", "--offload-arch", "-mcpu", "-x", "-o", "-include")


def translate_options(options: Sequence[str]) -> tuple[str, ...]:
    """NVRTC and clang options -> clang options; CompileError for anything else."""
    out: list[str] = []
    for opt in options:
        if not isinstance(opt, str):
            raise CompileError(f"{TARGET}: option {opt!r} is not a str")
        if opt in _NVRTC_FLAGS:
            out.extend(_NVRTC_FLAGS[opt])
            continue
        if any(opt == r or opt.startswith(r + "=") for r in _REFUSED):
            raise CompileError(f"{TARGET}: option {opt!r} would change what the compiler produces; it is fixed")
        for prefix, clang in _NVRTC_VALUED.items():
            if opt.startswith(prefix) and len(opt) > len(prefix):
                out.append(clang + opt[len(prefix):])
                break
        else:
            if opt.startswith(_CLANG_PREFIXES) and len(opt) > 2:
                out.append(opt)
            else:
                raise CompileError(
                    f"{TARGET}: option {opt!r} is not understood (NVRTC --fmad, --use_fast_math, -D, -U, -I, "
                    f"--std and clang -O/-f/-W/-D/-U/-I/-std= options are)"
                )
    return tuple(out)


def _source_text(source: Any) -> str:
    if isinstance(source, str):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        try:
            return bytes(source).decode()
        except UnicodeDecodeError as exc:
            raise CompileError(f"{TARGET}: the source is not UTF-8 text ({exc})") from None
    raise CompileError(f"{TARGET}: expected CUDA C++ source as str or bytes, got {type(source).__name__}")


def _check_entry(code: bytes, entry: str) -> None:
    """The code object must define ``entry`` (checked with hrx_amdf's reader where installed)."""
    try:
        from hrx_amdf.codeobject import CodeObject
    except ImportError:
        return
    from hrx_core.errors import ArtifactError

    try:
        co = CodeObject(code, target=TARGET)
    except ArtifactError as exc:
        raise CompileError(f"{TARGET}: clang produced an unreadable code object: {exc}") from None
    if entry and entry not in co.kernels:
        raise CompileError(
            f"{TARGET}: the code object has no kernel {entry!r} (kernels: {', '.join(co.kernels) or 'none'}); "
            f'declare it extern "C" __global__'
        )


def compile_gfx1151(source: Any, entry: str, options: Sequence[str]) -> tuple[bytes, str]:
    """CUDA-dialect C++ -> a gfx1151 code object (ELF bytes) and clang's diagnostics.

    A source that already is a code object (ELF bytes, e.g. ``Kernel(sources={"gfx1151":
    code})``) is checked and passed through: prebuilt kernels need no clang."""
    if isinstance(source, (bytes, bytearray, memoryview)) and bytes(source[:4]) == b"\x7fELF":
        code = bytes(source)
        _check_entry(code, entry or "")
        return code, "prebuilt code object"
    text = _source_text(source)
    args = translate_options(options)
    clang = find_clang()
    with tempfile.TemporaryDirectory(prefix="hrx-gfx1151-") as d:
        code, log = _run_clang(clang.path, text, args, Path(d))
    if entry:
        _check_entry(code, entry)
    return code, log


@functools.lru_cache(maxsize=1)
def salt() -> str:
    """clang version and prelude digest (never raises)."""
    found = _find()
    version = found.version if isinstance(found, Clang) else "none"
    return f"clang={version};prelude={prelude_digest()};args={' '.join(BASE_ARGS)}"


def compilers() -> list[Compiler]:
    """The gfx1151 compiler, reading kernels' ``cuda`` sources."""
    return [
        Compiler(
            target=TARGET,
            source="cuda",
            compile=compile_gfx1151,
            persistent=True,
            salt=salt,
            description=f"CUDA-dialect C++ through clang (HIP mode) to {TARGET} code objects",
        )
    ]


def doctor_rows() -> list[tuple[str, str, str]]:
    """The ``hrx doctor`` row saying which clang compiles for gfx1151, or why none does."""
    try:
        found = _find()
    except Exception as exc:  # noqa: BLE001
        return [("amdgpu", f"{TARGET} compiler", f"error: {type(exc).__name__}: {exc}")]
    if isinstance(found, str):
        return [("amdgpu", f"{TARGET} compiler", found)]
    return [("amdgpu", f"{TARGET} compiler", found.describe())]


__all__ = [
    "TARGET",
    "ENV_CLANG",
    "Clang",
    "find_clang",
    "compile_gfx1151",
    "translate_options",
    "prelude_text",
    "salt",
    "compilers",
    "doctor_rows",
    "reset_for_tests",
]
