"""Every ```python block of the README, docs/*.md and plugins/*/README.md runs as written.

The blocks of one page run in order, in one namespace, in a fresh temporary working
directory, on the host engine (``HRX_ENGINE=host``), offline (``HF_HUB_OFFLINE=1``, and
``socket.connect`` refuses every address but loopback); a DeprecationWarning raised by
the page's own code fails it. A page creates every model or file it needs itself, as a
reader would; the harness adds no hidden set-up. Pages that need hardware this machine
lacks run on the GPU machine only (the ``gpu`` marker, with the best engine instead of
the host one); a page skipped here says why in ``SKIPPED``.

Shell blocks are not run; their ``hrx ...`` lines must parse with the installed
command's parser, and their ``pip install -e ...`` lines must bring the local hrx-*
distributions the installed ones depend on.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    str(p.relative_to(ROOT))
    for p in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("plugins/*/README.md")]
)
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)

# Pages not run here, each with the reason printed in the skip.
SKIPPED: dict[str, str] = {}
# Pages that run only where the cuda engine is available (the H200), on the best engine.
GPU_PAGES = {"docs/cuda.md"}
# What some pages print, checked after they ran.
PRINTS = {
    "README.md": ["[0. 2. 4. 6.]"],
    "docs/amd.md": ["gfx1151 PM4 (user queues)", "[0. 2. 4. 6.]"],
    "docs/npu.md": ["[0. 2. 4. 6.] SPATIAL 1"],
    "docs/runtime.md": ["[0. 2. 4. 6.]\n", "[2. 2. 2. 2.]\n", "[16. 16.]\n"],
    "docs/usage.md": ["[4. 4.]\n", "[2048. 2049.]\n", "[5. 9. 2. 6.]\n32764\n", "retired: True\n"],
    "docs/image.md": ["(2, 256, 588)\n"],
    "docs/model.md": ["[1.        1.0009775 1.001955 ]", "(1024,) float32", "[1.5 1.5]\n", "[3 1 4 "],
    "docs/model_gpt2.md": ["(512,) float32\n"],
}


def python_blocks(page: str) -> list[tuple[int, str]]:
    """The page's ```python blocks as (first line number, source)."""
    text = (ROOT / page).read_text()
    return [
        (text.count("\n", 0, m.start(2)) + 1, m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) == "python"
    ]


def _params():
    for page in PAGES:
        marks = []
        if page in SKIPPED:
            marks.append(pytest.mark.skip(reason=f"{page}: {SKIPPED[page]}"))
        if page in GPU_PAGES:
            marks.append(pytest.mark.gpu)
        yield pytest.param(page, marks=marks, id=page)


def _local_only(connect):
    """socket.connect refusing every address but loopback and local sockets."""

    def guarded(sock, address):
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and host not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"a documented block tried to reach the network ({address!r})")
        return connect(sock, address)

    return guarded


def _cuda_available() -> bool:
    from hrx_core import plugins

    engine = plugins.engines().get("cuda")
    return engine is not None and engine.probe().available


@pytest.mark.parametrize("page", list(_params()))
def test_page_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    blocks = python_blocks(page)
    if page in GPU_PAGES:
        if not _cuda_available():
            pytest.skip(f"{page} needs the cuda engine")
        monkeypatch.delenv("HRX_ENGINE", raising=False)
    else:
        monkeypatch.setenv("HRX_ENGINE", "host")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", _local_only(socket.socket.connect))
    monkeypatch.chdir(tmp_path)
    # a page may configure logging (docs/logging.md does): later tests get it back as it was
    loggers = [(lg, lg.level, list(lg.handlers)) for lg in (logging.getLogger(), logging.getLogger("hrx"))]
    namespace: dict = {"__name__": "__main__"}
    try:
        with warnings.catch_warnings():
            # documented code uses no deprecated HRX call (warnings attributed to the page's code)
            warnings.filterwarnings("error", category=DeprecationWarning, module="__main__")
            for line, source in blocks:
                # Padding with newlines makes tracebacks name the page's own line numbers.
                exec(compile("\n" * (line - 1) + source, str(ROOT / page), "exec"), namespace)
    finally:
        for logger, level, handlers in loggers:
            logger.handlers[:] = handlers
            logger.setLevel(level)
    out = capsys.readouterr().out
    for expected in PRINTS.get(page, []):
        assert expected in out, f"{page} should print {expected!r}; it printed:\n{out}"


def test_every_page_is_covered() -> None:
    """The harness finds the pages that have python blocks (a renamed fence or folder
    would otherwise drop a page silently)."""
    with_python = {page for page in PAGES if python_blocks(page)}
    assert {"README.md", "docs/usage.md", "docs/runtime.md", "docs/artifacts.md",
            "docs/model_gpt2.md", "docs/npu.md", "docs/engines.md"} <= with_python
    for page in PAGES:
        for m in FENCE.finditer((ROOT / page).read_text()):
            assert m.group(1) in {"python", "sh", "bash", "toml", "json", "text", ""}, (
                f"{page}: unknown fence language {m.group(1)!r} (python blocks must say ```python)")


def test_harness_keeps_blocks_off_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _local_only(socket.socket.connect))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(AssertionError, match="network"):
        sock.connect(("192.0.2.1", 443))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        client.connect(server.getsockname())  # loopback stays allowed


def test_harness_reports_the_failing_page_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing block's traceback names the page and the line inside it."""
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nx = 1\n```\n\ntext\n\n```python\ny = x + undefined_name\n```\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    blocks = python_blocks("page.md")
    assert [line for line, _ in blocks] == [4, 10]
    namespace: dict = {}
    with pytest.raises(NameError) as info:
        for line, source in blocks:
            exec(compile("\n" * (line - 1) + source, str(page), "exec"), namespace)
    assert info.traceback[-1].lineno + 1 == 10 and os.fspath(info.traceback[-1].path) == str(page)


def test_readme_shows_exactly_two_shell_commands() -> None:
    text = (ROOT / "README.md").read_text()
    fresh = text.split("## On a fresh machine", 1)[1].split("## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", fresh, re.S)
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest" in commands[1] and "pytest" in ci


def _project(folder: Path) -> tuple[str, list[str]]:
    """(name, names of its dependencies) from a pyproject.toml."""
    import tomllib

    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    names = [re.match(r"[A-Za-z0-9_.-]+", dep).group(0).lower() for dep in project.get("dependencies", [])]
    return project["name"].lower(), names


def test_documented_installs_bring_their_local_dependencies() -> None:
    """hrx-core and the plugins are not on PyPI: a documented ``pip install -e ...`` of
    a plugin also installs (from the repo) every hrx-* distribution it depends on."""
    local = {_project(ROOT)[0]: "."}
    local.update({_project(p.parent)[0]: str(p.parent.relative_to(ROOT)) for p in ROOT.glob("plugins/*/pyproject.toml")})
    commands = []
    for page in PAGES:
        for command in re.findall(r"pip install ([^`\n&#]*)", (ROOT / page).read_text()):
            paths = {re.sub(r"\[.*\]$", "", p.strip("'\"")) for p in re.findall(r"-e\s+(\S+)", command)}
            installed = {name for name, path in local.items() if path in paths}
            for name in installed:
                wanted = {dep for dep in _project(ROOT / local[name])[1] if dep in local}
                assert wanted <= installed, f"{page}: `pip install {command.strip()}` lacks {sorted(wanted - installed)}"
            commands.append(command)
    assert len(commands) >= 5, commands


class _Parsed(Exception):
    """Raised instead of running a command once its line parsed."""


def hrx_lines(page: str) -> list[str]:
    """The ``hrx ...`` command lines of a page's shell blocks (comments and chained
    commands cut off)."""
    lines = []
    for m in FENCE.finditer((ROOT / page).read_text()):
        if m.group(1) in {"sh", "bash"}:
            for line in m.group(2).splitlines():
                for part in re.split(r"&&|\|\||;", line.split(" #", 1)[0]):
                    if part.strip().startswith("hrx "):
                        lines.append(part.strip())
    return lines


def test_documented_hrx_command_lines_parse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every ``hrx ...`` line in a shell block parses with the installed command's parser
    (nothing runs: parsing stops the command)."""
    import argparse
    import shlex

    from hrx_core.cli.main import main

    real = argparse.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    monkeypatch.chdir(tmp_path)
    checked = []
    for page in PAGES:
        if page in SKIPPED:
            continue
        for line in hrx_lines(page):
            with pytest.raises(_Parsed):
                try:
                    main(shlex.split(line)[1:])
                except SystemExit as exc:
                    pytest.fail(f"{page}: `{line}` does not parse (exit {exc.code})")
            checked.append(line)
    assert len(checked) >= 10, checked
