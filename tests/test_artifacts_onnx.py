"""hrx_core.artifacts.onnx: graph indexes, attribute getters, tensor decoding.

Decoding is cross-checked against onnx.numpy_helper.to_array, on tensors built here
(every element type, raw and typed storage, external data) and on the real models the
onnx package ships under onnx/backend/test/data.
"""

from __future__ import annotations

import glob
import os
import random

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from hrx_core import artifacts
from hrx_core.artifacts.onnx import Model, Node, decode_tensor, element_types, sniff
from hrx_core.errors import ArtifactError, InvalidArgument

F = TensorProto.FLOAT


# -- helpers ---------------------------------------------------------------------------


def _bits(a: np.ndarray) -> np.ndarray:
    """A representation two decodings of the same tensor agree on exactly."""
    a = np.asarray(a)
    if a.dtype == object:
        return a
    if a.dtype.kind in "biu" and a.dtype.itemsize <= 8 and a.dtype.kind != "V":
        return a.astype(np.int64) if a.dtype != np.uint64 else a
    name = a.dtype.name
    if name in ("int4", "uint4", "int2", "uint2"):
        return a.astype(np.int16)
    return np.ascontiguousarray(a).view(
        np.dtype(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else np.uint8
    )


def assert_same(ours: np.ndarray, ref: np.ndarray) -> None:
    assert ours.shape == tuple(ref.shape)
    assert ours.dtype == ref.dtype, (ours.dtype, ref.dtype)
    if ours.dtype == object:
        assert ours.tolist() == ref.tolist()
    elif ours.dtype.kind == "c":
        assert np.array_equal(ours.reshape(-1).view(ours.real.dtype), ref.reshape(-1).view(ref.real.dtype))
    else:
        assert np.array_equal(_bits(ours), _bits(ref))


def sample(code: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random values of element type ``code`` (finite, in range)."""
    dtype = helper.tensor_dtype_to_np_dtype(code)
    name = helper.tensor_dtype_to_string(code).split(".")[-1]
    n = int(np.prod(shape))
    if code == TensorProto.STRING:
        return np.array([f"s{i}-é" for i in range(n)], dtype=object).reshape(shape)
    if code == TensorProto.BOOL:
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if name in ("INT4", "INT2", "UINT4", "UINT2"):
        bits = 4 if "4" in name else 2
        lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if name.startswith("INT") else (0, 1 << bits)
        return rng.integers(lo, hi, n).astype(dtype).reshape(shape)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True).reshape(shape)
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype).reshape(shape)
    if name == "FLOAT8E8M0":
        return rng.uniform(0.1, 8, n).astype(dtype).reshape(shape)
    return rng.uniform(-3, 3, n).astype(np.float32).astype(dtype).reshape(shape)


ALL_TYPES = sorted(element_types())
TYPE_IDS = [element_types()[c] for c in ALL_TYPES]


def tiny_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, F, None)


# -- tensor decoding -------------------------------------------------------------------


def test_every_onnx_element_type_is_decodable():
    expressible = {c for c in helper.get_all_tensor_dtypes() if c != TensorProto.UNDEFINED}
    assert expressible <= set(element_types())


@pytest.mark.parametrize("shape", [(3, 5), (0,), ()], ids=["3x5", "empty", "scalar"])
@pytest.mark.parametrize("code", ALL_TYPES, ids=TYPE_IDS)
def test_decode_raw_and_typed_match_numpy_helper(code, shape):
    rng = np.random.default_rng(code)
    values = sample(code, shape, rng)
    tensors = []
    if code != TensorProto.STRING:
        raw = numpy_helper.from_array(values, "raw")
        assert raw.HasField("raw_data")
        tensors.append(raw)
    flat = values.flatten()
    if code == TensorProto.STRING:
        flat = [s.encode() for s in flat]
    typed = helper.make_tensor("typed", code, list(shape), flat)
    assert not typed.HasField("raw_data")
    tensors.append(typed)
    for t in tensors:
        ours = decode_tensor(t)
        assert_same(ours, numpy_helper.to_array(t))
        assert_same(ours, values)


def test_int4_packing_low_nibble_first_and_sign_extended():
    t = helper.make_tensor("q", TensorProto.INT4, [3], b"\x8f\x07", raw=True)
    assert decode_tensor(t).astype(np.int8).tolist() == [-1, -8, 7]
    u = helper.make_tensor("q", TensorProto.UINT4, [3], b"\x8f\x07", raw=True)
    assert decode_tensor(u).astype(np.int8).tolist() == [15, 8, 7]
    two = helper.make_tensor("q", TensorProto.INT2, [5], b"\xe4\x03", raw=True)
    assert decode_tensor(two).astype(np.int8).tolist() == [0, 1, -2, -1, -1]


def test_strings_as_bytes_and_non_utf8():
    t = helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"\xff"])
    assert decode_tensor(t, strings="bytes").tolist() == [b"a", b"\xff"]
    with pytest.raises(ArtifactError, match="'s'.*UTF-8"):
        decode_tensor(t)


def _proto(name, code, dims, *, raw=None, **fields):
    t = TensorProto(name=name, data_type=code, dims=dims)
    if raw is not None:
        t.raw_data = raw
    for field, values in fields.items():
        getattr(t, field).extend(values)
    return t


@pytest.mark.parametrize(
    "tensor, message",
    [
        (_proto("short", F, [4], raw=b"\0" * 12), "'short'.*16 bytes.*12"),
        (_proto("few", F, [4], float_data=[1.0, 2.0]), "'few'.*4 entries in float_data, found 2"),
        (_proto("big8", TensorProto.INT8, [1], int32_data=[300]), "'big8'.*300"),
        (_proto("b", TensorProto.BOOL, [1], int32_data=[2]), "'b'.*outside"),
        (_proto("p4", TensorProto.INT4, [5], raw=b"\0\0"), "'p4'.*3 bytes.*2"),
        (_proto("both", F, [1], raw=b"\0" * 4, float_data=[1.0]), "'both'.*both raw_data and float_data"),
        (_proto("u32", TensorProto.UINT32, [1], uint64_data=[2**32]), "'u32'.*exceeds"),
    ],
    ids=[
        "raw-length",
        "typed-count",
        "int8-range",
        "bool-range",
        "int4-packed-length",
        "raw-and-typed",
        "uint32-range",
    ],
)
def test_malformed_tensors_raise(tensor, message):
    with pytest.raises(ArtifactError, match=message):
        decode_tensor(tensor)


def test_undefined_type_and_negative_dims():
    t = TensorProto(name="u", data_type=0)
    with pytest.raises(ArtifactError, match="'u'.*data_type 0"):
        decode_tensor(t)
    t = TensorProto(name="n", data_type=F, dims=[-1])
    with pytest.raises(ArtifactError, match="'n'.*negative"):
        decode_tensor(t)


# -- external data ---------------------------------------------------------------------


@pytest.fixture
def external_model(tmp_path):
    rng = np.random.default_rng(0)
    weights = {
        "w32": rng.standard_normal((8, 16)).astype(np.float32),
        "w16": rng.standard_normal((33,)).astype(np.float16),
        "q4": rng.integers(-8, 8, 21).astype(helper.tensor_dtype_to_np_dtype(TensorProto.INT4)),
    }
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    nodes = [helper.make_node("Identity", ["w32"], ["y"], name="id")]
    model = tiny_model(nodes, [], [vi("y")], inits)
    path = tmp_path / "ext.onnx"
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    assert (tmp_path / "weights.bin").exists()
    return path, weights


@pytest.mark.parametrize("eager", [True, False])
def test_external_data(external_model, eager):
    path, weights = external_model
    m = Model.load(path, load_external_data=eager)
    ref = onnx.load(str(path))
    for name, value in weights.items():
        ours = m.initializer(name)
        assert_same(ours, value)
        assert_same(ours, numpy_helper.to_array(next(t for t in ref.graph.initializer if t.name == name)))


def test_external_data_errors(external_model, tmp_path):
    path, _ = external_model
    data = path.read_bytes()
    lazy = Model.load(data, load_external_data=False)  # bytes: no directory known
    with pytest.raises(ArtifactError, match="'w32'.*base directory"):
        lazy.initializer("w32")
    assert Model.load(data, base_dir=tmp_path).initializer("w32").shape == (8, 16)
    deferred = Model.load(path, load_external_data=False)
    os.remove(tmp_path / "weights.bin")
    with pytest.raises(ArtifactError, match="'w32'.*weights.bin"):
        deferred.initializer("w32")
    with pytest.raises(ArtifactError, match="external data"):
        Model.load(path)
    bad = TensorProto(name="esc", data_type=F, dims=[1], data_location=TensorProto.EXTERNAL)
    bad.external_data.add(key="location", value="../x.bin")
    with pytest.raises(ArtifactError, match="'esc'.*leaves"):
        decode_tensor(bad, base_dir=tmp_path)


# -- indexes ---------------------------------------------------------------------------


def diamond() -> onnx.ModelProto:
    # listed out of order: the consumer first
    nodes = [
        helper.make_node("Add", ["l", "r"], ["y"], name="join"),
        helper.make_node("Relu", ["x"], ["l"]),  # unnamed
        helper.make_node("Mul", ["x", "w"], ["r"]),  # unnamed
    ]
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    model = tiny_model(nodes, [vi("x")], [vi("y")], [w])
    model.opset_import.append(helper.make_opsetid("com.example", 2))
    return model


def test_indexes_and_topological_order():
    m = Model.load(diamond().SerializeToString())
    assert list(m.nodes) == ["join", "Relu_1", "Mul_2"]
    assert [n.name for n in m.topological_order] == ["Relu_1", "Mul_2", "join"]
    assert m.producer("l").name == "Relu_1" and m.producer("x") is None and m.producer("w") is None
    assert [n.name for n in m.consumers("x")] == ["Relu_1", "Mul_2"]
    assert m.consumers("y") == ()
    assert m.inputs == ("x",) and m.outputs == ("y",)
    assert set(m.initializers) == {"w"} and m.initializer("w").tolist() == [1, 1, 1]
    assert dict(m.opset_imports) == {"": 17, "com.example": 2}
    assert m.values == {"x", "w", "l", "r", "y"}
    node = m.node("join")
    assert isinstance(node, Node) and node.inputs == ("l", "r") and node.op_type == "Add"
    with pytest.raises(InvalidArgument, match="'nope'"):
        m.producer("nope")
    with pytest.raises(InvalidArgument, match="'nope'"):
        m.node("nope")
    # synthetic names are stable across loads
    assert list(Model.load(diamond().SerializeToString()).nodes) == list(m.nodes)


def test_duplicate_and_colliding_node_names():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="n"),
        helper.make_node("Relu", ["a"], ["b"], name="n"),
        helper.make_node("Relu", ["b"], ["c"], name="Relu_3"),
        helper.make_node("Relu", ["c"], ["d"]),
    ]
    m = Model(tiny_model(nodes, [vi("x")], [vi("d")]))
    assert list(m.nodes) == ["n", "n#1", "Relu_3", "Relu_3#1"]


def test_optional_empty_input_is_not_dangling():
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")]
    hi = numpy_helper.from_array(np.array(1, np.float32), "hi")
    m = Model(tiny_model(nodes, [vi("x")], [vi("y")], [hi]))
    assert [n.name for n in m.consumers("hi")] == ["clip"]


def test_dangling_reference():
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    with pytest.raises(ArtifactError, match="node 'adder'.*'ghost'.*dangling"):
        Model(tiny_model(nodes, [vi("x")], [vi("y")]))
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    with pytest.raises(ArtifactError, match="graph output 'z'.*dangling"):
        Model(tiny_model(nodes, [vi("x")], [vi("z")]))


def test_cycle():
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Relu", ["x"], ["y"], name="fine"),
    ]
    with pytest.raises(ArtifactError, match="cycle.*'first'.*'second'") as info:
        Model(tiny_model(nodes, [vi("x")], [vi("y")]))
    assert "'fine'" not in str(info.value)
    selfloop = [helper.make_node("Add", ["x", "s"], ["s"], name="loop")]
    with pytest.raises(ArtifactError, match="cycle.*'loop'"):
        Model(tiny_model(selfloop, [vi("x")], [vi("s")]))


def test_duplicate_producers():
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="one"),
        helper.make_node("Neg", ["x"], ["y"], name="two"),
    ]
    with pytest.raises(ArtifactError, match="'y'.*two producers.*'one'.*'two'"):
        Model(tiny_model(nodes, [vi("x")], [vi("y")]))
    w = numpy_helper.from_array(np.ones(1, np.float32), "w")
    nodes = [helper.make_node("Relu", ["x"], ["w"], name="over")]
    with pytest.raises(ArtifactError, match="'w'.*'over'.*initializer"):
        Model(tiny_model(nodes, [vi("x")], [vi("w")], [w]))
    nodes = [helper.make_node("Relu", ["x"], ["x"], name="shadow")]
    with pytest.raises(ArtifactError, match="'x'.*'shadow'.*graph input"):
        Model(tiny_model(nodes, [vi("x")], [vi("x")]))


def test_subgraph_outer_references_order_and_dangling():
    then_g = helper.make_graph([helper.make_node("Identity", ["late"], ["t"])], "then", [], [vi("t")])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e")])
    nodes = [
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Relu", ["x"], ["late"], name="producer"),
        helper.make_node("Cast", ["x"], ["cond"], name="cast", to=TensorProto.BOOL),
    ]
    m = Model(tiny_model(nodes, [vi("x")], [vi("y")]))
    assert m.node("if").implicit_inputs == ("late", "x")
    order = [n.name for n in m.topological_order]
    assert order.index("producer") < order.index("if") and order.index("cast") < order.index("if")
    assert "if" in [n.name for n in m.consumers("late")]
    bad_g = helper.make_graph([helper.make_node("Identity", ["nowhere"], ["t"])], "bad", [], [vi("t")])
    nodes = [helper.make_node("If", ["x"], ["y"], name="if2", then_branch=bad_g, else_branch=else_g)]
    with pytest.raises(ArtifactError, match="node 'if2'.*'nowhere'.*dangling"):
        Model(tiny_model(nodes, [vi("x")], [vi("y")]))


def test_malformed_files(tmp_path):
    with pytest.raises(ArtifactError, match="cannot parse"):
        Model.load(b"\xff\xff\xff not a protobuf")
    with pytest.raises(ArtifactError, match="no such"):
        Model.load(tmp_path / "missing.onnx")


# -- attributes ------------------------------------------------------------------------


@pytest.fixture
def attr_model() -> Model:
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "body", [], [vi("o")])
    t = numpy_helper.from_array(np.arange(6, dtype=np.int64).reshape(2, 3), "tv")
    node = helper.make_node(
        "Custom",
        ["x"],
        ["y"],
        name="c",
        domain="com.example",
        f=1.5,
        i=-7,
        s="héllo",
        t=t,
        g=body,
        fs=[0.5, 2.0],
        is_=[1, 2, 3],
        ss=["a", "b"],
        ts=[t, t],
        gs=[body],
    )
    return Model(tiny_model([node], [vi("x")], [vi("y")]))


def test_attribute_getters(attr_model):
    m = attr_model
    assert m.attr_float("c", "f") == 1.5
    assert m.attr_int("c", "i") == -7
    assert m.attr_string("c", "s") == "héllo"
    assert m.attr_tensor("c", "t").tolist() == [[0, 1, 2], [3, 4, 5]]
    assert m.attr_graph("c", "g").name == "body"
    assert m.attr_floats("c", "fs") == (0.5, 2.0)
    assert m.attr_ints(m.node("c"), "is_") == (1, 2, 3)
    assert m.attr_strings("c", "ss") == ("a", "b")
    assert [a.tolist() for a in m.attr("c", "ts", "tensors")] == [[[0, 1, 2], [3, 4, 5]]] * 2
    assert [g.name for g in m.attr("c", "gs", "graphs")] == ["body"]
    assert m.attr_int("c", "absent", default=4) == 4
    assert m.attr("c", "absent", "graph", default=None) is None


@pytest.mark.parametrize(
    "getter, name, expected, actual",
    [
        ("attr_int", "f", "int", "float"),
        ("attr_float", "i", "float", "int"),
        ("attr_string", "is_", "string", "ints"),
        ("attr_ints", "s", "ints", "string"),
        ("attr_floats", "fs", None, None),
        ("attr_strings", "t", "strings", "tensor"),
        ("attr_tensor", "g", "tensor", "graph"),
        ("attr_graph", "gs", "graph", "graphs"),
    ],
)
def test_attribute_type_errors_name_everything(attr_model, getter, name, expected, actual):
    get = getattr(attr_model, getter)
    if expected is None:
        get("c", name)
        return
    with pytest.raises(ArtifactError) as info:
        get("c", name, default=0)  # a default covers absence, not a wrong type
    msg = str(info.value)
    assert "'c'" in msg and f"'{name}'" in msg and f"expected {expected}" in msg and f"found {actual}" in msg


def test_attribute_missing_and_bad_arguments(attr_model):
    with pytest.raises(ArtifactError, match="node 'c'.*no attribute 'axis'.*expected int"):
        attr_model.attr_int("c", "axis")
    with pytest.raises(InvalidArgument, match="'ghost'"):
        attr_model.attr_int("ghost", "i")
    with pytest.raises(InvalidArgument, match="kind='integer'"):
        attr_model.attr("c", "i", "integer")


def test_untyped_attribute_from_old_files_is_inferred():
    node = helper.make_node("Custom", ["x"], ["y"], name="old", axis=3)
    node.attribute[0].type = 0
    m = Model(tiny_model([node], [vi("x")], [vi("y")]))
    assert m.attr_int("old", "axis") == 3
    with pytest.raises(ArtifactError, match="expected float, found int"):
        m.attr_float("old", "axis")


# -- artifacts.open --------------------------------------------------------------------


def test_open_dispatches_to_onnx(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save_model(diamond(), str(path))
    m = artifacts.open(path)
    assert isinstance(m, Model) and m.path == str(path)
    plain = tmp_path / "model_without_suffix"
    plain.write_bytes(path.read_bytes())
    assert isinstance(artifacts.open(plain), Model)  # sniffed
    assert isinstance(artifacts.open(plain, format="onnx"), Model)
    assert isinstance(artifacts.open(path, load_external_data=False), Model)
    assert sniff(path.read_bytes()[:64], path.stat().st_size)
    assert not sniff(b"\x10\x00\x00\x00\x00\x00\x00\x00{}", 10)


# -- the onnx package's own models -------------------------------------------------------

_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
_SHIPPED = sorted(glob.glob(os.path.join(_DATA, "**", "*.onnx"), recursive=True))
if len(_SHIPPED) > 150:
    _SHIPPED = sorted(random.Random(7).sample(_SHIPPED, 150))


def test_onnx_ships_models():
    assert len(_SHIPPED) >= 20, _DATA


@pytest.mark.parametrize("path", _SHIPPED, ids=[os.path.relpath(p, _DATA) for p in _SHIPPED])
def test_shipped_model(path):
    m = Model.load(path)
    ref = onnx.load(path)
    order = m.topological_order
    assert sorted(n.name for n in order) == sorted(m.nodes) and len(order) == len(ref.graph.node)
    position = {n.name: i for i, n in enumerate(order)}
    for node in order:
        for value in (*node.inputs, *node.implicit_inputs):
            if value:
                producer = m.producer(value)
                assert producer is None or position[producer.name] < position[node.name]
                assert node in m.consumers(value)
        for value in node.outputs:
            if value:
                assert m.producer(value) is node
    for value in m.values:
        for consumer in m.consumers(value):
            assert value in consumer.inputs or value in consumer.implicit_inputs
    assert set(m.initializers) == {t.name for t in ref.graph.initializer}
    for t in ref.graph.initializer:
        assert_same(m.initializer(t.name), numpy_helper.to_array(t))
    assert dict(m.opset_imports) == {("" if o.domain == "ai.onnx" else o.domain): o.version for o in ref.opset_import}
