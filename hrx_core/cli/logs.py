"""Logging of the ``hrx`` command: ``-v``/``--verbose`` and ``-q``/``--quiet``.

HRX logs through ``logging.getLogger("hrx")`` and its children (``hrx.plugins``: plugin
load failures and the engine :func:`hrx_core.device` picks; ``hrx.kernels``: native kernels
that fell back to numpy; ``hrx.runtime``: quarantined allocations; ``hrx.artifacts``:
hub resolution; ``hrx.models``). A library leaves the handlers to its application; the
``hrx`` command prints records on stderr as ``hrx: LEVEL: logger: message`` -- warnings
by default, INFO with ``-v``, DEBUG with ``-vv``, errors only with ``--quiet``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Sequence

LOGGER = "hrx"


def verbosity(argv: Sequence[str]) -> tuple[int, bool]:
    """``(-v count, --quiet)`` read from a command line before it is parsed (plugins log
    while they load, before the parser that knows every option exists)."""
    verbose, quiet = 0, False
    for arg in argv:
        if arg == "--":
            break
        if arg == "--verbose":
            verbose += 1
        elif arg == "--quiet":
            quiet = True
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 1 and set(arg[1:]) <= {"v", "q"}:
            verbose += arg.count("v")
            quiet = quiet or "q" in arg
    return verbose, quiet


def level(verbose: int, quiet: bool) -> int:
    if quiet:
        return logging.ERROR
    return logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG


@contextlib.contextmanager
def cli_logging(verbose: int, quiet: bool) -> Iterator[logging.Handler]:
    """Print the ``hrx`` logger's records at the chosen level on stderr while the block runs
    (then restore the logger as it was, so in-process callers of ``main`` are left alone)."""
    logger = logging.getLogger(LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("hrx: %(levelname)s: %(name)s: %(message)s"))
    previous = logger.level
    logger.setLevel(level(verbose, quiet))
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


__all__ = ["LOGGER", "cli_logging", "level", "verbosity"]
