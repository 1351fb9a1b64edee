"""Agreement with Pillow where the conventions match (skipped where Pillow is missing).

PIL rounds uint8 results half up from fixed-point weights (and, when antialiasing,
rounds the first pass to uint8 too), so agreement is within one unit, not exact.
"""

from __future__ import annotations

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")

RNG = np.random.default_rng(5)


def pil_resize(a, size, resample):
    return np.asarray(Image.fromarray(a).resize((size[1], size[0]), resample=resample, reducing_gap=None))


@pytest.mark.parametrize("size", [(7, 9), (13, 11), (40, 64), (61, 100)])
def test_resize_bilinear_matches_pil(ops, size):
    a = RNG.integers(0, 256, (21, 33, 3), dtype=np.uint8)
    t = ops.upload(a)
    # PIL's BILINEAR antialiases when reducing: compare with antialias=True
    got = ops.resize(t, size, antialias=True).numpy()
    assert np.abs(got.astype(int) - pil_resize(a, size, Image.Resampling.BILINEAR)).max() <= 1
    if size[0] >= 21 and size[1] >= 33:  # enlarging: antialias makes no difference
        assert np.array_equal(got, ops.resize(t, size).numpy())


@pytest.mark.parametrize("size", [(7, 9), (40, 64), (21, 33), (100, 17)])
def test_resize_nearest_matches_pil(ops, size):
    a = RNG.integers(0, 256, (21, 33, 4), dtype=np.uint8)
    got = ops.resize(ops.upload(a), size, mode="nearest").numpy()
    assert np.array_equal(got, pil_resize(a, size, Image.Resampling.NEAREST))


def test_affine_matches_pil_inside_the_image(ops):
    a = RNG.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    c, s = np.cos(0.3) * 0.8, np.sin(0.3) * 0.8
    pil = (c, -s, 8.0, s, c, -3.0)  # PIL: source = M @ (x + 0.5, y + 0.5, 1), pixel centres at +0.5
    m = [[pil[0], pil[1], 0.5 * (pil[0] + pil[1]) + pil[2] - 0.5], [pil[3], pil[4], 0.5 * (pil[3] + pil[4]) + pil[5] - 0.5]]
    got = ops.affine(ops.upload(a), m).numpy()
    expect = np.asarray(Image.fromarray(a).transform((40, 30), Image.Transform.AFFINE, pil, resample=Image.Resampling.BILINEAR))
    ys, xs = np.mgrid[0:30, 0:40].astype(np.float64)
    sx = m[0][0] * xs + m[0][1] * ys + m[0][2]
    sy = m[1][0] * xs + m[1][1] * ys + m[1][2]
    inside = (sx >= 0) & (sx <= 38.99) & (sy >= 0) & (sy <= 28.99)  # all four taps in the image
    assert inside.sum() > 300
    assert np.abs(got.astype(int) - expect.astype(int))[inside].max() <= 1
