"""`hrx model init` + `hrx generate` end to end, through the installed `hrx` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")

from hrx_core.execution.trace import validate_trace

TINY_ARGS = ["--n-embd", "128", "--n-layer", "2", "--n-head", "4", "--n-positions", "128", "--vocab-size", "512",
             "--std", "0.1", "--seed", "9"]


def hrx(*args, timeout=120):
    cmd = [sys.executable, "-c", "import sys; from hrx_core.cli.main import main; sys.exit(main())", *args]
    env = {k: v for k, v in os.environ.items() if k != "HRX_ENGINE"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)


@pytest.fixture(scope="module")
def cli_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli") / "model"
    r = hrx("model", "init", str(d), "--shape", "tiny", *TINY_ARGS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 layers x 128" in r.stdout and (d / "config.json").exists() and (d / "model.safetensors").exists()
    return d


def test_init_then_generate(cli_model, engine, tiny_dir):
    from hrx_models.gpt2.reference import NumpyGpt2

    r = hrx("generate", "--model", str(cli_model), "--prompt-ids", "1,2,3,4,5", "--max-new-tokens", "20", "--engine", engine)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    tokens = next(l for l in lines if l.startswith("request 0: tokens:")).split(":", 2)[2].split()
    assert "tokens/s" in r.stdout
    want = NumpyGpt2(cli_model).greedy([1, 2, 3, 4, 5], 20)
    if engine == "host":
        assert [int(t) for t in tokens] == want
    assert (cli_model / "model.safetensors").read_bytes() == (tiny_dir / "model.safetensors").read_bytes()  # same seed


@pytest.mark.parametrize("concurrency", ["threads", "asyncio"])
def test_several_requests_match_alone(cli_model, engine, concurrency):
    from hrx_models.gpt2 import Gpt2Decoder

    import hrx_core

    prompts = ["1,2,3,4,5", "7", "100 200 300"]
    with Gpt2Decoder.load(cli_model, hrx_core.device(engine)) as dec:  # each alone, in this process
        alone = [list(dec.generate([int(t) for t in p.replace(",", " ").split()], 16).tokens) for p in prompts]
    args = [a for p in prompts for a in ("--prompt-ids", p)]
    r = hrx("generate", "--model", str(cli_model), *args, "--max-new-tokens", "16", "--engine", engine,
            "--concurrency", concurrency, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert [q["tokens"] for q in out["requests"]] == alone
    assert out["tokens_per_s"] > 0


def test_trace(cli_model, engine, tmp_path):
    path = tmp_path / "trace.json"
    r = hrx("generate", "--model", str(cli_model), "--prompt-ids", "3,4", "--max-new-tokens", "8", "--engine", engine,
            "--trace", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    trace = json.loads(path.read_text())
    validate_trace(trace)
    names = [e.get("name") for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert names.count("decode") == 8 and names.count("prefill") == 1


def test_errors_are_reported(cli_model, tmp_path):
    r = hrx("generate", "--model", str(tmp_path / "nowhere"), "--prompt-ids", "1", "--engine", "host")
    assert r.returncode == 2 and "ConfigError" in r.stderr and "config.json" in r.stderr
    r = hrx("generate", "--model", str(cli_model), "--prompt-ids", "600", "--engine", "host", "--budget-mb", "0.1")
    assert r.returncode == 2 and "token id 600 is outside 0..511" in r.stderr  # validated before loading


def test_argument_errors_in_process(cli_model, tmp_path):
    import argparse

    from hrx_models import cli
    from hrx_models.gpt2 import ConfigError

    from hrx_core.errors import BudgetExceeded, InvalidArgument

    with pytest.raises(InvalidArgument, match="--prompt-ids"):
        cli._prompt_ids("1,x")
    init = argparse.Namespace(directory=str(tmp_path / "bad"), shape="tiny", n_embd=100, n_layer=None, n_head=3,
                              n_positions=None, vocab_size=None, seed=0, std=0.02, dtype="f32", prefix=False, attn_bias=False)
    with pytest.raises(ConfigError, match="not a multiple of n_head"):
        cli._run_model(init)
    gen = argparse.Namespace(model=str(cli_model), revision=None, prompt=None, prompt_ids=["1"], max_new_tokens=4, engine="host", concurrency="threads",
                             budget_mb=0.1, context=None, trace=None, json=False)
    with pytest.raises(BudgetExceeded):
        cli._run_generate(gen)
