"""safetensors files: a checked header, zero-copy tensor views, file-backed device loading.

Format (https://github.com/huggingface/safetensors): 8 bytes little-endian ``N``,
then ``N`` bytes of UTF-8 JSON (an object mapping tensor names to
``{"dtype", "shape", "data_offsets": [begin, end]}`` plus an optional
``"__metadata__"`` string->string map), then the data section. Offsets are relative
to the data section; the tensors' byte ranges must tile it exactly (no gaps, no
overlap, nothing left over).

:class:`FileView` parses and checks the whole header on open (cost O(header), not
O(file)); every violation raises :class:`~hrx_core.errors.ArtifactError` naming the
file, the tensor and the rule broken (``rule '<id>'``, ids in :data:`RULES`).
"""

from __future__ import annotations

import builtins
import json
import mmap
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Self

import attrs
import ml_dtypes
import numpy as np

from ..errors import ArtifactError, InvalidArgument, Unsupported, show
from .files import fspath, open_regular, pread_exact

if TYPE_CHECKING:
    from ..budget import MemoryBudget
    from ..buffer import Buffer
    from ..stream import Stream

#: Largest header accepted (the reference implementation's bound).
MAX_HEADER_BYTES = 100_000_000

#: safetensors dtype name -> (bits per element, numpy dtype or None for packed sub-byte types).
DTYPES: dict[str, tuple[int, np.dtype | None]] = {
    "BOOL": (8, np.dtype(np.bool_)),
    "U8": (8, np.dtype(np.uint8)),
    "I8": (8, np.dtype(np.int8)),
    "U16": (16, np.dtype(np.uint16)),
    "I16": (16, np.dtype(np.int16)),
    "U32": (32, np.dtype(np.uint32)),
    "I32": (32, np.dtype(np.int32)),
    "U64": (64, np.dtype(np.uint64)),
    "I64": (64, np.dtype(np.int64)),
    "F16": (16, np.dtype(np.float16)),
    "BF16": (16, np.dtype(ml_dtypes.bfloat16)),
    "F32": (32, np.dtype(np.float32)),
    "F64": (64, np.dtype(np.float64)),
    "C64": (64, np.dtype(np.complex64)),
    "F8_E4M3": (8, np.dtype(ml_dtypes.float8_e4m3fn)),  # torch.float8_e4m3fn
    "F8_E5M2": (8, np.dtype(ml_dtypes.float8_e5m2)),
    "F8_E4M3FNUZ": (8, np.dtype(ml_dtypes.float8_e4m3fnuz)),
    "F8_E5M2FNUZ": (8, np.dtype(ml_dtypes.float8_e5m2fnuz)),
    "F8_E8M0": (8, np.dtype(ml_dtypes.float8_e8m0fnu)),
    # Packed sub-byte types: raw bytes only (numpy has no packed representation).
    "F4": (4, None),
    "F6_E2M3": (6, None),
    "F6_E3M2": (6, None),
}

#: Rule ids used in error messages.
RULES = (
    "file-size",  # the file holds at least the 8-byte length prefix
    "header-bound",  # N <= MAX_HEADER_BYTES
    "header-length",  # 8 + N <= file size
    "json",  # the header is UTF-8 JSON without duplicate keys
    "header-object",  # the header is an object of tensor entries
    "metadata",  # __metadata__ is a string->string map
    "entry",  # a tensor entry is an object with dtype, shape, data_offsets
    "dtype",  # the dtype is known
    "shape",  # a list of non-negative ints
    "offsets",  # [begin, end] non-negative ints, begin <= end
    "size",  # elements x itemsize == end - begin (whole bytes)
    "bounds",  # end <= data section size
    "overlap",  # byte ranges do not overlap
    "gap",  # byte ranges leave no gap
    "coverage",  # byte ranges cover the data section to its end
)

Advice = Literal["willneed", "sequential", "dontneed"]
_ADVICE = {"willneed": "MADV_WILLNEED", "sequential": "MADV_SEQUENTIAL", "dontneed": "MADV_DONTNEED"}


@attrs.frozen
class TensorInfo:
    """One tensor's header entry. ``begin``/``end`` are absolute file offsets."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numpy_dtype(self) -> np.dtype | None:
        """The numpy dtype (ml_dtypes for BF16/F8), or None for packed sub-byte types."""
        return DTYPES[self.dtype][1]


#: Array limits numpy enforces (ndim, and each dimension as a signed 64-bit size).
MAX_DIMS = 32  # numpy 1.x; numpy 2 allows 64
MAX_DIM = 2**63 - 1


def _fail(path: str, rule: str, detail: str, tensor: str | None = None) -> ArtifactError:
    where = f"tensor {tensor!r} " if tensor is not None else "header "
    return ArtifactError(f"{path}: {where}breaks rule '{rule}': {detail}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_header(
    path: str, data: bytes | bytearray | memoryview | mmap.mmap, file_size: int
) -> tuple[dict[str, TensorInfo], dict[str, str], int]:
    """Check a safetensors header: (tensors by name in file order, metadata, data start)."""
    if file_size < 8:
        raise _fail(path, "file-size", f"{file_size} bytes is shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > MAX_HEADER_BYTES:
        raise _fail(path, "header-bound", f"header length {n} exceeds the limit of {MAX_HEADER_BYTES} bytes")
    if 8 + n > file_size:
        raise _fail(path, "header-length", f"header length {n} runs past the end of the {file_size}-byte file")
    try:
        header = json.loads(bytes(data[8 : 8 + n]).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _fail(path, "json", f"header is not valid UTF-8 JSON: {exc}") from None
    if not isinstance(header, dict):
        raise _fail(path, "header-object", f"header is a JSON {type(header).__name__}, not an object")
    start, size = 8 + n, file_size - 8 - n
    metadata = header.pop("__metadata__", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _fail(path, "metadata", "__metadata__ must map strings to strings")
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
            raise _fail(path, "entry", "expected an object with dtype, shape and data_offsets", name)
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _fail(path, "dtype", f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})", name)
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise _fail(path, "shape", f"shape {shape!r} is not a list of non-negative integers", name)
        if len(shape) > MAX_DIMS or any(d > MAX_DIM for d in shape):
            # numpy cannot represent it even when another dimension is 0
            raise _fail(path, "shape", f"shape {shape!r} has more than {MAX_DIMS} dimensions or one above {MAX_DIM}", name)
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) and o >= 0 for o in offsets)):
            raise _fail(path, "offsets", f"data_offsets {offsets!r} is not [begin, end] of non-negative integers", name)
        begin, end = offsets
        if begin > end:
            raise _fail(path, "offsets", f"data_offsets begin {begin} > end {end}", name)
        if end > size:
            raise _fail(path, "bounds", f"data_offsets end {end} exceeds the {size}-byte data section", name)
        bits = int(np.prod(shape, dtype=object)) * DTYPES[dtype][0]
        if bits % 8 or bits // 8 != end - begin:
            raise _fail(
                path,
                "size",
                f"shape {shape} x {dtype} is {bits / 8:g} bytes, but data_offsets span {end - begin}",
                name,
            )
        tensors[name] = TensorInfo(name, dtype, tuple(shape), start + begin, start + end)
    pos, prev = start, None
    for info in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if info.begin < pos:
            raise _fail(
                path, "overlap", f"bytes [{info.begin - start}, {info.end - start}) overlap tensor {prev!r}", info.name
            )
        if info.begin > pos:
            raise _fail(
                path, "gap", f"bytes [{pos - start}, {info.begin - start}) before it belong to no tensor", info.name
            )
        pos, prev = info.end, info.name
    if pos != file_size:
        last = f"tensor {prev!r}" if prev is not None else "the header"
        raise _fail(path, "coverage", f"bytes [{pos - start}, {size}) after {last} belong to no tensor")
    return tensors, dict(metadata), start


class FileView:
    """A checked safetensors file, mapped (mmap, read-only) or owned (read into memory).

    Use :meth:`open`; close with :meth:`close` or a ``with`` block. Views returned by
    :meth:`numpy` / :meth:`raw` keep the mapping alive: closing while they exist
    drops this object's reference and the mapping is unmapped when the last view
    goes away.
    """

    def __init__(
        self,
        path: str,
        data: mmap.mmap | bytearray,
        tensors: dict[str, TensorInfo],
        metadata: dict[str, str],
        mode: str,
        fd: int | None = None,
    ) -> None:
        self.path = path
        self.mode = mode
        self._data: mmap.mmap | bytearray | None = data
        #: a descriptor of the mapped file itself (device loads pread from it)
        self._fd = fd
        self._tensors = tensors
        self.metadata: Mapping[str, str] = metadata

    @classmethod
    def open(cls, path: str | os.PathLike[str], mode: Literal["mapped", "owned"] = "mapped") -> FileView:
        """Open and check ``path``. ``mapped`` maps the file; ``owned`` reads it into memory.

        Only regular files are read (a device, FIFO or socket -- also behind a symbolic
        link -- raises ArtifactError before anything is read), and never more bytes
        than ``fstat`` reported. A mapped file must not be truncated while its views
        are in use (see :meth:`numpy`)."""
        if not isinstance(mode, str) or mode not in ("mapped", "owned"):
            raise InvalidArgument(f"mode: expected 'mapped' or 'owned', got {show(mode)}")
        fd, st = open_regular(path)
        spath = fspath("path", path)
        size = st.st_size
        keep_fd = False
        try:
            if size < 8 or mode == "owned":
                data: mmap.mmap | bytearray = bytearray(pread_exact(fd, size, 0, spath))
            else:
                try:
                    data = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
                except (OSError, ValueError) as exc:
                    raise ArtifactError(f"{spath}: cannot map: {exc}") from None
                keep_fd = True
            try:
                tensors, metadata, _ = parse_header(spath, data, size)
            except BaseException:
                if isinstance(data, mmap.mmap):
                    data.close()
                raise
        except BaseException:
            os.close(fd)
            raise
        if not keep_fd:
            os.close(fd)
        return cls(spath, data, tensors, metadata, mode, fd if keep_fd else None)

    # -- lifetime ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._data is None

    def close(self) -> None:
        """Release the file's memory (idempotent)."""
        data, self._data = self._data, None
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        if isinstance(data, mmap.mmap):
            try:
                data.close()
            except BufferError:
                pass  # views are exported; the mapping goes when they do

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._tensors)} tensors"
        return f"FileView({self.path!r}, {self.mode}, {state})"

    def _buf(self) -> mmap.mmap | bytearray:
        if self._data is None:
            raise InvalidArgument(f"{self.path}: FileView is closed")
        return self._data

    # -- header -----------------------------------------------------------------

    def names(self) -> list[str]:
        """Tensor names in header order."""
        return list(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def info(self, name: str) -> TensorInfo:
        """dtype, shape and absolute byte range of ``name``."""
        if not isinstance(name, str):
            raise InvalidArgument(f"name: expected a tensor name (str), got {type(name).__name__}")
        try:
            return self._tensors[name]
        except KeyError:
            raise InvalidArgument(f"{self.path}: no tensor named {name!r}") from None

    def _names(self, names: Any) -> list[str]:
        """``names`` (None: all, a str, or an iterable of strs) as checked tensor names."""
        if names is None:
            return list(self._tensors)
        if isinstance(names, str):
            names = [names]
        if isinstance(names, (bytes, bytearray)) or not isinstance(names, Iterable):
            raise InvalidArgument(f"names: expected tensor names or None, got {type(names).__name__}")
        out = list(names)
        for n in out:
            self.info(n)
        return out

    # -- host views ---------------------------------------------------------------

    def _check_size(self, t: TensorInfo) -> None:
        """A mapped file must still hold the tensor's bytes: touching mapped pages past
        the end of a truncated file kills the process (SIGBUS), so check first."""
        if self._fd is None:
            return
        try:
            size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise ArtifactError(f"{self.path}: cannot stat the mapped file: {exc.strerror or exc}") from None
        if size < t.end:
            raise ArtifactError(
                f"{self.path}: the file was truncated to {size} bytes after it was mapped; tensor {t.name!r} "
                f"needs bytes [{t.begin}, {t.end}) (reopen it)"
            )

    def raw(self, name: str, *, copy: bool = False) -> memoryview:
        """The tensor's bytes, zero-copy (read-only for mapped files), or a private copy
        with ``copy=True``. See :meth:`numpy` about truncated mapped files."""
        t = self.info(name)
        buf = self._buf()
        self._check_size(t)
        view = memoryview(buf)[t.begin : t.end]
        return memoryview(bytes(view)) if copy else view

    def numpy(self, name: str, *, copy: bool = False) -> np.ndarray:
        """A zero-copy numpy view (read-only for mapped files; BF16/F8 via ml_dtypes), or
        a private copy with ``copy=True``.

        A mapped view reads the file's pages on access. The call checks that the file
        still holds the tensor, but a file truncated *while* a zero-copy view is in use
        makes the next access fault (SIGBUS, which kills the process): map only files
        nothing else rewrites, or take ``copy=True`` (or ``mode="owned"``)."""
        t = self.info(name)
        dtype = t.numpy_dtype
        if dtype is None:
            raise Unsupported(f"{self.path}: tensor {name!r} has packed dtype {t.dtype}; use raw()")
        buf = self._buf()
        self._check_size(t)
        arr = np.frombuffer(buf, dtype=dtype, count=t.nbytes // dtype.itemsize, offset=t.begin)
        return arr.reshape(t.shape).copy() if copy else arr.reshape(t.shape)

    def advise(self, names: Iterable[str] | None, advice: Advice) -> bool:
        """Page advice (madvise) for the selected tensors' bytes, or the whole data section.

        Returns True when advice was given, False where it is a no-op (owned files,
        platforms without madvise or without that advice).
        """
        if not isinstance(advice, str) or advice not in _ADVICE:
            raise InvalidArgument(f"advice: expected one of {sorted(_ADVICE)}, got {show(advice)}")
        infos = [self.info(n) for n in self._names(names)]
        data = self._buf()
        flag = getattr(mmap, _ADVICE[advice], None)
        if isinstance(data, bytearray) or flag is None or not hasattr(data, "madvise"):
            return False
        page = mmap.PAGESIZE
        for t in infos:
            if t.nbytes:
                start = t.begin - t.begin % page
                data.madvise(flag, start, t.end - start)
        return True

    # -- device loading -----------------------------------------------------------

    def load(
        self, stream: Stream, names: Iterable[str] | None = None, *, budget: MemoryBudget | None = None
    ) -> dict[str, Buffer]:
        """Upload the selected tensors (all by default) to new device buffers.

        Each buffer is charged to ``budget`` (default: the stream's budget) before it is
        allocated, then filled through the stream's staging ring: a mapped file is read
        with ``pread`` into the pinned chunks (:meth:`Stream.upload_file_ranges`, one
        pipeline over all tensors: no page-table population of the mapping), an owned one copied from memory. Only the selected
        byte ranges are read, so a subset touches only its own pages. Zero-byte tensors get a 1-byte buffer
        (devices allocate nothing smaller). On any failure the buffers allocated so far
        are closed. Returns buffers by name; the uploads are queued on ``stream``.
        """
        from ..stream import Stream

        if not isinstance(stream, Stream):
            raise InvalidArgument(f"stream: expected an hrx Stream, got {type(stream).__name__}")
        if budget is not None:
            from ..budget import MemoryBudget

            if not isinstance(budget, MemoryBudget):
                raise InvalidArgument(f"budget: expected a MemoryBudget or None, got {type(budget).__name__}")
        infos = [self.info(n) for n in dict.fromkeys(self._names(names))]
        data = self._buf()
        charge_to = budget if budget is not None else stream.memory_budget
        out: dict[str, Buffer] = {}
        try:
            for t in infos:
                out[t.name] = stream.device.allocate(max(t.nbytes, 1), budget=charge_to)
            ranges = [(out[t.name], t.begin, t.nbytes) for t in infos if t.nbytes]
            if ranges and self._fd is not None:
                # one staging pipeline over every tensor: reads of the next tensors
                # overlap the device copies of the earlier ones
                stream.upload_file_ranges(self._fd, ranges)
            else:
                for buf, begin, nbytes in ranges:
                    stream.upload(buf, np.frombuffer(data, np.uint8, count=nbytes, offset=begin))
        except BaseException:
            for buf in out.values():
                buf.close()
            raise
        return out

    def load_tensor(self, stream: Stream, name: str, *, budget: MemoryBudget | None = None) -> Buffer:
        """:meth:`load` of one tensor."""
        return self.load(stream, [name], budget=budget)[name]


def sniff(head: bytes, file_size: int) -> bool:
    """Whether the first bytes of a file look like safetensors (a plausible length, then '{')."""
    if len(head) < 9:
        return False
    (n,) = struct.unpack_from("<Q", head, 0)
    return 2 <= n <= min(MAX_HEADER_BYTES, file_size - 8) and head[8:9] == b"{"


__all__ = ["DTYPES", "MAX_HEADER_BYTES", "RULES", "FileView", "TensorInfo", "parse_header", "sniff"]
