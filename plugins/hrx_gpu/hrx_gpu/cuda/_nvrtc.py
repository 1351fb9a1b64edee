"""cffi ABI-mode binding of NVRTC: CUDA C++ to CUBIN (or PTX) at run time.

The library is searched for, in order: ``HRX_NVRTC`` (a path), the system CUDA
(``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda/lib64``), the dynamic loader's
paths (``ctypes.util.find_library``, ``libnvrtc.so.13``/``.12``), and the pip
wheels (``nvidia-cuda-nvrtc``: ``nvidia/cuda_nvrtc/lib``, ``nvidia/cu13/lib`` and
any ``nvidia/**/libnvrtc.so*`` under ``sys.path``). Nothing is loaded at import.

A real architecture (``--gpu-architecture=sm_90``) yields CUBIN through
``nvrtcGetCUBIN``; a virtual one (``compute_90``) yields PTX. Failures raise
:class:`~hrx_core.errors.CompileError` whose ``log`` is the NVRTC program log.
"""

from __future__ import annotations

import ctypes.util
import glob
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from hrx_core.errors import CompileError

from ._cffi import LazyFFI

CDEF = r"""
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int *major, int *minor);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char * const *headers,
                               const char * const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char * const name_expression);
nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char * const name_expression,
                                const char **lowered_name);
"""

NVRTC_SUCCESS = 0

_ARCH_OPTION = re.compile(r"^(?:--gpu-architecture|-arch)(?:=|\s+)?(\S+)$")


class NvrtcUnavailable(CompileError):
    """No usable NVRTC library was found."""


_FFI = LazyFFI(CDEF)


def get_ffi() -> Any:
    """The cffi FFI with the NVRTC declarations (parsed once, on first use)."""
    return _FFI.get()


def candidates() -> Iterator[str]:
    """Paths or sonames to try, most preferred first."""
    explicit = os.environ.get("HRX_NVRTC")
    if explicit:
        yield explicit
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in roots:
        if root:
            for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
                yield from _sorted_libs(glob.glob(os.path.join(root, sub, "libnvrtc.so*")))
    found = ctypes.util.find_library("nvrtc")
    if found:
        yield found
    yield from ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        for sub in ("nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"):
            yield from _sorted_libs(glob.glob(os.path.join(entry, sub, "libnvrtc.so*")))
        yield from _sorted_libs(glob.glob(os.path.join(entry, "nvidia", "**", "libnvrtc.so*"), recursive=True))


def _sorted_libs(paths: Sequence[str]) -> list[str]:
    # libnvrtc.so.13 before libnvrtc.so; never the builtins library.
    libs = [p for p in paths if "builtins" not in os.path.basename(p) and "alt" not in os.path.basename(p)]
    return sorted(libs, key=lambda p: (-len(os.path.basename(p)), p))


class Nvrtc:
    """A loaded NVRTC."""

    def __init__(self, ffi: Any, lib: Any, path: str) -> None:
        self.ffi = ffi
        self.lib = lib
        self.path = path
        major, minor = ffi.new("int *"), ffi.new("int *")
        self._check(lib.nvrtcVersion(major, minor), "nvrtcVersion")
        self.version = (int(major[0]), int(minor[0]))

    def _error_string(self, code: int) -> str:
        try:
            text = self.lib.nvrtcGetErrorString(code)
            if text != self.ffi.NULL:
                return str(self.ffi.string(text).decode(errors="replace"))
        except Exception:  # noqa: BLE001
            pass
        return f"NVRTC error {code}"

    def _check(self, code: int, call: str, log: str = "") -> None:
        if code != NVRTC_SUCCESS:
            raise CompileError(f"{call} failed: {self._error_string(code)}", log=log)

    def compile(
        self, source: str, entry: str, options: Sequence[str], name: str = "hrx_kernel.cu"
    ) -> tuple[bytes, str, str]:
        """Compile ``source``; return ``(code, log, lowered entry name)``.

        ``code`` is CUBIN for a real architecture, else PTX.
        """
        ffi, lib = self.ffi, self.lib
        prog = ffi.new("nvrtcProgram *")
        self._check(
            lib.nvrtcCreateProgram(prog, source.encode(), name.encode(), 0, ffi.NULL, ffi.NULL), "nvrtcCreateProgram"
        )
        try:
            entry_c = ffi.new("char[]", entry.encode()) if entry else None
            if entry_c is not None:
                self._check(lib.nvrtcAddNameExpression(prog[0], entry_c), "nvrtcAddNameExpression")
            keep = [ffi.new("char[]", o.encode()) for o in options]
            opts = ffi.new("const char *[]", keep) if keep else ffi.NULL
            result = lib.nvrtcCompileProgram(prog[0], len(keep), opts)
            log = self._log(prog[0])
            if result != NVRTC_SUCCESS:
                what = f"kernel {entry!r}" if entry else "module"
                raise CompileError(f"NVRTC failed to compile {what}: {self._error_string(result)}", log=log)
            arch = architecture(options)
            if arch is not None and arch.startswith("sm_"):
                size = ffi.new("size_t *")
                self._check(lib.nvrtcGetCUBINSize(prog[0], size), "nvrtcGetCUBINSize", log)
                buf = ffi.new("char[]", int(size[0]))
                self._check(lib.nvrtcGetCUBIN(prog[0], buf), "nvrtcGetCUBIN", log)
                code = bytes(ffi.buffer(buf, int(size[0])))
            else:
                size = ffi.new("size_t *")
                self._check(lib.nvrtcGetPTXSize(prog[0], size), "nvrtcGetPTXSize", log)
                buf = ffi.new("char[]", int(size[0]))
                self._check(lib.nvrtcGetPTX(prog[0], buf), "nvrtcGetPTX", log)
                code = bytes(ffi.buffer(buf, int(size[0])))  # NUL-terminated PTX text
            lowered = entry
            if entry_c is not None:
                out = ffi.new("const char **")
                self._check(lib.nvrtcGetLoweredName(prog[0], entry_c, out), "nvrtcGetLoweredName", log)
                lowered = ffi.string(out[0]).decode()
            return code, log, lowered
        finally:
            lib.nvrtcDestroyProgram(prog)

    def _log(self, prog: Any) -> str:
        ffi = self.ffi
        size = ffi.new("size_t *")
        if self.lib.nvrtcGetProgramLogSize(prog, size) != NVRTC_SUCCESS or size[0] <= 1:
            return ""
        buf = ffi.new("char[]", int(size[0]))
        if self.lib.nvrtcGetProgramLog(prog, buf) != NVRTC_SUCCESS:
            return ""
        return str(ffi.string(buf).decode(errors="replace")).strip()


def architecture(options: Sequence[str]) -> str | None:
    """The value of the last ``--gpu-architecture``/``-arch`` option, if any."""
    arch = None
    it = iter(options)
    for option in it:
        if option in ("--gpu-architecture", "-arch"):
            arch = next(it, None)
            continue
        match = _ARCH_OPTION.match(option)
        if match:
            arch = match.group(1)
    return arch


_load_lock = threading.Lock()
_nvrtc: Nvrtc | None = None
_load_error: str | None = None


def load() -> Nvrtc:
    """Find and open NVRTC once; raise NvrtcUnavailable with what was tried."""
    global _nvrtc, _load_error
    if _nvrtc is not None:
        return _nvrtc
    with _load_lock:
        if _nvrtc is not None:
            return _nvrtc
        if _load_error is not None:
            raise NvrtcUnavailable(_load_error)
        try:
            ffi = get_ffi()
        except Exception as exc:  # noqa: BLE001
            _load_error = f"cffi unusable: {exc}"
            raise NvrtcUnavailable(_load_error) from exc
        tried: list[str] = []
        seen: set[str] = set()
        for candidate in candidates():
            if candidate in seen:
                continue
            seen.add(candidate)
            try:
                lib = ffi.dlopen(candidate)
                nvrtc = Nvrtc(ffi, lib, candidate)
            except (OSError, AttributeError, CompileError) as exc:
                text = str(exc).split(".  Additionally")[0].splitlines()
                tried.append(f"{candidate}: {text[0] if text else type(exc).__name__}")
                continue
            _nvrtc = nvrtc
            return nvrtc
        shown = "; ".join(tried[:6]) + ("; ..." if len(tried) > 6 else "")
        _load_error = f"libnvrtc not found (tried {len(tried)}: {shown})"
        raise NvrtcUnavailable(_load_error)


def reset_for_tests() -> None:
    """Forget the loaded NVRTC and any load failure."""
    global _nvrtc, _load_error
    with _load_lock:
        _nvrtc = None
        _load_error = None


__all__ = ["CDEF", "Nvrtc", "NvrtcUnavailable", "architecture", "candidates", "get_ffi", "load"]
