"""safetensors FileView: header checks, zero-copy views, page advice, device loading,
``hrx_core.artifacts.open`` dispatch, and a fuzzer that finds nothing but ArtifactError."""

from __future__ import annotations

import gc
import json
import mmap
import struct
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hrx_core as hrx
from hrx_core import artifacts
from hrx_core.artifacts.safetensors import DTYPES, MAX_HEADER_BYTES, FileView
from hrx_core.errors import ArtifactError, BudgetExceeded, InvalidArgument, Unsupported
from hrx_core.hookspecs import hookimpl
from hrx_core.plugins import plugin_manager

MODES = ["mapped", "owned"]
NP_NAMES = {v[1]: k for k, v in DTYPES.items() if v[1] is not None}


# -- a tiny writer following the format ----------------------------------------------


def encode(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None, *, align: int = 8) -> bytes:
    """safetensors bytes for ``tensors`` (packed in order, header padded with spaces)."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs, pos = [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": NP_NAMES[arr.dtype], "shape": list(arr.shape), "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    return encode_header(header, align=align) + b"".join(blobs)


def encode_header(header: Any, *, align: int = 8) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % align)
    return struct.pack("<Q", len(text)) + text


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def sample() -> dict[str, np.ndarray]:
    return {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.array([1.5, -2.25], dtype=ml_dtypes.bfloat16),
        "i": np.arange(5, dtype=np.int64),
        "m": np.array([True, False, True]),
        "f8": np.array([0.5, 1.0, -2.0], dtype=ml_dtypes.float8_e4m3fn),
        "s": np.array(7, dtype=np.uint16),
        "e": np.zeros((0, 3), dtype=np.float16),
    }


@pytest.fixture
def sample_file(tmp_path: Path) -> Path:
    return write(tmp_path / "m.safetensors", encode(sample(), {"format": "np"}))


# -- reading ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_round_trip_own_writer(sample_file: Path, mode: str) -> None:
    with FileView.open(sample_file, mode=mode) as fv:
        assert fv.names() == list(sample())
        assert dict(fv.metadata) == {"format": "np"}
        for name, ref in sample().items():
            arr = fv.numpy(name)
            assert arr.dtype == ref.dtype and arr.shape == ref.shape
            np.testing.assert_array_equal(arr, ref)
            assert bytes(fv.raw(name)) == ref.tobytes()
            info = fv.info(name)
            assert info.nbytes == ref.nbytes and info.shape == ref.shape
        assert fv.numpy("w").flags.writeable == (mode == "owned")
        assert fv.raw("w").readonly == (mode == "mapped")
    assert fv.closed
    with pytest.raises(InvalidArgument, match="closed"):
        fv.numpy("w")


def test_numpy_is_zero_copy(sample_file: Path) -> None:
    with FileView.open(sample_file, mode="owned") as fv:
        a = fv.numpy("w")
        a[0, 0] = 42.0
        assert fv.numpy("w")[0, 0] == 42.0


def test_close_with_live_views_is_safe(sample_file: Path) -> None:
    fv = FileView.open(sample_file)
    arr = fv.numpy("w")
    fv.close()  # the mapping stays alive until the view goes
    assert arr[2, 3] == 11.0
    del arr
    gc.collect()


def test_unknown_tensor_and_bad_mode(sample_file: Path) -> None:
    with FileView.open(sample_file) as fv, pytest.raises(InvalidArgument, match="'nope'"):
        fv.info("nope")
    with pytest.raises(InvalidArgument, match="mode"):
        FileView.open(sample_file, mode="lazy")  # type: ignore[arg-type]


def test_missing_file_is_artifact_error(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="cannot open"):
        FileView.open(tmp_path / "absent.safetensors")


def test_packed_dtype_raw_only(tmp_path: Path) -> None:
    header = {"q": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]}}
    path = write(tmp_path / "p.safetensors", encode_header(header) + b"\x12\x34\x56")
    with FileView.open(path) as fv:
        assert bytes(fv.raw("q")) == b"\x12\x34\x56"
        with pytest.raises(Unsupported, match="packed"):
            fv.numpy("q")


def test_advise(sample_file: Path) -> None:
    with FileView.open(sample_file) as fv:
        expected = hasattr(mmap.mmap, "madvise") and hasattr(mmap, "MADV_WILLNEED")
        for advice in ("willneed", "sequential", "dontneed"):
            assert fv.advise(None, advice) is (expected and hasattr(mmap, f"MADV_{advice.upper()}"))
        assert fv.advise(["w"], "willneed") is expected
        np.testing.assert_array_equal(fv.numpy("w"), sample()["w"])  # dontneed on a file mapping keeps data
        with pytest.raises(InvalidArgument, match="advice"):
            fv.advise(None, "random")  # type: ignore[arg-type]
    with FileView.open(sample_file, mode="owned") as fv:
        assert fv.advise(None, "willneed") is False


def test_advise_calls_madvise_page_aligned(sample_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(mmap.mmap, "madvise"):
        pytest.skip("no madvise on this platform")
    calls: list[tuple[int, int, int]] = []

    class Spy:
        def __init__(self, real: mmap.mmap) -> None:
            self.real = real

        def madvise(self, flag: int, start: int, length: int) -> None:
            calls.append((flag, start, length))
            self.real.madvise(flag, start, length)

    with FileView.open(sample_file) as fv:
        real = fv._data
        assert isinstance(real, mmap.mmap)
        monkeypatch.setattr(fv, "_data", Spy(real))
        assert fv.advise(["w", "e"], "willneed") is True  # "e" is empty: no call
        info = fv.info("w")
        monkeypatch.undo()
    assert calls == [(mmap.MADV_WILLNEED, 0, info.end)]


# -- the safetensors library's own files ------------------------------------------


def test_round_trip_safetensors_numpy(tmp_path: Path) -> None:
    stn = pytest.importorskip("safetensors.numpy")
    ref = {k: v for k, v in sample().items() if v.dtype in (np.float32, np.int64, np.bool_, np.uint16, np.float16)}
    ref["c"] = np.array([1 + 2j, 3 - 4j], dtype=np.complex64)
    path = tmp_path / "lib.safetensors"
    stn.save_file(ref, str(path), metadata={"k": "v"})
    with FileView.open(path) as fv:
        assert sorted(fv.names()) == sorted(ref) and dict(fv.metadata) == {"k": "v"}
        for name, arr in ref.items():
            got = fv.numpy(name)
            assert got.dtype == arr.dtype and got.shape == arr.shape
            np.testing.assert_array_equal(got, arr)
    # And the library reads what FileView accepts from our writer.
    ours = write(tmp_path / "ours.safetensors", encode(ref))
    back = stn.load_file(str(ours))
    for name, arr in ref.items():
        np.testing.assert_array_equal(back[name], arr)


def test_round_trip_safetensors_bf16_and_f8(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors")
    ref = {
        "b": np.array([[1.0, -0.5], [3.25, 1e30]], dtype=ml_dtypes.bfloat16),
        "f": np.array([0.5, -448.0], dtype=ml_dtypes.float8_e4m3fn),
        "g": np.array([0.25, 57344.0], dtype=ml_dtypes.float8_e5m2),
    }
    ref["z"] = np.array([1.0, -2.0], dtype=ml_dtypes.float8_e4m3fnuz)
    ref["q"] = np.array([0.5, 4.0], dtype=ml_dtypes.float8_e5m2fnuz)
    path = tmp_path / "bf16.safetensors"
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8: numpy dtype names and pointers
        specs = {
            k: safetensors.TensorSpec(
                dtype=v.dtype.name, shape=list(v.shape), data_ptr=v.ctypes.data, data_len=v.nbytes
            )
            for k, v in ref.items()
        }
        safetensors.serialize_file(specs, str(path))
    else:
        payload = {k: {"dtype": NP_NAMES[v.dtype], "shape": list(v.shape), "data": v.tobytes()} for k, v in ref.items()}
        safetensors.serialize_file(payload, str(path))
    with FileView.open(path) as fv:
        for name, arr in ref.items():
            got = fv.numpy(name)
            assert got.dtype == arr.dtype
            assert got.tobytes() == arr.tobytes()


def test_torch_writer_round_trip(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    ref = {"w": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "x": torch.ones(4, dtype=torch.float32)}
    path = tmp_path / "t.safetensors"
    st_torch.save_file(ref, str(path))
    with FileView.open(path) as fv:
        for name, t in ref.items():
            assert fv.numpy(name).tobytes() == t.contiguous().view(torch.uint8).numpy().tobytes()


# -- validation rules: one hand-broken file each ------------------------------------


def entry(dtype: Any = "F32", shape: Any = (2,), offsets: Any = (0, 8)) -> dict[str, Any]:
    return {
        "dtype": dtype,
        "shape": list(shape) if isinstance(shape, tuple) else shape,
        "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets,
    }


BROKEN: list[tuple[str, bytes, str | None]] = [
    ("file-size", b"\x01\x02\x03", None),
    ("header-bound", struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}", None),
    ("header-length", struct.pack("<Q", 100) + b"{}", None),
    ("json", struct.pack("<Q", 4) + b"{x:1", None),
    ("json", struct.pack("<Q", 3) + b"{\xff}", None),
    ("json", struct.pack("<Q", 20) + b'{"a":1,"a":2}       ', None),  # duplicate key
    ("header-object", encode_header([1, 2]), None),
    ("metadata", encode_header({"__metadata__": {"k": 1}}), None),
    ("metadata", encode_header({"__metadata__": ["k"]}), None),
    ("entry", encode_header({"t": {"dtype": "F32", "shape": [1]}}) + b"\0" * 4, "t"),
    ("entry", encode_header({"t": 5}), "t"),
    ("dtype", encode_header({"t": entry(dtype="F128")}) + b"\0" * 8, "t"),
    ("dtype", encode_header({"t": entry(dtype=3)}) + b"\0" * 8, "t"),
    ("shape", encode_header({"t": entry(shape=(-2,))}) + b"\0" * 8, "t"),
    ("shape", encode_header({"t": entry(shape=[2.0])}) + b"\0" * 8, "t"),
    ("shape", encode_header({"t": entry(shape=[True, 2])}) + b"\0" * 8, "t"),
    ("shape", encode_header({"t": entry(shape="2")}) + b"\0" * 8, "t"),
    ("offsets", encode_header({"t": entry(offsets=(0,))}) + b"\0" * 8, "t"),
    ("offsets", encode_header({"t": entry(offsets=(8, 0))}) + b"\0" * 8, "t"),
    ("offsets", encode_header({"t": entry(offsets=(-1, 7))}) + b"\0" * 8, "t"),
    ("size", encode_header({"t": entry(shape=(3,))}) + b"\0" * 8, "t"),
    ("size", encode_header({"t": {"dtype": "F4", "shape": [3], "data_offsets": [0, 1]}}) + b"\0", "t"),
    ("bounds", encode_header({"t": entry()}) + b"\0" * 4, "t"),
    ("overlap", encode_header({"a": entry(), "b": entry(offsets=(4, 12), shape=(2,))}) + b"\0" * 12, "b"),
    ("gap", encode_header({"a": entry(), "b": entry(offsets=(12, 20))}) + b"\0" * 20, "b"),
    ("gap", encode_header({"a": entry(offsets=(4, 12))}) + b"\0" * 12, "a"),
    ("coverage", encode_header({"a": entry()}) + b"\0" * 12, "a"),
    ("coverage", encode_header({}) + b"\0", None),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("rule", "data", "tensor"), BROKEN, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(BROKEN)])
def test_each_rule(tmp_path: Path, mode: str, rule: str, data: bytes, tensor: str | None) -> None:
    path = write(tmp_path / "bad.safetensors", data)
    with pytest.raises(ArtifactError) as err:
        FileView.open(path, mode=mode)
    msg = str(err.value)
    assert str(path) in msg and f"rule '{rule}'" in msg
    if tensor is not None:
        assert f"tensor {tensor!r}" in msg


def test_empty_file_with_empty_header_is_valid(tmp_path: Path) -> None:
    with FileView.open(write(tmp_path / "e.safetensors", encode_header({}))) as fv:
        assert fv.names() == [] and dict(fv.metadata) == {}


# -- fuzzing: nothing but ArtifactError ------------------------------------------------

# Hypothesis draws only a few numbers per case (a seed plus the mutation), and a
# seeded numpy generator builds the file: 5,000 cases must run in seconds.
FUZZ_DTYPES = [np.float32, np.float16, np.int8, np.uint64, np.bool_, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2]
JSON_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**64,
    2**70,
    1.5,
    "",
    "F32",
    "BF16",
    "F4",
    [],
    [0],
    [-1, 3],
    [0, 2**66],
    [3, 1],
    [1.5, 2],
    [[1]],
    {},
    {"k": 1},
    {"k": "v"},
    "x" * 3,
]


def base_file(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    names = rng.permutation(["a", "b", "w.0", "\u00e9", "__x"])[: rng.integers(0, 5)]
    tensors = {str(n): np.arange(rng.integers(0, 7)).astype(FUZZ_DTYPES[rng.integers(len(FUZZ_DTYPES))]) for n in names}
    meta = [None, {}, {"k": "v"}][rng.integers(3)]
    return encode(tensors, meta, align=int(rng.choice([1, 8])))


@st.composite
def mutated_files(draw: st.DrawFn) -> bytes:
    data = bytearray(base_file(draw(st.integers(0, 2**32 - 1))))
    (n,) = struct.unpack_from("<Q", data)
    kind = draw(st.sampled_from(["truncate", "flip", "field", "field", "length", "append", "none"]))
    r = draw(st.integers(0, 2**64 - 1))
    if kind == "truncate":
        return bytes(data[: r % (len(data) + 1)])
    if kind == "flip":
        rng = np.random.default_rng(r)
        for _ in range(int(rng.integers(1, 5))):
            data[int(rng.integers(0, 8 + n))] ^= 1 << int(rng.integers(0, 8))
        return bytes(data)
    if kind == "length":
        new = [r, n - 1 - r % 8, n + 1 + r % 8, MAX_HEADER_BYTES + 1, 2**64 - 1][r % 5]
        struct.pack_into("<Q", data, 0, max(new, 0))
        return bytes(data)
    if kind == "append":
        return bytes(data) + r.to_bytes(8, "little")[: 1 + r % 8]
    if kind == "none":
        return bytes(data)
    header = json.loads(data[8 : 8 + n])
    names = [k for k in header if k != "__metadata__"] + ["__metadata__", "new"]
    target = names[r % len(names)]
    field = ["dtype", "shape", "data_offsets", "*"][(r >> 8) % 4]
    value = draw(st.sampled_from(JSON_VALUES) | st.integers() | st.lists(st.integers(-2, 40), max_size=3))
    if field == "*" or target == "__metadata__" or not isinstance(header.get(target), dict):
        header[target] = value
    else:
        header[target][field] = value
    return encode_header(header) + bytes(data[8 + n :])


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(
    max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=mutated_files(), mode=st.sampled_from(MODES))
def test_fuzz_only_artifact_error(fuzz_dir: Path, data: bytes, mode: str) -> None:
    path = write(fuzz_dir / "f.safetensors", data)
    try:
        fv = FileView.open(path, mode=mode)
    except ArtifactError:
        return
    with fv:  # accepted files are fully usable
        total = 0
        for name in fv.names():
            info = fv.info(name)
            total += info.nbytes
            assert len(fv.raw(name)) == info.nbytes
            if info.numpy_dtype is not None:
                assert fv.numpy(name).nbytes == info.nbytes
        assert fv.names() == [] or total == len(data) - 8 - struct.unpack_from("<Q", data)[0]


@pytest.mark.parametrize("shape", [[0, 2**66], [0, 2**63], [1] * 33])
def test_shapes_numpy_cannot_represent_are_refused(tmp_path: Path, shape: list[int]) -> None:
    """Found by the fuzzer: a zero dimension beside one beyond int64 passes the byte
    count (0 == 0) but numpy cannot reshape to it."""
    header = {"a": {"dtype": "I8", "shape": shape, "data_offsets": [0, 1 if 0 not in shape else 0]}}
    path = write(tmp_path / "f.safetensors", encode_header(header) + (b"" if 0 in shape else b"\0"))
    with pytest.raises(ArtifactError, match="shape"):
        FileView.open(path)


# -- device loading -------------------------------------------------------------------


@pytest.fixture
def host_stream() -> Any:
    dev = hrx.device("host")
    return dev, dev.stream()


@pytest.mark.parametrize("mode", MODES)
def test_load_all(sample_file: Path, host_stream: Any, mode: str) -> None:
    _, s = host_stream
    with FileView.open(sample_file, mode=mode) as fv:
        bufs = fv.load(s)
        assert list(bufs) == fv.names()
        for name, ref in sample().items():
            if ref.nbytes:
                got = s.download(bufs[name])
                assert got.tobytes() == ref.tobytes()
        one = fv.load_tensor(s, "b")
        assert s.download(one).view(ml_dtypes.bfloat16).tolist() == sample()["b"].tolist()


@pytest.mark.parametrize("mode", MODES)
def test_load_subset_uploads_only_its_ranges(
    sample_file: Path, host_stream: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Mapped files are read with pread (Stream.upload_file_ranges) over exactly the selected
    byte ranges; owned files upload views of their memory, not copies."""
    _, s = host_stream
    ranges: list[tuple[int, int]] = []
    real_upload, real_upload_file = s.upload, s.upload_file_ranges

    def spy(dst: Any, data: Any) -> Any:
        assert isinstance(data, np.ndarray) and not data.flags.owndata  # a view of the file, not a copy
        base = fv._data
        start = data.__array_interface__["data"][0] - np.frombuffer(base, np.uint8).__array_interface__["data"][0]
        ranges.append((start, start + data.nbytes))
        return real_upload(dst, data)

    def spy_file(file: Any, items: Any) -> Any:
        assert isinstance(file, int)
        for _, offset, nbytes in items:
            ranges.append((offset, offset + nbytes))
        return real_upload_file(file, items)

    monkeypatch.setattr(s, "upload", spy)
    monkeypatch.setattr(s, "upload_file_ranges", spy_file)
    with FileView.open(sample_file, mode=mode) as fv:
        bufs = fv.load(s, ["i", "w"])
        assert set(bufs) == {"i", "w"}
        assert sorted(ranges) == sorted((fv.info(n).begin, fv.info(n).end) for n in ("i", "w"))
        np.testing.assert_array_equal(s.download(bufs["i"]).view(np.int64), sample()["i"])
        for b in bufs.values():
            b.close()


def test_load_charges_budget_before_allocating(sample_file: Path, host_stream: Any) -> None:
    dev, s = host_stream
    with s.allocate(16) as warm:  # the stream's staging ring exists before any budget is set
        s.upload_file(warm, sample_file, 0, 16)  # (file reads always stage)
        s.synchronize()
    gc.collect()
    before = dev.stats.live_bytes
    with FileView.open(sample_file) as fv:
        need = sum(max(fv.info(n).nbytes, 1) for n in fv.names())
        budget = hrx.MemoryBudget(need - 1)
        with pytest.raises(BudgetExceeded):
            fv.load(s, budget=budget)
        s.synchronize()
        gc.collect()
        # every buffer is charged before anything is read: nothing stays allocated
        assert dev.stats.live_bytes == before
        assert budget.used_bytes == 0
        # The stream's budget is the default, and is charged for what stays loaded.
        s.with_memory_budget(hrx.MemoryBudget(need))
        bufs = fv.load(s)
        assert s.memory_budget is not None and s.memory_budget.used_bytes == need
        for b in bufs.values():
            b.close()
        s.synchronize()
        s.with_memory_budget(None)


def test_load_unknown_name_allocates_nothing(sample_file: Path, host_stream: Any) -> None:
    dev, s = host_stream
    before = dev.stats.allocations
    with FileView.open(sample_file) as fv, pytest.raises(InvalidArgument, match="'zzz'"):
        fv.load(s, ["w", "zzz"])
    assert dev.stats.allocations == before


# -- hrx_core.artifacts.open ------------------------------------------------------------


def test_open_by_suffix_and_sniffing(sample_file: Path, tmp_path: Path) -> None:
    with artifacts.open(sample_file) as fv:
        assert isinstance(fv, FileView) and fv.mode == "mapped"
    renamed = write(tmp_path / "weights.bin", sample_file.read_bytes())
    with artifacts.open(renamed, mode="owned") as fv:
        assert isinstance(fv, FileView) and fv.mode == "owned"
    with artifacts.open(renamed, format="safetensors") as fv:
        assert fv.names() == list(sample())


def test_open_unknown_format(tmp_path: Path) -> None:
    junk = write(tmp_path / "notes.txt", b"hello world, not a model")
    with pytest.raises(ArtifactError, match="notes.txt.*unknown artifact format"):
        artifacts.open(junk)
    with pytest.raises(ArtifactError, match="no loader for format 'gguf'"):
        artifacts.open(junk, format="gguf")
    with pytest.raises(ArtifactError, match="cannot open"):
        artifacts.open(tmp_path / "absent.bin")


def test_open_uses_hook_loaders(tmp_path: Path, sample_file: Path) -> None:
    opened: list[str] = []

    class Toy:
        format = "toy"
        suffixes = (".toy",)

        def sniff(self, head: bytes, file_size: int) -> bool:
            return head.startswith(b"TOY!")

        def open(self, path: str, **options: Any) -> Any:
            opened.append(path)
            return ("toy", options)

    class Plugin:
        @hookimpl
        def hrx_artifact_loaders(self) -> list[Any]:
            return [Toy()]

    pm = plugin_manager()
    plugin = Plugin()
    pm.register(plugin, name="test-toy-loader")
    try:
        assert artifacts.open(write(tmp_path / "a.toy", b"x"), k=1) == ("toy", {"k": 1})
        assert artifacts.open(write(tmp_path / "b.dat", b"TOY!...")) == ("toy", {})
        with artifacts.open(sample_file) as fv:  # the built-in still serves safetensors
            assert isinstance(fv, FileView)
        assert [type(x).__name__ for x in artifacts.loaders()][-1] == "SafetensorsLoader"
    finally:
        pm.unregister(plugin)
    assert len(opened) == 2
