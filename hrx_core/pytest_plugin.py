"""HRX's pytest plugin (entry point ``pytest11: hrx``), loaded by every pytest session
in an environment where hrx-core is installed.

- ``--hrx-engine NAME`` (repeatable) chooses the engines the conformance suites run on
  (:func:`hrx_core.testing.engines`): the shipped suite (``pytest --pyargs
  hrx_core.conformance --hrx-engine NAME``), this repository's suites and the plugins'
  suites all parametrize over them. Without it they run on
  :data:`hrx_core.testing.ENGINES`.
- ``--hrx-plugin MODULE`` (repeatable) registers a module's ``@hookimpl`` functions
  as a plugin before the tests run, as an installed ``hrx`` entry point would: an
  engine under development runs the suite before it is packaged.
- Test sessions run the AMD engines on the simulated Strix Halo unless
  ``HRX_AMDF_PROVIDER`` says otherwise: CI has no AMD hardware, and a Strix Halo owner
  runs the suites with ``HRX_AMDF_PROVIDER=libamdf`` (scripts/test-amd-hardware.sh).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hrx", "HRX engines")
    group.addoption(
        "--hrx-engine",
        action="append",
        default=[],
        metavar="NAME",
        help="run the HRX conformance tests on engine NAME (repeatable; default: host, cuda, amdgpu)",
    )
    group.addoption(
        "--hrx-plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="register the hrx plugin MODULE (its @hookimpl functions) before the tests run (repeatable)",
    )


def _apply(options: Any) -> None:
    chosen = getattr(options, "hrx_engine", None) or []
    modules = getattr(options, "hrx_plugin", None) or []
    if not chosen and not modules:
        return  # nothing asked: hrx_core is not even imported
    from . import plugins, testing

    for module_name in modules:
        if plugins.registry().pm.has_plugin(module_name):
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise pytest.UsageError(f"--hrx-plugin {module_name}: cannot import it: {exc}") from None
        try:
            plugins.register(module, module_name)
        except Exception as exc:  # PluginError: an unknown hook, a name clash
            raise pytest.UsageError(f"--hrx-plugin {module_name}: {exc}") from None
    if chosen:
        testing.set_engines(chosen)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # before the first conftest.py is imported: conftests parametrize fixtures over
    # hrx_core.testing.engine_params() when they are imported
    os.environ.setdefault("HRX_AMDF_PROVIDER", "fake")
    _apply(early_config.known_args_namespace)


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("HRX_AMDF_PROVIDER", "fake")
    _apply(config.option)


def pytest_report_header(config: pytest.Config) -> str:
    from . import testing

    return f"hrx engines: {', '.join(testing.engines())}"
