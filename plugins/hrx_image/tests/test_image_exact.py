"""Exactness across engines: the CUDA sources against the numpy host kernels.

* on a GPU machine (``-m gpu``): each operation on the host and cuda engines,
  compared byte for byte;
* everywhere with a C++ compiler: every dispatch ImageOps makes on the host engine
  with the numpy kernels is replayed through the CUDA source compiled for the CPU
  (hrx_image.native, the host engine's fast path) and compared byte for byte;
* with nvcc: the CUDA sources compile, and contain no fused multiply-add.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from hrx_image import ImageOps, native
from hrx_image import kernels as K

RNG = np.random.default_rng(77)
M1 = [[0.93, -0.21, 3.7], [0.25, 1.07, -2.2]]
M3 = np.array([[[1.31, 0.4, -5.0], [-0.3, 0.77, 4.5]], [[0.5, 0.0, 1.25], [0.0, 0.5, 0.75]], [[1, 0, 0], [0, 1, 0]]])


def u8(shape):
    return RNG.integers(0, 256, shape, dtype=np.uint8)


def workload(ops: ImageOps) -> list[np.ndarray]:
    """Every operation in its variants; returns the downloaded results."""
    frames = u8((3, 37, 61, 3))
    rgba = u8((2, 19, 23, 4))
    f32 = (RNG.random((2, 17, 29, 3), dtype=np.float32) * 300 - 20).astype(np.float32)
    layer = u8((9, 14, 4))
    t, ta, tf, tl = ops.upload(frames), ops.upload(rgba), ops.upload(f32), ops.upload(layer)
    out = []
    for size in ((16, 24), (53, 97), (37, 61), (5, 3)):
        out.append(ops.resize(t, size))
        out.append(ops.resize(t, size, antialias=True))
        out.append(ops.resize(t, size, mode="nearest"))
        out.append(ops.resize(tf, size))
        out.append(ops.resize(tf, size, antialias=True))
        out.append(ops.resize(ta, size, antialias=True))
    for m in (M1, M3, [[2.5, 0.3, -40], [-0.2, 3.1, -20]]):
        out.append(ops.affine(t, m))
        out.append(ops.affine(t, m, (40, 50), out_dtype="f32"))
    out.append(ops.affine(tf, M1, (20, 20)))
    out.append(ops.affine(tf, M1, out_dtype="u8"))
    out.append(ops.affine(ta, [[0.7, 0.1, 1.5], [-0.1, 0.8, 2.5]]))
    for pre in (False, True):
        for off in ((-4, -3), (50, 30), (10, 5)):
            out.append(ops.composite(t, tl, off, premultiplied=pre))
            out.append(ops.composite(ta, tl, off, premultiplied=pre))
    for dt in ("f32", "bf16"):
        out.append(ops.normalize(t, "imagenet", dtype=dt))
        out.append(ops.normalize(ta, (0.1, 0.2, 0.3, 0.4), (0.3, 0.2, 0.1, 0.5), dtype=dt, channels=(3, 2, 1, 0)))
        out.append(ops.normalize(t, "clip", dtype=dt, patch_size=8, pad="zero"))
    chw = ops.normalize(t, "siglip")
    out.append(ops.patchify(chw, 6, pad="zero"))
    out.append(ops.patchify(ops.upload(u8((2, 3, 12, 18))), 6))
    out.append(ops.patchify(ops.normalize(t, "siglip", dtype="bf16"), 4, pad="zero"))
    return [o.numpy() for o in out]


@pytest.mark.gpu
def test_host_and_cuda_agree_byte_for_byte(host_dev, cuda_dev):
    host, cuda = host_dev, cuda_dev
    state = RNG.bit_generator.state
    a = workload(ImageOps(host))
    RNG.bit_generator.state = state
    b = workload(ImageOps(cuda))
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, i
        assert x.tobytes() == y.tobytes(), f"result {i} ({x.dtype} {list(x.shape)}) differs"


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    if native.compiler() is None:
        pytest.skip("no C++ compiler to run the CUDA sources on the CPU")
    return native.build(K._SOURCES, tmp_path_factory.mktemp("cuda_on_cpu"))


@pytest.fixture()
def numpy_kernels(monkeypatch):
    monkeypatch.setattr(K, "USE_NATIVE", False)


@pytest.mark.parametrize("threads", [1, 3])
def test_cuda_sources_on_cpu_match_numpy_kernels(emulated, numpy_kernels, threads, host_dev, monkeypatch):
    from hrx_tensor.plans import Slot

    # eager calls go through each slot's prepared launch; route them through
    # stream.dispatch (same kernel, geometry and bindings) so the spy sees every one
    monkeypatch.setattr(Slot, "launch", lambda self, stream, kernel, grid, block, scalars, views:
                        stream.dispatch(kernel, grid, views, block=block, scalars=scalars))
    ops = ImageOps(host_dev)
    stream = ops.stream
    real = stream.dispatch
    checked = {}

    def spy(kernel, grid, bindings, *, block=1, scalars=()):
        stream.synchronize()
        before = [np.array(stream.download(b)) for b in bindings]
        done = real(kernel, grid, bindings, block=block, scalars=scalars)
        done.wait()
        after = [stream.download(b) for b in bindings]
        native.run(emulated, kernel.entry, before, kernel.check_scalars(scalars), threads=threads)
        for i, access in enumerate(kernel.buffer_access):
            if access.writes:
                assert before[i].tobytes() == after[i].tobytes(), f"{kernel.name} scalars={scalars}"
        checked[kernel.name] = checked.get(kernel.name, 0) + 1
        return done

    stream.dispatch = spy
    try:
        workload(ops)
    finally:
        del stream.dispatch
    assert set(checked) == {k.name for k in K.ALL}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_sources_compile_without_fma(tmp_path):
    cu = tmp_path / "image_kernels.cu"
    cu.write_text("".join(f"namespace k{i} {{\n{s}\n}}\n" for i, s in enumerate(K._SOURCES)))
    ptx = tmp_path / "image_kernels.ptx"
    # default --fmad=true: the __f*_rn intrinsics alone must keep contraction out
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-o", str(ptx), str(cu)], check=True, capture_output=True)
    text = ptx.read_text()
    for k in K.ALL:
        assert ".entry " + k.entry in text
    assert "fma.rn.f32" not in text and "mad.f32" not in text
