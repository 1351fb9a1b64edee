"""Argument types of the ``hrx`` command and its plugin commands: values are checked
when the command line is parsed -- before anything is loaded, allocated or run -- and
a bad one is one line on stderr with a non-zero exit.

    parser.add_argument("--n", type=count("--n", limit=1 << 30), default=...)
    parser.add_argument("--trace", type=output_file("--trace"))
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from typing import Any, NoReturn
from ..errors import show


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that states every option's default: ``(default: X)`` is appended unless the
    help text already says what the default is; flags read ``off``, unset values
    ``not set``."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (not action.option_strings or action.required or action.default is argparse.SUPPRESS
                or "default" in text.lower()):
            return text
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            shown = "on" if action.default else "off"
        elif action.default is None:
            shown = "not set"
        elif isinstance(action, argparse._AppendAction) and not action.default:
            shown = "none"
        else:
            shown = "%(default)s"
        return f"{text} (default: {shown})" if text else f"(default: {shown})"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) and exit 2, and
    whose help (its subcommands' too) shows every option's default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def count(name: str, *, minimum: int = 1, limit: int = 1 << 40) -> Callable[[str], int]:
    """An int in ``minimum..limit``."""

    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} expects an integer, got {show(text)}") from None
        if not minimum <= value <= limit:
            raise argparse.ArgumentTypeError(f"{name} must be in {minimum}..{limit}, got {value}")
        return value

    parse.__name__ = "count"
    return parse


def number(name: str, *, minimum: float = 0.0, maximum: float = math.inf, inclusive: bool = False) -> Callable[[str], float]:
    """A finite float above ``minimum`` (or equal with ``inclusive``) and below ``maximum``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} expects a number, got {show(text)}") from None
        low_ok = value >= minimum if inclusive else value > minimum
        if not math.isfinite(value) or not low_ok or not value < maximum:
            bound = f">= {minimum}" if inclusive else f"> {minimum}"
            raise argparse.ArgumentTypeError(f"{name} must be a finite number {bound} and < {maximum}, got {show(text)}")
        return value

    parse.__name__ = "number"
    return parse


def output_file(name: str) -> Callable[[str], str]:
    """A path a file can be written to: checked now, not after the work it records."""

    def parse(text: str) -> str:
        if not text:
            return text  # '' means "none" where a command allows it
        if "\x00" in text:
            raise argparse.ArgumentTypeError(f"{name}: the path contains a NUL byte")
        if os.path.isdir(text):
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is a directory")
        parent = os.path.dirname(os.path.abspath(text)) or "."
        if not os.path.isdir(parent):
            raise argparse.ArgumentTypeError(f"{name}: directory {parent!r} does not exist")
        if os.path.exists(text) and not os.access(text, os.W_OK) or not os.access(parent, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not writable")
        return text

    parse.__name__ = "output_file"
    return parse


def output_dir(name: str) -> Callable[[str], str]:
    """A directory that exists or can be created (not an existing file)."""

    def parse(text: str) -> str:
        if not text or "\x00" in text:
            raise argparse.ArgumentTypeError(f"{name}: expected a directory path, got {show(text)}")
        if os.path.exists(text) and not os.path.isdir(text):
            raise argparse.ArgumentTypeError(f"{name}: {text!r} exists and is not a directory")
        probe = os.path.abspath(text)
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"{name}: cannot create or write {text!r} ({probe!r} is not a writable directory)")
        return text

    parse.__name__ = "output_dir"
    return parse


def host_memory_bytes() -> int:
    """Physical memory of this machine (0 if unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_host_memory(what: str, nbytes: int, fraction: float = 0.5) -> None:
    """Refuse (InvalidArgument) host buffers of ``nbytes`` beyond ``fraction`` of RAM:
    the command would otherwise be killed by the kernel after minutes of work."""
    from ..errors import InvalidArgument

    total = host_memory_bytes()
    if total and nbytes > fraction * total:
        raise InvalidArgument(
            f"{what}: needs about {nbytes / 2**30:.1f} GiB of host memory, more than {fraction:.0%} "
            f"of this machine's {total / 2**30:.1f} GiB"
        )


def debug() -> bool:
    return os.environ.get("HRX_DEBUG", "") not in ("", "0")


__all__: list[Any] = ["DefaultsHelpFormatter", "Parser", "check_host_memory", "count", "debug", "host_memory_bytes", "number", "output_dir", "output_file"]
