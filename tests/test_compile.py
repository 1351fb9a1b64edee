"""hrx_core.compile: compilers from the hook, cached by source, options and target."""

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core import plugins


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
