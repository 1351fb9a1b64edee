"""Owned graphs prepare their commands while recording (the spec: "Stream::owned_graph
prepares commands during recording"), and runtime regions build their native graph
when recorded, so the first submission costs what every submission costs."""

from __future__ import annotations

import numpy as np

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions

from .kernels import INC_BYTES, launch_1d


def test_owned_graph_prepares_each_node_while_recording(dev):
    s = dev.stream()
    buf = s.allocate_from(np.zeros(64, np.uint8))
    g = s.owned_graph()
    g.fill(buf.slice(0, 32), pattern=1)
    grid, block = launch_1d(64)
    g.dispatch(INC_BYTES, grid, [buf], block=block, scalars=(64,))
    assert len(g._prepared) == 2  # commands ready before any launch
    built = dev.stats.graph_launches
    g.prepare()  # the native graph (or the command list) now, not at the first launch
    assert g._plan is not None and dev.stats.graph_launches == built
    g.launch().wait(30)
    assert (s.download(buf)[:32] == 2).all() and (s.download(buf)[32:] == 1).all()
    g.close()


def test_runtime_regions_are_prepared_when_recorded(dev):
    rt = Runtime(dev, RuntimeOptions(observe=False))
    x = rt.allocate(64)
    g = rt.graph()
    region = g.compute("inc", lambda r: r.dispatch(INC_BYTES, 1, [x], scalars=(64,)))
    assert region.device_graph._plan is not None  # prepared at recording
    if dev.info.native_graphs:
        assert region.device_graph._native is not None  # the native graph exists already
    rt.submit(g).wait(30)
    rt.close()
