"""Lifetimes (issue 14, must-fix 8): closed NPU programs stay closed, the compile cache
does not keep callables alive, a dropped device stops its threads."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import hrx_core as hrx

from .tally import tried


def _hrx_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("hrx-host-")}


def test_a_dropped_device_stops_its_worker_threads():
    gc.collect()
    before = _hrx_threads()
    for _ in range(3):
        dev = hrx.open_device("host")
        for family in ("compute", "copy"):
            s = dev.stream(family)
            buf = s.allocate_from(np.arange(64, dtype=np.uint8))
            assert (s.download(buf) == np.arange(64)).all()
        del dev, s, buf
    tried("lifetimes", "Device (dropped)", 3)
    deadline = time.monotonic() + 10
    while True:
        gc.collect()
        leaked = _hrx_threads() - before
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"{len(leaked)} worker threads outlived their devices"


def test_the_compile_cache_does_not_keep_callables_alive():
    def kernel_fn(buf):
        buf[:] = 1

    k = hrx.Kernel("transient", host=kernel_fn)
    dev = hrx.open_device("host")
    s = dev.stream()
    buf = dev.allocate(8)
    s.dispatch(k, 1, [buf]).wait(10)
    ref = weakref.ref(kernel_fn)
    del k, kernel_fn
    s.synchronize()
    gc.collect()
    tried("lifetimes", "compile cache (callable)")
    assert ref() is None  # it was cached by id forever


def test_a_closed_npu_program_does_not_run_from_an_earlier_graph():
    hrx_npu = pytest.importorskip("hrx_npu")
    from hrx_npu.contract import BufferContract, KernelContract

    npu = hrx_npu.open_device("npu-host", columns=2)
    ran = []

    def prog_fn(b, *, scratch, column, columns):
        ran.append(column)
        b[:] = 9

    art = hrx.compile(prog_fn, target="host", entry="p")
    prog = npu.load_artifact(art, columns=2, contract=KernelContract([BufferContract.read_write(256)]))
    buf = npu.allocate(256)
    s = npu.stream()
    g = s.access_graph()
    prog.record(g, [buf])
    g.launch().wait(10)
    assert len(ran) == 2
    prepared = s.prepare(prog.kernel, 1, [buf])
    prog.close()  # its columns are free for other programs now
    other = npu.load_artifact(art, columns=2, contract=KernelContract([BufferContract.read_write(256)]))
    ran.clear()
    tried("lifetimes", "Graph.launch (closed program)")
    with pytest.raises(hrx.InvalidArgument, match="unloaded|closed"):
        g.launch()
    tried("lifetimes", "PreparedLaunch.launch (closed program)")
    with pytest.raises(hrx.InvalidArgument, match="unloaded|closed"):
        prepared.launch()
    tried("lifetimes", "Stream.dispatch (closed program)")
    with pytest.raises(hrx.InvalidArgument, match="unloaded|closed"):
        s.dispatch(prog.kernel, 1, [buf])
    s.synchronize()
    assert ran == []  # nothing ran on columns the program no longer owns
    other.close()
