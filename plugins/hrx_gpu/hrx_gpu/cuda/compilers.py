"""Compilers this plugin registers: ``cuda`` (NVRTC) and passthrough ``ptx``/``cubin``.

``cuda`` compiles CUDA C++ to CUBIN for the architecture in the options (the device
adds ``--gpu-architecture=sm_XX``); without one it uses device 0's architecture, or
emits PTX if no device is visible. Its cache salt names the NVRTC and driver
versions, so upgrading either recompiles.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from hrx_core.compiler import Compiler
from hrx_core.errors import CompileError

from . import _driver, _nvrtc, image


def _source_text(source: Any) -> str:
    if isinstance(source, str):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source).decode()
    raise CompileError(f"cuda: expected CUDA C++ source as str or bytes, got {type(source).__name__}")


@functools.lru_cache(maxsize=1)
def default_architecture() -> str | None:
    """``sm_XY`` of device 0, or None without a usable driver."""
    try:
        driver = _driver.load()
        if driver.device_count() <= 0:
            return None
        major, minor = driver.compute_capability(driver.device(0))
        return f"sm_{major}{minor}"
    except Exception:  # noqa: BLE001
        return None


def compile_cuda(source: Any, entry: str, options: Sequence[str]) -> tuple[bytes, str]:
    """CUDA C++ -> CUBIN (or PTX for a virtual architecture) through NVRTC."""
    text = _source_text(source)
    nvrtc = _nvrtc.load()  # NvrtcUnavailable is a CompileError
    opts = list(options)
    if _nvrtc.architecture(opts) is None:
        arch = default_architecture()
        if arch is not None:
            opts.append(f"--gpu-architecture={arch}")
    code, log, lowered = nvrtc.compile(text, entry, opts)
    if entry and lowered != entry:
        code = image.tag(code, lowered)
    return code, log


def compile_ptx(source: Any, entry: str, options: Sequence[str]) -> tuple[bytes, str]:
    """PTX passes through (str or bytes -> bytes)."""
    if isinstance(source, str):
        return source.encode(), ""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), ""
    raise CompileError(f"ptx: expected PTX text as str or bytes, got {type(source).__name__}")


def compile_cubin(source: Any, entry: str, options: Sequence[str]) -> tuple[bytes, str]:
    """CUBIN (or fatbin) bytes pass through."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not image.is_binary(data):
            raise CompileError("cubin: the bytes are neither an ELF CUBIN nor a fatbin")
        return data, ""
    raise CompileError(f"cubin: expected bytes, got {type(source).__name__}")


@functools.lru_cache(maxsize=1)
def salt() -> str:
    """NVRTC version, driver version and default architecture (never raises)."""
    try:
        nvrtc = _nvrtc.load()
        nvrtc_version = f"{nvrtc.version[0]}.{nvrtc.version[1]}"
    except Exception:  # noqa: BLE001
        nvrtc_version = "none"
    try:
        driver_version = str(_driver.load().version)
    except Exception:  # noqa: BLE001
        driver_version = "none"
    return f"nvrtc={nvrtc_version};driver={driver_version};arch={default_architecture()}"


def compilers() -> list[Compiler]:
    return [
        Compiler(
            target="cuda",
            compile=compile_cuda,
            persistent=True,
            salt=salt,
            description="CUDA C++ through NVRTC to CUBIN",
        ),
        Compiler(target="ptx", compile=compile_ptx, persistent=True, description="PTX text (loaded by the driver JIT)"),
        Compiler(target="cubin", compile=compile_cubin, persistent=True, description="prebuilt CUBIN/fatbin"),
    ]


__all__ = ["compilers", "compile_cuda", "compile_ptx", "compile_cubin", "salt", "default_architecture"]
