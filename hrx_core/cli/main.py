"""Entry point of the ``hrx`` command."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable

from .. import __version__, progress
from ..errors import HRXError
from . import CliCommand
from .args import Parser, count, debug
from .logs import cli_logging, verbosity

BUILTIN = ("doctor", "prepare", "pipeline")


def plugin_commands() -> dict[str, CliCommand]:
    """Subcommands from installed plugins, by name (built-in names cannot be replaced)."""
    from .. import plugins as reg

    found: dict[str, CliCommand] = {}
    for batch in reg.registry().pm.hook.hrx_cli_commands():
        for cmd in batch or ():
            if not isinstance(cmd, CliCommand):
                print(f"hrx: ignoring a plugin command that is not a CliCommand: {cmd!r}", file=sys.stderr)
                continue
            if cmd.name in BUILTIN or cmd.name in found:
                print(f"hrx: ignoring a second definition of the command {cmd.name!r}", file=sys.stderr)
                continue
            found[cmd.name] = cmd
    return found


def _prepare() -> int:
    from .. import plugins as reg

    status = 0
    for name, engine in reg.engines().items():
        st = engine.probe()
        if not st.available:
            print(f"{name}: skipped ({st.reason})")
            continue
        try:
            for line in engine.prepare():
                print(line)
            print(_warm_kernels(name))
        except HRXError as exc:
            print(f"{name}: FAILED: {exc}")
            status = 1
    for failure in reg.failures():
        print(f"plugin {failure.name}: failed to load: {failure.error}")
        status = 1
    return status


def _warm_kernels(engine: str) -> str:
    """Compile (into the compile caches) every kernel plugins declare for ``engine``."""
    from .. import plugins as reg
    from ..compiler import cache_dir
    from ..kernel import Kernel

    dev = reg.device(engine)
    kernels: dict[str, Kernel] = reg.kernels(engine)
    cache = reg.registry().compile_cache
    before = cache.misses
    # a kernel whose arguments exceed this device's limit never loads here (its plugin
    # chooses another where the limit is lower): counted, not compiled
    limit = dev.info.limits.max_kernel_arg_bytes
    beyond = [k for k in kernels.values() if k.argument_bytes > limit]
    for kernel in kernels.values():
        if kernel.argument_bytes <= limit:
            kernel.executable(dev)
    compiled = cache.misses - before
    note = f"; {len(beyond)} beyond its {limit}-byte argument limit, not used here" if beyond else ""
    return (f"{engine}: {len(kernels) - len(beyond)} plugin kernels ready ({compiled} compiled now; "
            f"disk cache {cache_dir()}{note})")


def main(argv: list[str] | None = None) -> int:
    """Run the ``hrx`` command. Errors are one line on stderr and a non-zero exit:
    2 for bad arguments and HRX errors, 130 for Ctrl-C, 1 for anything else
    (``HRX_DEBUG=1`` prints its traceback)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose, quiet = verbosity(argv)
    with cli_logging(verbose, quiet):
        previous = progress.set_quiet(quiet)
        try:
            return _main(argv)
        finally:
            progress.set_quiet(previous)


def _add_output_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """-v/--verbose and -q/--quiet, on ``hrx`` and after every subcommand (subcommands
    leave the values given before them in place)."""
    default: object = argparse.SUPPRESS
    parser.add_argument("-v", "--verbose", action="count", default=0 if top else default,
                        help="log more: -v for INFO (engine choice, native kernels), -vv for DEBUG")
    parser.add_argument("-q", "--quiet", action="store_true", default=False if top else default,
                        help="no progress bars, and only errors logged")


def _add_to_subcommands(parser: argparse.ArgumentParser) -> None:
    """-v/-q on every subcommand, nested ones (``hrx model init``) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                if not any("--quiet" in a.option_strings for a in subparser._actions):
                    _add_output_options(subparser, top=False)
                _add_to_subcommands(subparser)


def build_parser() -> tuple[Parser, dict[str, CliCommand]]:
    """The ``hrx`` parser with every built-in and plugin subcommand (each with -v/-q),
    and the plugin commands by name (a plugin whose ``configure`` fails is left out,
    with a note)."""
    parser = Parser(prog="hrx", description="HRX for Python: GPU/NPU inference runtime")
    parser.add_argument("--version", action="version", version=version_line())
    _add_output_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="show plugins, engines, devices, queues, limits and what is missing")
    doctor.add_argument("--json", action="store_true",
                        help="machine-readable output (with a 'schema' version and a 'missing' list)")
    sub.add_parser("prepare", help="start each installed engine and warm its caches (never downloads)")
    pipeline = sub.add_parser("pipeline", help="run a small upload/kernel/graph/download pipeline and check it")
    pipeline.add_argument("--engine", default=None, help="engine to use (default: the best available)")
    pipeline.add_argument("--elements", type=count("--elements", limit=1 << 34), default=1 << 20,
                          help="float32 elements of the vectors")
    extra = plugin_commands()
    configured = {}
    for cmd in extra.values():
        try:
            cmd.configure(sub.add_parser(cmd.name, help=cmd.help))
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the others
            print(f"hrx: ignoring the command {cmd.name!r}: configuring it failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        configured[cmd.name] = cmd
    _add_to_subcommands(parser)
    return parser, configured


def _main(argv: list[str]) -> int:
    try:
        parser, extra = build_parser()
    except HRXError as exc:
        print(f"hrx: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)

    def run() -> int:
        if args.command == "doctor":
            from .doctor import run

            return run(args.json)
        if args.command == "prepare":
            return _prepare()
        if args.command == "pipeline":
            from .pipeline import run as run_pipeline

            return run_pipeline(args.engine, args.elements)
        return int(extra[args.command].run(args))

    return run_reporting(f"hrx {args.command}", run)


def run_reporting(prog: str, fn: Callable[[], int | None]) -> int:
    """Run ``fn`` as a command-line tool named ``prog``: its exit status, or, when it
    raises, one line on stderr and a non-zero status -- 2 for HRX errors, missing
    Python packages and OS errors (a missing file), 130 for Ctrl-C, 141 (quietly) when
    stdout's reader went away, 1 for anything else (``HRX_DEBUG=1`` re-raises, showing
    the traceback). Used by ``hrx`` and by the scripts under bench/."""
    try:
        return int(fn() or 0)
    except HRXError as exc:
        print(f"{prog}: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if debug():
            raise
        print(f"{prog}: needs the Python package {exc.name!r}, which is not installed: {_one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (``hrx doctor | head``): stop quietly, as a SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:  # a file or directory the user named (missing, unreadable, full disk)
        if debug():
            raise
        print(f"{prog}: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a command-line tool reports, never dumps a traceback
        if debug():
            raise
        print(f"{prog}: {type(exc).__name__}: {_one_line(exc)} (HRX_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def version_line() -> str:
    """What ``hrx --version`` prints."""
    return f"hrx {__version__} (hrx-core {__version__}, Python {platform.python_version()})"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 500 else text[:497] + "..."


if __name__ == "__main__":
    sys.exit(main())
