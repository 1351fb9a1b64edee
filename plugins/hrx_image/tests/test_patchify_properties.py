"""patchify's vectorized kernel against the loop reference, byte for byte.

The kernel moves whole patch runs in 16-, 8-, 4-, 2- or 1-byte vectors depending on
the run length, the row pitch and the alignment of the image's first byte, with one
warp per source row and the lanes' positions carried without divisions. Generated
shapes, channel counts, element sizes, byte offsets and padding:

* through ImageOps on every engine present (the host runs the CUDA source compiled
  for the CPU, or the numpy kernel where no compiler exists -- both covered);
* through the CPU build of the CUDA source directly, with the GPU's 32 lanes (and
  odd lane counts) emulated, so the lane/carry arithmetic the GPU runs is the one
  checked here, on output memory pre-filled with garbage (every byte is written).

HRX_IMAGE_EXAMPLES sets the number of examples per test (default 200).
"""

from __future__ import annotations

import os

import image_reference as ref
import numpy as np
import pytest
from hrx_image import kernels as K
from hrx_image import native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ml_dtypes import bfloat16

EXAMPLES = int(os.environ.get("HRX_IMAGE_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DTYPES = [np.uint8, np.int8, np.uint16, np.float16, bfloat16, np.float32, np.int32]
PATCHES = [1, 2, 3, 4, 5, 6, 7, 8, 14, 16]


def raw(rng, shape, dtype):
    """Arbitrary bit patterns of ``dtype`` (NaN payloads included for floats)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return rng.integers(0, 256, size, dtype=np.uint8).view(dtype).reshape(shape)


def problem(draw_seed, n, c, gh, gw, p, rh, rw, dtype):
    """A [n, c, h, w] image with h, w = gh*p - rh, gw*p - rw (rh, rw < p: padding)."""
    rng = np.random.default_rng(draw_seed)
    h, w = max(1, gh * p - rh), max(1, gw * p - rw)
    return raw(rng, (n, c, h, w), dtype)


shapes = {
    "seed": st.integers(0, 2**32 - 1),
    "n": st.integers(1, 3),
    "c": st.integers(1, 5),
    "gh": st.integers(1, 4),
    "gw": st.integers(1, 5),
    "p": st.sampled_from(PATCHES),
    "rh": st.integers(0, 15),
    "rw": st.integers(0, 15),
    "dtype": st.sampled_from(DTYPES),
}


@pytest.fixture(params=["native", "numpy"])
def kernel_path(request, monkeypatch):
    """Both host kernels (on other engines the parameter changes nothing)."""
    if request.param == "native" and native.library(K._SOURCES) is None:
        pytest.skip(f"no CPU build of the CUDA sources: {native.why_unavailable(K._SOURCES)}")
    monkeypatch.setattr(K, "USE_NATIVE", request.param == "native")
    return request.param


@SETTINGS
@given(offset=st.integers(0, 9), batched=st.booleans(), **shapes)
def test_patchify_random_shapes_and_offsets(ops, kernel_path, seed, n, c, gh, gw, p, rh, rw, dtype, offset, batched):
    """Any shape, element size and element offset of the image inside its buffer
    (which moves its first byte off 16-byte alignment) gives the reference bytes."""
    x = problem(seed, n if batched else 1, c, gh, gw, p, rh % p, rw % p, dtype)
    es = x.dtype.itemsize
    pad = "zero" if x.shape[2] % p or x.shape[3] % p else None
    flat = np.concatenate([raw(np.random.default_rng(seed + 1), (offset,), dtype), x.reshape(-1)])
    with ops.upload(flat.view(np.uint8)) as buf:
        view = buf.view.slice(offset * es, x.nbytes)
        image = ops.tensor(view, x.shape if batched else x.shape[1:], dtype)
        with ops.patchify(image, p, pad=pad) as out:
            got = out.numpy()
    expect = ref.patchify(x, p)
    if not batched:
        expect = expect[0]
    assert got.shape == expect.shape and got.dtype == expect.dtype
    assert got.tobytes() == expect.tobytes()


@pytest.fixture(scope="module")
def cpu_build(tmp_path_factory):
    if native.compiler() is None:
        pytest.skip("no C++ compiler to run the CUDA sources on the CPU")
    return native.build(K._SOURCES, tmp_path_factory.mktemp("patchify_on_cpu"))


@SETTINGS
@given(offset=st.integers(0, 31), lanes=st.sampled_from([32, 1, 3, 7, 64]), threads=st.sampled_from([1, 2, 5]),
       narrow=st.booleans(), **shapes)
def test_patchify_lanes_emulated(cpu_build, seed, n, c, gh, gw, p, rh, rw, dtype, offset, lanes, threads, narrow):
    """The kernel's lane loop with the GPU's 32 lanes (and others), every vector width
    the alignment allows (or a narrower one), against the numpy kernel."""
    x = problem(seed, n, c, gh, gw, p, rh % p, rw % p, dtype)
    n, c, h, w = x.shape
    es = x.dtype.itemsize
    hp, wp = -(-h // p) * p, -(-w // p) * p
    src_all = np.zeros(x.nbytes + 16 + 32 * es, np.uint8)
    base = src_all.ctypes.data
    start = (-base) % 16 + offset * es  # the image's first byte: offset elements past 16-byte alignment
    src = src_all[start : start + x.nbytes]
    src[:] = x.reshape(-1).view(np.uint8)
    vw = K.vector_width((p * es) | (w * es) | src.ctypes.data)
    if narrow:
        vw = max(1, vw // 4)
    dst = np.full(n * c * hp * wp * es + 16, 0xAB, np.uint8)  # garbage: every byte must be written
    scalars = K.PATCHIFY.check_scalars((n, c, h, w, p, hp, wp, es, vw))
    native.run(cpu_build, "hrx_image_patchify", [src, dst[:-16]], scalars, threads=threads, lanes=lanes)
    expect = ref.patchify(x, p)
    assert dst[:-16].tobytes() == expect.tobytes()
    assert (dst[-16:] == 0xAB).all()  # nothing written past the output


def test_vector_width():
    assert [K.vector_width(b) for b in (0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 48, 64 + 8)] == [16, 1, 2, 1, 4, 2, 8, 4, 16, 16, 16, 8]


@pytest.mark.parametrize("p,dtype,w,offset,vw", [
    (16, np.float32, 224, 0, 16), (14, np.float32, 224, 0, 8), (14, bfloat16, 224, 0, 4), (16, np.uint8, 1920, 0, 16),
    (16, np.float32, 224, 1, 4), (16, bfloat16, 224, 3, 2), (3, np.uint8, 30, 0, 1),
])
def test_vector_width_of_calls(ops, p, dtype, w, offset, vw):
    """The plan key records the vector width a call's alignment allows."""
    es = np.dtype(dtype).itemsize
    x = np.zeros((3, p, w), dtype)
    with ops.upload(np.zeros(x.nbytes + offset * es, np.uint8)) as buf:
        image = ops.tensor(buf.view.slice(offset * es, x.nbytes), x.shape, dtype)
        ops.patchify(image, p).close()
    keys = [e.key for e in ops.plan_cache._plans.values() if e.key[0] == "patchify" and e.key[1:9] == (1, 3, p, w, p, p, w, es)]
    assert keys and keys[-1][-1] == vw
