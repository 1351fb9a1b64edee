"""Model files and artifacts: ``open(path)`` picks a loader by format.

Loaders come from the ``hrx_artifact_loaders`` hook (each plugin returns a sequence of
:class:`ArtifactLoader` objects) plus the built-in safetensors and ONNX loaders, each used
when no plugin provides its format. A loader is chosen by an
explicit ``format=``, else by file suffix, else by sniffing the file's first bytes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import ArtifactError, InvalidArgument, PluginError
from .files import fspath, open_regular, pread_exact

#: Bytes read from the start of a file for sniffing.
SNIFF_BYTES = 64


@runtime_checkable
class ArtifactLoader(Protocol):
    """What an ``hrx_artifact_loaders`` hook returns (one object per format)."""

    format: str
    suffixes: Sequence[str]

    def sniff(self, head: bytes, file_size: int) -> bool:
        """Whether a file starting with ``head`` is in this format."""
        ...

    def open(self, path: str, **options: Any) -> Any:
        """Open ``path``; malformed files raise ArtifactError."""
        ...


class SafetensorsLoader:
    """The built-in loader: opens :class:`~hrx_core.artifacts.safetensors.FileView`."""

    format = "safetensors"
    suffixes: Sequence[str] = (".safetensors",)

    def sniff(self, head: bytes, file_size: int) -> bool:
        from .safetensors import sniff

        return sniff(head, file_size)

    def open(self, path: str, **options: Any) -> Any:
        from .safetensors import FileView

        return FileView.open(path, **options)


class OnnxLoader:
    """The built-in loader: opens :class:`~hrx_core.artifacts.onnx.Model` (needs the onnx package)."""

    format = "onnx"
    suffixes: Sequence[str] = (".onnx",)

    def sniff(self, head: bytes, file_size: int) -> bool:
        from .onnx import sniff

        return sniff(head, file_size)

    def open(self, path: str, **options: Any) -> Any:
        from .onnx import Model

        return Model.load(path, **options)


def loaders() -> list[ArtifactLoader]:
    """Registered loaders in priority order: plugins first, then the built-ins they do not replace."""
    from ..plugins import plugin_manager

    try:
        results = plugin_manager().hook.hrx_artifact_loaders()
    except Exception as exc:
        raise PluginError(f"hrx_artifact_loaders() failed: {type(exc).__name__}: {exc}") from exc
    found: list[ArtifactLoader] = []
    for result in results:
        for loader in result or ():
            if not isinstance(loader, ArtifactLoader):
                raise PluginError(f"hrx_artifact_loaders() returned {loader!r}, which is not an ArtifactLoader")
            found.append(loader)
    for builtin in (OnnxLoader(), SafetensorsLoader()):
        if not any(loader.format == builtin.format for loader in found):
            found.append(builtin)
    return found


def open(path: str | os.PathLike[str], *, format: str | None = None, **options: Any) -> Any:
    """Open a model file with the loader for its format; options go to the loader.

    Unknown formats raise ArtifactError naming the path.
    """
    spath = fspath("path", path)
    if format is not None and not isinstance(format, str):
        raise InvalidArgument(f"format: expected a str or None, got {type(format).__name__}")
    candidates = loaders()
    if format is not None:
        for loader in candidates:
            if loader.format == format:
                return loader.open(spath, **options)
        known = ", ".join(sorted({loader.format for loader in candidates}))
        raise ArtifactError(f"{spath}: no loader for format {format!r} (known: {known})")
    lower = spath.lower()
    for loader in candidates:
        if any(lower.endswith(suffix.lower()) for suffix in loader.suffixes):
            return loader.open(spath, **options)
    fd, st = open_regular(spath)  # a FIFO or device is refused, never read
    try:
        size = st.st_size
        head = pread_exact(fd, min(SNIFF_BYTES, size), 0, spath)
    finally:
        os.close(fd)
    for loader in candidates:
        if loader.sniff(head, size):
            return loader.open(spath, **options)
    raise ArtifactError(f"{spath}: unknown artifact format (no loader claims its suffix or first bytes)")


__all__ = ["ArtifactLoader", "OnnxLoader", "SafetensorsLoader", "loaders", "open"]
