"""The ``hrx`` command under bad values: one line on stderr, a non-zero exit, no
traceback -- and checked before the work (an unwritable --trace is found at once)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hrx_core.cli.main import main

from .tally import tried


def _run(capsys, argv, *, env=None, monkeypatch=None):
    if env:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse exits
        code = exc.code
    out = capsys.readouterr()
    if env:
        for k in env:
            monkeypatch.delenv(k)
    return code, out.out, out.err


BAD = [
    ["pipeline", "--elements", "-1"],
    ["pipeline", "--elements", "0"],
    ["pipeline", "--elements", "abc"],
    ["pipeline", "--elements", str(1 << 40)],
    ["pipeline", "--engine", "no-such-engine"],
    ["demo", "--n", "0"],
    ["demo", "--requests", "0"],
    ["demo", "--samples", "-3"],
    ["demo", "--m", "1e3"],
    ["demo", "--columns", "0"],
    ["demo", "--quick", "--trace", "/nonexistent/dir/trace.json"],
    ["demo", "--quick", "--trace", "/"],
    ["demo", "--gpu-engine", "nope", "--quick", "--trace", ""],
    ["model", "init", "{file}"],
    ["model", "init", "{dir}/m", "--n-embd", "0"],
    ["model", "init", "{dir}/m", "--n-head", "-4"],
    ["model", "init", "{dir}/m", "--std", "nan"],
    ["model", "init", "{dir}/m", "--std", "-1"],
    ["model", "init", "{dir}/m", "--seed", "-1"],
    ["model", "init", "{dir}/m", "--n-embd", "65536", "--n-layer", "4096", "--vocab-size", "1000000"],
    ["model", "init", "{dir}/m", "--n-embd", "100", "--n-head", "3"],
    ["generate", "--model", "{dir}/missing", "--prompt-ids", "1,2"],
    ["generate", "--model", "{ckpt}", "--prompt-ids", "x,y"],
    ["generate", "--model", "{ckpt}", "--prompt-ids", ""],
    ["generate", "--model", "{ckpt}", "--prompt-ids", "1", "--budget-mb", "nan"],
    ["generate", "--model", "{ckpt}", "--prompt-ids", "1", "--budget-mb", "inf"],
    ["generate", "--model", "{ckpt}", "--prompt-ids", "1", "--budget-mb", "0.001"],
    ["generate", "--model", "{ckpt}", "--prompt-ids", "1", "--max-new-tokens", "0"],
    ["generate", "--model", "{ckpt}", "--prompt-ids", "99999999"],
    ["generate", "--model", "{ckpt}", "--prompt-ids", "1", "--context", "100000"],
    ["generate", "--model", "{ckpt}", "--prompt-ids", "1", "--trace", "/nonexistent/t.json"],
    ["generate", "--model", "{file}", "--prompt-ids", "1"],
    ["nosuchcommand"],
]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    gpt2 = pytest.importorskip("hrx_models.gpt2")
    cfg = gpt2.Gpt2Config(n_embd=128, n_layer=1, n_head=4, n_positions=16, vocab_size=64)
    return gpt2.write_random_checkpoint(tmp_path_factory.mktemp("ckpt"), cfg, seed=1)


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a)[:60] for a in BAD])
def test_bad_values_are_one_line_errors(capsys, tmp_path, ckpt, argv):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    argv = [a.format(dir=tmp_path, file=a_file, ckpt=ckpt) for a in argv]
    tried("cli", f"hrx {argv[0]}")
    t0 = time.perf_counter()
    code, out, err = _run(capsys, argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code not in (0, None), (argv, out, err)
    assert len(lines) == 1 and "Traceback" not in err, (argv, err)
    assert time.perf_counter() - t0 < 20  # refused early, not after the work


def test_bad_environment_is_a_one_line_error(capsys, monkeypatch):
    tried("cli", "HRX_STAGING_THREADS")
    code, out, err = _run(capsys, ["pipeline", "--elements", str(32 << 20)], env={"HRX_STAGING_THREADS": "abc"},
                          monkeypatch=monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "HRX_STAGING_THREADS" in err, err


def test_the_real_command_prints_one_line(tmp_path):
    # the installed entry point, in a fresh process
    for argv in (["pipeline", "--elements", "-1"], ["demo", "--requests", "0"],
                 ["model", "init", str(tmp_path / "m"), "--std", "nan"]):
        tried("cli", f"hrx {argv[0]} (process)")
        r = subprocess.run([sys.executable, "-m", "hrx_core.cli.main", *argv], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "HRX_DEBUG": ""})
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, (argv, r.stderr)
