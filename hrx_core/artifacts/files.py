"""Reading model files safely: regular files only, sizes checked before reading, and
paths that stay inside the directory they are relative to.

Every file HRX reads on behalf of a model (safetensors, ONNX and its external data,
config.json, hub cache entries, ``Stream.upload_file``) is opened through
:func:`open_regular`: with ``O_NONBLOCK`` so that a FIFO cannot block the open, then
checked with ``fstat`` to be a regular file -- a character device (``/dev/zero``), a
FIFO, a socket or a directory raises ArtifactError naming the path (symbolic links
are followed, so a link to ``/dev/zero`` is refused the same way). Reads are bounded
by the size ``fstat`` reported and by a limit per kind of file.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from ..errors import ArtifactError, InvalidArgument, show

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def fspath(name: str, path: Any) -> str:
    """``path`` (str, bytes or os.PathLike) as a str, or InvalidArgument naming ``name``."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise InvalidArgument(f"{name}: expected a path (str, bytes or os.PathLike), got {type(path).__name__}")
    try:
        p = os.fspath(path)
        text = os.fsdecode(p)
    except Exception as exc:  # noqa: BLE001 - a path-like whose __fspath__ raises
        raise InvalidArgument(f"{name}: not a usable path ({type(exc).__name__}: {exc})") from None
    if "\x00" in text:
        raise InvalidArgument(f"{name}: path contains a NUL byte: {show(text)}")
    if not text:
        raise InvalidArgument(f"{name}: empty path")
    return text


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` is, in words ("a FIFO", "a regular file", ...)."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def check_regular_fd(fd: int, what: str) -> os.stat_result:
    """``fstat(fd)``, or ArtifactError unless it is a regular file."""
    try:
        st = os.fstat(fd)
    except OSError as exc:
        raise ArtifactError(f"{what}: cannot stat: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ArtifactError(f"{what}: is {kind_of(st.st_mode)}, not a regular file (only regular files are read)")
    return st


def open_regular(path: Any, what: str | None = None, *, name: str = "path") -> tuple[int, os.stat_result]:
    """Open ``path`` read-only without blocking on special files; (fd, stat) of a
    regular file, else ArtifactError (the descriptor is closed then)."""
    spath = fspath(name, path)
    label = what or spath
    try:
        fd = os.open(spath, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ArtifactError(f"{label}: cannot open: {exc.strerror or exc}") from None
    try:
        st = check_regular_fd(fd, label)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def pread_exact(fd: int, nbytes: int, offset: int, what: str) -> bytes:
    """Exactly ``nbytes`` at ``offset`` (ArtifactError if the file ends first)."""
    chunks = []
    done = 0
    while done < nbytes:
        try:
            chunk = os.pread(fd, min(nbytes - done, 64 << 20), offset + done)
        except OSError as exc:
            raise ArtifactError(f"{what}: read failed: {exc.strerror or exc}") from None
        if not chunk:
            raise ArtifactError(f"{what}: ended at byte {offset + done}, {nbytes - done} bytes short (truncated?)")
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def read_regular(path: Any, *, limit: int, what: str | None = None, name: str = "path") -> bytes:
    """The whole of a regular file of at most ``limit`` bytes (ArtifactError otherwise)."""
    fd, st = open_regular(path, what, name=name)
    label = what or fspath(name, path)
    try:
        if st.st_size > limit:
            raise ArtifactError(f"{label}: {st.st_size} bytes exceed the limit of {limit} for this kind of file")
        return pread_exact(fd, st.st_size, 0, label)
    finally:
        os.close(fd)


def inside(base_dir: Any, location: str, what: str) -> str:
    """The real path of ``location`` under ``base_dir``, refusing anything whose real
    path (symbolic links resolved, also of linked directories) leaves ``base_dir``."""
    base = os.path.realpath(fspath("base_dir", base_dir))
    if "\x00" in location:
        raise ArtifactError(f"{what}: location contains a NUL byte")
    real = os.path.realpath(os.path.join(base, location))
    try:
        ok = os.path.commonpath([base, real]) == base
    except ValueError:
        ok = False
    if not ok or real == base:
        raise ArtifactError(f"{what}: {location!r} resolves to {real!r}, outside the model directory {base!r}")
    return real


__all__ = ["check_regular_fd", "fspath", "inside", "kind_of", "open_regular", "pread_exact", "read_regular"]
