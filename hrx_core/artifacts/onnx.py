"""ONNX models: checked graph indexes, attribute getters and tensor decoding.

:meth:`Model.load` reads a model with the ``onnx`` library (external data included)
and builds owned indexes over its main graph: nodes by name (unnamed or duplicate
names get stable synthetic names), the producer and consumers of every value,
initializers by name, graph inputs/outputs, opset imports and a topological order
(Kahn's algorithm, ties broken by file order). Values a subgraph (``If``/``Loop``/
``Scan`` bodies) reads from the enclosing graph count as implicit inputs of the node
that owns the subgraph. Dangling references, duplicate producers and cycles raise
:class:`~hrx_core.errors.ArtifactError` naming the node and the value.

:func:`decode_tensor` turns a ``TensorProto`` into numpy for every element type the
``onnx`` library knows: raw and typed storage, external data, float16, bfloat16 and
the float8/float6/float4 kinds (ml_dtypes), packed int4/uint4/int2/uint2 (low bits
first, signed kinds sign-extended) and strings.
"""

from __future__ import annotations

import heapq
import math
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs
import ml_dtypes
import numpy as np

from ..errors import ArtifactError, InvalidArgument, require
from .files import fspath, inside, open_regular, pread_exact, read_regular

#: Largest ONNX model file read (protobuf's limit for one message).
MAX_MODEL_BYTES = 2**31 - 1

if TYPE_CHECKING:
    import onnx


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: Sentinel: an attribute getter without a default raises when the attribute is absent.
MISSING: Final[Any] = _Missing()

#: Attribute kinds accepted by :meth:`Model.attr` -> ``AttributeProto.AttributeType`` value.
ATTRIBUTE_KINDS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "float": 1,
        "int": 2,
        "string": 3,
        "tensor": 4,
        "graph": 5,
        "floats": 6,
        "ints": 7,
        "strings": 8,
        "tensors": 9,
        "graphs": 10,
        "sparse_tensor": 11,
        "sparse_tensors": 12,
        "type_proto": 13,
        "type_protos": 14,
    }
)
_KIND_NAMES = {v: k for k, v in ATTRIBUTE_KINDS.items()}

# ---------------------------------------------------------------------------------
# Tensor element types
# ---------------------------------------------------------------------------------


@attrs.frozen
class _ElementType:
    name: str  # TensorProto.DataType name
    dtype: np.dtype  # numpy dtype of the decoded array
    bits: int  # bits per element in raw_data (0 for strings)
    field: str  # typed storage field
    storage: str  # how the typed field encodes elements (see _decode_typed)


def _element_types() -> dict[int, _ElementType]:
    from onnx import TensorProto

    table: dict[int, _ElementType] = {}

    def add(name: str, dtype: Any, bits: int, field: str, storage: str) -> None:
        code = getattr(TensorProto, name, None)
        if code is None or dtype is None:  # not expressible by this onnx/ml_dtypes
            return
        table[int(code)] = _ElementType(name, np.dtype(dtype), bits, field, storage)

    md = ml_dtypes
    add("FLOAT", np.float32, 32, "float_data", "direct")
    add("DOUBLE", np.float64, 64, "double_data", "direct")
    add("INT32", np.int32, 32, "int32_data", "direct")
    add("INT64", np.int64, 64, "int64_data", "direct")
    add("UINT32", np.uint32, 32, "uint64_data", "direct")
    add("UINT64", np.uint64, 64, "uint64_data", "direct")
    add("COMPLEX64", np.complex64, 64, "float_data", "pairs")
    add("COMPLEX128", np.complex128, 128, "double_data", "pairs")
    add("UINT8", np.uint8, 8, "int32_data", "bits")
    add("INT8", np.int8, 8, "int32_data", "bits")
    add("UINT16", np.uint16, 16, "int32_data", "bits")
    add("INT16", np.int16, 16, "int32_data", "bits")
    add("FLOAT16", np.float16, 16, "int32_data", "bits")
    add("BFLOAT16", md.bfloat16, 16, "int32_data", "bits")
    add("BOOL", np.bool_, 8, "int32_data", "bool")
    add("STRING", np.object_, 0, "string_data", "string")
    for name, attr in (
        ("FLOAT8E4M3FN", "float8_e4m3fn"),
        ("FLOAT8E4M3FNUZ", "float8_e4m3fnuz"),
        ("FLOAT8E5M2", "float8_e5m2"),
        ("FLOAT8E5M2FNUZ", "float8_e5m2fnuz"),
        ("FLOAT8E8M0", "float8_e8m0fnu"),
    ):
        add(name, getattr(md, attr, None), 8, "int32_data", "bits")
    # Sub-byte kinds: raw_data is an LSB-first bit stream; 4- and 2-bit typed storage
    # holds one packed byte per int32 entry, 6-bit typed storage one element per entry.
    add("UINT4", getattr(md, "uint4", None), 4, "int32_data", "packed")
    add("INT4", getattr(md, "int4", None), 4, "int32_data", "packed")
    add("FLOAT4E2M1", getattr(md, "float4_e2m1fn", None), 4, "int32_data", "packed")
    add("UINT2", getattr(md, "uint2", None), 2, "int32_data", "packed")
    add("INT2", getattr(md, "int2", None), 2, "int32_data", "packed")
    add("FLOAT6E2M3", getattr(md, "float6_e2m3fn", None), 6, "int32_data", "sixbit")
    add("FLOAT6E3M2", getattr(md, "float6_e3m2fn", None), 6, "int32_data", "sixbit")
    return table


_TYPES: dict[int, _ElementType] | None = None


def element_types() -> Mapping[int, str]:
    """Every ``TensorProto.DataType`` value :func:`decode_tensor` decodes -> its name."""
    return MappingProxyType({k: v.name for k, v in _types().items()})


def _types() -> dict[int, _ElementType]:
    global _TYPES
    if _TYPES is None:
        _TYPES = _element_types()
    return _TYPES


def _label(tensor: onnx.TensorProto, what: str | None) -> str:
    if what:
        return what
    return f"tensor {tensor.name!r}" if tensor.name else "unnamed tensor"


def decode_tensor(
    tensor: onnx.TensorProto,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    strings: Literal["str", "bytes"] = "str",
    what: str | None = None,
) -> np.ndarray:
    """Decode ``tensor`` to a numpy array of its element type.

    External data is read from files relative to ``base_dir``. Strings come back as an
    object array of ``str`` (UTF-8 decoded) or, with ``strings="bytes"``, of ``bytes``.
    The result may be a read-only view of the tensor's bytes. ``what`` names the
    tensor in error messages (default: its name). Malformed tensors raise ArtifactError.
    """
    from onnx import TensorProto

    if not isinstance(tensor, TensorProto):
        raise InvalidArgument(f"tensor: expected an onnx TensorProto, got {type(tensor).__name__}")
    label = _label(tensor, what)
    if not isinstance(strings, str) or strings not in ("str", "bytes"):
        raise InvalidArgument(f"strings={strings!r}: expected 'str' or 'bytes'")
    if tensor.HasField("segment"):
        raise ArtifactError(f"{label}: segmented tensors are not supported")
    kind = _types().get(tensor.data_type)
    if kind is None:
        raise ArtifactError(f"{label}: unknown or undefined data_type {tensor.data_type}")
    dims = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in dims):
        raise ArtifactError(f"{label}: negative dimension in shape {list(dims)}")
    count = math.prod(dims)

    if kind.storage == "string":
        if tensor.HasField("raw_data") or tensor.data_location == TensorProto.EXTERNAL:
            raise ArtifactError(f"{label}: STRING tensors must use string_data, not raw or external data")
        items = list(tensor.string_data)
        _check_count(label, kind, len(items), count)
        if strings == "str":
            try:
                items = [s.decode("utf-8") for s in items]
            except UnicodeDecodeError as exc:
                raise ArtifactError(
                    f"{label}: string element is not UTF-8 ({exc}); decode with strings='bytes'"
                ) from exc
        out = np.empty(count, dtype=object)
        out[:] = items
        return out.reshape(dims)

    if tensor.data_location == TensorProto.EXTERNAL:
        raw: bytes | None = _read_external(tensor, base_dir, label)
    elif tensor.HasField("raw_data"):
        raw = tensor.raw_data
    else:
        raw = None

    if raw is not None:
        if len(getattr(tensor, kind.field)):
            raise ArtifactError(f"{label}: both raw_data and {kind.field} are set")
        expected = (count * kind.bits + 7) // 8
        if len(raw) != expected:
            raise ArtifactError(
                f"{label}: {kind.name} shape {list(dims)} needs {expected} bytes of data, found {len(raw)}"
            )
        if kind.bits in (2, 4, 6):
            return _unpack(np.frombuffer(raw, dtype=np.uint8), kind, dims)
        arr = np.frombuffer(raw, dtype=_little(kind.dtype))
        if sys.byteorder == "big":
            arr = arr.astype(kind.dtype)
        return arr.reshape(dims)
    return _decode_typed(tensor, kind, dims, count, label)


def _little(dtype: np.dtype) -> np.dtype:
    # ml_dtypes types have no byte order to set; they are 1-2 bytes and stored little-endian.
    return dtype.newbyteorder("<") if dtype.kind in "biufc" and dtype.itemsize > 1 else dtype


def _check_count(label: str, kind: _ElementType, found: int, expected: int) -> None:
    if found != expected:
        raise ArtifactError(f"{label}: {kind.name} needs {expected} entries in {kind.field}, found {found}")


def _checked_int32(label: str, kind: _ElementType, values: Iterable[int], lo: int, hi: int) -> np.ndarray:
    arr = np.asarray(values, dtype=np.int64)
    if arr.size and (arr.min() < lo or arr.max() > hi):
        bad = arr[(arr < lo) | (arr > hi)][0]
        raise ArtifactError(f"{label}: {kind.name} entry {int(bad)} in {kind.field} is outside [{lo}, {hi}]")
    return arr


def _decode_typed(
    tensor: onnx.TensorProto, kind: _ElementType, dims: tuple[int, ...], count: int, label: str
) -> np.ndarray:
    values = getattr(tensor, kind.field)
    if kind.storage == "direct":
        _check_count(label, kind, len(values), count)
        if kind.name == "UINT32":
            arr = np.asarray(values, dtype=np.uint64)
            if arr.size and arr.max() > 0xFFFFFFFF:
                raise ArtifactError(f"{label}: UINT32 entry {int(arr.max())} in uint64_data exceeds 2**32-1")
            return arr.astype(np.uint32).reshape(dims)
        return np.asarray(values, dtype=kind.dtype).reshape(dims)
    if kind.storage == "pairs":
        _check_count(label, kind, len(values), 2 * count)
        part = np.float32 if kind.dtype == np.complex64 else np.float64
        return np.asarray(values, dtype=part).view(kind.dtype).reshape(dims)
    if kind.storage == "bool":
        _check_count(label, kind, len(values), count)
        arr = _checked_int32(label, kind, values, 0, 1)
        return (arr != 0).reshape(dims)
    if kind.storage == "bits":
        # Each int32 entry holds one element's bit pattern (signed or unsigned form).
        _check_count(label, kind, len(values), count)
        bits = kind.bits
        arr = _checked_int32(label, kind, values, -(1 << (bits - 1)), (1 << bits) - 1)
        storage = np.uint8 if bits == 8 else np.uint16
        return (arr & ((1 << bits) - 1)).astype(storage).view(kind.dtype).reshape(dims)
    if kind.storage == "packed":
        _check_count(label, kind, len(values), (count * kind.bits + 7) // 8)
        arr = _checked_int32(label, kind, values, -128, 255)
        return _unpack((arr & 0xFF).astype(np.uint8), kind, dims)
    # "sixbit": one element per entry, low six bits.
    _check_count(label, kind, len(values), count)
    arr = _checked_int32(label, kind, values, 0, 63)
    return arr.astype(np.uint8).view(kind.dtype).reshape(dims)


def _unpack(data: np.ndarray, kind: _ElementType, dims: tuple[int, ...]) -> np.ndarray:
    """Unpack an LSB-first stream of ``kind.bits``-bit elements into one byte each."""
    bits = kind.bits
    count = math.prod(dims)
    stream = np.unpackbits(data, bitorder="little")[: count * bits].reshape(count, bits)
    weights = (1 << np.arange(bits, dtype=np.uint8)).astype(np.uint8)
    values = (stream * weights).sum(axis=1, dtype=np.uint8)
    if kind.name not in ("INT4", "INT2"):
        return values.view(kind.dtype).reshape(dims)
    # signed kinds: sign-extend, then convert to the ml_dtypes integer type
    signed = values.astype(np.int8)
    signed[values >= (1 << (bits - 1))] -= 1 << bits
    return signed.astype(kind.dtype).reshape(dims)


def _read_external(tensor: onnx.TensorProto, base_dir: str | os.PathLike[str] | None, label: str) -> bytes:
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location")
    if not location:
        raise ArtifactError(f"{label}: external data has no 'location'")
    if base_dir is None:
        raise ArtifactError(f"{label}: external data {location!r} needs a base directory (load from a path)")
    if os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        raise ArtifactError(f"{label}: external data location {location!r} leaves the model directory")
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError as exc:
        raise ArtifactError(f"{label}: external data offset/length is not an integer: {exc}") from exc
    # symbolic links (of the file or of a directory on the way) must not lead out of
    # the model directory; only regular files are read, within their size
    path = inside(base_dir, location, f"{label}: external data")
    fd, st = open_regular(path, f"{label}: external data {location!r}")
    try:
        size = st.st_size
        if length is None:
            length = size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise ArtifactError(
                f"{label}: external data range [{offset}, {offset + length}) is outside {location!r} ({size} bytes)"
            )
        return pread_exact(fd, length, offset, f"{label}: external data {location!r}")
    finally:
        os.close(fd)


def _external_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of ``graph`` and its subgraphs that keeps its data in a file."""
    from onnx import TensorProto

    def walk(g: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
        yield from g.initializer
        for sp in g.sparse_initializer:
            yield sp.values
            yield sp.indices
        for node in g.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("sparse_tensor"):
                    yield a.sparse_tensor.values
                    yield a.sparse_tensor.indices
                if a.HasField("g"):
                    yield from walk(a.g)
                for sub in a.graphs:
                    yield from walk(sub)

    for t in walk(graph):
        if t.data_location == TensorProto.EXTERNAL:
            yield t


def _load_external(proto: onnx.ModelProto, base_dir: str, where: str) -> None:
    """Read every external tensor into ``raw_data`` with the checks of decode_tensor
    (inside the model directory, regular files, in-range sizes)."""
    from onnx import TensorProto

    for t in _external_tensors(proto.graph):
        raw = _read_external(t, base_dir, f"{where}: {_label(t, None)}")
        t.raw_data = raw
        t.data_location = TensorProto.DEFAULT
        del t.external_data[:]


# ---------------------------------------------------------------------------------
# Graph indexes
# ---------------------------------------------------------------------------------


@attrs.frozen
class Node:
    """One node of the main graph; ``name`` is unique within the model's index."""

    name: str
    index: int  # position in the file's node list
    op_type: str
    domain: str
    inputs: tuple[str, ...]  # "" marks an omitted optional input
    outputs: tuple[str, ...]
    #: Outer-scope values read by this node's subgraphs (If/Loop/Scan bodies).
    implicit_inputs: tuple[str, ...]
    proto: Any = attrs.field(eq=False, repr=False)


def _subgraph_free_names(graph: onnx.GraphProto) -> set[str]:
    """Names a graph (and its nested graphs) reads but does not define."""
    defined = {v.name for v in graph.input}
    defined.update(t.name for t in graph.initializer)
    defined.update(t.values.name for t in graph.sparse_initializer)
    used: set[str] = set()
    for node in graph.node:
        defined.update(o for o in node.output if o)
        used.update(i for i in node.input if i)
        for g in _node_subgraphs(node):
            used |= _subgraph_free_names(g)
    used.update(o.name for o in graph.output)
    return used - defined


def _node_subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    out: list[onnx.GraphProto] = []
    for a in node.attribute:
        if a.HasField("g"):
            out.append(a.g)
        out.extend(a.graphs)
    return out


class Model:
    """Checked, indexed view of an ONNX model's main graph (see the module docstring).

    Attributes: ``proto`` (the ``ModelProto``), ``path`` (or None), ``base_dir`` (for
    external data, or None), ``nodes`` (name -> :class:`Node`, file order),
    ``topological_order``, ``inputs`` / ``outputs`` (graph input/output names),
    ``initializers`` (name -> ``TensorProto``), ``opset_imports`` (domain -> version,
    ``""`` for the default domain).
    """

    def __init__(self, proto: onnx.ModelProto, *, path: str | None = None, base_dir: str | None = None) -> None:
        self.proto = proto
        self.path = path
        self.base_dir = base_dir
        where = f"{path}: " if path else ""
        self._where = where
        graph = proto.graph

        opsets: dict[str, int] = {}
        for imp in proto.opset_import:
            domain = "" if imp.domain == "ai.onnx" else imp.domain
            if domain in opsets:
                raise ArtifactError(f"{where}opset domain {imp.domain!r} is imported twice")
            opsets[domain] = int(imp.version)
        self.opset_imports: Mapping[str, int] = MappingProxyType(opsets)

        inits: dict[str, onnx.TensorProto] = {}
        for t in graph.initializer:
            if not t.name:
                raise ArtifactError(f"{where}an initializer has no name")
            if t.name in inits:
                raise ArtifactError(f"{where}initializer {t.name!r} is defined twice")
            inits[t.name] = t
        self.initializers: Mapping[str, onnx.TensorProto] = MappingProxyType(inits)
        sparse = {t.values.name for t in graph.sparse_initializer}

        self.inputs: tuple[str, ...] = tuple(v.name for v in graph.input)
        if len(set(self.inputs)) != len(self.inputs):
            dup = next(n for n in self.inputs if self.inputs.count(n) > 1)
            raise ArtifactError(f"{where}graph input {dup!r} is declared twice")
        self.outputs: tuple[str, ...] = tuple(v.name for v in graph.output)

        # Values defined outside any node: graph inputs, initializers, sparse initializers.
        sources = set(self.inputs) | set(inits) | sparse

        # Nodes by name: unnamed nodes get "<op_type>_<index>"; a name already taken gets
        # "#k" appended. Both are stable for a given file.
        nodes: dict[str, Node] = {}
        taken = {n.name for n in graph.node if n.name}
        producer: dict[str, Node] = {}
        order: list[Node] = []
        for index, proto_node in enumerate(graph.node):
            name = proto_node.name
            if not name or name in nodes:
                base = name or f"{proto_node.op_type or 'node'}_{index}"
                name, k = base, 1
                while name in nodes or (name != proto_node.name and name in taken):
                    name, k = f"{base}#{k}", k + 1
            implicit: set[str] = set()
            for g in _node_subgraphs(proto_node):
                implicit |= _subgraph_free_names(g)
            node = Node(
                name=name,
                index=index,
                op_type=proto_node.op_type,
                domain=proto_node.domain,
                inputs=tuple(proto_node.input),
                outputs=tuple(proto_node.output),
                implicit_inputs=tuple(sorted(implicit)),
                proto=proto_node,
            )
            nodes[name] = node
            order.append(node)
            for out in node.outputs:
                if not out:
                    continue
                if out in producer:
                    raise ArtifactError(
                        f"{where}value {out!r} has two producers: node {producer[out].name!r} and node {name!r}"
                    )
                if out in sources:
                    what = "an initializer" if out in inits or out in sparse else "a graph input"
                    raise ArtifactError(f"{where}value {out!r} produced by node {name!r} is also {what}")
                producer[out] = node
        self.nodes: Mapping[str, Node] = MappingProxyType(nodes)
        self._producer = producer

        consumers: dict[str, list[Node]] = {}
        for node in order:
            seen: set[str] = set()
            for value in (*node.inputs, *node.implicit_inputs):
                if not value or value in seen:
                    continue
                seen.add(value)
                if value not in producer and value not in sources:
                    how = "input" if value in node.inputs else "subgraph reference"
                    raise ArtifactError(
                        f"{where}node {node.name!r} ({node.op_type}) {how} {value!r} is dangling: "
                        "not a graph input, initializer or node output"
                    )
                consumers.setdefault(value, []).append(node)
        for out in self.outputs:
            if out not in producer and out not in sources:
                raise ArtifactError(f"{where}graph output {out!r} is dangling: nothing produces it")
        self._consumers = {k: tuple(v) for k, v in consumers.items()}
        self._values = frozenset(sources | set(producer))

        # Kahn's algorithm; ties broken by file order so the result is stable.
        deps: dict[str, set[str]] = {}
        users: dict[str, list[Node]] = {n.name: [] for n in order}
        for node in order:
            need = {producer[v].name for v in (*node.inputs, *node.implicit_inputs) if v in producer}
            deps[node.name] = need
            for d in need:
                users[d].append(node)
        pending = {name: len(need) for name, need in deps.items()}
        ready = [(n.index, n.name) for n in order if pending[n.name] == 0]
        heapq.heapify(ready)
        topo: list[Node] = []
        while ready:
            _, name = heapq.heappop(ready)
            topo.append(nodes[name])
            for user in users[name]:
                pending[user.name] -= 1
                if pending[user.name] == 0:
                    heapq.heappush(ready, (user.index, user.name))
        if len(topo) != len(order):
            stuck = [n.name for n in order if pending[n.name] > 0]
            shown = ", ".join(repr(s) for s in stuck[:8]) + (" ..." if len(stuck) > 8 else "")
            raise ArtifactError(f"{where}the graph has a cycle through nodes {shown}")
        self.topological_order: tuple[Node, ...] = tuple(topo)

        self._attrs: dict[str, dict[str, Any]] = {}
        for node in order:
            table: dict[str, Any] = {}
            for a in node.proto.attribute:
                if a.name in table:
                    raise ArtifactError(f"{where}node {node.name!r} has attribute {a.name!r} twice")
                table[a.name] = a
            self._attrs[node.name] = table

    # -- loading ------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        source: str | os.PathLike[str] | bytes,
        *,
        load_external_data: bool = True,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> Model:
        """Load a model from a path or serialized bytes and index it.

        With ``load_external_data`` the onnx library reads external tensors now (from
        the model's directory, or ``base_dir`` for bytes); otherwise they are read when
        decoded. Malformed models raise ArtifactError; without the onnx package,
        MissingDependency names the extra to install.
        """
        onnx = require("onnx", "opening ONNX models", "onnx")

        if not isinstance(load_external_data, bool):
            raise InvalidArgument(f"load_external_data: expected a bool, got {type(load_external_data).__name__}")
        if isinstance(source, (bytes, bytearray, memoryview)):
            path = None
            bdir = fspath("base_dir", base_dir) if base_dir is not None else None
            try:
                proto = onnx.load_model_from_string(bytes(source))
            except Exception as exc:
                raise ArtifactError(f"cannot parse ONNX model bytes: {type(exc).__name__}: {exc}") from exc
            where = "ONNX model bytes"
        else:
            path = fspath("source", source)
            bdir = fspath("base_dir", base_dir) if base_dir is not None else os.path.dirname(os.path.abspath(path))
            if not os.path.lexists(path):
                raise ArtifactError(f"{path}: no such ONNX model file")
            data = read_regular(path, limit=MAX_MODEL_BYTES, what=f"{path}: ONNX model", name="source")
            try:
                proto = onnx.load_model_from_string(data)
            except Exception as exc:
                raise ArtifactError(f"{path}: cannot parse ONNX model: {type(exc).__name__}: {exc}") from exc
            where = path
        if load_external_data and bdir is not None:
            _load_external(proto, bdir, where)
        try:
            return cls(proto, path=path, base_dir=bdir)
        except RecursionError:
            raise ArtifactError(f"{where}: subgraphs are nested too deeply") from None

    # -- value indexes --------------------------------------------------------------

    @property
    def values(self) -> frozenset[str]:
        """Every value name of the main graph (inputs, initializers, node outputs)."""
        return self._values

    def node(self, name: str) -> Node:
        """The node called ``name`` (InvalidArgument if there is none)."""
        if not isinstance(name, str):
            raise InvalidArgument(f"name: expected a node name (str), got {type(name).__name__}")
        try:
            return self.nodes[name]
        except KeyError:
            raise InvalidArgument(f"{self._where}no node named {name!r}") from None

    def producer(self, value: str) -> Node | None:
        """The node producing ``value``; None for graph inputs and initializers."""
        self._check_value(value)
        return self._producer.get(value)

    def consumers(self, value: str) -> tuple[Node, ...]:
        """Nodes reading ``value`` (directly or from a subgraph), in file order."""
        self._check_value(value)
        return self._consumers.get(value, ())

    def _check_value(self, value: str) -> None:
        if not isinstance(value, str):
            raise InvalidArgument(f"value: expected a value name (str), got {type(value).__name__}")
        if value not in self._values:
            raise InvalidArgument(f"{self._where}no value named {value!r}")

    def initializer(self, name: str, *, strings: Literal["str", "bytes"] = "str") -> np.ndarray:
        """Decode the initializer ``name`` to numpy (see :func:`decode_tensor`)."""
        if not isinstance(name, str):
            raise InvalidArgument(f"name: expected an initializer name (str), got {type(name).__name__}")
        try:
            tensor = self.initializers[name]
        except KeyError:
            raise InvalidArgument(f"{self._where}no initializer named {name!r}") from None
        return decode_tensor(tensor, base_dir=self.base_dir, strings=strings, what=f"{self._where}initializer {name!r}")

    def decode(self, tensor: onnx.TensorProto, *, strings: Literal["str", "bytes"] = "str") -> np.ndarray:
        """Decode any tensor of this model, external data relative to the model."""
        return decode_tensor(tensor, base_dir=self.base_dir, strings=strings)

    # -- attributes -----------------------------------------------------------------

    def attr(self, node: Node | str, name: str, kind: str, default: Any = MISSING) -> Any:
        """Attribute ``name`` of ``node`` checked to be of ``kind`` (a key of ATTRIBUTE_KINDS).

        Returns int, float, str, numpy array (tensor), GraphProto, or tuples of those
        for the plural kinds (sparse tensors and type protos come back as protos). An
        absent attribute returns ``default`` when given; an absent one without default
        or one of another type raises ArtifactError naming node, attribute and types.
        """
        node_name = node.name if isinstance(node, Node) else node
        if not isinstance(node_name, str):
            raise InvalidArgument(f"node: expected a Node or a node name, got {type(node).__name__}")
        if not isinstance(name, str):
            raise InvalidArgument(f"name: expected an attribute name (str), got {type(name).__name__}")
        if node_name not in self.nodes:
            raise InvalidArgument(f"{self._where}no node named {node_name!r}")
        if not isinstance(kind, str) or kind not in ATTRIBUTE_KINDS:
            raise InvalidArgument(f"kind={kind!r}: expected one of {', '.join(ATTRIBUTE_KINDS)}")
        op = self.nodes[node_name].op_type
        a = self._attrs[node_name].get(name)
        if a is None:
            if default is MISSING:
                raise ArtifactError(
                    f"{self._where}node {node_name!r} ({op}) has no attribute {name!r} (expected {kind})"
                )
            return default
        if a.ref_attr_name:
            raise ArtifactError(
                f"{self._where}node {node_name!r} ({op}) attribute {name!r} refers to function attribute "
                f"{a.ref_attr_name!r}, which has no value here"
            )
        actual = a.type or _infer_type(a)
        if actual != ATTRIBUTE_KINDS[kind]:
            raise ArtifactError(
                f"{self._where}node {node_name!r} ({op}) attribute {name!r}: expected {kind}, "
                f"found {_KIND_NAMES.get(actual, f'type {actual}')}"
            )
        what = f"{self._where}node {node_name!r} attribute {name!r}"
        if kind == "float":
            return float(a.f)
        if kind == "int":
            return int(a.i)
        if kind == "string":
            return _utf8(a.s, what)
        if kind == "tensor":
            return decode_tensor(a.t, base_dir=self.base_dir, what=what)
        if kind == "graph":
            return a.g
        if kind == "floats":
            return tuple(float(x) for x in a.floats)
        if kind == "ints":
            return tuple(int(x) for x in a.ints)
        if kind == "strings":
            return tuple(_utf8(s, what) for s in a.strings)
        if kind == "tensors":
            return tuple(decode_tensor(t, base_dir=self.base_dir, what=f"{what}[{i}]") for i, t in enumerate(a.tensors))
        if kind == "graphs":
            return tuple(a.graphs)
        if kind == "sparse_tensor":
            return a.sparse_tensor
        if kind == "sparse_tensors":
            return tuple(a.sparse_tensors)
        if kind == "type_proto":
            return a.tp
        return tuple(a.type_protos)

    def attr_int(self, node: Node | str, name: str, default: Any = MISSING) -> int:
        """INT attribute (see :meth:`attr`)."""
        return self.attr(node, name, "int", default)

    def attr_float(self, node: Node | str, name: str, default: Any = MISSING) -> float:
        """FLOAT attribute (see :meth:`attr`)."""
        return self.attr(node, name, "float", default)

    def attr_string(self, node: Node | str, name: str, default: Any = MISSING) -> str:
        """STRING attribute decoded as UTF-8 (see :meth:`attr`)."""
        return self.attr(node, name, "string", default)

    def attr_ints(self, node: Node | str, name: str, default: Any = MISSING) -> tuple[int, ...]:
        """INTS attribute (see :meth:`attr`)."""
        return self.attr(node, name, "ints", default)

    def attr_floats(self, node: Node | str, name: str, default: Any = MISSING) -> tuple[float, ...]:
        """FLOATS attribute (see :meth:`attr`)."""
        return self.attr(node, name, "floats", default)

    def attr_strings(self, node: Node | str, name: str, default: Any = MISSING) -> tuple[str, ...]:
        """STRINGS attribute (see :meth:`attr`)."""
        return self.attr(node, name, "strings", default)

    def attr_tensor(self, node: Node | str, name: str, default: Any = MISSING) -> np.ndarray:
        """TENSOR attribute decoded to numpy (see :meth:`attr`)."""
        return self.attr(node, name, "tensor", default)

    def attr_graph(self, node: Node | str, name: str, default: Any = MISSING) -> onnx.GraphProto:
        """GRAPH attribute as a ``GraphProto`` (see :meth:`attr`)."""
        return self.attr(node, name, "graph", default)

    def __repr__(self) -> str:
        where = self.path or "<bytes>"
        return f"Model({where!r}, nodes={len(self.nodes)}, initializers={len(self.initializers)})"


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{what}: string is not UTF-8 ({exc})") from exc


def _infer_type(a: onnx.AttributeProto) -> int:
    """The type of an attribute written without ``type`` (old files), from its fields."""
    for field, code in (("f", 1), ("i", 2), ("s", 3), ("t", 4), ("g", 5), ("sparse_tensor", 11), ("tp", 13)):
        if a.HasField(field):
            return code
    for field, code in (
        ("floats", 6),
        ("ints", 7),
        ("strings", 8),
        ("tensors", 9),
        ("graphs", 10),
        ("sparse_tensors", 12),
        ("type_protos", 14),
    ):
        if len(getattr(a, field)):
            return code
    return 0


#: First bytes of a ModelProto: field 1 (ir_version) varint, then another known field.
_MODEL_FIELD_KEYS = frozenset({0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x4A, 0x52, 0x62, 0x72, 0x7A})


def sniff(head: bytes, file_size: int) -> bool:
    """Whether a file starting with ``head`` looks like a serialized ONNX ModelProto."""
    from .safetensors import sniff as safetensors_sniff

    if safetensors_sniff(head, file_size):  # a length prefix can begin with the same bytes
        return False
    return len(head) >= 3 and head[0] == 0x08 and 1 <= head[1] <= 0x7F and head[2] in _MODEL_FIELD_KEYS


__all__ = ["ATTRIBUTE_KINDS", "MISSING", "Model", "Node", "decode_tensor", "element_types", "sniff"]
