"""Bad input: typed errors naming the argument, raised before anything is submitted."""

from __future__ import annotations

import numpy as np
import pytest
from hrx_image import DeviceTensor, ImageOps

from hrx_core.errors import InvalidArgument, Unsupported


@pytest.fixture(scope="module")
def img(ops):
    return ops.upload(np.zeros((2, 8, 12, 3), np.uint8))


def no_work(ops, dev, fn):
    """``fn`` raises InvalidArgument and dispatches nothing; returns the message."""
    before = dev.stats.dispatches
    with pytest.raises(InvalidArgument) as e:
        fn()
    assert dev.stats.dispatches == before
    return str(e.value)


def test_image_checks(ops, dev, img):
    f32 = ops.upload(np.zeros((4, 4, 3), np.float32))
    assert "dtype float32" in no_work(ops, dev, lambda: ops.normalize(f32))
    assert "dtype int16" in no_work(ops, dev, lambda: ops.resize(ops.upload(np.zeros((4, 4, 3), np.int16)), 2))
    assert "[H, W, C]" in no_work(ops, dev, lambda: ops.resize(ops.upload(np.zeros((4, 4), np.uint8)), 2))
    assert "5 channels" in no_work(ops, dev, lambda: ops.resize(ops.upload(np.zeros((4, 4, 5), np.uint8)), 2))
    assert "2 channels" in no_work(ops, dev, lambda: ops.composite(ops.upload(np.zeros((4, 4, 2), np.uint8)),
                                                                   ops.upload(np.zeros((2, 2, 4), np.uint8))))
    empty = DeviceTensor(img.buffer, (0, 4, 3), np.uint8, strides=(24, 3, 1))  # no contiguous zero-size tensor exists
    assert "zero-size" in no_work(ops, dev, lambda: ops.resize(empty, 2))
    assert "DeviceTensor" in no_work(ops, dev, lambda: ops.resize(np.zeros((4, 4, 3), np.uint8), 2))
    assert "empty" in no_work(ops, dev, lambda: ops.upload(np.zeros((0, 3), np.uint8)))
    raw = ops.upload(np.zeros(4 * 4 * 3 * 4 + 2, np.uint8))
    odd = ops.tensor(raw.buffer.slice(2, 4 * 4 * 3 * 4), (4, 4, 3), np.float32)
    assert "byte offset 2" in no_work(ops, dev, lambda: ops.resize(odd, 2))
    t = ops.upload(np.zeros((4, 4, 3), np.uint8))
    ops.resize(t, 2).close()  # validated arguments are memoised; the tensor is checked on every call
    ops.normalize(t).close()
    t.close()
    assert "closed" in no_work(ops, dev, lambda: ops.resize(t, 2))
    assert "closed" in no_work(ops, dev, lambda: ops.normalize(t))


def test_size_and_mode_checks(ops, dev, img):
    assert "size[0]: 0" in no_work(ops, dev, lambda: ops.resize(img, (0, 4)))
    assert "size" in no_work(ops, dev, lambda: ops.resize(img, (4, 4, 4)))
    assert "size[1]" in no_work(ops, dev, lambda: ops.resize(img, (4, 1 << 24)))
    assert "mode" in no_work(ops, dev, lambda: ops.resize(img, 4, mode="bicubic"))
    assert "antialias" in no_work(ops, dev, lambda: ops.resize(img, 4, mode="nearest", antialias=True))
    ops.resize(img, 4, antialias=True).close()
    assert "antialias" in no_work(ops, dev, lambda: ops.resize(img, 4, antialias=1))


def test_normalize_checks(ops, dev, img):
    assert "preset" in no_work(ops, dev, lambda: ops.normalize(img, "nope"))
    assert "std" in no_work(ops, dev, lambda: ops.normalize(img, "imagenet", (1, 1, 1)))
    assert "std: [1.0, 0.0, 1.0] has a zero" in no_work(ops, dev, lambda: ops.normalize(img, (0, 0, 0), (1, 0, 1)))
    assert "mean: 2 values" in no_work(ops, dev, lambda: ops.normalize(img, (0, 0), (1, 1, 1)))
    assert "non-finite" in no_work(ops, dev, lambda: ops.normalize(img, (0, np.nan, 0), (1, 1, 1)))
    assert "channels[0]: 3" in no_work(ops, dev, lambda: ops.normalize(img, "unit", channels=(3, 1, 0)))
    assert "dtype" in no_work(ops, dev, lambda: ops.normalize(img, dtype="f16"))
    assert "max_value" in no_work(ops, dev, lambda: ops.normalize(img, max_value=0))
    assert "pad" in no_work(ops, dev, lambda: ops.normalize(img, pad="zero"))
    assert "preset 'imagenet' has 3 channels" in no_work(ops, dev, lambda: ops.normalize(img, channels=(0,)))


def test_patch_checks(ops, dev, img):
    chw = ops.upload(np.zeros((3, 8, 12), np.float32))
    assert "5 does not divide the image 8x12" in no_work(ops, dev, lambda: ops.patchify(chw, 5))
    assert "does not divide" in no_work(ops, dev, lambda: ops.normalize(img, patch_size=5))
    assert "patch_size: 0" in no_work(ops, dev, lambda: ops.patchify(chw, 0))
    assert "pad" in no_work(ops, dev, lambda: ops.patchify(chw, 4, pad="reflect"))
    assert "8-byte" in no_work(ops, dev, lambda: ops.patchify(ops.upload(np.zeros((3, 4, 4), np.float64)), 2))
    assert ops.patchify(chw, 5, pad="zero").shape == (6, 75)


def test_affine_checks(ops, dev, img):
    assert "singular" in no_work(ops, dev, lambda: ops.affine(img, [[1, 2, 0], [2, 4, 0]]))
    assert "singular" in no_work(ops, dev, lambda: ops.affine(img, [[0, 0, 1], [0, 0, 1]]))
    assert "image 1" in no_work(ops, dev, lambda: ops.affine(img, [[[1, 0, 0], [0, 1, 0]], [[0, 0, 0], [0, 0, 0]]]))
    assert "shape [3, 3]" in no_work(ops, dev, lambda: ops.affine(img, np.eye(3)))
    assert "[2, 2, 3]" in no_work(ops, dev, lambda: ops.affine(img, np.zeros((3, 2, 3))))
    assert "non-finite" in no_work(ops, dev, lambda: ops.affine(img, [[1, 0, np.inf], [0, 1, 0]]))
    assert "exceeds" in no_work(ops, dev, lambda: ops.affine(img, [[1e30, 0, 0], [0, 1, 0]]))
    assert "matrix" in no_work(ops, dev, lambda: ops.affine(img, "identity"))
    assert "out_dtype" in no_work(ops, dev, lambda: ops.affine(img, [[1, 0, 0], [0, 1, 0]], out_dtype="bf16"))


def test_composite_checks(ops, dev, img):
    layer = ops.upload(np.zeros((2, 2, 4), np.uint8))
    assert "layer" in no_work(ops, dev, lambda: ops.composite(img, ops.upload(np.zeros((2, 2, 3), np.uint8))))
    assert "layer" in no_work(ops, dev, lambda: ops.composite(img, ops.upload(np.zeros((2, 2, 4), np.float32))))
    assert "offset" in no_work(ops, dev, lambda: ops.composite(img, layer, (1, 2, 3)))
    assert "offset[1]" in no_work(ops, dev, lambda: ops.composite(img, layer, (1, 1 << 40)))
    assert "premultiplied" in no_work(ops, dev, lambda: ops.composite(img, layer, premultiplied="yes"))


def test_fragment_and_constructor_checks(ops, dev, img):
    assert "graph" in no_work(ops, dev, lambda: ops.resize_fragment(object(), img, 4))
    with pytest.raises(Unsupported):
        ops.resize_fragment(ops.stream.graph(), img, 4)
    with pytest.raises(InvalidArgument):
        ImageOps(dev, plan_cache={})
    with pytest.raises(InvalidArgument):
        ImageOps(dev, stream=object())
    with pytest.raises(Unsupported):
        ImageOps(object())
    g = ops.stream.access_graph()
    _, params = ops.affine_fragment(g, img, [[1, 0, 0], [0, 1, 0]])
    with pytest.raises(InvalidArgument, match="singular"):
        params.set([[0, 0, 0], [0, 0, 0]])
    with pytest.raises(InvalidArgument, match="matrix"):
        params.set(np.tile(np.eye(2, 3), (2, 1, 1)))
