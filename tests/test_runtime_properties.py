"""Property test: random multi-lane programs through the runtime equal a serial reference.

Each example records a few tracked graphs of uploads, kernels, copies, fills and
downloads over overlapping ranges of three tracked buffers, submits them concurrently
from threads, and compares every download and the final buffers with numpy applying
the graphs one by one in submission order. The host engine shuffles interleavings
(jitter) so that a missing hazard shows. HRX_RUNTIME_EXAMPLES sets the count (2000).
"""

from __future__ import annotations

import os
import threading

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrx_core.execution import Runtime, RuntimeOptions

from .conftest import open_device
from .kernels import INC_BYTES, XOR_BYTES

EXAMPLES = int(os.environ.get("HRX_RUNTIME_EXAMPLES", "2000"))
BLOCK = 64


@st.composite
def ranges(draw, sizes, count=1):
    b = draw(st.integers(0, 2))
    n = draw(st.integers(1, sizes[b]))
    return b, draw(st.integers(0, sizes[b] - n)), n


@st.composite
def programs(draw):
    sizes = draw(st.lists(st.integers(8, 96), min_size=3, max_size=3))
    graphs = []
    for _ in range(draw(st.integers(1, 3))):
        regions = []
        for _ in range(draw(st.integers(1, 5))):
            kind = draw(st.sampled_from(["upload", "xor", "inc", "copy", "fill", "download"]))
            b, off, n = draw(ranges(sizes))
            if kind in ("xor", "copy"):
                b2 = draw(st.integers(0, 2))
                n2 = min(n, sizes[b2])
                off2 = draw(st.integers(0, sizes[b2] - n2))
                if b2 == b and off < off2 + n2 and off2 < off + n2:
                    kind = "inc"
                else:
                    regions.append((kind, b, off, b2, off2, n2, draw(st.integers(0, 255))))
                    continue
            if kind == "upload":
                regions.append(("upload", b, off, n, draw(st.binary(min_size=n, max_size=n))))
            elif kind == "fill":
                regions.append(("fill", b, off, n, draw(st.integers(0, 255))))
            else:
                regions.append((kind, b, off, n))
        graphs.append(regions)
    return sizes, graphs, draw(st.integers(0, 2**32 - 1))


def _apply(bufs, region, downloads):
    kind = region[0]
    if kind == "upload":
        _, b, off, n, data = region
        bufs[b][off : off + n] = np.frombuffer(data, np.uint8)
    elif kind in ("xor", "copy"):
        _, b, off, b2, off2, n, key = region
        src = bufs[b][off : off + n].copy()
        bufs[b2][off2 : off2 + n] = src ^ np.uint8(key) if kind == "xor" else src
    elif kind == "fill":
        _, b, off, n, value = region
        bufs[b][off : off + n] = value
    elif kind == "inc":
        _, b, off, n = region
        bufs[b][off : off + n] += np.uint8(1)
    else:
        _, b, off, n = region
        downloads.append(bufs[b][off : off + n].copy())


def _record(g, region, bufs):
    kind = region[0]
    if kind == "upload":
        _, b, off, n, data = region
        return g.upload(bufs[b].slice(off, n), np.frombuffer(data, np.uint8))
    if kind == "copy":
        _, b, off, b2, off2, n, _ = region
        return g.copyto(bufs[b2].slice(off2, n), bufs[b].slice(off, n))
    if kind == "xor":
        _, b, off, b2, off2, n, key = region
        src, dst = bufs[b].slice(off, n), bufs[b2].slice(off2, n)
        return g.compute("xor", lambda r: r.dispatch(XOR_BYTES, -(-n // BLOCK), [src, dst], block=BLOCK, scalars=(key, n)))
    if kind == "fill":
        _, b, off, n, value = region
        return g.fill(bufs[b].slice(off, n), pattern=value)
    if kind == "inc":
        _, b, off, n = region
        view = bufs[b].slice(off, n)
        return g.compute("inc", lambda r: r.dispatch(INC_BYTES, -(-n // BLOCK), [view], block=BLOCK, scalars=(n,)))
    _, b, off, n = region
    return g.download(bufs[b].slice(off, n))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=programs())
def test_concurrent_tracked_graphs_match_serial_reference(engine, program):
    sizes, graphs, seed = program
    dev = open_device(engine, **({"jitter_us": 50} if engine == "host" else {}))
    rt = Runtime(dev, RuntimeOptions(observe=False, copy_engine="copy" if seed % 2 else "compute"))
    rng = np.random.default_rng(seed)
    initial = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    bufs = [rt.allocate(n) for n in sizes]
    s = rt.lane("compute").stream
    for buf, data in zip(bufs, initial):
        s.upload_blocking(buf, data)
    recorded = []
    for i, regions in enumerate(graphs):
        g = rt.graph(f"g{i}")
        recorded.append((g, [_record(g, r, bufs) for r in regions]))
    submissions: list = [None] * len(recorded)
    errors = []

    def submit(i):
        try:
            submissions[i] = rt.submit(recorded[i][0])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(recorded))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for sub in submissions:
        sub.wait()
    # the serial reference, graph by graph in submission order
    state = [x.copy() for x in initial]
    order = sorted(range(len(recorded)), key=lambda i: submissions[i].sequence)
    for i in order:
        expect_downloads: list = []
        for region in graphs[i]:
            _apply(state, region, expect_downloads)
        got = [reg.read() for (kind, *_), reg in zip(graphs[i], recorded[i][1]) if kind == "download"]
        assert len(got) == len(expect_downloads)
        for a, b in zip(got, expect_downloads):
            np.testing.assert_array_equal(a, b)
    for buf, want in zip(bufs, state):
        np.testing.assert_array_equal(s.download(buf), want)
    for g, _ in recorded:
        g.close()
    rt.close()
