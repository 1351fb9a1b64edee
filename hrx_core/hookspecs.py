"""Hook specifications of the ``hrx`` plugin group (pluggy).

A plugin is any object (usually a module) with functions decorated by
:data:`hookimpl` and named like the specs below. Third-party distributions declare
it under the entry-point group ``hrx``::

    [project.entry-points.hrx]
    myengine = "my_package.plugin"

The built-in host engine is registered through the same hooks. An implementation may
return None (it provides nothing this time). Every function a plugin marks with
:data:`hookimpl` must be named like a spec below: a misspelled one is a PluginError
naming it when plugins load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from .compiler import Compiler
    from .engine import Engine

PROJECT = "hrx"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def hrx_engines() -> Sequence[Engine] | None:
    """Return the engines this plugin provides."""


@hookspec
def hrx_compilers() -> Sequence[Compiler] | None:
    """Return compilers, one per target they produce code for."""


@hookspec
def hrx_kernels(engine: str) -> dict[str, Any] | None:
    """Return kernels an op family provides for ``engine``, by name."""


@hookspec
def hrx_artifact_loaders() -> Sequence[Any] | None:
    """Return loaders for model-file formats."""


@hookspec
def hrx_doctor() -> Sequence[tuple[str, str, str]] | None:
    """Return extra ``hrx doctor`` rows as (section, item, detail)."""


@hookspec
def hrx_cli_commands() -> Sequence[Any] | None:
    """Return extra ``hrx`` subcommands as :class:`hrx_core.cli.CliCommand` objects.

    Each one names the subcommand, its one-line help, a ``configure(parser)`` that
    adds its arguments to an ``argparse`` subparser, and ``run(args) -> int`` that
    executes it (HRXError subclasses are reported as ``hrx <name>: Type: message``
    with exit status 2).
    """
