"""hrx_core.compile: compilers from the hook, cached by source, options and target."""

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core import plugins
from hrx_core.compiler import Compiler
from hrx_core.hookspecs import hookimpl


def test_host_target_compiles_callables_and_source():
    def k(buf):
        buf[:] = 1

    a = hrx.compile(k, target="host", entry="k")
    assert a.target == "host" and a.code is k
    src = "def twice(buf):\n    buf[:] = buf * 2\n"
    b = hrx.compile(src, target="host", entry="twice")
    assert callable(b.code) and b.code.__name__ == "twice"


def test_cache_keys_on_source_options_and_target():
    cache = plugins.registry().compile_cache
    src = "def f(b):\n    pass\n"
    hits = cache.hits
    a = hrx.compile(src, target="host", entry="f")
    b = hrx.compile(src, target="host", entry="f")
    assert a is b and cache.hits == hits + 1
    c = hrx.compile(src, target="host", entry="f", options=["-O3"])
    assert c is not a and c.key != a.key
    d = hrx.compile(src + "\n", target="host", entry="f")
    assert d.key != a.key


def test_compile_errors():
    with pytest.raises(hrx.CompileError) as info:
        hrx.compile("def broken(:\n", target="host", entry="broken")
    assert "syntax" in str(info.value) and info.value.log
    with pytest.raises(hrx.CompileError, match="no callable"):
        hrx.compile("x = 1\n", target="host", entry="missing")
    with pytest.raises(hrx.Unsupported, match="registered: .*host"):
        hrx.compile("...", target="vulkan-spirv")
    with pytest.raises(hrx.InvalidArgument):
        hrx.compile(12345, target="host")
    with pytest.raises(hrx.InvalidArgument):
        hrx.compile("x", target="host", options=[1])  # type: ignore[list-item]


def test_kernel_from_host_source_runs(dev):
    if "host" not in dev.info.targets:
        pytest.skip("host source only")
    k = hrx.Kernel("set7", buffers=1, host="def set7(b):\n    b[:] = 7\n")
    s = dev.stream()
    buf = dev.allocate(16)
    s.dispatch(k, 1, [buf]).wait()
    assert (s.download(buf) == 7).all()


def test_kernel_clone_retains_executables(dev):
    from .kernels import ADD_U32

    s = dev.stream()
    buf = s.allocate_from(np.zeros(4, np.uint32))
    s.dispatch(ADD_U32, 1, [buf], block=4, scalars=(1, 4))
    clone = ADD_U32.clone()
    assert clone.executable(dev) is ADD_U32.executable(dev)
    s.dispatch(clone, 1, [buf], block=4, scalars=(1, 4)).wait()
    assert (s.download(buf).view(np.uint32) == 2).all()


def test_kernel_validation():
    with pytest.raises(hrx.InvalidArgument):
        hrx.Kernel("", host=lambda: None)
    with pytest.raises(hrx.InvalidArgument):
        hrx.Kernel("nosrc")
    with pytest.raises(hrx.InvalidArgument):
        hrx.Kernel("bad", buffers=("sideways",), host=lambda b: None)
    with pytest.raises(hrx.InvalidArgument):
        hrx.Kernel("bad", scalars=("not-a-dtype",), host=lambda: None)
    with pytest.raises(hrx.InvalidArgument, match="programmatic"):
        hrx.Kernel("bad", host=lambda: None, programmatic=1)


def test_programmatic_kernel_marks_its_executables(dev):
    """programmatic=True (the kernel waits for its predecessors itself) reaches every
    executable loaded from it, so an engine may launch it early in a graph; others
    stay plain."""
    from .kernels import _EMPTY_CUDA

    waits = hrx.Kernel("empty", buffers=0, host=lambda: None, cuda=_EMPTY_CUDA, programmatic=True)
    plain = hrx.Kernel("empty", buffers=0, host=lambda: None, cuda=_EMPTY_CUDA)
    assert waits.programmatic and not plain.programmatic
    assert waits.executable(dev).programmatic is True
    assert plain.executable(dev).programmatic is False
    assert waits.clone().programmatic


class _ToyCompilerPlugin:
    """Registers a compiler for target "toy" that reads a kernel's cuda source."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, str, tuple[str, ...]]] = []

    @hookimpl
    def hrx_compilers(self):
        def compile_toy(source, entry, options):
            self.calls.append((source, entry, tuple(options)))
            return f"toy:{entry}".encode(), ""

        return [Compiler(target="toy", source="cuda", compile=compile_toy, description="test")]


@pytest.fixture
def toy_compiler():
    reg = plugins.registry()
    plugin = _ToyCompilerPlugin()
    reg.pm.register(plugin, name="test-toy-compiler")
    reg._compilers = None
    try:
        yield plugin
    finally:
        reg.pm.unregister(plugin)
        reg._compilers = None


def _toy_device(targets):
    from types import SimpleNamespace

    loaded = []
    native = SimpleNamespace(
        compile_options=lambda target: ("--dev",) if target == "toy" else (),
        load_executable=lambda artifact: loaded.append(artifact) or artifact,
    )
    return SimpleNamespace(name="toy0", info=SimpleNamespace(targets=targets), native=native), loaded


def test_compiler_declares_the_source_target_it_reads(toy_compiler):
    assert Compiler(target="gfx", compile=lambda *a: (b"", "")).source_target == "gfx"
    k = hrx.Kernel("toyk", host=lambda b: None, cuda="__global__ void toyk() {}", options={"cuda": ("-c1",), "toy": ("-t1",)})
    assert k.source_for(("toy", "host")) == ("toy", "cuda")
    assert k.source_for(("host", "toy")) == ("host", "host")
    assert hrx.Kernel("hostonly", host=lambda: None).source_for(("toy",)) is None
    device, loaded = _toy_device(("toy",))
    artifact = k.executable(device)
    # the cuda source, cuda options, then the target's own and the device's options
    assert toy_compiler.calls == [("__global__ void toyk() {}", "toyk", ("-c1", "-t1", "--dev"))]
    assert artifact.target == "toy" and artifact.code == b"toy:toyk" and loaded == [artifact]
    assert k.executable(device) is artifact  # loaded once per device


def test_explicit_source_for_the_target_wins(toy_compiler):
    k = hrx.Kernel("toyk2", cuda="cuda text", sources={"toy": "toy text"})
    assert k.source_for(("toy",)) == ("toy", "toy")
    device, _ = _toy_device(("toy",))
    k.executable(device)
    assert toy_compiler.calls == [("toy text", "toyk2", ("--dev",))]


def test_target_without_a_compiler_reading_the_source_is_unsupported():
    k = hrx.Kernel("toyk3", cuda="cuda text")
    device, _ = _toy_device(("toy",))
    with pytest.raises(hrx.Unsupported, match="toy0 runs toy"):
        k.executable(device)
