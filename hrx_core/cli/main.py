"""Entry point of the ``hrx`` command."""

from __future__ import annotations

import argparse
import sys
from ..errors import HRXError
from . import CliCommand

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
    for kernel in kernels.values():
        kernel.executable(dev)
    compiled = cache.misses - before
    return f"{engine}: {len(kernels)} plugin kernels ready ({compiled} compiled now; disk cache {cache_dir()})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hrx", description="HRX for Python: GPU/NPU inference runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="show plugins, engines, devices, queues, limits and what is missing")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    sub.add_parser("prepare", help="start each installed engine and warm its caches (never downloads)")
    pipeline = sub.add_parser("pipeline", help="run a small upload/kernel/graph/download pipeline and check it")
    pipeline.add_argument("--engine", default=None, help="engine to use (default: best available)")
    pipeline.add_argument("--elements", type=int, default=1 << 20)
    extra = plugin_commands()
    for cmd in extra.values():
        cmd.configure(sub.add_parser(cmd.name, help=cmd.help))
    args = parser.parse_args(argv)
    try:
        if args.command == "doctor":
            from .doctor import run

            return run(args.json)
        if args.command == "prepare":
            return _prepare()
        if args.command == "pipeline":
            from .pipeline import run as run_pipeline

            return run_pipeline(args.engine, args.elements)
        return int(extra[args.command].run(args))
    except HRXError as exc:
        print(f"hrx {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
