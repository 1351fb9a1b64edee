"""Text in, text out: the checkpoint's tokenizer, `hrx generate --prompt`, hub repo ids from
a local hub cache, and fast failures offline or without network. Everything is built here:
a tiny GPT-2 with seeded weights and a byte-level BPE trained on generated text."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")
tokenizers = pytest.importorskip("tokenizers", reason="hrx-models needs tokenizers: pip install tokenizers")

import hrx_core as hrx
from hrx_core.errors import ArtifactError, InvalidArgument, Unsupported

VOCAB = 512  # the vocab_size of conftest's tiny model
REPO = "hrx-test/tiny-gpt2"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TEXTS = ["kato rine mosa", " luperi gafo", "héllo wörld ✓", "zuhi\nbawy  kaka"]


def _corpus() -> list[str]:
    rng = random.Random(0)
    syll = ["ka", "to", "ri", "ne", "mo", "sa", "lu", "pe", "di", "ga", "fo", "ve", "zu", "hi", "ba", "wy"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    return [" ".join(rng.choice(words) for _ in range(30)) for _ in range(200)]


def _tokenizer(vocab_size: int):
    tok = tokenizers.ByteLevelBPETokenizer()
    tok.train_from_iterator(_corpus(), vocab_size=vocab_size, min_frequency=1, show_progress=False)
    assert tok.get_vocab_size() == vocab_size
    return tok


def _copy_model(source, target):
    for name in ("config.json", "model.safetensors"):
        shutil.copy(source / name, target / name)
    return target


@pytest.fixture(scope="session")
def text_dir(tmp_path_factory, tiny_dir):
    """conftest's tiny GPT-2 with a tokenizer.json of exactly its vocab_size tokens."""
    d = _copy_model(tiny_dir, tmp_path_factory.mktemp("text"))
    _tokenizer(VOCAB).save(str(d / "tokenizer.json"))
    return d


@pytest.fixture(scope="session")
def bpe_dir(tmp_path_factory, text_dir):
    """The same model with GPT-2's tokenizer files (vocab.json + merges.txt) instead."""
    d = _copy_model(text_dir, tmp_path_factory.mktemp("bpe"))
    _tokenizer(VOCAB).save_model(str(d))
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "merges.txt", "model.safetensors", "vocab.json"]
    return d


def hub_cache(root, repo_id, source, names) -> None:
    """Lay ``names`` of ``source`` out as huggingface_hub does under ``root`` (a hub cache):
    blobs named by SHA-256, a snapshot of relative symlinks, refs/main -> the commit."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    blobs, snapshot = repo / "blobs", repo / "snapshots" / COMMIT
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    for name in names:
        data = (source / name).read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hrx_cli(*args, env=None, timeout=120):
    cmd = [sys.executable, "-c", "import sys; from hrx_core.cli.main import main; sys.exit(main())", *args]
    base = {k: v for k, v in os.environ.items() if k not in ("HRX_ENGINE", "HF_HUB_OFFLINE", "HF_ENDPOINT")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**base, **(env or {})}, check=False)


def _greedy_text(directory, prompt: str, n: int) -> str:
    from hrx_models.gpt2.reference import NumpyGpt2
    from hrx_models.tokenizer import Tokenizer

    tok = Tokenizer.load(directory)
    return tok.decode(NumpyGpt2(directory).greedy(tok.encode(prompt), n))


# -- the tokenizer ------------------------------------------------------------------


def test_tokenizer_round_trips_both_file_forms(text_dir, bpe_dir):
    from hrx_models.tokenizer import Tokenizer

    a, b = Tokenizer.load(text_dir), Tokenizer.load(bpe_dir)
    assert a.vocab_size == b.vocab_size == VOCAB
    assert a.source.endswith("tokenizer.json") and "vocab.json" in b.source
    for text in TEXTS:
        ids = a.encode(text)
        assert ids == b.encode(text) and all(0 <= t < VOCAB for t in ids)
        assert a.decode(ids) == b.decode(ids) == text
    assert len(a.encode("kato")) < len("kato")  # merges learned from the corpus apply


def test_tokenizer_errors(text_dir, tmp_path):
    from hrx_models.tokenizer import MissingTokenizer, Tokenizer

    with pytest.raises(MissingTokenizer, match=r"tokenizer.json \(or vocab.json \+ merges.txt\)"):
        Tokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"model": 5}')
    with pytest.raises(ArtifactError, match="tokenizer.json"):
        Tokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer.json").mkdir()
    with pytest.raises(ArtifactError):
        Tokenizer.load(tmp_path)
    tok = Tokenizer.load(text_dir)
    with pytest.raises(InvalidArgument, match="text"):
        tok.encode(b"bytes")  # type: ignore[arg-type]
    for bad in ([512], [-1], [[1, 2]], [1.5]):
        with pytest.raises(InvalidArgument, match="ids"):
            tok.decode(bad)
    assert tok.decode([]) == ""


def test_missing_tokenizers_package_is_one_clear_error(text_dir, monkeypatch):
    from hrx_models.tokenizer import Tokenizer

    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed
    with pytest.raises(Unsupported, match="pip install tokenizers"):
        Tokenizer.load(text_dir)


# -- the Python API -------------------------------------------------------------------


def test_generate_text_matches_the_reference(text_dir, bpe_dir, engine):
    from hrx_models.gpt2 import Gpt2Decoder, TextGeneration

    prompt = TEXTS[0]
    with Gpt2Decoder.load(text_dir, hrx.device(engine)) as dec:
        out = dec.generate_text(prompt, 12)
        assert isinstance(out, TextGeneration) and out.prompt == prompt
        assert list(out.generation.prompt) == dec.tokenizer.encode(prompt)
        assert out.text == dec.tokenizer.decode(out.generation.tokens)
        if engine == "host":
            assert out.text == _greedy_text(text_dir, prompt, 12)
        with dec.slot() as s:
            assert s.generate_text(prompt, 12).text == out.text
        for bad in (b"x", ["kato"], None):
            with pytest.raises(InvalidArgument, match="prompt"):
                dec.generate_text(bad, 4)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="encodes to no tokens"):
            dec.generate_text("", 4)
        with pytest.raises(InvalidArgument, match="max_new_tokens"):
            dec.generate_text(prompt, 1000)
    with Gpt2Decoder.load(bpe_dir, hrx.device(engine)) as dec:  # vocab.json + merges.txt
        assert dec.generate_text(prompt, 12).text == out.text


def test_checkpoint_without_tokenizer(engine, tiny_dir):
    from hrx_models.gpt2 import Gpt2Decoder
    from hrx_models.tokenizer import MissingTokenizer

    with Gpt2Decoder.load(tiny_dir, hrx.device(engine)) as dec:
        with pytest.raises(MissingTokenizer, match="no tokenizer"):
            dec.generate_text("kato", 4)


def test_tokenizer_larger_than_the_model_is_refused(text_dir, tmp_path, engine):
    from hrx_models.gpt2 import Gpt2Decoder

    _copy_model(text_dir, tmp_path)
    _tokenizer(600).save(str(tmp_path / "tokenizer.json"))
    with Gpt2Decoder.load(tmp_path, hrx.device(engine)) as dec:
        with pytest.raises(ArtifactError, match="600 tokens, more than the model's vocab_size 512"):
            dec.generate_text("kato", 4)
    r = hrx_cli("generate", "--model", str(tmp_path), "--prompt", "kato", "--engine", engine)
    assert r.returncode == 2 and "600 tokens" in r.stderr, r.stderr


# -- hrx generate --prompt --------------------------------------------------------------


def test_cli_prints_text(text_dir, engine):
    prompt = TEXTS[0]
    r = hrx_cli("generate", "--model", str(text_dir), "--prompt", prompt, "--max-new-tokens", "12", "--engine", engine)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("request 0: text: "))
    shown_prompt, shown_text = line[len("request 0: text: "):].split(" -> ")
    assert json.loads(shown_prompt) == prompt
    if engine == "host":
        assert json.loads(shown_text) == _greedy_text(text_dir, prompt, 12)
    # several text requests, as JSON, each as it is alone
    r = hrx_cli("generate", "--model", str(text_dir), "--prompt", prompt, "--prompt", TEXTS[2], "--max-new-tokens", "12",
                "--engine", engine, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["requests"]
    assert [q["prompt_text"] for q in out] == [prompt, TEXTS[2]]
    assert out[0]["text"] == json.loads(shown_text)


def test_cli_prompt_ids_also_decode_and_options_exclude(text_dir):
    from hrx_models.tokenizer import Tokenizer

    ids = Tokenizer.load(text_dir).encode(TEXTS[1])
    r = hrx_cli("generate", "--model", str(text_dir), "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", "4",
                "--engine", "host")
    assert r.returncode == 0, r.stderr
    assert f"request 0: text: {json.dumps(TEXTS[1], ensure_ascii=False)} -> " in r.stdout
    r = hrx_cli("generate", "--model", str(text_dir), "--prompt", "a", "--prompt-ids", "1", "--engine", "host")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr
    r = hrx_cli("generate", "--model", str(text_dir), "--engine", "host")
    assert r.returncode == 2 and "--prompt" in r.stderr


# -- hub repo ids -----------------------------------------------------------------------


def test_repo_id_from_the_hub_cache_offline(text_dir, bpe_dir, tmp_path, engine):
    home = tmp_path / "hf_home"
    hub_cache(home / "hub", REPO, text_dir, ["config.json", "model.safetensors", "tokenizer.json"])
    hub_cache(home / "hub", "hrx-test/bpe", bpe_dir, ["config.json", "model.safetensors", "vocab.json", "merges.txt"])
    want = _greedy_text(text_dir, TEXTS[0], 8)
    # offline, and online without network (an endpoint nobody listens on): both from the cache
    for env in ({"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}):
        for repo in (REPO, "hrx-test/bpe"):
            t0 = time.monotonic()
            r = hrx_cli("generate", "--model", repo, "--prompt", TEXTS[0], "--max-new-tokens", "8", "--engine", engine,
                        env={"HF_HOME": str(home), **env})
            assert r.returncode == 0, r.stdout + r.stderr
            assert time.monotonic() - t0 < 45  # not huggingface_hub's retries (23 s a file) on top of the run
            line = next(l for l in r.stdout.splitlines() if l.startswith("request 0: text: "))
            if engine == "host":
                assert json.loads(line.split(" -> ")[1]) == want
            if "HF_ENDPOINT" in env:
                assert "no network" in r.stderr and "serving" in r.stderr  # logged: the cache served it


def test_repo_id_through_the_python_api(text_dir, tmp_path, monkeypatch, caplog):
    from hrx_models.gpt2 import Gpt2Decoder
    from hrx_models.resolve import resolve_checkpoint

    hub_cache(tmp_path, REPO, text_dir, ["config.json", "model.safetensors", "tokenizer.json"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level("INFO", logger="hrx.models"):
        path = resolve_checkpoint(REPO, tokenizer=True, cache_dir=tmp_path)
    assert path.name == COMMIT and (path / "tokenizer.json").is_file()
    assert f"model {REPO!r}: config.json, model.safetensors, tokenizer.json from the hub cache" in caplog.text
    assert resolve_checkpoint(text_dir) == text_dir  # a local directory as it is
    with pytest.raises(InvalidArgument, match="revision"):
        resolve_checkpoint(text_dir, revision="main")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    with Gpt2Decoder.load(REPO, hrx.device("host")) as dec:
        assert dec.generate_text(TEXTS[0], 8).text == _greedy_text(text_dir, TEXTS[0], 8)


def _fails_fast(capsys, monkeypatch, tmp_path, **env) -> str:
    from hrx_core.cli.main import main

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    # huggingface_hub reads its environment once, at import (perhaps in another test)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", "HF_HUB_OFFLINE" in env)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", env.get("HF_ENDPOINT", "http://127.0.0.1:1"))
    t0 = time.monotonic()
    rc = main(["generate", "--model", "hrx-test/absent", "--prompt", "hello", "--engine", "host"])
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert elapsed < 2.0, f"took {elapsed:.1f} s"
    assert err.count("\n") == 1 and err.startswith("hrx generate: MissingFiles: ")
    for name in ("config.json", "model.safetensors", "tokenizer.json (or vocab.json + merges.txt)"):
        assert name in err
    assert "hf download hrx-test/absent config.json model.safetensors tokenizer.json" in err
    return err


def test_missing_repo_fails_fast_offline(capsys, monkeypatch, tmp_path):
    err = _fails_fast(capsys, monkeypatch, tmp_path, HF_HUB_OFFLINE="1")
    assert "is not a local directory, and offline: the hub cache" in err


def test_missing_repo_fails_fast_without_network(capsys, monkeypatch, tmp_path):
    err = _fails_fast(capsys, monkeypatch, tmp_path, HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    assert "no network (cannot reach 127.0.0.1:" in err


def test_partly_cached_repo_lists_only_what_is_missing(text_dir, capsys, monkeypatch, tmp_path):
    from hrx_core.cli.main import main

    hub_cache(tmp_path, REPO, text_dir, ["config.json", "tokenizer.json"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    assert main(["generate", "--model", REPO, "--prompt", "hello", "--engine", "host"]) == 2
    err = capsys.readouterr().err
    assert "lacks model.safetensors of that repo" in err and f"hf download {REPO} model.safetensors'" in err


def test_paths_are_not_repo_ids(tmp_path):
    from hrx_models.gpt2 import ConfigError
    from hrx_models.resolve import is_repo_id, resolve_checkpoint

    assert is_repo_id("gpt2") and is_repo_id("openai-community/gpt2")
    for path in ("./gpt2", "/models/gpt2", "a/b/c", "~/x", "", "gpt2/"):
        assert not is_repo_id(path)
    with pytest.raises(ConfigError, match="not a directory"):
        resolve_checkpoint(str(tmp_path / "nowhere"))


def test_the_docs_text_section_runs(capsys):
    """docs/model_gpt2.md, "Text prompts and hub models": its Python block as written."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "model_gpt2.md").read_text()
    section = page.split("## Text prompts and hub models", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    exec(compile(block, "docs/model_gpt2.md", "exec"), {})
    assert capsys.readouterr().out.startswith("'")


def test_the_tokenizer_is_optional_for_token_ids(text_dir, tmp_path, monkeypatch):
    """A repo cached without tokenizer files still loads (and generates from ids); text is refused."""
    from hrx_models.gpt2 import Gpt2Decoder
    from hrx_models.resolve import resolve_checkpoint
    from hrx_models.tokenizer import MissingTokenizer

    from hrx_core.artifacts.hf import MissingFiles

    hub_cache(tmp_path, REPO, text_dir, ["config.json", "model.safetensors"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(MissingFiles, match=r"tokenizer.json \(or vocab.json \+ merges.txt\)"):
        resolve_checkpoint(REPO, tokenizer=True)
    assert not (resolve_checkpoint(REPO, tokenizer=None) / "tokenizer.json").exists()
    with pytest.raises(InvalidArgument, match="tokenizer"):
        resolve_checkpoint(REPO, tokenizer="yes")  # type: ignore[arg-type]
    with Gpt2Decoder.load(REPO, hrx.device("host")) as dec:
        assert len(dec.generate([1, 2, 3], 4).tokens) == 4
        with pytest.raises(MissingTokenizer):
            dec.generate_text("kato", 4)
