"""The "host" compile target: Python callables, or Python source with an entry."""

from __future__ import annotations

from typing import Any

from ..compiler import Compiler
from ..errors import CompileError


def compile_host(source: Any, entry: str, options: tuple[str, ...]) -> tuple[Any, str]:
    if callable(source):
        return source, ""
    if isinstance(source, str):
        namespace: dict[str, Any] = {"__name__": f"hrx_host_kernel_{entry or 'anon'}"}
        try:
            code = compile(source, f"<hrx host kernel {entry}>", "exec")
            exec(code, namespace)
        except SyntaxError as exc:
            raise CompileError(f"host kernel {entry!r}: syntax error", log=f"line {exc.lineno}: {exc.msg}") from None
        except Exception as exc:
            raise CompileError(f"host kernel {entry!r}: executing the source failed", log=repr(exc)) from None
        fn = namespace.get(entry)
        if not callable(fn):
            raise CompileError(f"host kernel source defines no callable {entry!r}")
        return fn, ""
    raise CompileError(f"host target compiles callables or Python source, got {type(source).__name__}")


HOST_COMPILER = Compiler(target="host", compile=compile_host, persistent=False, description="Python callables")
