"""Bounded Chrome/Perfetto traces: recording, export and the format validator."""

from __future__ import annotations

import copy
import json
import threading

import pytest

from hrx_core.errors import InvalidArgument
from hrx_core.execution.trace import TraceRecorder, validate_trace


class FakeClock:
    """A settable ns clock so traces are deterministic."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


T0 = 1_000_000


def roundtrip(rec: TraceRecorder) -> dict:
    return json.loads(json.dumps(rec.to_json()))


def by_phase(trace: dict, ph: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def thread_names(trace: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in by_phase(trace, "M") if e["name"] == "thread_name"}


@pytest.fixture
def pipeline() -> tuple[TraceRecorder, dict[str, int], dict[str, int]]:
    """Four lanes, overlapping work across lanes, nesting on one lane, flows, counters."""
    rec = TraceRecorder(clock=FakeClock(T0))
    lanes = {name: rec.track(name, "lanes") for name in ("upload", "compute", "download", "npu")}
    queue = rec.track("cuda:0/compute0", "queues")
    us = 1000
    ids = {
        "up": rec.slice(lanes["upload"], "upload x", T0, T0 + 100 * us, args={"bytes": 4096}),
        "mm": rec.slice(lanes["compute"], "matmul", T0 + 100 * us, T0 + 400 * us),
        "mm.k1": rec.slice(lanes["compute"], "kernel 1", T0 + 120 * us, T0 + 200 * us),
        "mm.k2": rec.slice(lanes["compute"], "kernel 2", T0 + 200 * us, T0 + 400 * us),  # shares parent's end
        "up2": rec.slice(lanes["upload"], "upload y", T0 + 150 * us, T0 + 250 * us),  # overlaps compute
        "npu": rec.slice(lanes["npu"], "npu conv", T0 + 250 * us + 7, T0 + 380 * us + 3),
        "down": rec.slice(lanes["download"], "download z", T0 + 400 * us, T0 + 451_351),
        "q": rec.slice(queue, "submit", T0 + 99 * us, T0 + 401 * us, category="queue"),
    }
    rec.flow(ids["up"], ids["mm"])
    rec.flow(ids["up2"], ids["npu"])
    rec.flow(ids["mm"], ids["down"], name="hazard")
    rec.counter("memory", "tracked_bytes", T0, 0)
    rec.counter("memory", "tracked_bytes", T0 + 50 * us, 4096)
    rec.counter("tracked", T0 + 60 * us, live=4096, peak=8192)
    rec.instant(lanes["compute"], "retire", T0 + 400 * us, args={"value": 3})
    return rec, lanes, ids


def test_pipeline_trace_is_valid(pipeline):
    rec, _, _ = pipeline
    trace = roundtrip(rec)
    validate_trace(trace)
    assert trace["displayTimeUnit"] == "ns"
    assert trace["otherData"]["dropped_events"] == 0
    assert len(by_phase(trace, "X")) == 8
    assert len(by_phase(trace, "C")) == 3
    assert len(by_phase(trace, "i")) == 1


def test_tracks_are_threads_in_group_processes(pipeline):
    rec, lanes, _ = pipeline
    assert rec.track("compute", "lanes") == lanes["compute"]  # stable id
    assert rec.track("compute", "queues") != lanes["compute"]  # names are per group
    trace = rec.to_json()
    processes = {e["pid"]: e["args"]["name"] for e in by_phase(trace, "M") if e["name"] == "process_name"}
    assert set(processes.values()) >= {"lanes", "queues", "memory", "hrx"}
    names = thread_names(trace)
    lanes_pid = next(pid for pid, name in processes.items() if name == "lanes")
    lane_rows = {name: key for key, name in names.items() if key[0] == lanes_pid}
    assert set(lane_rows) == {"upload", "compute", "download", "npu"}
    sort = {
        (e["pid"], e["tid"]): e["args"]["sort_index"] for e in by_phase(trace, "M") if e["name"] == "thread_sort_index"
    }
    order = sorted(lane_rows, key=lambda name: sort[lane_rows[name]])
    assert order == ["upload", "compute", "download", "npu"]
    assert all(pid != tid for pid, tid in names)


def test_explicit_sort_index_orders_lanes():
    rec = TraceRecorder()
    rec.track("npu", "lanes", sort_index=3)
    rec.track("upload", "lanes", sort_index=0)
    trace = rec.to_json()
    names = thread_names(trace)
    sort = {
        names[(e["pid"], e["tid"])]: e["args"]["sort_index"]
        for e in by_phase(trace, "M")
        if e["name"] == "thread_sort_index"
    }
    assert sort["upload"] < sort["npu"]


def test_slice_timestamps_are_relative_microseconds(pipeline):
    rec, _, _ = pipeline
    trace = rec.to_json()
    slices = {e["name"]: e for e in by_phase(trace, "X")}
    assert slices["upload x"]["ts"] == 0 and slices["upload x"]["dur"] == 100
    assert slices["upload x"]["args"] == {"bytes": 4096}
    assert slices["submit"]["cat"] == "queue"
    # Non-integral microseconds read back as exact nanoseconds, as Perfetto converts them.
    npu = slices["npu conv"]
    assert round(npu["ts"] * 1000) == 250_007 and int(npu["ts"] * 1000) == 250_007
    assert round(npu["dur"] * 1000) == 129_996


def test_flows_bind_inside_their_slices(pipeline):
    rec, _, _ = pipeline
    trace = roundtrip(rec)
    slices = {e["name"]: e for e in by_phase(trace, "X")}
    starts, finishes = by_phase(trace, "s"), by_phase(trace, "f")
    assert len(starts) == len(finishes) == 3
    for s, f in zip(starts, finishes):
        assert (s["id"], s["cat"], s["name"]) == (f["id"], f["cat"], f["name"])
        assert f["bp"] == "e"
    flow = {(s["tid"], f["tid"]): (s, f) for s, f in zip(starts, finishes)}
    up, mm = slices["upload x"], slices["matmul"]
    s, f = flow[(up["tid"], mm["tid"])]
    assert up["ts"] <= s["ts"] <= up["ts"] + up["dur"]
    assert mm["ts"] <= f["ts"] <= mm["ts"] + mm["dur"]
    assert s["name"] == "dep" and flow[(mm["tid"], slices["download z"]["tid"])][0]["name"] == "hazard"


def test_counters(pipeline):
    rec, lanes, _ = pipeline
    rec.counter(lanes["compute"], "occupancy", T0, 0.5)
    trace = roundtrip(rec)
    validate_trace(trace)
    counters = by_phase(trace, "C")
    assert counters[0]["args"] == {"value": 0} and counters[1]["args"] == {"value": 4096}
    assert counters[2]["args"] == {"live": 4096, "peak": 8192}
    assert counters[-1]["pid"] == next(e["pid"] for e in by_phase(trace, "X") if e["name"] == "matmul")


def test_partial_overlap_on_one_track_moves_to_an_extra_row():
    clock = FakeClock(0)
    rec = TraceRecorder(clock=clock)
    lane = rec.track("compute", "lanes")
    a = rec.slice(lane, "a", 0, 100)
    b = rec.slice(lane, "b", 50, 150)  # partially overlaps a
    rec.flow(a, b)
    trace = roundtrip(rec)
    validate_trace(trace)
    assert trace["otherData"]["overlap_rows"] == 1
    rows = {e["name"]: e["tid"] for e in by_phase(trace, "X")}
    assert rows["a"] != rows["b"]
    assert thread_names(trace)[(by_phase(trace, "X")[1]["pid"], rows["b"])] == "compute (overlap 1)"


def test_events_before_start_are_clipped():
    rec = TraceRecorder(clock=FakeClock(1000))
    lane = rec.track("compute")
    rec.slice(lane, "early", 0, 3000)
    rec.slice(lane, "inner", 500, 2000)
    trace = roundtrip(rec)
    validate_trace(trace)
    assert [(e["ts"], e["dur"]) for e in by_phase(trace, "X")] == [(0, 2), (0, 1)]


def test_ring_drops_oldest_and_counts():
    rec = TraceRecorder(max_events=10, clock=FakeClock(0))
    names = [rec.track(n, "lanes") for n in ("upload", "compute")]
    for i in range(25):
        rec.slice(names[i % 2], f"s{i}", i * 10, i * 10 + 5)
    assert len(rec) == 10 and rec.dropped == 15
    trace = roundtrip(rec)
    validate_trace(trace)
    assert [e["name"] for e in by_phase(trace, "X")] == [f"s{i}" for i in range(15, 25)]
    assert trace["otherData"]["dropped_events"] == 15
    assert set(thread_names(trace).values()) == {"upload", "compute"}  # metadata never dropped


def test_flow_to_dropped_slice_is_omitted():
    rec = TraceRecorder(max_events=3, clock=FakeClock(0))
    lane = rec.track("compute")
    first = rec.slice(lane, "first", 0, 10)
    rec.slice(lane, "a", 10, 20)
    rec.slice(lane, "b", 20, 30)
    last = rec.slice(lane, "last", 30, 40)  # drops "first"
    rec.flow(first, last)
    trace = roundtrip(rec)
    validate_trace(trace)
    assert not by_phase(trace, "s") and trace["otherData"]["unbound_flows"] == 1


def test_thread_safety_smoke():
    rec = TraceRecorder(max_events=5_000)
    per_thread, threads = 2_000, 8

    def work(k: int) -> None:
        track = rec.track(f"lane{k % 4}", "lanes")
        prev = None
        for i in range(per_thread):
            now = rec.now()
            sid = rec.slice(track, "r", now, now)
            if prev is not None and i % 50 == 0:
                rec.flow(prev, sid)
            rec.counter("tracked", now, live=i)
            prev = sid

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(rec) == 5_000
    total = threads * (2 * per_thread + (per_thread - 1) // 50)
    assert rec.dropped == total - 5_000
    assert len({e["tid"] for e in by_phase(rec.to_json(), "X")}) <= 4


def test_write_produces_loadable_json(pipeline, tmp_path):
    rec, _, _ = pipeline
    path = rec.write(tmp_path / "trace.json")
    with open(path) as f:
        data = json.load(f)
    validate_trace(data)
    assert data == roundtrip(rec)


@pytest.mark.parametrize(
    "call",
    [
        lambda r, t: r.slice(t, "x", 10, 5),
        lambda r, t: r.slice(99, "x", 0, 5),
        lambda r, t: r.slice(t, "", 0, 5),
        lambda r, t: r.slice(t, "x", 0.5, 5),
        lambda r, t: r.flow(0, 1),
        lambda r, t: r.counter("c", 0),
        lambda r, t: r.counter("c", 0, v="high"),
        lambda r, t: r.counter(t, "c", 0, float("nan")),
        lambda r, t: r.instant(t, "x", 0, args=[1]),
        lambda r, t: r.track("x", ""),
    ],
)
def test_bad_arguments_raise_invalid_argument(call):
    rec = TraceRecorder()
    track = rec.track("compute")
    with pytest.raises(InvalidArgument):
        call(rec, track)
    assert len(rec) == 0


def test_bad_max_events():
    with pytest.raises(InvalidArgument, match="max_events"):
        TraceRecorder(max_events=0)


# -- the validator against hand-broken traces -------------------------------------------

GOOD = {
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 1, "args": {"name": "lanes"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 10, "args": {"name": "compute"}},
        {"ph": "X", "name": "a", "cat": "hrx", "pid": 1, "tid": 10, "ts": 0, "dur": 10},
        {"ph": "X", "name": "b", "cat": "hrx", "pid": 1, "tid": 10, "ts": 2, "dur": 3},
        {"ph": "X", "name": "c", "cat": "hrx", "pid": 1, "tid": 11, "ts": 5, "dur": 10},
        {"ph": "B", "name": "d", "pid": 1, "tid": 12, "ts": 1},
        {"ph": "E", "pid": 1, "tid": 12, "ts": 4},
        {"ph": "s", "name": "dep", "cat": "hrx", "id": 1, "pid": 1, "tid": 10, "ts": 1},
        {"ph": "f", "bp": "e", "name": "dep", "cat": "hrx", "id": 1, "pid": 1, "tid": 11, "ts": 6},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 3, "args": {"bytes": 10}},
        {"ph": "i", "s": "t", "name": "i", "pid": 1, "tid": 10, "ts": 3},
    ]
}


def test_hand_written_good_trace_is_valid():
    validate_trace(copy.deepcopy(GOOD))


def broken(index: int, **changes) -> dict:
    trace = copy.deepcopy(GOOD)
    event = trace["traceEvents"][index]
    for key, value in changes.items():
        if value is None:
            del event[key]
        else:
            event[key] = value
    return trace


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        ([], "traceEvents"),
        ({"events": []}, "traceEvents"),
        (broken(2, ph=None), r"traceEvents\[2\]: missing 'ph'"),
        (broken(2, ph="Q"), r"traceEvents\[2\]: unknown phase"),
        (broken(2, pid="1"), r"traceEvents\[2\].*pid"),
        (broken(2, tid=None), r"traceEvents\[2\].*tid"),
        (broken(3, dur=-1), r"traceEvents\[3\].*'dur' >= 0"),
        (broken(3, ts=-5), r"traceEvents\[3\].*'ts' >= 0"),
        (broken(3, ts="2"), r"traceEvents\[3\].*'ts'"),
        (broken(7, ph="t"), r"traceEvents\[(7|8)\]: flow .* no earlier matching 's'"),
        (broken(7, id=2), r"traceEvents\[8\]: flow 'f' .* no earlier matching 's'"),
        (broken(8, cat=None), r"traceEvents\[8\]: flow event needs a str 'cat'"),
        (broken(8, id=None), r"traceEvents\[8\]: flow event needs an 'id'"),
        (broken(8, ts=50), r"traceEvents\[8\]: flow 'f' .* cannot bind"),
        (broken(3, ts=8), r"traceEvents\[3\]: slice \[8000, 11000\] ns partially overlaps traceEvents\[2\]"),
        (broken(4, tid=10), r"partially overlaps"),
        (broken(6, tid=13), r"traceEvents\[6\]: 'E' event with no open 'B'"),
        (broken(9, args={"bytes": "10"}), r"traceEvents\[9\]: 'C' event series 'bytes' has non-numeric"),
        (broken(9, args={}), r"traceEvents\[9\]: 'C' event needs non-empty 'args'"),
        (broken(0, name="process_title"), r"traceEvents\[0\]: unknown metadata name"),
        (broken(1, args={"name": 3}), r"traceEvents\[1\]: 'thread_name' needs a str"),
        (broken(10, s="x"), r"traceEvents\[10\]: instant scope"),
    ],
)
def test_broken_traces_raise_value_error(trace, message):
    with pytest.raises(ValueError, match=message):
        validate_trace(trace)


def test_flow_finish_without_start():
    trace = copy.deepcopy(GOOD)
    del trace["traceEvents"][7]
    with pytest.raises(ValueError, match=r"traceEvents\[7\]: flow 'f'.*no earlier matching 's'"):
        validate_trace(trace)


def test_overlap_is_judged_in_perfetto_nanoseconds():
    # 4.35 us * 1000 is 4349.999... ; Perfetto rounds it to 4350 ns, so a child
    # ending there is nested, not overlapping.
    trace = {
        "traceEvents": [
            {"ph": "X", "name": "p", "pid": 1, "tid": 2, "ts": 0, "dur": 4.35},
            {"ph": "X", "name": "c", "pid": 1, "tid": 2, "ts": 4.1, "dur": 0.25},
        ]
    }
    validate_trace(trace)


def test_flow_ids_and_binding_follow_perfetto():
    trace = copy.deepcopy(GOOD)
    trace["traceEvents"][7]["id"] = "1"  # Perfetto reads string ids as hex: "1" == 1
    del trace["traceEvents"][8]["bp"]  # without bp "e" it binds to the next slice to start
    trace["traceEvents"][8]["ts"] = 4
    validate_trace(trace)
    trace["traceEvents"][8]["ts"] = 6  # no slice on tid 11 starts at or after 6
    with pytest.raises(ValueError, match=r"traceEvents\[8\].*cannot bind"):
        validate_trace(trace)
