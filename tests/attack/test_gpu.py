"""What only a GPU proves (``gpu`` marker: skipped where the cuda engine is missing;
run with ``python -m pytest -m gpu tests/attack/test_gpu.py`` on the GPU machine).

* a real copy, fill and recorded-graph copy over more than 4 GiB on cuda, split by
  the core at the engine's 4 GiB transfer limit, checked at the split boundary;
* ``allocate_from`` on cuda without staging when the source is already pinned or
  registrable (the spec: "initializes a new buffer directly ... avoiding a staging copy").
"""

from __future__ import annotations

import numpy as np
import pytest

from hrx_core.testing import open_device

pytestmark = pytest.mark.gpu

SPLIT = 1 << 32  # the cuda engine's largest single copy or fill


def _bytes_at(stream, buf, offset: int, n: int) -> np.ndarray:
    return stream.download(buf.slice(offset, n))


def test_copy_fill_and_graph_copy_beyond_4_gib_are_split_and_exact():
    dev = open_device("cuda")
    assert dev.info.limits.max_transfer_bytes == SPLIT
    n = SPLIT + (1 << 20)  # crosses the split by 1 MiB
    free, _ = dev.native.memory_info()
    if free < 2 * n + (1 << 30):
        pytest.skip(f"needs {2 * n} bytes of free device memory, {free} free")
    s = dev.stream()
    src, dst = dev.allocate(n), dev.allocate(n)
    s.fill(src, np.uint32(0xA1B2C3D4))  # one fill of > 4 GiB: split in two native fills
    marks = {0: 1, SPLIT - 8: 2, SPLIT - 1: 3, SPLIT: 4, SPLIT + 7: 5, n - 1: 6}
    for off, v in marks.items():
        s.upload(src.slice(off, 1), np.array([v], np.uint8))
    s.copyto(dst, src)  # one copy of > 4 GiB: split in two native copies
    for off, v in marks.items():
        assert _bytes_at(s, dst, off, 1)[0] == v, off
    word = np.tile(np.array([0xA1B2C3D4], np.uint32).view(np.uint8), 4)
    for off in (SPLIT - 64, SPLIT + 64, n - 64):  # 16-byte windows away from the marks
        np.testing.assert_array_equal(_bytes_at(s, dst, off, 16), word)
    g = s.owned_graph()
    g.fill(dst, 0)
    g.copyto(dst, src)
    g.launch().wait(600)
    for off, v in marks.items():
        assert _bytes_at(s, dst, off, 1)[0] == v, off
    g.close()
    src.close()
    dst.close()
    s.synchronize(600)


def test_allocate_from_a_pinned_source_skips_staging():
    dev = open_device("cuda")
    s = dev.stream()
    n = 1 << 20
    shared = dev.allocate_shared(n)
    with shared.map("write") as host:
        host[:] = (np.arange(n) % 251).astype(np.uint8)
        buf = s.allocate_from(host)  # pinned memory: the copy engine reads it directly
    assert s.staging_bytes == 0  # no staging ring was needed
    np.testing.assert_array_equal(s.download(buf), (np.arange(n) % 251).astype(np.uint8))
    buf.close()
    shared.close()


def test_allocate_from_registers_large_pageable_sources_and_stages_small_ones():
    dev = open_device("cuda")
    s = dev.stream()
    big = (np.arange(32 << 20) % 253).astype(np.uint8)  # 32 MiB of pageable memory: registered
    buf = s.allocate_from(big)
    assert s.staging_bytes == 0
    np.testing.assert_array_equal(s.download(buf), big)
    big[:] = 0  # the source may be reused at once (the copy finished, the registration ended)
    np.testing.assert_array_equal(s.download(buf)[:16], (np.arange(16) % 253).astype(np.uint8))
    small = s.allocate_from(np.arange(1024, dtype=np.uint8))  # small: staged as before
    assert s.staging_bytes > 0
    np.testing.assert_array_equal(s.download(small), np.arange(1024, dtype=np.uint8))
    buf.close()
    small.close()
