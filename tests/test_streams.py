"""Streams: copies, fills, dispatches, splitting, staging, events (every engine)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.staging import DEFAULT_CHUNKS, MAX_CHUNK_BYTES

from .kernels import ADD_U32, EMPTY, SLEEPY, XOR_BYTES, launch_1d


def _fresh(s, n, value=0xAB):
    buf = s.allocate_from(np.full(n, value, np.uint8))
    return buf


def test_copy_fill_dispatch(stream):
    s = stream
    n = 4096
    src = s.allocate_from(np.arange(n, dtype=np.uint32))
    dst = s.allocate(n * 4)
    s.copyto(dst, src)
    grid, block = launch_1d(n)
    s.dispatch(ADD_U32, grid, [dst], block=block, scalars=(7, n))
    s.fill(dst.slice(0, 16), np.uint32(0xDEADBEEF))
    out = s.download(dst).view(np.uint32)
    expect = np.arange(n, dtype=np.uint32) + 7
    expect[:4] = 0xDEADBEEF
    np.testing.assert_array_equal(out, expect)


@pytest.mark.parametrize("pattern", [0x5A, b"\x01\x02", np.uint16(0xBEEF), np.float32(1.5), b"\x01\x02\x03\x04"])
def test_fill_patterns(stream, pattern):
    s = stream
    buf = _fresh(s, 64)
    if isinstance(pattern, int):
        s.fill(buf.slice(8, 48), pattern=pattern).wait()  # an int is a byte only when asked
    else:
        s.fill(buf.slice(8, 48), pattern).wait()  # bytes, or a numpy scalar of its own dtype
    out = s.download(buf)
    raw = bytes([pattern]) if isinstance(pattern, int) else (pattern.tobytes() if isinstance(pattern, np.generic) else pattern)
    assert out[8:56].tobytes() == raw * (48 // len(raw))
    assert (out[:8] == 0xAB).all() and (out[56:] == 0xAB).all()


def test_large_copies_and_fills_split_with_one_completion(engine):
    from .conftest import open_device

    dev = open_device(engine, max_transfer_bytes=4096)
    assert dev.info.limits.max_transfer_bytes == 4096
    s = dev.stream()
    n = 4096 * 5 + 100  # 6 pieces, the last one short
    data = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    src = s.allocate_from(data)
    dst = s.allocate(n)
    done = s.copyto(dst, src)
    assert isinstance(done, hrx.Completion)
    src.close()  # retained until retirement
    done.wait()
    np.testing.assert_array_equal(s.download(dst), data)
    s.fill(dst, np.uint32(0x01020304)).wait() if n % 4 == 0 else s.fill(dst.slice(0, n - n % 4), np.uint32(0x01020304)).wait()
    out = s.download(dst)
    assert out[: n - n % 4].tobytes() == b"\x04\x03\x02\x01" * ((n - n % 4) // 4)
    # uploads larger than the transfer limit split as well
    s.upload_blocking(dst, data[::-1].copy())
    np.testing.assert_array_equal(s.download(dst), data[::-1])


def test_split_copy_inside_graph(engine):
    from .conftest import open_device

    dev = open_device(engine, max_transfer_bytes=4096)
    s = dev.stream()
    n = 4096 * 3 + 12
    data = np.random.default_rng(2).integers(0, 256, n, dtype=np.uint8)
    src, dst = s.allocate_from(data), s.allocate(n)
    g = s.access_graph()
    g.fill(dst, 0)
    g.copyto(dst, src)
    g.launch().wait()
    np.testing.assert_array_equal(s.download(dst), data)


# -- every error path: typed error, destination unchanged ------------------------

def _assert_unchanged(s, buf, value=0xAB):
    assert (s.download(buf) == value).all()


def test_copy_errors_leave_destination_unchanged(dev):
    s = dev.stream()
    a, b = _fresh(s, 64), _fresh(s, 64)
    with pytest.raises(hrx.OutOfBounds):
        s.copyto(b.slice(0, 32), a)  # length mismatch
    with pytest.raises(hrx.Overlap):
        s.copyto(a.slice(16, 32), a.slice(0, 32))
    with pytest.raises(hrx.InvalidArgument):
        s.copyto(b, a.binding().write())  # source declared write-only
    with pytest.raises(hrx.InvalidArgument):
        s.copyto(b.binding().read(), a)  # destination declared read-only
    with pytest.raises(hrx.InvalidArgument):
        s.copyto(np.zeros(64, np.uint8), a)  # type: ignore[arg-type]
    with pytest.raises(hrx.OutOfBounds):
        s.copyto(b.slice(32, 40), a.slice(0, 64))
    _assert_unchanged(s, b)
    _assert_unchanged(s, a)
    # adjacent, non-overlapping ranges of one buffer are fine
    s.copyto(a.slice(32, 32), a.slice(0, 32)).wait()


def test_fill_errors_leave_destination_unchanged(dev):
    s = dev.stream()
    b = _fresh(s, 64)
    with pytest.raises(hrx.InvalidArgument):
        s.fill(b, 256)
    with pytest.raises(hrx.InvalidArgument):
        s.fill(b, b"\x01\x02\x03")
    with pytest.raises(hrx.InvalidArgument):
        s.fill(b.slice(2, 8), np.uint32(1))  # misaligned for a 4-byte pattern
    with pytest.raises(hrx.InvalidArgument):
        s.fill(b.slice(0, 6), np.uint32(1))  # length not a multiple
    with pytest.raises(hrx.InvalidArgument):
        s.fill(b.binding().read(), pattern=1)
    with pytest.raises(hrx.InvalidArgument):
        s.fill(b, "x")  # type: ignore[arg-type]
    with pytest.raises(hrx.InvalidArgument):
        s.fill(b, True)  # type: ignore[arg-type]
    _assert_unchanged(s, b)


def test_dispatch_errors_leave_destination_unchanged(dev):
    s = dev.stream()
    b = _fresh(s, 64)
    with pytest.raises(hrx.InvalidArgument):
        s.dispatch(ADD_U32, 1, [b, b], scalars=(1, 16))  # too many buffers
    with pytest.raises(hrx.InvalidArgument):
        s.dispatch(ADD_U32, 1, [b], scalars=(1,))  # too few scalars
    with pytest.raises(hrx.InvalidArgument):
        s.dispatch(ADD_U32, 1, [b], scalars=(-1, 16))  # not a uint32
    with pytest.raises(hrx.InvalidArgument):
        s.dispatch(ADD_U32, 0, [b], scalars=(1, 16))  # empty grid
    with pytest.raises(hrx.InvalidArgument):
        s.dispatch(ADD_U32, (1, 1, 1, 1), [b], scalars=(1, 16))
    with pytest.raises(hrx.InvalidArgument):
        s.dispatch(ADD_U32, 1, [b], block=4096, scalars=(1, 16))
    with pytest.raises(hrx.InvalidArgument):
        s.dispatch("add_u32", 1, [b], scalars=(1, 16))  # type: ignore[arg-type]
    with pytest.raises(hrx.InvalidArgument):
        s.dispatch(ADD_U32, 1, b, scalars=(1, 16))  # type: ignore[arg-type]
    only_other = hrx.Kernel("only_other", buffers=0, sources={"made-up-target": "..."})
    with pytest.raises(hrx.Unsupported, match="made-up-target"):
        s.dispatch(only_other, 1, [])
    _assert_unchanged(s, b)


def test_upload_download_errors(dev):
    s = dev.stream()
    b = _fresh(s, 64)
    with pytest.raises(hrx.OutOfBounds):
        s.upload(b, np.zeros(65, np.uint8))  # whole destination checked first
    with pytest.raises(hrx.InvalidArgument):
        s.upload(b, np.zeros(0, np.uint8))
    with pytest.raises(hrx.InvalidArgument):
        s.upload(b, object())
    with pytest.raises(hrx.InvalidArgument):
        s.upload(b.binding().read(), np.zeros(8, np.uint8))
    with pytest.raises(hrx.OutOfBounds):
        s.download(b, out=np.zeros(63, np.uint8))
    with pytest.raises(hrx.InvalidArgument):
        s.download(b, out=np.zeros((8, 16), np.uint8)[:, ::2])
    with pytest.raises(hrx.InvalidArgument):
        s.allocate_from(b"")
    _assert_unchanged(s, b)


def test_buffers_of_another_device_are_rejected(engine):
    from .conftest import open_device

    d1 = open_device(engine)
    d2 = open_device(engine, max_transfer_bytes=1 << 20)
    assert d1 is not d2
    s = d1.stream()
    foreign = d2.allocate(16)
    local = d1.allocate(16)
    with pytest.raises(hrx.InvalidArgument, match="belongs to"):
        s.copyto(local, foreign)
    with pytest.raises(hrx.InvalidArgument, match="belongs to"):
        s.fill(foreign, 0)


# -- staging -----------------------------------------------------------------------

def test_upload_is_staged_in_bounded_chunks(dev):
    s = dev.stream()
    n = (DEFAULT_CHUNKS + 1) * MAX_CHUNK_BYTES + 12345  # more chunks than the ring holds
    data = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8)
    dst = s.allocate(n)
    done = s.upload(dst, data)
    data[:] = 0  # the host data may be reused as soon as upload returns
    done.wait()
    assert s.staging_bytes <= DEFAULT_CHUNKS * MAX_CHUNK_BYTES < n
    out = s.download(dst)
    np.testing.assert_array_equal(out, np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8))
    # many uploads reuse the same chunks
    before = s.staging_bytes
    for _ in range(5):
        s.upload(dst.slice(0, 1 << 20), np.ones(1 << 20, np.uint8))
    s.synchronize()
    assert s.staging_bytes == before


def test_upload_blocking_and_allocate_from(stream):
    s = stream
    data = np.arange(1000, dtype=np.float64)
    buf = s.allocate_from(data)
    assert buf.nbytes == data.nbytes
    np.testing.assert_array_equal(s.download(buf).view(np.float64), data)
    s.upload_blocking(buf.slice(8, 16), np.array([7.0, 9.0]))
    out = s.download(buf).view(np.float64)
    assert out[1] == 7.0 and out[2] == 9.0 and out[3] == 3.0
    into = np.empty(1000, np.float64)
    assert s.download(buf, out=into) is into
    assert into[2] == 9.0
    # bytes-like objects work too
    b2 = s.allocate_from(b"hello world!")
    assert s.download(b2).tobytes() == b"hello world!"


def test_failed_submission_keeps_accepted_chunks_on_timeline():
    """Host engine fault injection: chunk 3 of 4 fails to submit (staged as on a GPU)."""
    dev = hrx.device("host", max_transfer_bytes=1 << 30, copy_queues=1, direct_host_access=False)
    s = dev.stream()
    n = 3 * MAX_CHUNK_BYTES + 4096
    dst = s.allocate_from(np.zeros(n, np.uint8))
    s.synchronize()
    data = np.full(n, 9, np.uint8)
    dev.native.faults.fail_submit(after=3)  # a later chunk's submission fails
    with pytest.raises(hrx.DeviceError, match="injected"):
        s.upload(dst, data)
    assert dev.native.faults.injected == 1
    s.synchronize()  # the accepted chunks complete on the stream's timeline
    out = s.download(dst)
    accepted = int(np.argmin(out == 9)) // MAX_CHUNK_BYTES  # whole chunks written
    assert 1 <= accepted <= 3
    assert (out[: accepted * MAX_CHUNK_BYTES] == 9).all()
    assert (out[accepted * MAX_CHUNK_BYTES :] == 0).all()
    # the stream stays usable
    s.upload_blocking(dst, data)
    assert (s.download(dst) == 9).all()


# -- events, ordering, concurrency -----------------------------------------------------

def test_events_order_work_across_streams(dev):
    dev_streams = [dev.stream() for _ in range(3)]
    a, b, c = dev_streams
    flag = dev.allocate(16)
    a.fill(flag, 0).wait()
    a.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(100_000_000,))  # writes 1 after ~0.1 s
    ev = a.record_event()
    assert isinstance(ev, hrx.Event)
    b.wait_event(ev)
    b.copyto(flag.slice(4, 4), flag.slice(0, 4))  # must see the 1
    ev2 = b.record_event()
    c.wait_event(ev2)
    c.copyto(flag.slice(8, 4), flag.slice(4, 4))
    c.synchronize()
    assert ev.is_complete and ev2.query()
    out = c.download(flag).view(np.uint32)
    assert list(out[:3]) == [1, 1, 1]


def test_wait_event_same_queue_and_validation(dev):
    s = dev.stream()
    ev = s.record_event()
    s.wait_event(ev)  # same stream: ordered already
    with pytest.raises(hrx.InvalidArgument):
        s.wait_event("not an event")  # type: ignore[arg-type]


def test_concurrent_dispatch_from_threads(dev):
    n = 1024
    streams = [dev.stream() for _ in range(4)]
    bufs = [s.allocate_from(np.zeros(n, np.uint32)) for s in streams]
    errors = []

    def work(s, buf):
        try:
            grid, block = launch_1d(n)
            for _ in range(50):
                s.dispatch(ADD_U32, grid, [buf], block=block, scalars=(1, n))
            s.synchronize()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s, b)) for s, b in zip(streams, bufs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for s, b in zip(streams, bufs):
        assert (s.download(b).view(np.uint32) == 50).all()


def test_prepared_launch(stream):
    s = stream
    n = 256
    buf = s.allocate_from(np.zeros(n, np.uint32))
    launch = s.prepare(ADD_U32, 1, [buf], block=n, scalars=(3, n))
    for _ in range(10):
        done = launch.launch()
    done.wait()
    assert (s.download(buf).view(np.uint32) == 30).all()
    empty = s.prepare(EMPTY, 1, [])
    empty.launch().wait()


def test_prepared_launch_rebind(stream):
    """rebind() retargets one buffer of a prepared launch; work already launched keeps
    its old binding, a rejected rebind changes nothing."""
    s = stream
    n = 64
    src_a = s.allocate_from(np.arange(n, dtype=np.uint8))
    src_b = s.allocate_from(np.arange(n, dtype=np.uint8)[::-1].copy())
    out_a, out_b = s.allocate(n), s.allocate(n)
    launch = s.prepare(XOR_BYTES, 1, [src_a, out_a], block=n, scalars=(0xFF, n))
    launch.launch()
    launch.rebind(0, src_b.slice(0, n))
    launch.rebind(1, out_b.binding().write())
    done = launch.launch()
    done.wait()
    assert (s.download(out_a) == np.arange(n, dtype=np.uint8) ^ 0xFF).all()
    assert (s.download(out_b) == np.arange(n, dtype=np.uint8)[::-1] ^ 0xFF).all()
    # hazards follow the new binding: a copy into src_b after the launch waits for it
    launch.rebind(1, out_a)
    launch.launch()
    s.copyto(src_b, src_a)
    assert (s.download(out_a) == np.arange(n, dtype=np.uint8)[::-1] ^ 0xFF).all()
    # rejected rebinds change nothing
    ro = s.allocate(n)
    with pytest.raises(hrx.InvalidArgument, match="index"):
        launch.rebind(2, ro)
    with pytest.raises(hrx.InvalidArgument, match="bindings\\[1\\]"):
        launch.rebind(1, ro.binding().read())  # the kernel writes buffer 1
    other = hrx.device("host") if s.device.info.engine != "host" else None
    if other is not None:
        with pytest.raises(hrx.InvalidArgument):
            launch.rebind(0, other.allocate(n))
    with pytest.raises(hrx.InvalidArgument):
        launch.rebind(0, np.zeros(n, np.uint8))
    s.fill(out_a, 0)
    launch.launch().wait()
    assert (s.download(out_a) == np.arange(n, dtype=np.uint8) ^ 0xFF).all()  # src_b now holds src_a's bytes
    # a freed binding is refused at launch, not used
    launch.rebind(0, ro)
    ro.close()
    with pytest.raises(hrx.InvalidArgument, match="freed"):
        launch.launch()


def test_upload_file(stream, tmp_path):
    """upload_file reads a byte range of a file into device memory through staging:
    paths, descriptors and file objects; multi-chunk sizes; a rejected call changes nothing."""
    s = stream
    n = (64 << 20) + 12345  # more than one staging chunk
    data = np.random.default_rng(5).integers(0, 256, n, dtype=np.uint8)
    path = tmp_path / "blob.bin"
    data.tofile(path)
    big = s.allocate(n)
    s.upload_file(big, path)
    assert np.array_equal(s.download(big), data)
    small = s.allocate(1000)
    with open(path, "rb") as f:
        s.upload_file(small, f, offset=777, nbytes=1000)
        assert np.array_equal(s.download(small), data[777:1777])
        s.upload_file(small.slice(100, 50), f.fileno(), offset=n - 50)
    assert np.array_equal(s.download(small)[100:150], data[-50:])
    before = s.download(small)
    with pytest.raises(hrx.OutOfBounds, match="past the end"):
        s.upload_file(small, path, offset=n - 10, nbytes=20)
    with pytest.raises(hrx.OutOfBounds, match="beyond the end"):
        s.upload_file(small, path, offset=n + 1)
    with pytest.raises(hrx.OutOfBounds, match="do not fit"):
        s.upload_file(small, path, offset=0, nbytes=1001)
    with pytest.raises(hrx.InvalidArgument, match="cannot open"):
        s.upload_file(small, tmp_path / "missing.bin")
    with pytest.raises(hrx.InvalidArgument, match="not open"):
        s.upload_file(small, 987654)
    with pytest.raises(hrx.InvalidArgument, match="read-only"):
        s.upload_file(small.binding().read(), path, nbytes=10)
    with pytest.raises(hrx.InvalidArgument, match="offset"):
        s.upload_file(small, path, offset=-1)
    assert np.array_equal(s.download(small), before)
    # several ranges through one pipeline; one bad range rejects the whole call
    parts = [s.allocate(n // 3) for _ in range(3)]
    s.upload_file_ranges(path, [(parts[0], 0, n // 3), (parts[1], n // 3, n // 3), (parts[2].slice(0, 100), n - 100, 100)])
    assert np.array_equal(s.download(parts[0]), data[: n // 3])
    assert np.array_equal(s.download(parts[1]), data[n // 3 : 2 * (n // 3)])
    assert np.array_equal(s.download(parts[2])[:100], data[-100:])
    s.fill(parts[0], 0)
    with pytest.raises(hrx.OutOfBounds, match="ranges\\[1\\]: nbytes"):
        s.upload_file_ranges(path, [(parts[0], 0, 10), (parts[1], n - 5, 10)])
    assert not s.download(parts[0]).any()
    with pytest.raises(hrx.InvalidArgument, match="ranges"):
        s.upload_file_ranges(path, [])
    with pytest.raises(hrx.InvalidArgument, match="ranges\\[0\\]"):
        s.upload_file_ranges(path, [(parts[0], 0)])
    for p in parts:
        p.close()
    big.close()


def test_failed_kernel_raises_and_stream_recovers(dev):
    if dev.kind != "host":
        pytest.skip("a failing host callable is the host engine's fault model")
    s = dev.stream()

    def boom(buf):
        raise RuntimeError("kernel exploded")

    bad = hrx.Kernel("boom", buffers=1, host=boom)
    buf = s.allocate_from(np.zeros(16, np.uint8))
    done = s.dispatch(bad, 1, [buf])
    with pytest.raises(hrx.DeviceError, match="exploded"):
        done.wait()
    with pytest.raises(hrx.DeviceError):
        s.synchronize()
    s.synchronize()  # reported once
    s.fill(buf, pattern=1).wait()
    assert (s.download(buf) == 1).all()


def test_a_failure_crosses_wait_event(dev):
    """Work that waited for failed work on another stream reports that failure: its
    inputs were never written, so its results must not be returned as good."""
    if dev.kind != "host":
        pytest.skip("a failing host callable is the host engine's fault model")

    def boom(buf):
        raise RuntimeError("producer exploded")

    bad = hrx.Kernel("boom", buffers=1, host=boom)
    producer, consumer = dev.stream(), dev.stream()
    data = producer.allocate_from(np.zeros(16, np.uint8))
    out = consumer.allocate_from(np.zeros(16, np.uint8))
    producer.dispatch(bad, 1, [data])
    consumer.wait_event(producer.record_event())
    consumer.copyto(out, data)
    with pytest.raises(hrx.DeviceError, match="waited for work .* that failed .*producer exploded"):
        consumer.synchronize()
    consumer.synchronize()  # reported once
    with pytest.raises(hrx.DeviceError, match="exploded"):
        producer.synchronize()  # the producer reports its own failure as before
    # a download after such a wait raises too; a clean wait does not
    producer.dispatch(bad, 1, [data])
    consumer.wait_event(producer.record_event())
    consumer.copyto(out, data)
    with pytest.raises(hrx.DeviceError, match="waited for work"):
        consumer.download(out)
    producer.fill(data, pattern=7)
    consumer.wait_event(producer.record_event())
    consumer.copyto(out, data)
    assert (consumer.download(out) == 7).all()
    same = dev.stream()  # streams sharing a queue are ordered, and still inherit the failure
    if same.slot is producer.slot:
        producer.dispatch(bad, 1, [data])
        same.wait_event(producer.record_event())
        with pytest.raises(hrx.DeviceError, match="waited for work"):
            same.synchronize()


# -- uploads into plain host memory (DeviceInfo.host_memory) ------------------------------

def test_upload_on_an_idle_queue_copies_at_once():
    """The host engine's buffers are host memory: an upload on an idle queue is one copy
    on the calling thread, complete on return, no staging ring."""
    dev = hrx.device("host")
    assert dev.info.host_memory and not hrx.device("host", direct_host_access=False).info.host_memory
    s = dev.stream()
    dst = s.allocate(3 * MAX_CHUNK_BYTES + 5)
    s.synchronize()
    data = np.random.default_rng(1).integers(0, 256, dst.nbytes, dtype=np.uint8)
    before = dev.stats.upload_bytes
    done = s.upload(dst.slice(1, dst.nbytes - 1), data[1:])
    assert done.is_complete and s.staging_bytes == 0
    assert dev.stats.upload_bytes - before == dst.nbytes - 1
    data[1:].fill(0)  # the caller may reuse its data at once
    out = s.download(dst)
    assert (out[1:] == np.random.default_rng(1).integers(0, 256, dst.nbytes, dtype=np.uint8)[1:]).all()
    done.wait()


def test_upload_orders_after_work_pending_on_its_queue():
    """Work still queued on the stream (a slow kernel writing the destination) keeps the
    upload behind it: the upload's bytes are what remains."""
    dev = hrx.device("host")
    s = dev.stream()
    flag = s.allocate_from(np.zeros(4, np.uint32))
    s.synchronize()
    s.dispatch(SLEEPY, 1, [flag], scalars=(100_000_000,))  # writes 1 after ~0.1 s
    done = s.upload(flag, np.full(4, 7, np.uint32))
    done.wait()
    assert (s.download(flag).view(np.uint32) == 7).all()


def test_upload_orders_after_a_wait_for_another_stream():
    """A wait for another stream's event is pending work of this queue: an upload issued
    after it lands after the other stream's write."""
    dev = hrx.device("host")
    a, b = dev.stream(), dev.stream()
    flag = a.allocate_from(np.zeros(4, np.uint32))
    a.synchronize()
    a.dispatch(SLEEPY, 1, [flag], scalars=(100_000_000,))
    b.wait_event(a.record_event())
    if b.slot is a.slot:
        pytest.skip("the two streams share a queue")
    b.upload(flag, np.full(4, 7, np.uint32)).wait()
    a.synchronize()
    assert (b.download(flag).view(np.uint32) == 7).all()


def test_upload_after_a_reported_failure_completes_cleanly():
    """The completion of a direct upload is its own: an earlier failed kernel on the
    stream does not make it raise."""
    dev = hrx.device("host")
    s = dev.stream()
    buf = s.allocate_from(np.zeros(16, np.uint8))
    s.synchronize()

    def boom(b):
        raise RuntimeError("kernel exploded")

    failed = s.dispatch(hrx.Kernel("boom", buffers=1, host=boom), 1, [buf])
    with pytest.raises(hrx.DeviceError, match="exploded"):
        failed.wait()
    done = s.upload(buf, np.full(16, 3, np.uint8))
    done.wait()
    with pytest.raises(hrx.DeviceError):
        s.synchronize()  # the kernel's failure is still the stream's to report
    assert (s.download(buf) == 3).all()


def test_upload_into_a_mapped_destination_is_refused_before_copying():
    dev = hrx.device("host")
    s = dev.stream()
    buf = s.allocate_from(np.zeros(64, np.uint8))
    s.synchronize()
    with buf.map("read") as host:
        with pytest.raises(hrx.AccessConflict):
            s.upload(buf, np.ones(64, np.uint8))
        assert (host == 0).all()


@pytest.mark.parametrize("threads", ["1", "4"])
def test_staged_transfers_round_trip(monkeypatch, threads):
    """The staging pipelines (what a discrete GPU uses) on the host engine."""
    monkeypatch.setenv("HRX_STAGING_THREADS", threads)
    dev = hrx.device("host", direct_host_access=False)
    s = dev.stream()
    n = (DEFAULT_CHUNKS + 1) * MAX_CHUNK_BYTES + 12345  # more chunks than the ring, the last one short
    data = np.random.default_rng(5).integers(0, 256, n, dtype=np.uint8)
    dst = s.allocate(n)
    s.upload_blocking(dst, data)
    assert s.staging_bytes <= DEFAULT_CHUNKS * MAX_CHUNK_BYTES
    out = s.download(dst)
    np.testing.assert_array_equal(out, data)
    # a view in the middle, into a caller's array
    into = np.zeros(MAX_CHUNK_BYTES + 7, np.uint8)
    s.download(dst.slice(MAX_CHUNK_BYTES - 3, MAX_CHUNK_BYTES + 7), out=into)
    np.testing.assert_array_equal(into, data[MAX_CHUNK_BYTES - 3 : 2 * MAX_CHUNK_BYTES + 4])
    small = s.allocate_from(b"staged!")
    assert s.download(small).tobytes() == b"staged!"


def test_copy_queue_transfers_overlap_compute(dev):
    """A copy-family stream moves bytes while a compute stream is busy."""
    if dev.info.family("copy") is None:
        pytest.skip("no copy queues")
    compute, copier = dev.stream("compute"), dev.stream("copy")
    flag = dev.allocate(8)
    src = copier.allocate_from(np.full(64 << 20, 3, np.uint8))
    dst = dev.allocate(64 << 20)
    busy = compute.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(1_000_000_000,))
    t0 = time.perf_counter()
    copier.copyto(dst, src).wait()
    assert time.perf_counter() - t0 < 0.6
    assert not busy.is_complete  # the copy did not wait for the kernel
    busy.wait()
    assert (copier.download(dst.slice(0, 4096)) == 3).all()
