"""Hostile files: special files (devices, FIFOs, directories), symbolic links out of a
model directory, truncation after mapping, fuzzed headers. Only regular files are
read, sizes are checked before reading, and every refusal is an HRXError."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hrx_core as hrx
from hrx_core import artifacts
from hrx_core.artifacts.safetensors import FileView

from .conftest import ATTACK, bounded, join_all
from .tally import tried

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

from hrx_core.artifacts.onnx import Model  # noqa: E402


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.fixture
def zero_link(tmp_path):
    link = tmp_path / "zero.safetensors"
    link.symlink_to("/dev/zero")
    return link


def _special_paths(tmp_path, fifo, zero_link):
    return {"/dev/zero": "/dev/zero", "link to /dev/zero": zero_link, "FIFO": fifo, "directory": tmp_path}


def test_fileview_reads_only_regular_files(tmp_path, fifo, zero_link):
    # /dev/zero was read until memory ran out; a FIFO hung the open
    for what, path in _special_paths(tmp_path, fifo, zero_link).items():
        for mode in ("mapped", "owned"):
            tried("hostile-files", "FileView.open")
            with pytest.raises(hrx.ArtifactError, match="not a regular file|cannot open"):
                bounded(lambda path=path, mode=mode: FileView.open(path, mode=mode))
        tried("hostile-files", "artifacts.open")
        with pytest.raises(hrx.ArtifactError, match="not a regular file|cannot open"):
            bounded(lambda path=path: artifacts.open(path))


def test_upload_file_reads_only_regular_files(tmp_path, fifo, zero_link):
    dev = hrx.open_device("host")
    s = dev.stream()
    buf = dev.allocate(64)
    for what, path in _special_paths(tmp_path, fifo, zero_link).items():
        tried("hostile-files", "Stream.upload_file")
        with pytest.raises(hrx.InvalidArgument, match="regular file|cannot open"):
            bounded(lambda path=path: s.upload_file(buf, path, 0, 64))
    rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        tried("hostile-files", "Stream.upload_file(fd)")
        with pytest.raises(hrx.InvalidArgument, match="FIFO"):
            s.upload_file(buf, rd, 0, 8)
    finally:
        os.close(rd)
    for bad in (-1, 2**40, 2**100, 987654, True, 1.5, None, object()):
        tried("bad-arguments", "Stream.upload_file(file=)")
        with pytest.raises(hrx.InvalidArgument, match="file"):
            s.upload_file(buf, bad, 0, 8)
    tried("bad-arguments", "Stream.upload_file(file=)")
    with pytest.raises(hrx.InvalidArgument, match="NUL"):
        s.upload_file(buf, "a\x00b", 0, 8)


def _external_model(directory, location="weights.bin"):
    w = np.arange(32, dtype=np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [32])],
        [numpy_helper.from_array(w, "w")]))
    path = directory / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path, w


@pytest.mark.parametrize("eager", [False, True])
def test_onnx_external_data_cannot_follow_links_out_of_the_model_directory(tmp_path, eager):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.bin"
    secret.write_bytes(np.full(32, 42, np.float32).tobytes())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    path, w = _external_model(model_dir)
    # 1: the data file itself is a link out of the directory
    os.remove(model_dir / "weights.bin")
    (model_dir / "weights.bin").symlink_to(secret)
    tried("hostile-files", "onnx.Model.load/initializer")
    with pytest.raises(hrx.ArtifactError, match="outside the model directory"):
        Model.load(path, load_external_data=eager).initializer("w")
    # 2: a linked directory on the way
    os.remove(model_dir / "weights.bin")
    (outside / "weights.bin").write_bytes(w.tobytes())
    other = tmp_path / "model2"
    (other / "sub").mkdir(parents=True)
    path2, _ = _external_model(other, location="sub/weights.bin")
    os.remove(other / "sub" / "weights.bin")
    os.rmdir(other / "sub")
    (other / "sub").symlink_to(outside)
    tried("hostile-files", "onnx.Model.load/initializer")
    with pytest.raises(hrx.ArtifactError, match="outside the model directory"):
        Model.load(path2, load_external_data=eager).initializer("w")
    # 3: special files as external data
    for target in ("/dev/zero",):
        os.remove(other / "sub")
        (other / "sub").mkdir()
        (other / "sub" / "weights.bin").symlink_to(target)
        tried("hostile-files", "onnx.Model.load/initializer")
        with pytest.raises(hrx.ArtifactError, match="outside the model directory|not a regular file"):
            Model.load(path2, load_external_data=eager).initializer("w")
        os.remove(other / "sub" / "weights.bin")
    os.mkfifo(other / "sub" / "weights.bin")
    tried("hostile-files", "onnx.Model.load/initializer (FIFO)")
    with pytest.raises(hrx.ArtifactError, match="FIFO"):
        bounded(lambda: Model.load(path2, load_external_data=eager).initializer("w"))
    # a link that stays inside the directory is fine
    os.remove(other / "sub" / "weights.bin")
    (other / "sub" / "real.bin").write_bytes(w.tobytes())
    (other / "sub" / "weights.bin").symlink_to(other / "sub" / "real.bin")
    np.testing.assert_array_equal(Model.load(path2, load_external_data=eager).initializer("w"), w)


def test_onnx_model_file_must_be_regular(tmp_path, fifo):
    for path in ("/dev/zero", fifo, tmp_path):
        tried("hostile-files", "onnx.Model.load")
        with pytest.raises(hrx.ArtifactError):
            bounded(lambda path=path: Model.load(path))


def test_gpt2_config_is_read_safely(tmp_path, fifo):
    gpt2 = pytest.importorskip("hrx_models.gpt2")
    d = tmp_path / "ckpt"
    d.mkdir()
    cfg = d / "config.json"
    cases = {
        "link to /dev/zero": lambda: cfg.symlink_to("/dev/zero"),
        "FIFO": lambda: os.mkfifo(cfg),
        "directory": lambda: cfg.mkdir(),
        "non-UTF-8": lambda: cfg.write_bytes(b'{"n_embd": "\xff\xfe"}'),
        "deeply nested": lambda: cfg.write_text("[" * 100_000 + "]" * 100_000),
        "huge": lambda: cfg.write_bytes(b" " * (2 << 20) + b"{}"),
        "not an object": lambda: cfg.write_text("[1, 2]"),
        "wrong types": lambda: cfg.write_text(json.dumps({"n_embd": "128", "n_layer": 2, "n_head": 4, "vocab_size": 5})),
    }
    for what, make in cases.items():
        if cfg.is_symlink() or cfg.is_file() or cfg.exists() and not cfg.is_dir():
            cfg.unlink()
        elif cfg.is_dir():
            cfg.rmdir()
        make()
        tried("hostile-files", "Gpt2Config.load")
        with pytest.raises(gpt2.ConfigError):
            bounded(lambda: gpt2.Gpt2Config.load(d))


def test_truncated_mapped_file_is_refused_not_a_sigbus(tmp_path):
    # a mapped view of a file truncated afterwards died with SIGBUS; the check runs in
    # a child process so that a regression kills the child, not the test run
    script = textwrap.dedent(f"""
        import numpy as np, os
        from safetensors.numpy import save_file
        from hrx_core.artifacts.safetensors import FileView
        from hrx_core.errors import ArtifactError
        p = {str(tmp_path / "t.safetensors")!r}
        save_file({{"a": np.ones(4096, np.float32), "b": np.ones(1 << 20, np.float32)}}, p)
        fv = FileView.open(p)
        os.truncate(p, 4096)
        for call in (lambda: fv.numpy("b"), lambda: fv.raw("b"), lambda: fv.numpy("b", copy=True)):
            try:
                call().sum() if hasattr(call(), "sum") else bytes(call())
                print("NO ERROR")
            except ArtifactError as exc:
                assert "truncated" in str(exc), exc
        print("ok")
    """)
    tried("hostile-files", "FileView.numpy (truncated)", 3)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.strip() == "ok"


# -- fuzzed headers ------------------------------------------------------------------------

def _safetensors_bytes(header: object, data: bytes = b"") -> bytes:
    body = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(body)) + body + data


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
ENTRY = st.fixed_dictionaries({
    "dtype": st.sampled_from(["F32", "BF16", "U8", "F4", "X", 3]),
    "shape": st.lists(st.integers(-2, 2**40), max_size=3) | JSON,
    "data_offsets": st.lists(st.integers(-5, 2**40), min_size=0, max_size=3) | JSON,
})


@settings(ATTACK, max_examples=200)
@given(header=st.one_of(JSON, st.dictionaries(st.text(max_size=6), ENTRY, max_size=3), st.binary(max_size=64)),
       data=st.binary(max_size=64), cut=st.integers(0, 200))
def test_fuzzed_safetensors_headers_raise_artifact_errors(tmp_path_factory, header, data, cut):
    blob = _safetensors_bytes(header, data)
    if cut < len(blob) and cut % 3 == 0:
        blob = blob[:cut]  # truncated files too
    path = tmp_path_factory.mktemp("fuzz") / "f.safetensors"
    path.write_bytes(blob)
    for mode in ("mapped", "owned"):
        tried("hostile-files", "FileView.open (fuzzed)")
        try:
            with FileView.open(path, mode=mode) as fv:
                for name in fv.names():
                    try:
                        fv.numpy(name)
                    except hrx.Unsupported:
                        fv.raw(name)
        except hrx.ArtifactError:
            pass


@settings(ATTACK, max_examples=200)
@given(blob=st.binary(max_size=256))
def test_fuzzed_onnx_bytes_raise_artifact_errors(blob):
    tried("hostile-files", "onnx.Model.load (fuzzed)")
    try:
        m = Model.load(blob)
        for name in list(m.initializers)[:4]:
            m.initializer(name)
    except hrx.ArtifactError:
        pass


@settings(ATTACK, max_examples=200)
@given(config=JSON)
def test_fuzzed_gpt2_configs_raise_typed_errors(tmp_path_factory, config):
    gpt2 = pytest.importorskip("hrx_models.gpt2")
    d = tmp_path_factory.mktemp("cfg")
    (d / "config.json").write_text(json.dumps(config))
    tried("hostile-files", "Gpt2Config.load (fuzzed)")
    try:
        gpt2.Gpt2Config.load(d).check_runnable()
    except (gpt2.ConfigError, hrx.Unsupported):
        pass
