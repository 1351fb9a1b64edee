"""bench/tools/ab.py's decoder_slots and the variants the GPU A/B tools build with it
(occupancy_ab.py, pdl_ab.py), run on the host engine with the tiny GPT-2 shape: what
can be checked without a GPU of tools that otherwise only run on one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")

import hrx_core as hrx  # noqa: E402

TOOLS = Path(__file__).resolve().parent.parent / "bench" / "tools"


@pytest.fixture(scope="module")
def tools():
    sys.path.insert(0, str(TOOLS))
    try:
        import ab
        import occupancy_ab
        import pdl_ab

        yield ab, occupancy_ab, pdl_ab
    finally:
        sys.path.remove(str(TOOLS))


def test_decoder_slots_configure_warm_and_close(tools, capsys):
    ab, occupancy_ab, pdl_ab = tools
    from hrx_models.gpt2 import fused_kernels as FK

    dev = hrx.device("host")
    seen = []
    variants = {
        "plan": occupancy_ab.configure("plan", 128),
        "b8/b6": occupancy_ab.configure("b8/b6", 128),
        "pdl shipped": pdl_ab.variant_of(dev, "shipped", False),
        "probe": seen.append,
    }
    with ab.decoder_slots(dev, "tiny", 32, variants, warm=[5, 6]) as slots:
        assert list(slots) == list(variants)
        decs = {label: slot.decoder for label, slot in slots.items()}
        assert seen == [decs["probe"]]  # configured before its slot was acquired
        k = decs["b8/b6"].kernels
        assert k.gemv_sms == 0 and k.ln_linear.name == "hrx_gpt2_ln_linear_w1024_b8"
        assert k.linear_residual.name == "hrx_gpt2_linear_residual_b6"
        assert decs["plan"].kernels.ln_linear is FK.LN_LINEAR  # the plan, unchanged (host: no budgets)
        ab.interleaved(slots, [1, 2, 3], 3, 1, "tiny")
        out = capsys.readouterr().out
        assert "the plan specializes nothing on this device" in out
        assert out.count("tokens agree 3/3") == len(variants)  # the host mirrors are the same for every budget
    assert all(d._closed for d in decs.values())


@pytest.mark.parametrize("name,want", [("plan", None), ("generic", None), ("b6", (6, 6)), ("b8/b6", (8, 6))])
def test_occupancy_variant_names(tools, name, want):
    assert tools[1].budgets(name) == want


@pytest.mark.parametrize("name", ["b7", "b6/b5", "wide", "b"])
def test_occupancy_refuses_unknown_variants(tools, name):
    with pytest.raises(SystemExit, match="unknown variant"):
        tools[1].budgets(name)


def test_plan_ab_runs_every_variant_on_the_host(monkeypatch, capsys):
    """bench/tools/plan_ab.py on the host engine at a small shape: every variant's line,
    and the switches restored after each TensorOps is made."""
    from hrx_tensor import TensorOps

    monkeypatch.syspath_prepend(str(TOOLS))
    monkeypatch.syspath_prepend(str(TOOLS.parent))
    import plan_ab

    monkeypatch.setattr(sys, "argv", ["plan_ab.py", "--engine", "host", "--shapes", "64x96", "--variants",
                                      "six,warp,warp6", "--reps", "1", "--rotate", "40000", "--measure", "100000"])
    assert plan_ab.main() == 0
    out = capsys.readouterr().out
    assert "64x96 (0 MiB, 4 weights):" in out
    for v in ("plan", "six", "warp", "warp6"):
        assert f"  {v} " in out
    assert TensorOps.use_budget_linear is True and TensorOps.use_bulk_linear is True
    monkeypatch.setattr(sys, "argv", ["plan_ab.py", "--variants", "nine"])
    with pytest.raises(SystemExit):
        plan_ab.main()


def test_eager_probe_reports_its_clocks_on_the_host(monkeypatch, capsys):
    """bench/tools/eager_probe.py on the host engine: one line of clocks a shape."""
    monkeypatch.syspath_prepend(str(TOOLS))
    monkeypatch.syspath_prepend(str(TOOLS.parent))
    import eager_probe

    monkeypatch.setattr(sys, "argv", ["eager_probe.py", "--engine", "host", "--shapes", "64x96,128x64", "--calls", "20",
                                      "--rounds", "1", "--rotate", "40000"])
    assert eager_probe.main() == 0
    out = capsys.readouterr().out
    assert out.count("  hrx          wall ") == 2 and "64x96 (0 MiB, 4 weights;" in out and "threads after:" in out


def test_replay_probe_times_each_layer_on_the_host(monkeypatch, capsys):
    """bench/tools/replay_probe.py on the host engine: the replay's layers, each timed."""
    monkeypatch.syspath_prepend(str(TOOLS))
    monkeypatch.syspath_prepend(str(TOOLS.parent))
    import replay_probe

    monkeypatch.setattr(sys, "argv", ["replay_probe.py", "--engine", "host", "--nodes", "3", "--calls", "5",
                                      "--rounds", "1", "--inputs", "2"])
    assert replay_probe.main() == 0
    out = capsys.readouterr().out
    assert "host: 3-node graph; compiled replay:" in out
    for layer in ("launch", "python"):
        assert f"  {layer} " in out and "back to back" in out


def test_spike_probe_splits_the_mean_on_the_host(monkeypatch, capsys):
    """bench/tools/spike_probe.py: its split of per-call times (the calls above four
    times the median, and their share of the time), and a run on the host engine."""
    monkeypatch.syspath_prepend(str(TOOLS))
    monkeypatch.syspath_prepend(str(TOOLS.parent))
    import spike_probe

    d = spike_probe.split([1.0] * 99 + [101.0])
    assert d["median"] == 1.0 and d["mean"] == pytest.approx(2.0) and d["p90"] == 1.0
    assert d["spikes"] == pytest.approx(0.01) and d["spike_share"] == pytest.approx(101 / 200)
    assert spike_probe.split([2.0, 3.0, 7.0])["spikes"] == 0  # 7 is not above 4 x 3
    monkeypatch.setattr(sys, "argv", ["spike_probe.py", "--engine", "host", "--nodes", "3", "--calls", "4", "--rounds", "1"])
    assert spike_probe.main() == 0
    out = capsys.readouterr().out
    assert "host: 3-node graphs, 1 rounds of 4 idle calls (us)" in out
    for name in ("launch", "launch3", "submit"):
        assert f"  {name} " in out and "% of the time" in out
    assert "  raw " not in out  # (cuda only)


def test_submit_probe_reports_the_round_end_and_loops_on_the_host(monkeypatch, capsys):
    """bench/tools/submit_probe.py on the host engine: each callable's figures with the
    round end's synchronize and snapshot times; --loop only submits."""
    monkeypatch.syspath_prepend(str(TOOLS))
    monkeypatch.syspath_prepend(str(TOOLS.parent))
    import submit_probe

    monkeypatch.setattr(sys, "argv", ["submit_probe.py", "--engine", "host", "--nodes", "3", "--calls", "5", "--rounds", "1"])
    assert submit_probe.main() == 0
    out = capsys.readouterr().out
    assert "  submit " in out and "  replayer " in out and "; mean " in out
    assert out.count("the round's end: Runtime.synchronize() ") == 2 and "stats.snapshot() " in out
    monkeypatch.setattr(sys, "argv", ["submit_probe.py", "--engine", "host", "--nodes", "3", "--loop", "7"])
    assert submit_probe.main() == 0
    assert capsys.readouterr().out.startswith("7 submissions; compiled: ")


def test_sync_ab_times_both_ways_of_settling_on_the_host(monkeypatch, capsys):
    """bench/tools/sync_ab.py on the host engine: the batch settle and a wait each."""
    monkeypatch.syspath_prepend(str(TOOLS))
    monkeypatch.syspath_prepend(str(TOOLS.parent))
    import sync_ab

    monkeypatch.setattr(sys, "argv", ["sync_ab.py", "--engine", "host", "--rounds", "2", "--calls", "70"])
    assert sync_ab.main() == 0
    out = capsys.readouterr().out
    assert out.startswith("host: Runtime.synchronize() after 70 submissions (6 pending at most)") and "a wait each " in out
