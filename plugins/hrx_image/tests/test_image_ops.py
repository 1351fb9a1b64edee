"""ImageOps on every engine present, against the float64 references in reference.py."""

from __future__ import annotations

import image_reference as ref
import numpy as np
import pytest
from hrx_image import PRESETS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ml_dtypes import bfloat16

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
RNG = np.random.default_rng(1234)


def image(shape, dtype=np.uint8):
    if dtype == np.uint8:
        return RNG.integers(0, 256, shape, dtype=np.uint8)
    return (RNG.random(shape, dtype=np.float32) * 255).astype(np.float32)


def batched(a):
    return a if a.ndim == 4 else a[None]


# -- normalize -------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["imagenet", "clip", "siglip"])
def test_normalize_presets_are_correctly_rounded(ops, preset):
    a = image((2, 9, 7, 3))
    got = ops.normalize(ops.upload(a), preset).numpy()
    mean, std = PRESETS[preset]
    expect = ref.normalize(a, mean, std, (0, 1, 2)).astype(np.float32)
    assert got.shape == (2, 3, 9, 7) and got.dtype == np.float32
    assert np.array_equal(got, expect)


def test_normalize_bf16_channel_order_and_rgba(ops):
    a = image((6, 5, 4))
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 2.0)
    got = ops.normalize(ops.upload(a), mean, std, dtype="bf16", channels=(2, 1, 0)).numpy()
    expect = ref.normalize(a[None], mean, std, (2, 1, 0))[0].astype(np.float32).astype(bfloat16)
    assert got.dtype == bfloat16 and got.shape == (3, 6, 5)
    assert np.array_equal(got.view(np.uint16), expect.view(np.uint16))


def test_normalize_max_value_and_single_channel(ops):
    a = image((5, 6, 1))
    got = ops.normalize(ops.upload(a), (123.675,), (58.395,), max_value=1.0).numpy()
    expect = ((a.astype(np.float64)[..., 0] - 123.675) / 58.395).astype(np.float32)
    assert np.array_equal(got[0], expect)


@pytest.mark.parametrize("pad", [None, "zero"])
def test_normalize_into_patches_equals_patchify(ops, pad):
    h, w = (8, 12) if pad is None else (9, 13)
    a = image((2, h, w, 3))
    fused = ops.normalize(ops.upload(a), "imagenet", patch_size=4, pad=pad).numpy()
    chw = ops.normalize(ops.upload(a), "imagenet")
    two = ops.patchify(chw, 4, pad=pad).numpy()
    assert np.array_equal(fused, two)
    assert np.array_equal(two, ref.patchify(chw.numpy(), 4))


# -- patchify --------------------------------------------------------------------------


@SETTINGS
@given(n=st.integers(1, 2), c=st.integers(1, 4), gh=st.integers(1, 3), gw=st.integers(1, 3), p=st.integers(1, 5),
       dtype=st.sampled_from([np.uint8, np.float32, bfloat16]), pad=st.booleans(), batched_in=st.booleans())
def test_patchify_matches_loops(ops, n, c, gh, gw, p, dtype, pad, batched_in):
    h, w = gh * p - (p > 1 and pad), gw * p
    x = RNG.standard_normal((n, c, h, w)).astype(dtype)
    src = x if batched_in else x[0]
    got = ops.patchify(ops.upload(src), p, pad="zero" if pad else None).numpy()
    expect = ref.patchify(x if batched_in else x[:1], p)
    assert np.array_equal(got if batched_in else got[None], expect)


# -- resize ----------------------------------------------------------------------------


@SETTINGS
@given(h=st.integers(1, 24), w=st.integers(1, 24), ho=st.integers(1, 24), wo=st.integers(1, 24), c=st.integers(1, 4),
       mode=st.sampled_from(["bilinear", "nearest", "antialias"]), f32=st.booleans())
def test_resize_against_float64(ops, h, w, ho, wo, c, mode, f32):
    a = image((2, h, w, c), np.float32 if f32 else np.uint8)
    kw = {"mode": "bilinear", "antialias": True} if mode == "antialias" else {"mode": mode}
    got = ops.resize(ops.upload(a), (ho, wo), **kw).numpy()
    expect = ref.resize(a, ho, wo, "nearest" if mode == "nearest" else "bilinear", mode == "antialias")
    assert got.shape == (2, ho, wo, c)
    if f32:
        np.testing.assert_allclose(got, expect, rtol=0, atol=255 * 4e-6 * (1 + 8 * (mode == "antialias")))
    else:
        assert ref.within_one(got, expect) <= 1


def test_resize_hd_frame_to_224(ops):
    a = image((270, 480, 3))
    for aa in (False, True):
        got = ops.resize(ops.upload(a), 56, antialias=aa).numpy()
        assert ref.within_one(got, ref.resize(a[None], 56, 56, antialias=aa)[0]) <= 1


def test_resize_identity_is_exact(ops):
    a = image((7, 9, 3))
    assert np.array_equal(ops.resize(ops.upload(a), (7, 9)).numpy(), a)


# -- affine ----------------------------------------------------------------------------


def rotation(theta, scale, tx, ty):
    c, s = np.cos(theta) / scale, np.sin(theta) / scale
    return np.array([[c, -s, tx], [s, c, ty]])


@SETTINGS
@given(h=st.integers(1, 20), w=st.integers(1, 20), c=st.sampled_from([1, 3, 4]), theta=st.floats(-3.2, 3.2),
       scale=st.floats(0.3, 3.0), tx=st.floats(-10, 10), ty=st.floats(-10, 10), f32_in=st.booleans(),
       f32_out=st.booleans())
def test_affine_against_float64(ops, h, w, c, theta, scale, tx, ty, f32_in, f32_out):
    a = image((h, w, c), np.float32 if f32_in else np.uint8)
    m = rotation(theta, scale, tx, ty)
    got = ops.affine(ops.upload(a), m, (h + 3, w + 2), out_dtype="f32" if f32_out else "u8").numpy()
    expect = ref.affine(a[None], m.astype(np.float32)[None], h + 3, w + 2)[0]
    if f32_out:
        # float32 coordinates: positions agree to ~1e-6 * extent, values to a slope of 255/pixel
        np.testing.assert_allclose(got, expect, rtol=0, atol=0.02)
    else:
        assert ref.within_one(got, expect) <= 1


def test_affine_identity_and_shift(ops):
    a = image((2, 6, 8, 3))
    t = ops.upload(a)
    assert np.array_equal(ops.affine(t, [[1, 0, 0], [0, 1, 0]]).numpy(), a)
    shifted = ops.affine(t, [[1, 0, 2], [0, 1, -1]]).numpy()  # out(x, y) = src(x + 2, y - 1)
    assert np.array_equal(shifted[:, 1:, :6], a[:, :5, 2:])
    assert not shifted[:, 0].any() and not shifted[:, :, 6:].any()


def test_affine_per_image_matrices(ops):
    a = image((3, 5, 6, 3))
    ms = np.stack([rotation(0.1 * i, 1 + 0.2 * i, i, -i) for i in range(3)])
    got = ops.affine(ops.upload(a), ms).numpy()
    assert ref.within_one(got, ref.affine(a, ms.astype(np.float32), 5, 6)) <= 1


def test_affine_new_matrix_reuses_plan_and_slots(ops, dev):
    a = ops.upload(image((8, 8, 3)))
    first = ops.affine(a, rotation(0.3, 1.0, 1, 2))
    first.numpy()
    first.close()
    misses = ops.plan_cache.stats.misses
    allocations = dev.stats.allocations
    plans = [e for e in (ops.plan_cache._plans.values()) if e.key[0] == "affine"]
    made = [e.plan.slots_made for e in plans]
    for i in range(4):
        m = rotation(0.1 * i, 1.0 + 0.1 * i, -i, i)
        out = ops.affine(a, m)
        assert ref.within_one(out.numpy(), ref.affine(a.numpy()[None], m.astype(np.float32)[None], 8, 8)[0]) <= 1
        out.close()
    assert ops.plan_cache.stats.misses == misses
    assert dev.stats.allocations == allocations
    assert [e.plan.slots_made for e in plans] == made
    # repeating the last matrix skips even the 24-byte upload
    ops.affine(a, m).close()
    uploaded = dev.stats.upload_bytes
    ops.affine(a, m).numpy()
    assert dev.stats.upload_bytes == uploaded


# -- composite -------------------------------------------------------------------------


@SETTINGS
@given(h=st.integers(1, 12), w=st.integers(1, 12), c=st.sampled_from([3, 4]), lh=st.integers(1, 8),
       lw=st.integers(1, 8), ox=st.integers(-9, 13), oy=st.integers(-9, 13), pre=st.booleans())
def test_composite_against_float64(ops, h, w, c, lh, lw, ox, oy, pre):
    a = image((2, h, w, c))
    layer = image((lh, lw, 4))
    if pre:  # premultiplied colours never exceed alpha
        layer[..., :3] = (layer[..., :3].astype(np.uint16) * layer[..., 3:] // 255).astype(np.uint8)
    got = ops.composite(ops.upload(a), ops.upload(layer), (ox, oy), premultiplied=pre).numpy()
    expect = ref.composite(a, layer, ox, oy, pre)
    assert ref.within_one(got, expect) <= 1


def test_composite_fully_outside_is_a_copy(ops):
    a = image((4, 5, 3))
    layer = ops.upload(image((2, 2, 4)))
    for off in ((5, 0), (0, 4), (-2, 0), (0, -2), (-100, 100)):
        assert np.array_equal(ops.composite(ops.upload(a), layer, off).numpy(), a)


def test_composite_opaque_and_transparent(ops):
    a = image((4, 4, 3))
    layer = image((2, 3, 4))
    layer[0, :, 3] = 255
    layer[1, :, 3] = 0
    got = ops.composite(ops.upload(a), ops.upload(layer), (1, 1)).numpy()
    assert np.array_equal(got[1, 1:4], layer[0, :, :3])
    assert np.array_equal(got[2], a[2])


# -- graphs ----------------------------------------------------------------------------


def test_pipeline_as_one_graph(ops, dev):
    frames = image((2, 30, 40, 3))
    src = ops.upload(frames)
    g = ops.stream.access_graph()
    g.input("frames", src.buffer)
    small = ops.resize_fragment(g, src, 16)
    warped, params = ops.affine_fragment(g, small, rotation(0.2, 1.0, 1, -1))
    patches = ops.normalize_fragment(g, warped, "clip", patch_size=8)
    g.launch().wait()
    eager = ops.normalize(ops.affine(ops.resize(src, 16), rotation(0.2, 1.0, 1, -1)), "clip", patch_size=8).numpy()
    assert np.array_equal(patches.numpy(), eager)
    # a new matrix and new frames: no re-recording
    other = ops.upload(image((2, 30, 40, 3)))
    params.set(rotation(-0.4, 1.2, 0, 2))
    g.launch(inputs={"frames": other.buffer}).wait()
    eager = ops.normalize(ops.affine(ops.resize(other, 16), rotation(-0.4, 1.2, 0, 2)), "clip", patch_size=8).numpy()
    assert np.array_equal(patches.numpy(), eager)
    layer = ops.upload(image((3, 3, 4)))
    comp = ops.composite_fragment(g, small, layer, (2, 2))
    flat = ops.patchify_fragment(g, ops.normalize_fragment(g, small, "unit"), 4)
    g.launch().wait()
    assert np.array_equal(comp.numpy(), ops.composite(small, layer, (2, 2)).numpy())
    assert np.array_equal(flat.numpy(), ops.patchify(ops.normalize(small, "unit"), 4).numpy())
