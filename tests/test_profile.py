"""Completion profiles (latency percentiles) and runtime statistics."""

from __future__ import annotations

import json
import math
import threading

import numpy as np
import pytest

from hrx_core.errors import InvalidArgument
from hrx_core.execution.profile import LatencyProfile, RuntimeStats, format_bytes, format_seconds

# -- LatencyProfile ---------------------------------------------------------------------


def test_percentiles_match_numpy():
    data = np.random.default_rng(7).exponential(scale=2e-3, size=1000)
    profile = LatencyProfile()
    for value in data:
        profile.record("decode", float(value))
    stats = profile.percentiles("decode")
    assert stats["count"] == 1000
    assert stats["mean"] == pytest.approx(data.mean())
    assert stats["max"] == data.max()
    for key, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert stats[key] == pytest.approx(np.percentile(data, q))


def test_known_small_data():
    profile = LatencyProfile()
    for value in (1.0, 2.0, 3.0, 4.0):
        profile.record("r", value)
    stats = profile.percentiles("r")
    assert stats == {
        "count": 4,
        "mean": 2.5,
        "p50": 2.5,
        "p90": pytest.approx(3.7),
        "p99": pytest.approx(3.97),
        "max": 4.0,
    }
    json.dumps(stats)


def test_bounded_per_name_with_exact_count_mean_max():
    profile = LatencyProfile(max_samples=64)
    values = np.linspace(0.0, 1.0, 5000)
    for value in values:
        profile.record("a", float(value))
    profile.record("b", 0.5)
    assert len(profile._series["a"].samples) == 64
    stats = profile.percentiles("a")
    assert stats["count"] == 5000
    assert stats["mean"] == pytest.approx(0.5)
    assert stats["max"] == 1.0
    assert 0.3 < stats["p50"] < 0.7  # a uniform reservoir estimates the median
    assert profile.percentiles("b")["count"] == 1


def test_summary_repr_and_measure():
    profile = LatencyProfile()
    assert "no regions" in repr(profile)
    profile.record("upload", 0.0015)
    profile.record("upload", 0.0025)
    with profile.measure("compute"):
        pass
    summary = profile.summary()
    assert list(summary) == ["upload", "compute"]
    assert summary["upload"]["count"] == 2
    text = repr(profile)
    assert "upload" in text and "compute" in text and "2.00 ms" in text and "2.50 ms" in text
    profile.clear()
    assert profile.summary() == {}


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda p: p.record("r", -1.0), "seconds"),
        (lambda p: p.record("r", float("inf")), "seconds"),
        (lambda p: p.record("r", "1"), "seconds"),
        (lambda p: p.record("", 1.0), "name"),
        (lambda p: p.percentiles("missing"), "name"),
        (lambda p: LatencyProfile(max_samples=0), "max_samples"),
    ],
)
def test_profile_bad_arguments(call, argument):
    with pytest.raises(InvalidArgument, match=argument):
        call(LatencyProfile())


def test_profile_thread_safety_smoke():
    profile = LatencyProfile(max_samples=100)

    def work(k: int) -> None:
        for i in range(2000):
            profile.record(f"r{k % 2}", i * 1e-6)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert profile.percentiles("r0")["count"] == profile.percentiles("r1")["count"] == 8000
    assert profile.percentiles("r0")["max"] == pytest.approx(1999e-6)


# -- RuntimeStats -----------------------------------------------------------------------


def test_counters_and_snapshot_is_independent():
    stats = RuntimeStats()
    stats.add("upload_bytes", 1024)
    stats.add("submissions")
    stats.lane_busy("compute", 0.25)
    snap = stats.snapshot()
    json.dumps(snap)
    stats.add("upload_bytes", 1024)
    stats.lane_busy("compute", 0.25)
    stats.lane_busy("npu", 1.0, regions=3)
    assert snap["upload_bytes"] == 1024 and snap["submissions"] == 1
    assert snap["lane_busy_seconds"] == {"compute": 0.25} and snap["lane_regions"] == {"compute": 1}
    snap["lane_busy_seconds"]["compute"] = 99.0  # mutating the copy changes nothing
    now = stats.snapshot()
    assert now["upload_bytes"] == 2048 and stats.get("upload_bytes") == 2048
    assert now["lane_busy_seconds"] == {"compute": 0.5, "npu": 1.0}
    assert now["lane_regions"] == {"compute": 2, "npu": 3}
    assert set(RuntimeStats.COUNTERS) <= set(now)


def test_peak_tracking():
    stats = RuntimeStats()
    assert stats.track_bytes(100) == 100
    stats.track_bytes(400)
    stats.track_bytes(-450)
    stats.track_bytes(200)
    snap = stats.snapshot()
    assert snap["live_tracked_bytes"] == 250 and snap["peak_tracked_bytes"] == 500
    with pytest.raises(InvalidArgument, match="delta"):
        stats.track_bytes(-251)
    assert stats.get("live_tracked_bytes") == 250  # a rejected call changes nothing


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda s: s.add("bogus", 1), "name"),
        (lambda s: s.add("live_tracked_bytes", 1), "track_bytes"),
        (lambda s: s.add("upload_bytes", 1.5), "value"),
        (lambda s: s.add("quarantined_owners", -1), "below 0"),
        (lambda s: s.lane_busy("compute", -0.1), "seconds"),
        (lambda s: s.lane_busy("", 0.1), "lane"),
        (lambda s: s.track_bytes(True), "delta"),
        (lambda s: s.get("nope"), "name"),
    ],
)
def test_stats_bad_arguments(call, argument):
    stats = RuntimeStats()
    with pytest.raises(InvalidArgument, match=argument):
        call(stats)
    assert stats.snapshot() == RuntimeStats().snapshot()


def test_quarantine_counts_go_up_and_down():
    stats = RuntimeStats()
    stats.add("quarantined_owners", 2)
    stats.add("quarantined_bytes", 4096)
    assert stats.add("quarantined_owners", -1) == 1


def test_repr_shows_key_numbers():
    stats = RuntimeStats()
    stats.add("upload_bytes", 3 * 1024 * 1024 // 2)
    stats.add("download_bytes", 512)
    stats.add("submissions", 7)
    stats.add("regions", 12)
    stats.track_bytes(2 * 1024**3)
    stats.add("quarantined_owners", 3)
    stats.lane_busy("compute", 0.0042, regions=5)
    text = repr(stats)
    for expected in (
        "upload 1.5 MiB",
        "download 512 B",
        "copy 0 B",
        "peak 2.0 GiB",
        "7 submissions",
        "12 regions",
        "compute 4.20 ms busy/5 regions",
        "3 owners",
    ):
        assert expected in text, (expected, text)
    assert len(text.splitlines()) == 6


def test_formatting_helpers():
    assert format_bytes(0) == "0 B" and format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(5 * 1024**4) == "5.0 TiB"
    assert format_seconds(5e-7) == "500 ns" and format_seconds(1.5e-5) == "15.0 us"
    assert format_seconds(2.5) == "2.50 s"


def test_stats_thread_safety_smoke():
    stats = RuntimeStats()

    def work() -> None:
        for _ in range(2000):
            stats.add("submissions")
            stats.track_bytes(10)
            stats.lane_busy("compute", 0.001)
            stats.track_bytes(-10)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = stats.snapshot()
    assert snap["submissions"] == 16000
    assert snap["live_tracked_bytes"] == 0 and 10 <= snap["peak_tracked_bytes"] <= 80
    assert snap["lane_regions"]["compute"] == 16000
    assert snap["lane_busy_seconds"]["compute"] == pytest.approx(16.0)


def test_a_batch_of_latencies_keeps_an_exact_count_sum_max_and_a_uniform_reservoir() -> None:
    """The runtime's fold records many latencies at once: the count, the max and the
    reservoir (the same seeded random stream) -- past its capacity too -- are those of
    recording them one at a time, and the sum is theirs to rounding (``sum()``, which
    Python 3.12 compensates)."""
    import random

    rng = random.Random(7)
    values = {name: [rng.uniform(0.0, 1e-3) for _ in range(3000)] for name in ("a", "b")}
    batched = LatencyProfile(max_samples=64, seed=3)
    single = LatencyProfile(max_samples=64, seed=3)
    for part in (slice(0, 150), slice(150, 1700), slice(1700, 3000)):
        batched._record_many({name: vs[part] for name, vs in values.items()})
        for name, vs in values.items():
            for v in vs[part]:
                single.record(name, v)
    for name, vs in values.items():
        s, r = batched._series[name], single._series[name]
        assert [s.count, s.max, s.samples, s.replace_at, s.w] == [r.count, r.max, r.samples, r.replace_at, r.w]
        assert s.total == pytest.approx(r.total, rel=1e-12) and s.total == pytest.approx(math.fsum(vs), rel=1e-12)
        assert s.count == 3000 and s.max == max(vs)
        assert len(s.samples) == 64 and set(s.samples) <= set(vs)
        assert set(s.samples) & set(vs[64:])  # past the capacity, values were kept


def test_the_reservoir_keeps_each_value_with_equal_probability() -> None:
    """Past its capacity the reservoir is a uniform sample of every value recorded (Li's
    Algorithm L): over many seeds, each tenth of the stream's positions holds a tenth
    of the samples (chi-square, 9 degrees of freedom, p ~ 0.001), the first
    ``max_samples`` values are not over-kept, and a value replaces a sample with
    probability k / count: k (H(n) - H(k)) replacements on average, each one slot draw."""
    import random

    class Counting(random.Random):
        draws = 0

        def randrange(self, *args):  # type: ignore[override]
            Counting.draws += 1
            return super().randrange(*args)

    n, k, seeds = 5000, 50, 200
    counts = np.zeros(10)
    first = 0
    for seed in range(seeds):
        profile = LatencyProfile(max_samples=k, seed=seed)
        profile._random = Counting(seed)
        profile._record_many({"r": [float(i) for i in range(n)]})
        kept = np.array(profile._series["r"].samples, dtype=np.int64)
        assert len(set(kept.tolist())) == k
        counts += np.bincount(kept * 10 // n, minlength=10)
        first += int((kept < k).sum())
    expected = seeds * k / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 27.9, counts
    # the first k positions: k / n of each reservoir on average (0.5 each here)
    assert first < seeds * k * k / n * 2 + 20, first
    replacements = k * sum(1 / i for i in range(k + 1, n + 1))  # ~ 229 a stream
    assert abs(Counting.draws / seeds - replacements) < 0.05 * replacements, Counting.draws / seeds


def test_the_reservoir_is_algorithm_l_as_written_out() -> None:
    """Recorded in uneven batches, the reservoir is what Li's Algorithm L gives taking one
    value at a time, written out here from the paper over the same random stream: W from
    the k-th value, a geometric skip with success probability W, and at each kept value a
    uniform slot, then W shrunk and the next skip drawn."""
    import random

    def u(rand: random.Random) -> float:
        x = rand.random()
        while x == 0.0:
            x = rand.random()
        return x

    def algorithm_l(values: list[float], k: int, seed: int) -> list[float]:
        rand = random.Random(seed)
        samples: list[float] = []
        w, next_at = 1.0, 0
        for count, v in enumerate(values, 1):
            if count <= k:
                samples.append(v)
                if count == k:
                    w = math.exp(math.log(u(rand)) / k)
                    next_at = k + math.floor(math.log(u(rand)) / math.log1p(-w)) + 1
            elif count == next_at:
                samples[rand.randrange(k)] = v
                w *= math.exp(math.log(u(rand)) / k)
                next_at += math.floor(math.log(u(rand)) / math.log1p(-w)) + 1
        return samples

    values = [float(i) for i in range(20000)]
    for k, seed in ((1, 0), (7, 1), (64, 2)):
        profile = LatencyProfile(max_samples=k, seed=seed)
        at = 0
        for size in (3, 1, 60, 500, 2, 5000, 14434):
            profile._record_many({"r": values[at:at + size]})
            at += size
        assert at == len(values)
        assert profile._series["r"].samples == algorithm_l(values, k, seed)
