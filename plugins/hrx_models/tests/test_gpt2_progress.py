"""Progress bars of `hrx model init` and of loading a checkpoint: drawn on a terminal,
never when stderr is not one or with --quiet."""

from __future__ import annotations

import io

import pytest

pytest.importorskip("hrx_models", reason="hrx-models is not installed: pip install -e plugins/hrx_models")

from hrx_core.cli.main import main

TINY = ["--shape", "tiny", "--n-layer", "1"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_model_init_bar_on_a_terminal_only(tmp_path, monkeypatch, capsys):
    assert main(["model", "init", str(tmp_path / "a"), *TINY]) == 0  # capsys: not a terminal
    assert capsys.readouterr().err == ""
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["model", "init", str(tmp_path / "b"), *TINY]) == 0
    assert "init weights:" in tty.getvalue() and "param" in tty.getvalue()
    quiet = Terminal()
    monkeypatch.setattr("sys.stderr", quiet)
    assert main(["model", "init", str(tmp_path / "c"), *TINY, "--quiet"]) == 0
    assert quiet.getvalue() == ""
    assert (tmp_path / "b" / "model.safetensors").read_bytes() == (tmp_path / "c" / "model.safetensors").read_bytes()


def test_checkpoint_load_bar(tiny_dir, monkeypatch):
    import hrx_core as hrx
    from hrx_core import progress
    from hrx_models.gpt2 import Gpt2Decoder

    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    Gpt2Decoder.load(tiny_dir, hrx.device("host")).close()
    assert "loading model.safetensors:" in tty.getvalue()
    quiet = Terminal()
    monkeypatch.setattr("sys.stderr", quiet)
    previous = progress.set_quiet(True)
    try:
        Gpt2Decoder.load(tiny_dir, hrx.device("host")).close()
    finally:
        progress.set_quiet(previous)
    assert quiet.getvalue() == ""
