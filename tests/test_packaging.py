"""The distributions' metadata: SPDX license and LICENSE files, hrx-* dependencies
pinned to the matching minor version, classifiers and URLs, and hrx-core's extras."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import hrx_core

REPO = Path(__file__).resolve().parents[1]
PROJECTS = [REPO, *sorted(p for p in (REPO / "plugins").iterdir() if (p / "pyproject.toml").is_file())]
NAMES = {tomllib.loads((p / "pyproject.toml").read_text())["project"]["name"] for p in PROJECTS}


def _meta(project: Path) -> dict:
    return tomllib.loads((project / "pyproject.toml").read_text())


def _requirements(project: dict) -> list[str]:
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs.extend(extra)
    return reqs


def _minor_pin(version: str) -> str:
    major, minor = (int(x) for x in version.split(".")[:2])
    return f">={major}.{minor},<{major}.{minor + 1}"


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_license_is_an_spdx_expression_with_a_license_file(project: Path) -> None:
    meta = _meta(project)["project"]
    assert meta["license"] == "MIT"  # a string: the table form is deprecated
    assert meta["license-files"] == ["LICENSE"]
    text = (project / "LICENSE").read_text()
    assert text.startswith("MIT License") and text == (REPO / "LICENSE").read_text()
    assert not any(c.startswith("License ::") for c in meta["classifiers"])  # replaced by the expression
    build = _meta(project)["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in build)


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_hrx_distributions_are_pinned_to_the_matching_minor_version(project: Path) -> None:
    meta = _meta(project)["project"]
    pin = _minor_pin(meta["version"])
    assert pin == _minor_pin(hrx_core.__version__)
    for req in _requirements(meta):
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0)
        if name in NAMES:
            assert req.removeprefix(name).lstrip("[").split("]")[-1] == pin, f"{meta['name']}: {req!r} is not pinned {pin}"


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_classifiers_and_urls(project: Path) -> None:
    meta = _meta(project)["project"]
    assert "Typing :: Typed" in meta["classifiers"]
    assert "Programming Language :: Python :: 3.11" in meta["classifiers"]
    assert meta["urls"] and all(u.startswith("https://") for u in meta["urls"].values())


def test_core_extras() -> None:
    extras = _meta(REPO)["project"]["optional-dependencies"]
    assert {"all", "test", "onnx", "hf"} <= set(extras)
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in extras["all"]}
    assert names == NAMES - {"hrx-core"}  # every plugin distribution of the repository
    assert any(r.startswith("mypy") for r in extras["test"])


def test_changelog_names_this_version() -> None:
    assert f"## {hrx_core.__version__}" in (REPO / "CHANGELOG.md").read_text()
