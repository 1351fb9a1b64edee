"""The ``hrx`` command line.

Plugins add subcommands through the ``hrx_cli_commands`` hook by returning
:class:`CliCommand` objects.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import attrs


@attrs.frozen
class CliCommand:
    """An ``hrx`` subcommand contributed by a plugin through ``hrx_cli_commands``."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


__all__ = ["CliCommand"]
