"""ImageOps' eager fast paths (memoised call specs, the plan dict in front of the plan
cache, prepared launches that rebind only what changed, outputs built without
re-validation) give the slow paths' bytes, and honour every change under a cached
binding: a closed buffer raises, a replaced view is rebound, an evicted plan keeps
the tables its live outputs' graphs read."""

from __future__ import annotations

import numpy as np
import pytest
from hrx_image import ImageOps
from hrx_tensor import DeviceTensor

from hrx_core.errors import InvalidArgument
from hrx_core.execution.plan_cache import PlanCache

RNG = np.random.default_rng(4321)
M = [[0.9, -0.2, 3.0], [0.2, 1.1, -2.0]]


def u8(shape):
    return RNG.integers(0, 256, shape, dtype=np.uint8)


def calls(ops, frames, layer):
    """Every operation once; the downloaded results."""
    chw = ops.normalize(frames, "imagenet")
    outs = [ops.resize(frames, (11, 17)), ops.resize(frames, 9, antialias=True), ops.affine(frames, M),
            ops.composite(frames, layer, (2, 3)), ops.normalize(frames, "clip", dtype="bf16", patch_size=4, pad="zero"),
            chw, ops.patchify(chw, 5, pad="zero")]
    return [o.numpy().copy() for o in outs]


def test_repeated_calls_equal_a_fresh_ops(ops):
    frames, layer = ops.upload(u8((2, 13, 22, 3))), ops.upload(u8((4, 5, 4)))
    first = calls(ops, frames, layer)
    for _ in range(3):  # warm: specs, plan dict, bound launches
        again = calls(ops, frames, layer)
        assert [a.tobytes() for a in again] == [a.tobytes() for a in first]
    slow = calls(ImageOps(ops.device, stream=ops.stream, plan_cache=PlanCache()), frames, layer)
    assert [a.tobytes() for a in slow] == [a.tobytes() for a in first]


def test_closed_buffer_under_cached_binding_raises(ops, dev):
    data = RNG.random((3, 8, 8), dtype=np.float32)
    buf = dev.allocate(data.nbytes)
    ops.stream.upload_blocking(buf, data.view(np.uint8).reshape(-1))
    image = ops.tensor(buf, data.shape, np.float32)
    ops.patchify(image, 4).close()
    ops.patchify(image, 4).close()  # the slot's launch is bound to the image's view
    buf.close()
    dispatches = dev.stats.dispatches
    with pytest.raises(InvalidArgument, match="image: the tensor's buffer was closed"):
        ops.patchify(image, 4)
    assert dev.stats.dispatches == dispatches


def test_replaced_view_is_rebound(ops):
    a, b = RNG.random((3, 8, 8), dtype=np.float32), RNG.random((3, 8, 8), dtype=np.float32)
    both = ops.upload(np.concatenate([a.reshape(-1), b.reshape(-1)]))
    image = DeviceTensor(both.view.slice(0, a.nbytes), a.shape, np.float32)
    first = ops.patchify(image, 4).numpy()
    image.view = both.view.slice(a.nbytes, b.nbytes)
    second = ops.patchify(image, 4).numpy()
    with ops.upload(b) as tb:
        assert second.tobytes() == ops.patchify(tb, 4).numpy().tobytes()
    assert first.tobytes() != second.tobytes()


def test_evicted_plan_keeps_tables_of_live_graph_outputs(dev):
    """A resize plan (with its uploaded table) evicted while a recorded graph's output
    holds its slot: the graph still replays right; the table goes with the last use."""
    cache = PlanCache(max_plans=8)
    ops = ImageOps(dev, plan_cache=cache)
    src = ops.upload(u8((1, 20, 30, 3)))
    g = ops.stream.access_graph()
    small = ops.resize_fragment(g, src, 7)
    g.launch().wait()
    expect = ops.resize(src, 7).numpy()
    assert small.numpy().tobytes() == expect.tobytes()
    ops.stream.synchronize()
    live = dev.stats.live_bytes
    assert cache.evict_idle() >= 1
    assert dev.stats.live_bytes == live - expect.nbytes  # only the idle eager slot went
    g.launch().wait()
    assert small.numpy().tobytes() == expect.tobytes()
    small.close()
    g.close()
    ops.stream.synchronize()
    assert dev.stats.live_bytes < live - expect.nbytes  # the slot and the table went with the last use
