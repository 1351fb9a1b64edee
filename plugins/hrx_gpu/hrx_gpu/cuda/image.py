"""Module images: CUBIN, PTX or fatbin bytes, optionally tagged with a lowered name.

A CUDA C++ kernel without ``extern "C"`` has a mangled symbol (``_Z7add_onePjj``).
The ``cuda`` compiler asks NVRTC for the lowered name of the requested entry and,
when it differs from the entry, prefixes the code with a small tag so that
:meth:`~hrx_gpu.cuda.device.CudaDevice.load_executable` looks up the right symbol. The
tag is ``MAGIC``, a 4-byte little-endian length and the UTF-8 name; plain CUBIN
(ELF), fatbin and PTX never start with ``MAGIC``.
"""

from __future__ import annotations

import struct

MAGIC = b"HRXCUMOD"
_ELF = b"\x7fELF"
_FATBIN = struct.pack("<I", 0xBA55ED50)


def tag(code: bytes, symbol: str) -> bytes:
    """``code`` tagged with the symbol to load instead of the artifact's entry."""
    name = symbol.encode()
    return MAGIC + struct.pack("<I", len(name)) + name + bytes(code)


def untag(code: bytes) -> tuple[bytes, str | None]:
    """``(code, symbol or None)`` from possibly tagged bytes."""
    if not code.startswith(MAGIC):
        return code, None
    (length,) = struct.unpack_from("<I", code, len(MAGIC))
    start = len(MAGIC) + 4
    return code[start + length :], code[start : start + length].decode()


def is_binary(code: bytes) -> bool:
    """CUBIN (ELF) or fatbin, as opposed to PTX text."""
    return code.startswith(_ELF) or code.startswith(_FATBIN)


def loadable(code: bytes | bytearray | memoryview | str) -> bytes:
    """Bytes ``cuModuleLoadData`` accepts: binaries as is, PTX NUL-terminated."""
    if isinstance(code, str):
        code = code.encode()
    data = bytes(code)
    if not is_binary(data) and not data.endswith(b"\0"):
        data += b"\0"
    return data


__all__ = ["MAGIC", "tag", "untag", "is_binary", "loadable"]
