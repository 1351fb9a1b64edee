"""docs/environment.md lists every environment variable the code reads."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "environment.md"


def _sources() -> list[Path]:
    files = [*REPO.glob("hrx_core/**/*.py"), *REPO.glob("plugins/*/hrx_*/**/*.py"), *REPO.glob("bench/*.py")]
    return sorted(p for p in files if "/tests/" not in p.as_posix())


def _constants(trees: dict[Path, ast.Module]) -> dict[str, str]:
    """Module-level ``NAME = "TEXT"`` assignments of every file (ENV_ENGINE and the like)."""
    out: dict[str, str] = {}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = node.value.value
    return out


def _loop_names(tree: ast.Module) -> dict[str, list[str]]:
    """``for var in ("A", "B")`` loops: the names ``var`` takes."""
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, (ast.Tuple, ast.List)):
            values = [e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(values) == len(node.iter.elts):
                out.setdefault(node.target.id, []).extend(values)
    return out


def _is_environ(node: ast.expr) -> bool:
    """``os.environ`` or a bare ``environ``."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (isinstance(node, ast.Name) and node.id == "environ")


def variables_read() -> dict[str, set[str]]:
    """Environment variable -> files that read it; names that cannot be resolved are
    reported as ``?<expression> in <file>`` so the test fails on them too."""
    trees = {p: ast.parse(p.read_text(), str(p)) for p in _sources()}
    consts = _constants(trees)
    found: dict[str, set[str]] = {}
    for path, tree in trees.items():
        loops = _loop_names(tree)
        rel = path.relative_to(REPO).as_posix()

        def record(arg: ast.expr) -> None:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names = [arg.value]
            elif isinstance(arg, ast.Name) and arg.id in consts:
                names = [consts[arg.id]]
            elif isinstance(arg, ast.Name) and arg.id in loops:
                names = loops[arg.id]
            else:
                names = [f"?{ast.unparse(arg)} in {rel}"]
            for name in names:
                found.setdefault(name, set()).add(rel)

        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr in ("get", "setdefault", "pop") and _is_environ(func.value):
                    record(node.args[0])
                elif isinstance(func, ast.Attribute) and func.attr == "getenv":
                    record(node.args[0])
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                record(node.slice)
    return found


def documented() -> set[str]:
    """Names in backticks in the first column of the page's tables."""
    names: set[str] = set()
    for line in PAGE.read_text().splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", line.split("|")[1]))
    return names


def test_every_variable_the_code_reads_is_documented() -> None:
    read = variables_read()
    missing = {name: sorted(files) for name, files in read.items() if name not in documented()}
    assert missing == {}, f"docs/environment.md does not list: {missing}"


def test_the_page_lists_only_variables_the_code_reads() -> None:
    assert documented() - set(variables_read()) == set()


def test_the_scan_sees_reads_of_every_kind() -> None:
    """The scanner resolves literals, module constants and loop variables (the test
    above could not fail if it saw nothing)."""
    read = variables_read()
    assert {"HRX_CACHE_DIR", "HRX_ENGINE", "HRX_HOT_PATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "CC"} <= set(read)
    assert "hrx_core/plugins.py" in read["HRX_ENGINE"]
