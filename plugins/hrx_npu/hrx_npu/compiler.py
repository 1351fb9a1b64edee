"""The ``npu-host-c`` target: NPU programs' host builds, C translation units compiled
with the system C compiler (through :mod:`hrx_core.native`, the one way HRX builds host
code) into shared libraries that cffi loads (ABI mode: no
Python headers needed, and the compiler's own diagnostics reach CompileError).

A program is one function with a fixed signature, declared with the
``HRX_NPU_PROGRAM(name)`` macro this module prepends::

    HRX_NPU_PROGRAM(scale) {          /* buffers in contract order, used ones only */
        float *x = (float *)buffers[0];
        int64_t n = lengths[0] / 4, per = (n + columns - 1) / columns;
        for (int64_t i = column * per; i < n && i < (column + 1) * per; ++i) x[i] *= 2.0f;
    }

It runs once per occupied column (``column`` in ``0..columns-1``, in parallel;
cffi releases the GIL during the call); ``scratch`` is that column's tile memory,
zeroed before every invocation. The compiler is registered through the
``hrx_compilers`` hook as a persistent compiler: ``hrx_core.compile`` caches the
library on disk, keyed by source, entry, flags and the compiler's version.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from hrx_core import native
from hrx_core.compiler import Compiler, cache_dir
from hrx_core.errors import CompileError, show

TARGET = "npu-host-c"
MAGIC = b"HRXNPU2\0"

PRELUDE = r"""
#include <stdint.h>
#include <string.h>
#define HRX_NPU_PROGRAM(name) void name(uint8_t **buffers, const int64_t *lengths, int32_t nbuffers, \
    uint8_t *scratch, int64_t scratch_bytes, int32_t column, int32_t columns)
static inline float hrx_bf16_to_f32(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#line 1 "program.c"
"""

SIGNATURE = ("void {entry}(uint8_t **buffers, const int64_t *lengths, int32_t nbuffers, uint8_t *scratch, "
             "int64_t scratch_bytes, int32_t column, int32_t columns);")

DEFAULT_FLAGS = ("-O3",)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def _cc() -> list[str]:
    return native.compiler_command("c")


def c_compiler() -> str | None:
    """The C compiler used (``CC``, else the interpreter's, else ``cc``), or None if it
    is not on PATH."""
    return native.compiler_path("c")


def salt() -> str:
    """What the output depends on besides source and flags: the compiler's version."""
    return f"{' '.join(_cc())}: {native.compiler_version('c')}"


def compile_c(source: Any, entry: str, options: tuple[str, ...]) -> tuple[bytes, str]:
    """Compile ``source`` into a shared library; returns its bytes (with a header)."""
    if not isinstance(source, str):
        raise CompileError(f"{TARGET}: expected C source text, got {type(source).__name__}")
    if not _IDENT.match(entry or ""):
        raise CompileError(f"{TARGET}: entry must be a C identifier, got {show(entry)}")
    if c_compiler() is None:
        raise CompileError(f"{TARGET}: no C compiler ({_cc()[0]!r} is not on PATH; set CC)")
    flags = list(options) or list(DEFAULT_FLAGS)
    tmp = tempfile.mkdtemp(prefix="hrx-npu-cc-")
    try:
        lib = Path(tmp) / "program.so"
        try:
            log = native.build_shared(PRELUDE + source, lib, language="c", flags=flags)
        except CompileError as exc:
            raise CompileError(f"{TARGET}: {entry!r} does not compile", log=exc.log or str(exc)) from None
        data = lib.read_bytes()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return MAGIC + entry.encode() + b"\0" + data, log


def load_entry(code: bytes) -> tuple[Any, Any]:
    """(ffi, function) of a library built by :func:`compile_c` (written to the cache)."""
    import hashlib

    import cffi

    if not isinstance(code, (bytes, bytearray)) or not bytes(code).startswith(MAGIC):
        raise CompileError(f"{TARGET}: not an npu-host-c artifact")
    entry, _, data = bytes(code)[len(MAGIC):].partition(b"\0")
    name = entry.decode()
    digest = hashlib.sha256(data).hexdigest()[:24]
    with _lock:
        hit = _loaded.get(digest)
        if hit is None:
            folder = cache_dir() / "npu-host"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{name}-{digest}.so"
            if not path.exists() or path.stat().st_size != len(data):
                part = path.with_suffix(f".{os.getpid()}.tmp")
                part.write_bytes(data)
                os.replace(part, path)
            if not _IDENT.match(name):
                raise CompileError(f"{TARGET}: the artifact's entry {name!r} is not a C identifier")
            ffi = cffi.FFI()
            ffi.cdef(SIGNATURE.format(entry=name))
            try:
                lib = ffi.dlopen(str(path))
                fn = getattr(lib, name)
            except (OSError, AttributeError) as exc:
                raise CompileError(f"{TARGET}: the library has no usable entry {name!r} ({exc})") from None
            hit = _loaded[digest] = (ffi, fn, lib)
    return hit[0], hit[1]


NPU_HOST_C = Compiler(target=TARGET, compile=compile_c, persistent=True, salt=salt,
                      description="NPU programs' host builds: C shared libraries loaded through cffi")

__all__ = ["NPU_HOST_C", "TARGET", "c_compiler", "compile_c", "load_entry"]
