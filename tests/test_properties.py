"""Property test: random programs equal a serial numpy reference.

Programs of copies, fills and kernel dispatches over overlapping views of a few
buffers run (a) on 3 streams, ordered only by record_event/wait_event where two
operations touch the same bytes, and (b) as an access graph whose dependencies HRX
infers from declared access. Both must give byte-identical results to running the
operations one by one in numpy. The device's transfer limit is tiny so that copies
and fills are split as well, and on the host engine every command first sleeps a
random few microseconds, so that a missing event or dependency changes the result.

HRX_PROPERTY_EXAMPLES sets the number of programs (default 2000).
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import open_device
from .kernels import INC_BYTES, XOR_BYTES

EXAMPLES = int(os.environ.get("HRX_PROPERTY_EXAMPLES", "2000"))
STREAMS = 3
BLOCK = 64


@st.composite
def programs(draw):
    sizes = draw(st.lists(st.integers(8, 160), min_size=3, max_size=3))
    ops = []
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["copy", "fill", "xor", "inc"]))
        stream = draw(st.integers(0, STREAMS - 1))
        if kind in ("copy", "xor"):
            sb, db = draw(st.integers(0, 2)), draw(st.integers(0, 2))
            n = draw(st.integers(1, min(sizes[sb], sizes[db])))
            so, do = draw(st.integers(0, sizes[sb] - n)), draw(st.integers(0, sizes[db] - n))
            if sb == db and so < do + n and do < so + n:
                ops.append(("inc", stream, db, do, n))  # overlapping copies are rejected: do something else
            elif kind == "copy":
                ops.append(("copy", stream, sb, so, db, do, n))
            else:
                ops.append(("xor", stream, sb, so, db, do, n, draw(st.integers(0, 255))))
        elif kind == "fill":
            b = draw(st.integers(0, 2))
            width = draw(st.sampled_from([1, 2, 4]))
            slots = sizes[b] // width
            k = draw(st.integers(1, slots))
            off = draw(st.integers(0, slots - k)) * width
            pattern = bytes(draw(st.lists(st.integers(0, 255), min_size=width, max_size=width)))
            ops.append(("fill", stream, b, off, k * width, pattern))
        else:
            b = draw(st.integers(0, 2))
            n = draw(st.integers(1, sizes[b]))
            ops.append(("inc", stream, b, draw(st.integers(0, sizes[b] - n)), n))
    seed = draw(st.integers(0, 2**32 - 1))
    return sizes, ops, seed


def _accesses(op):
    """(buffer, start, end, writes) of an operation."""
    kind = op[0]
    if kind in ("copy", "xor"):
        _, _, sb, so, db, do, n = op[:7]
        return [(sb, so, so + n, False), (db, do, do + n, True)]
    if kind == "fill":
        _, _, b, off, n, _ = op
        return [(b, off, off + n, True)]
    _, _, b, off, n = op
    return [(b, off, off + n, True)]


def _conflict(a, b):
    return any(x[0] == y[0] and x[1] < y[2] and y[1] < x[2] and (x[3] or y[3]) for x in _accesses(a) for y in _accesses(b))


def _reference(sizes, ops, initial):
    bufs = [x.copy() for x in initial]
    for op in ops:
        kind = op[0]
        if kind == "copy":
            _, _, sb, so, db, do, n = op
            bufs[db][do : do + n] = bufs[sb][so : so + n].copy()
        elif kind == "xor":
            _, _, sb, so, db, do, n, key = op
            bufs[db][do : do + n] = bufs[sb][so : so + n] ^ np.uint8(key)
        elif kind == "fill":
            _, _, b, off, n, pattern = op
            bufs[b][off : off + n] = np.frombuffer(pattern * (n // len(pattern)), np.uint8)
        else:
            _, _, b, off, n = op
            bufs[b][off : off + n] += np.uint8(1)
    return bufs


def _issue(target, op, bufs, **kw):
    kind = op[0]
    if kind == "copy":
        _, _, sb, so, db, do, n = op
        return target.copyto(bufs[db].slice(do, n), bufs[sb].slice(so, n), **kw)
    if kind == "xor":
        _, _, sb, so, db, do, n, key = op
        grid = -(-n // BLOCK)
        return target.dispatch(XOR_BYTES, grid, [bufs[sb].slice(so, n), bufs[db].slice(do, n)], block=BLOCK, scalars=(key, n), **kw)
    if kind == "fill":
        _, _, b, off, n, pattern = op
        return target.fill(bufs[b].slice(off, n), pattern, **kw)
    _, _, b, off, n = op
    return target.dispatch(INC_BYTES, -(-n // BLOCK), [bufs[b].slice(off, n)], block=BLOCK, scalars=(n,), **kw)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=programs())
def test_random_programs_match_serial_reference(engine, program):
    sizes, ops, seed = program
    # the host engine shuffles interleavings so that a missing dependency shows
    dev = open_device(engine, max_transfer_bytes=32, **({"jitter_us": 100} if engine == "host" else {}))
    rng = np.random.default_rng(seed)
    initial = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    expect = _reference(sizes, ops, initial)
    streams = [dev.stream() for _ in range(STREAMS)]
    s0 = streams[0]

    # (a) three streams, ordered by events exactly where operations conflict
    bufs = [s0.allocate_from(x) for x in initial]
    events = []
    for i, op in enumerate(ops):
        stream = streams[op[1]]
        for j in range(i):
            if ops[j][1] != op[1] and _conflict(ops[j], op):
                stream.wait_event(events[j])
        _issue(stream, op, bufs)
        events.append(stream.record_event())
    for s in streams:
        s.synchronize()
    for got, want in zip(bufs, expect):
        np.testing.assert_array_equal(s0.download(got), want)

    # (b) the same program as an access graph: HRX infers the dependencies
    bufs = [s0.allocate_from(x) for x in initial]
    g = s0.access_graph()
    for op in ops:
        _issue(g, op, bufs)
    g.launch().wait()
    for got, want in zip(bufs, expect):
        np.testing.assert_array_equal(s0.download(got), want)

    # (c) the graph replayed with fresh inputs of the same size gives the same answer
    names = [g.input(f"b{i}", b) for i, b in enumerate(bufs)]
    assert len(names) == 3
    fresh = [s0.allocate_from(x) for x in initial]
    g.launch(inputs={f"b{i}": b for i, b in enumerate(fresh)}).wait()
    for got, want in zip(fresh, expect):
        np.testing.assert_array_equal(s0.download(got), want)
    g.close()
