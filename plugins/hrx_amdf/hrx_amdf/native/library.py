"""Finding, loading and negotiating with the libamdf shared library.

The library is found through ``HRX_AMDF_LIBRARY`` (a path to the shared object, or a
directory holding ``libamdf.so``), else :func:`ctypes.util.find_library` and the names
``libamdf.so``, ``libamdf.so.1`` and ``amdf`` on the loader's search path. Its only
exported symbol, ``amdf_query_api``, is asked for the newest API table in
[``MIN_ABI_VERSION``, ``TARGET_ABI_VERSION``]; the GPU and XDNA extension tables come
from the table's ``query_extension``. A missing extension is recorded with its reason
(a library built without that family), not an error.

Nothing here runs at ``import hrx_amdf``: :func:`probe` answers whether the library is
usable (and why not) without raising, and :func:`load` raises an HRX error.
"""

from __future__ import annotations

import ctypes.util
import os
import threading
from pathlib import Path
from typing import Any

import attrs
from hrx_core.errors import Unsupported

from ..constants import (
    GPU_EXTENSION_VERSION,
    MIN_ABI_VERSION,
    TARGET_ABI_VERSION,
    XDNA_EXTENSION_VERSION,
    Extension,
    StatusCode,
)
from ..errors import AmdfError, AmdfUnsupported, check, error_for, make_status, status_name
from .cdef import ffi

ENV_VAR = "HRX_AMDF_LIBRARY"
LIBRARY_NAMES = ("libamdf.so", "libamdf.so.1", "amdf")

#: How to obtain and point HRX at a libamdf build (part of every "not found" reason).
BUILD_HINT = (
    "libamdf is built from ROCm/hrx-system with CMake: "
    "`cmake -G Ninja -S hrx-system -B build -DAMDF_BUILD=ON -DIREE_HAL_DRIVER_AMDGPU=OFF "
    "-DLIBHRX_BUILD=OFF -DLOOM_BUILD=OFF && cmake --build build --target amdf`; "
    f"then set {ENV_VAR} to the shared object it produced "
    f"(`export {ENV_VAR}=$(find build -name 'libamdf.so*' | head -n1)`) or to its directory"
)


class LibraryNotFound(Unsupported):
    """No libamdf shared library could be found or opened. The message says where it
    looked and how to point ``HRX_AMDF_LIBRARY`` at a build."""


def _table_bytes(ctype_name: str, last_field: str) -> int:
    return ffi.offsetof(ctype_name, last_field) + ffi.sizeof("void*")


def _entry_names(ctype_name: str) -> tuple[str, ...]:
    return tuple(name for name, field in ffi.typeof(ctype_name).fields if field.type.kind == "function")


#: Entry points of each table the binding calls, and the table bytes that cover them.
API_ENTRIES = _entry_names("amdf_api_t")
GPU_ENTRIES = _entry_names("amdf_gpu_api_t")
XDNA_ENTRIES = _entry_names("amdf_xdna_api_t")
API_REQUIRED_BYTES = _table_bytes("amdf_api_t", API_ENTRIES[-1])
GPU_REQUIRED_BYTES = _table_bytes("amdf_gpu_api_t", GPU_ENTRIES[-1])
XDNA_REQUIRED_BYTES = _table_bytes("amdf_xdna_api_t", XDNA_ENTRIES[-1])


@attrs.frozen
class ExtensionTable:
    """One extension's table (``None`` with the reason when the library lacks it)."""

    name: str
    table: Any = None  # cdata `const amdf_gpu_api_t *` / `const amdf_xdna_api_t *`
    version: int = 0
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.table is not None


@attrs.frozen
class Library:
    """A loaded libamdf: its path, the negotiated base table and the extension tables.
    The shared object stays loaded for the life of the process, which keeps every
    table and function pointer valid (libamdf's rule)."""

    path: str
    handle: Any
    api: Any  # cdata `const amdf_api_t *`
    abi_version: int
    api_bytes: int
    gpu: ExtensionTable
    xdna: ExtensionTable

    def facts(self) -> dict[str, Any]:
        """What ``hrx doctor`` shows about the library."""
        return {
            "library": self.path,
            "abi_version": self.abi_version,
            "api_table_bytes": self.api_bytes,
            "extensions": {
                ext.name: ({"version": ext.version} if ext.available else {"missing": ext.reason})
                for ext in (self.gpu, self.xdna)
            },
        }


def candidates(env: str | None = None) -> list[str]:
    """Where the library is looked for, in order."""
    configured = os.environ.get(ENV_VAR, "") if env is None else env
    if configured:
        path = Path(configured).expanduser()
        if path.is_dir():
            return [str(path / name) for name in LIBRARY_NAMES[:2]]
        return [str(path)]
    found = ctypes.util.find_library("amdf")
    names = [found] if found else []
    return names + [name for name in LIBRARY_NAMES if name != found]


def _open(env: str | None) -> tuple[str, Any]:
    configured = os.environ.get(ENV_VAR, "") if env is None else env
    tried: list[str] = []
    for candidate in candidates(env):
        if configured and os.sep in candidate and not Path(candidate).exists():
            tried.append(f"{candidate}: no such file")
            continue
        try:
            return candidate, ffi.dlopen(candidate)
        except OSError as exc:
            tried.append(f"{candidate}: {exc}")
    if configured:
        where = f"{ENV_VAR}={configured} could not be loaded ({'; '.join(tried)})"
    else:
        where = (
            f"{ENV_VAR} is not set and none of {', '.join(LIBRARY_NAMES)} is on the library search path"
            " (ctypes.util.find_library('amdf') found nothing)"
        )
    raise LibraryNotFound(f"libamdf not found: {where}. {BUILD_HINT}.")


def _check_entries(call: str, table: Any, names: tuple[str, ...]) -> None:
    missing = [name for name in names if getattr(table, name) == ffi.NULL]
    if missing:
        raise error_for(
            call, make_status(StatusCode.VERSION_MISMATCH), f"table lacks entry points {', '.join(missing)}"
        )


def _extension(
    api: Any, ext: Extension, version: int, ctype: str, entries: tuple[str, ...], need: int
) -> ExtensionTable:
    name = ext.name.lower()
    out = ffi.new("const void **")
    status = api.query_extension(int(ext), version, version, out)
    if status:
        return ExtensionTable(name, reason=f"query_extension({ext.name}, {version}): {status_name(status)}")
    if out[0] == ffi.NULL:
        return ExtensionTable(name, reason=f"query_extension({ext.name}) returned no table")
    table = ffi.cast(f"const {ctype} *", out[0])
    if table.extension_version != version:
        return ExtensionTable(name, reason=f"{ctype} reports version {table.extension_version}, asked for {version}")
    if table.structure_size < need:
        return ExtensionTable(name, reason=f"{ctype} is {table.structure_size} bytes; the binding calls up to {need}")
    try:
        _check_entries("query_extension", table, entries)
    except AmdfError as exc:
        return ExtensionTable(name, reason=str(exc))
    return ExtensionTable(name, table=table, version=int(table.extension_version))


def _negotiate(path: str, handle: Any) -> Library:
    try:
        query = handle.amdf_query_api
    except AttributeError as exc:
        raise AmdfUnsupported(
            "amdf_query_api", make_status(StatusCode.NOT_FOUND), f"{path} does not export amdf_query_api ({exc})"
        ) from None
    out = ffi.new("const amdf_api_t **")
    status = query(MIN_ABI_VERSION, TARGET_ABI_VERSION, out)
    check(
        "amdf_query_api",
        status,
        f"{path} has no ABI version in [{MIN_ABI_VERSION}, {TARGET_ABI_VERSION}]; this binding targets ABI "
        f"{TARGET_ABI_VERSION}: use a libamdf build of ROCm/hrx-system that provides it",
    )
    api = out[0]
    if api == ffi.NULL:
        raise error_for("amdf_query_api", make_status(StatusCode.INTERNAL), "returned success and no table")
    version = int(api.abi_version)
    if not MIN_ABI_VERSION <= version <= TARGET_ABI_VERSION:
        raise error_for(
            "amdf_query_api",
            make_status(StatusCode.VERSION_MISMATCH),
            f"table reports ABI {version}, asked for [{MIN_ABI_VERSION}, {TARGET_ABI_VERSION}]",
        )
    if api.structure_size < API_REQUIRED_BYTES:
        raise error_for(
            "amdf_query_api",
            make_status(StatusCode.VERSION_MISMATCH),
            f"amdf_api_t is {api.structure_size} bytes; ABI {TARGET_ABI_VERSION} calls need {API_REQUIRED_BYTES}",
        )
    _check_entries("amdf_query_api", api, API_ENTRIES)
    gpu = _extension(api, Extension.GPU, GPU_EXTENSION_VERSION, "amdf_gpu_api_t", GPU_ENTRIES, GPU_REQUIRED_BYTES)
    xdna = _extension(
        api, Extension.XDNA, XDNA_EXTENSION_VERSION, "amdf_xdna_api_t", XDNA_ENTRIES, XDNA_REQUIRED_BYTES
    )
    return Library(path, handle, api, version, int(api.structure_size), gpu, xdna)


_lock = threading.Lock()
_loaded: dict[str, Library] = {}


def load(env: str | None = None) -> Library:
    """Load and negotiate libamdf (once per path per process).

    ``env`` overrides ``HRX_AMDF_LIBRARY`` (``""``: search the usual names). Raises
    :class:`LibraryNotFound` when nothing loads, :class:`~hrx_amdf.errors.AmdfUnsupported`
    (``VERSION_MISMATCH``) when the library offers no ABI in range or tables too small
    for the calls the binding makes."""
    path, handle = _open(env)
    with _lock:
        found = _loaded.get(path)
        if found is None:
            found = _loaded[path] = _negotiate(path, handle)
        return found


def probe(env: str | None = None) -> tuple[bool, str, dict[str, Any]]:
    """``(ok, reason, facts)`` without raising: whether libamdf is usable, why not
    (naming ``HRX_AMDF_LIBRARY`` and how to build libamdf when it is missing), and what
    was found (library path, negotiated ABI, extension versions or why each is
    missing). Creates no instance and touches no device."""
    facts: dict[str, Any] = {
        "env": ENV_VAR,
        "configured": os.environ.get(ENV_VAR, "") if env is None else env,
        "searched": candidates(env),
        "target_abi_version": TARGET_ABI_VERSION,
    }
    try:
        library = load(env)
    except LibraryNotFound as exc:
        return False, str(exc), facts
    except AmdfError as exc:
        facts["status"] = exc.code_name
        return False, f"libamdf unusable: {exc}", facts
    facts.update(library.facts())
    have = [f"{ext.name} extension v{ext.version}" for ext in (library.gpu, library.xdna) if ext.available]
    lacking = [f"no {ext.name} extension ({ext.reason})" for ext in (library.gpu, library.xdna) if not ext.available]
    reason = f"libamdf ABI {library.abi_version} at {library.path}: " + ", ".join(have + lacking)
    return True, reason, facts


__all__ = [
    "ENV_VAR",
    "LIBRARY_NAMES",
    "BUILD_HINT",
    "LibraryNotFound",
    "ExtensionTable",
    "Library",
    "candidates",
    "load",
    "probe",
    "API_REQUIRED_BYTES",
    "GPU_REQUIRED_BYTES",
    "XDNA_REQUIRED_BYTES",
]
