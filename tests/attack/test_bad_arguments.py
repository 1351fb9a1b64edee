"""Generated bad arguments for every public entry point.

For each entry point and each of its parameters, hypothesis draws values of the
wrong kind for that parameter (see :mod:`.hostile`) while the others stay valid. The
call must raise an HRXError subclass whose message names the parameter, and must
leave everything unchanged (device and budget accounting, submissions, quarantine).
Anything else -- an untyped exception, an accepted bad value, a changed state -- is
a defect.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hrx_core as hrx
from hrx_core.errors import HRXError

from . import hostile as h
from .conftest import ATTACK
from .tally import tried
from .world import World


@attrs.frozen
class Entry:
    """``call(world, **kwargs)`` with valid ``good[p](world)`` for every parameter; a bad
    value of ``bad[p]`` for one of them must raise an HRXError naming ``names[p]``."""

    name: str
    call: Callable[..., Any]
    good: dict[str, Callable[[World], Any]]
    bad: dict[str, st.SearchStrategy[Any]]
    names: dict[str, tuple[str, ...]] = attrs.field(factory=dict)


def _v(value: Any) -> Callable[[World], Any]:
    return lambda w: value


NUMBER_BYTES = st.one_of(h.not_int().filter(lambda v: not isinstance(v, (bytes, bytearray, memoryview))),
                         st.integers(max_value=-1), st.integers(min_value=256))

ENTRIES: list[Entry] = [
    # -- engines, devices, kernels, compilation ---------------------------------------------
    Entry("hrx.open_device", lambda w, engine, index: hrx.open_device(engine, index),
          {"engine": _v("host"), "index": _v(0)},
          {"engine": st.one_of(h.bad_name().filter(lambda v: v is not None), st.sampled_from(["nope", "HOST"])),
           "index": h.bad_count(0, 0)}),
    Entry("hrx.device(options)", lambda w, opt: hrx.open_device("host", **opt), {"opt": _v({})},
          {"opt": st.sampled_from([{"bogus": 1}, {"max_transfer_bytes": 0}, {"max_transfer_bytes": "1"},
                                   {"compute_queues": -1}, {"jitter_us": 1.5}, {"copy_queues": True},
                                   {"compute_queues": 2**40}, {"max_transfer_bytes": 2**70}])},
          {"opt": ("bogus", "max_transfer_bytes", "compute_queues", "jitter_us", "copy_queues")}),
    Entry("hrx.compile", lambda w, source, target, entry, options: hrx.compile(source, target=target, entry=entry, options=options),
          {"source": _v("def f(b):\n    pass\n"), "target": _v("host"), "entry": _v("f"), "options": _v(())},
          {"source": st.sampled_from([None, 1, 1.5, [], object(), h.Hostile()]),
           "target": st.one_of(h.bad_name(), st.just("no-such-target")),
           "entry": st.sampled_from([None, 1, b"f", [], object()]),
           "options": st.sampled_from([None, 1, "-O3", [1], [None], object(), h.Hostile()])}),
    Entry("Kernel", lambda w, name, buffers, scalars, host, entry, options: hrx.Kernel(
        name, buffers=buffers, scalars=scalars, host=host, entry=entry, options=options),
          {"name": _v("k"), "buffers": _v(1), "scalars": _v(()), "host": _v(lambda b: None), "entry": _v(None),
           "options": _v(None)},
          {"name": h.bad_name(), "buffers": st.one_of(st.sampled_from([-1, 10**6, "rw", [1], ["sideways"], None, 1.5, h.Hostile()])),
           "scalars": st.sampled_from([None, 1, "f4", [None], ["nope"], [object()], [np.dtype("O")], ["U4"], [h.Hostile()]]),
           "host": st.sampled_from([1, [], object(), b""]),
           "entry": st.sampled_from(["", 1, b"x", []]),
           "options": st.sampled_from([1, "x", {"host": "-O3"}, {"host": [1]}, {1: ["a"]}, [("host", "x")]])},
          {"scalars": ("scalars",), "host": ("host", "sources")}),
    Entry("Device.allocate", lambda w, nbytes, budget: w.dev.allocate(nbytes, budget=budget),
          {"nbytes": _v(64), "budget": _v(None)},
          {"nbytes": h.bad_count(1, 2**62), "budget": st.sampled_from([1, "b", object(), {}, True])}),
    Entry("Device.allocate_shared", lambda w, nbytes: w.dev.allocate_shared(nbytes), {"nbytes": _v(64)},
          {"nbytes": h.bad_count(1, 2**62)}),
    Entry("Device.stream", lambda w, family: w.dev.stream(family), {"family": _v("compute")},
          {"family": st.one_of(h.bad_name(), st.sampled_from(["npu", "COMPUTE", "copy "]))}),
    Entry("Device.set_stream_queue_count", lambda w, count: w.other.set_stream_queue_count(count),
          {"count": _v(4)}, {"count": h.bad_count(1, None)}),
    Entry("Device.wrap", lambda w, obj: w.dev.wrap(obj), {"obj": _v(np.zeros(8, np.uint8))},
          {"obj": st.sampled_from([None, 1, "x", b"x", np.zeros(0, np.uint8), np.zeros((4, 4))[:, ::2],
                                   np.zeros(4).view(np.uint8)[:0], object(), h.Hostile()])}),
    Entry("Device.buffer_pool", lambda w, kw: w.dev.buffer_pool(**kw), {"kw": _v({})},
          {"kw": st.sampled_from([{"max_free_bytes": -1}, {"max_free_bytes": "1"}, {"shared": 1}, {"budget": 5},
                                  {"max_free_bytes": math.nan}])},
          {"kw": ("max_free_bytes", "shared", "budget")}),
    Entry("BufferPool.allocate", lambda w, nbytes: w.pool.allocate(nbytes), {"nbytes": _v(64)},
          {"nbytes": h.bad_count(1, 2**62)}),
    Entry("MemoryBudget", lambda w, limit_bytes, name: hrx.MemoryBudget(limit_bytes, name=name),
          {"limit_bytes": _v(100), "name": _v("b")},
          {"limit_bytes": h.bad_count(0, None), "name": h.bad_name()}),
    Entry("MemoryBudget.charge", lambda w, nbytes, what: w.budget.charge(nbytes, what),
          {"nbytes": _v(0), "what": _v("x")},
          {"nbytes": h.bad_count(0, 1 << 30), "what": st.sampled_from([None, 1, object(), b"x"])}),
    Entry("MemoryBudget.reservation", lambda w, nbytes: w.budget.reservation(nbytes), {"nbytes": _v(0)},
          {"nbytes": h.bad_count(0, 1 << 30)}),
    # -- buffers, views, bindings -------------------------------------------------------------
    Entry("Buffer.slice", lambda w, offset, length: w.buf.slice(offset, length), {"offset": _v(0), "length": _v(8)},
          {"offset": h.bad_count(0, 4095), "length": h.bad_count(1, 4096)}, {"offset": ("offset", "slice"), "length": ("length", "slice")}),
    Entry("Buffer.map", lambda w, access, offset, length: w.shared.map(access, offset, length).__enter__(),
          {"access": _v("read"), "offset": _v(0), "length": _v(8)},
          {"access": st.sampled_from(["sideways", None, 4, hrx.Access(0), b"read"]), "offset": h.bad_count(0, 4095),
           "length": h.bad_count(1, 4096).filter(lambda v: v is not None)}, {"offset": ("offset", "slice"), "length": ("length", "slice")}),
    Entry("Buffer.cache_control", lambda w, op, offset, length: w.buf.cache_control(op, offset, length),
          {"op": _v("flush"), "offset": _v(0), "length": _v(8)},
          {"op": st.sampled_from(["wipe", None, 1, object(), []]), "offset": h.bad_count(0, 4095),
           "length": h.bad_count(1, 4096).filter(lambda v: v is not None)},
          {"offset": ("offset", "slice"), "length": ("length", "slice")}),
    Entry("Buffer.visibility", lambda w, producer, consumer: w.shared.visibility(producer, consumer),
          {"producer": _v("host"), "consumer": lambda w: w.dev},
          {"producer": st.sampled_from([None, 1, "cpu", object()]), "consumer": st.sampled_from([None, 1, "gpu", object()])}),
    # -- streams ---------------------------------------------------------------------------------
    Entry("Stream.with_memory_budget", lambda w, budget: w.dev.stream().with_memory_budget(budget), {"budget": _v(None)},
          {"budget": st.sampled_from([1, "b", object(), 1.5])}),
    Entry("Stream.allocate_from", lambda w, data: w.stream.allocate_from(data), {"data": _v(np.ones(8, np.uint8))},
          {"data": h.bad_host_data()}),
    Entry("Stream.copy", lambda w, src, dst: w.stream.copyto(dst, src),
          {"src": lambda w: w.buf.slice(0, 64), "dst": lambda w: w.buf2.slice(0, 64)},
          {"src": st.one_of(h.bad_bindable(), st.sampled_from([h.Lazy("write-only src", lambda w: w.buf.slice(0, 64).write()),
                                                                  h.Lazy("wrong length", lambda w: w.buf.slice(0, 8))])),
           "dst": st.one_of(h.bad_bindable(), st.sampled_from([h.Lazy("read-only dst", lambda w: w.buf2.slice(0, 64).read()),
                                                                  h.Lazy("overlapping dst", lambda w: w.buf.slice(32, 64))]))},
          {"src": ("src", "copy"), "dst": ("dst", "copy")}),
    Entry("Stream.fill", lambda w, dst, value: w.stream.fill(dst, value), {"dst": lambda w: w.buf2, "value": _v(0)},
          {"dst": st.one_of(h.bad_bindable(tensors=True), st.just(h.Lazy("read-only", lambda w: w.buf2.binding().read()))),
           "value": st.one_of(st.sampled_from([256, -1, True, None, 1.5, "x", b"", b"abc", b"12345", np.float64(1), []]))},
          {"value": ("value", "fill")}),
    Entry("Stream.dispatch", lambda w, kernel, grid, bindings, block, scalars: w.stream.dispatch(
        kernel, grid, bindings, block=block, scalars=scalars),
          {"kernel": lambda w: w.kernel, "grid": _v(1), "bindings": lambda w: [w.buf2], "block": _v(1), "scalars": _v((8,))},
          {"kernel": st.sampled_from([None, "inc_bytes", 1, object(), lambda b: None]),
           "grid": st.one_of(h.bad_count(1, 2**31 - 1), st.sampled_from([(), (1, 2, 3, 4), (0,), (1, 70000), [1.0], (True,)])),
           "bindings": st.one_of(h.bad_sequence(), st.sampled_from([[], [None], "x", [1], [h.Lazy("x", lambda w: w.buf2)] * 2]),
                                 st.lists(h.bad_bindable(), min_size=1, max_size=1),
                                 st.just([h.Lazy("read-only for a read_write kernel", lambda w: w.buf2.binding().read())])),
           "block": st.one_of(h.bad_count(1, 1024), st.sampled_from([(64, 64), (1, 1, 65), 1.0])),
           "scalars": st.one_of(h.bad_sequence(), st.sampled_from([(), (1, 2), (None,), (True,), (1.5,), (-1,), (2**32,), ("8",),
                                                                    (np.float64(8),), ([8],)]))},
          {"bindings": ("bindings",), "scalars": ("scalars",)}),
    Entry("Stream.prepare", lambda w, grid, bindings, scalars: w.stream.prepare(w.kernel, grid, bindings, scalars=scalars),
          {"grid": _v(1), "bindings": lambda w: [w.buf2], "scalars": _v((8,))},
          {"grid": h.bad_count(1, 2**31 - 1), "bindings": st.one_of(h.bad_sequence(), st.lists(h.bad_bindable(), min_size=1, max_size=1)),
           "scalars": st.sampled_from([None, (None,), (True,), (1.5,)])}, {"bindings": ("bindings",)}),
    Entry("PreparedLaunch.rebind", lambda w, index, binding: w.stream.prepare(w.kernel, 1, [w.buf2], scalars=(8,)).rebind(index, binding),
          {"index": _v(0), "binding": lambda w: w.buf2},
          {"index": h.bad_count(0, 0), "binding": st.one_of(h.bad_bindable(), st.just(h.Lazy("read-only", lambda w: w.buf2.binding().read())))},
          {"binding": ("bindings[0]", "binding")}),
    Entry("Stream.wait_event", lambda w, event: w.stream.wait_event(event), {"event": lambda w: w.event},
          {"event": st.sampled_from([None, 1, "e", object(), h.Lazy("a completion", lambda w: w.completion)])}),
    Entry("Stream.record_event(timing)", lambda w, timing: w.stream.record_event(timing=timing), {"timing": _v(True)},
          {"timing": h.bad_bool()}),
    Entry("Event.elapsed_time", lambda w, start, end: start.elapsed_time(end),
          {"start": lambda w: w.timed_event(), "end": lambda w: w.timed_event()},
          {"start": st.sampled_from([h.Lazy("untimed", lambda w: w.event)]),
           "end": st.sampled_from([None, 1.5, "e", h.Lazy("untimed", lambda w: w.event),
                                   h.Lazy("a completion", lambda w: w.completion),
                                   h.Lazy("other device", lambda w: w.other.stream().record_event(timing=True))])},
          {"start": ("event",), "end": ("end",)}),
    Entry("DeviceTensor.__dlpack__", lambda w, stream, copy, dl_device: w.tensor().__dlpack__(stream=stream, copy=copy, dl_device=dl_device),
          {"stream": _v(None), "copy": _v(None), "dl_device": _v(None)},
          {"stream": st.sampled_from([-2, 1.5, "s", True]), "copy": st.sampled_from([True, 1, "no"]),
           "dl_device": st.sampled_from([(2, 0), (1, 5), "cpu", 1])}),
    Entry("Stream.upload", lambda w, dst, data: w.stream.upload(dst, data),
          {"dst": lambda w: w.buf2, "data": _v(np.ones(64, np.uint8))},
          {"dst": st.one_of(h.bad_bindable(), st.just(h.Lazy("too small", lambda w: w.buf2.slice(0, 8)))), "data": h.bad_host_data()},
          {"dst": ("dst", "upload")}),
    Entry("Stream.upload_blocking", lambda w, dst, data, timeout: w.stream.upload_blocking(dst, data, timeout),
          {"dst": lambda w: w.buf2, "data": _v(np.ones(64, np.uint8)), "timeout": _v(10)},
          {"dst": h.bad_bindable(), "data": h.bad_host_data(), "timeout": h.bad_timeout()}),
    Entry("Stream.upload_file", lambda w, dst, file, offset, nbytes: w.stream.upload_file(dst, file, offset, nbytes),
          {"dst": lambda w: w.buf2, "file": lambda w: w.st_path, "offset": _v(0), "nbytes": _v(8)},
          {"dst": h.bad_bindable(), "file": st.one_of(h.bad_path(), st.sampled_from([-1, 2**40, 10**6, h.Lazy("dir", lambda w: w.tmp)])),
           "offset": st.one_of(h.bad_count(0, None), st.integers(min_value=10**6, max_value=2**70)), "nbytes": st.one_of(h.not_int().filter(lambda v: v is not None), st.integers(max_value=-1),
                                                                st.integers(min_value=4097, max_value=2**70))},
          {"nbytes": ("nbytes", "upload_file", "file"), "offset": ("offset",)}),
    Entry("Stream.upload_file_ranges", lambda w, ranges: w.stream.upload_file_ranges(w.st_path, ranges),
          {"ranges": lambda w: [(w.buf2, 0, 8)]},
          {"ranges": st.sampled_from([None, [], "r", [None], [(1, 0, 8)], [(h.Lazy("b", lambda w: w.buf2), -1, 8)], [("x",)],
                                      [(1, 2)], {1: 2}, [[1, 2, 3, 4]]])},
          {"ranges": ("ranges", "dst", "offset")}),
    Entry("Stream.download", lambda w, src, out: w.stream.download(src, out),
          {"src": lambda w: w.buf.slice(0, 64), "out": _v(None)},
          {"src": st.one_of(h.bad_bindable(), st.just(h.Lazy("write-only", lambda w: w.buf.binding().write()))),
           "out": st.sampled_from([1, "o", np.zeros(8, np.uint8), np.zeros(64, np.uint8)[::2], np.zeros(64, np.uint8).reshape(8, 8).T,
                                   np.zeros(64, object), h.Lazy("read-only", lambda w: np.frombuffer(bytes(64), np.uint8))])},
          {"out": ("out",)}),
    Entry("Stream.synchronize", lambda w, timeout: w.stream.synchronize(timeout), {"timeout": _v(10)}, {"timeout": h.bad_timeout()}),
    Entry("Stream.owned_graph", lambda w, inferred: w.stream.owned_graph(inferred=inferred), {"inferred": _v(True)},
          {"inferred": h.bad_bool()}),
    Entry("Device.synchronize", lambda w, timeout: w.dev.synchronize(timeout), {"timeout": _v(10)}, {"timeout": h.bad_timeout()}),
    Entry("Completion.add_done_callback", lambda w, callback: w.completion.add_done_callback(callback),
          {"callback": _v(lambda c: None)}, {"callback": h.bad_callable()}),
    # -- graphs ----------------------------------------------------------------------------------
    Entry("Graph.copy", lambda w, src, dst: w.stream.access_graph().copyto(dst, src),
          {"src": lambda w: w.buf.slice(0, 64), "dst": lambda w: w.buf2.slice(0, 64)},
          {"src": h.bad_bindable(), "dst": st.one_of(h.bad_bindable(), st.just(h.Lazy("overlap", lambda w: w.buf.slice(8, 64))))},
          {"dst": ("dst", "copy")}),
    Entry("Graph.fill", lambda w, dst, value: w.stream.access_graph().fill(dst, value), {"dst": lambda w: w.buf2, "value": _v(0)},
          {"dst": h.bad_bindable(tensors=True), "value": st.sampled_from([256, None, "x", b"123", 1.5])}, {"value": ("value", "fill")}),
    Entry("Graph.dispatch", lambda w, grid, bindings, scalars, deps: w.stream.graph().dispatch(
        w.kernel, grid, bindings, scalars=scalars, deps=deps),
          {"grid": _v(1), "bindings": lambda w: [w.buf2], "scalars": _v((8,)), "deps": _v([])},
          {"grid": h.bad_count(1, 2**31 - 1), "bindings": st.one_of(h.bad_sequence(), st.lists(h.bad_bindable(), min_size=1, max_size=1)),
           "scalars": st.sampled_from([(None,), (True,), (1.5,), None, 5]),
           "deps": st.sampled_from([None, 1, "d", [1], [None], h.Lazy("foreign node", lambda w: [w.node])])},
          {"bindings": ("bindings",)}),
    Entry("Graph.join", lambda w, deps: w.stream.graph().join(deps), {"deps": _v([])},
          {"deps": st.sampled_from([None, 1, [2], h.Lazy("node of another graph", lambda w: [w.node])])}),
    Entry("Graph.input", lambda w, name, buffer: w.stream.access_graph().input(name, buffer),
          {"name": _v("x"), "buffer": lambda w: w.buf2},
          {"name": h.bad_name(), "buffer": st.one_of(h.bad_bindable(), st.just(h.Lazy("a view", lambda w: w.buf2.view())))}),
    Entry("Graph.launch", lambda w, stream, inputs: w.graph.launch(stream, inputs=inputs),
          {"stream": _v(None), "inputs": _v(None)},
          {"stream": st.sampled_from([1, "s", object(), h.Lazy("stream of another device", lambda w: w.other.stream())]),
           "inputs": st.sampled_from([1, "x", [("x", 1)], {"y": 1}, {"x": None}, {"x": 5},
                                      h.Lazy("wrong size", lambda w: {"x": w.buf2.slice(0, 8)}),
                                      h.Lazy("read-only", lambda w: {"x": w.buf.binding().read()}),
                                      h.Lazy("closed", lambda w: {"x": w.closed_buffer()})])},
          {"inputs": ("inputs",)}),
    # -- the runtime -----------------------------------------------------------------------------
    Entry("RuntimeOptions", lambda w, kw: __import__("hrx_core.execution", fromlist=["x"]).RuntimeOptions(**kw), {"kw": _v({})},
          {"kw": st.sampled_from([{"max_submissions": 0}, {"max_submissions": "1"}, {"max_submissions": True},
                                  {"compute_engine": "gpu"}, {"copy_engine": None}, {"memory_budget": 1},
                                  {"observe": "yes"}, {"trace_events": -1}, {"bogus": 1}, {"max_submissions": 1.5}])},
          {"kw": ("max_submissions", "compute_engine", "copy_engine", "memory_budget", "observe", "trace_events", "bogus")}),
    Entry("Runtime", lambda w, device, options: __import__("hrx_core.execution", fromlist=["x"]).Runtime(device, options),
          {"device": lambda w: w.dev, "options": _v(None)},
          {"device": st.sampled_from([None, 1, "host", object()]), "options": st.sampled_from([1, {}, "o", object()])}),
    Entry("Runtime.lane", lambda w, name: w.rt.lane(name), {"name": _v("compute")},
          {"name": st.one_of(h.bad_name(), st.sampled_from(["npu", "gpu"]))}, {"name": ("lane",)}),
    Entry("Runtime.allocate", lambda w, nbytes, shared: w.rt.allocate(nbytes, shared=shared),
          {"nbytes": _v(64), "shared": _v(False)}, {"nbytes": h.bad_count(1, None), "shared": h.bad_bool()}),
    Entry("Runtime.submit", lambda w, graph, block, timeout: w.rt.submit(graph, block=block, timeout=timeout),
          {"graph": lambda w: w.tg, "block": _v(True), "timeout": _v(10)},
          {"graph": st.sampled_from([None, 1, "g", h.Lazy("a device graph", lambda w: w.graph),
                                     h.Lazy("another runtime's graph", lambda w: w.other_runtime.graph())]),
           "block": h.bad_bool(), "timeout": h.bad_timeout()}),
    Entry("Runtime.synchronize", lambda w, timeout: w.rt.synchronize(timeout), {"timeout": _v(10)}, {"timeout": h.bad_timeout()}),
    Entry("Runtime.write_trace", lambda w, path: w.rt.write_trace(path), {"path": lambda w: str(w.tmp / "t.json")},
          {"path": h.bad_path()}, {"path": ("path", "trace")}),
    Entry("TrackedGraph.compute", lambda w, name, record, lane: w.rt.graph().compute(name, record, lane=lane),
          {"name": _v("c"), "record": lambda w: (lambda g: g.fill(w.rbuf, pattern=1)), "lane": _v("compute")},
          {"name": h.bad_name(), "record": h.bad_callable(), "lane": st.one_of(h.bad_name(), st.sampled_from(["upload", "npu"]))},
          {"name": ("name",)}),
    Entry("TrackedGraph.upload", lambda w, dst, data, name: w.rt.graph().upload(dst, data, name=name),
          {"dst": lambda w: w.rbuf, "data": _v(np.zeros(256, np.uint8)), "name": _v("u")},
          {"dst": st.one_of(h.bad_bindable(), st.just(h.Lazy("read-only", lambda w: w.rbuf.binding().read()))),
           "data": st.one_of(h.bad_host_data(), st.just(np.zeros(8, np.uint8))), "name": h.bad_name()},
          {"data": ("data", "upload"), "dst": ("dst", "upload")}),
    Entry("TrackedGraph.download", lambda w, src, name: w.rt.graph().download(src, name=name),
          {"src": lambda w: w.rbuf, "name": _v("d")},
          {"src": st.one_of(h.bad_bindable(), st.just(h.Lazy("write-only", lambda w: w.rbuf.binding().write()))), "name": h.bad_name()}),
    Entry("TrackedGraph.gpu_scoped", lambda w, name, bindings, fn: w.rt.graph().gpu_scoped(name, bindings, fn),
          {"name": _v("s"), "bindings": lambda w: [w.rbuf.binding().read()], "fn": _v(lambda scope: None)},
          {"name": h.bad_name(), "bindings": st.one_of(h.bad_sequence(), st.lists(h.bad_bindable(), min_size=1, max_size=1)),
           "fn": h.bad_callable()}, {"bindings": ("bindings",)}),
    Entry("UploadRegion.write", lambda w, data: w.up.write(data), {"data": _v(np.zeros(256, np.uint8))},
          {"data": st.one_of(h.bad_host_data(), st.just(np.zeros(8, np.uint8)))}),
    Entry("DownloadRegion.read", lambda w, dtype, timeout: w.down.read(dtype, timeout=timeout),
          {"dtype": _v(np.uint8), "timeout": _v(10)}, {"dtype": h.bad_dtype(), "timeout": h.bad_timeout()}),
    Entry("Runtime.native_session.run", lambda w, model, timeout: _session_run(w, model, timeout),
          {"model": _v(lambda ns: None), "timeout": _v(10)}, {"model": h.bad_callable(), "timeout": h.bad_timeout()}),
    # -- the model layer -------------------------------------------------------------------------
    Entry("ModelContext", lambda w, device, options: __import__("hrx_core.model", fromlist=["x"]).ModelContext(device, options),
          {"device": lambda w: w.dev, "options": _v(None)},
          {"device": st.sampled_from([None, 1, "host", object()]), "options": st.sampled_from([1, "o", {}])}),
    Entry("ModelSession.weight", lambda w, name, data, dtype, shape: w.ctx.session("s" + str(id(data) % 97)).weight(
        name, data, dtype=dtype, shape=shape),
          {"name": _v("w"), "data": _v(np.ones(16, np.float32)), "dtype": _v(None), "shape": _v(None)},
          {"name": st.one_of(h.bad_name(), st.just("a/b")), "data": st.sampled_from([None, [], np.zeros(0), "abc", object(),
                                                                                        np.array([object()]), [[1], [2, 3]]]),
           "dtype": h.bad_dtype().filter(lambda d: d is not None),
           "shape": st.one_of(h.bad_shape().filter(lambda v: v is not None), st.just((5,)))},
          {"data": ("data", "weight"), "shape": ("shape",)}),
    Entry("ModelSession.tensor", lambda w, name, shape, dtype: w.ctx.session("t").tensor(name, shape, dtype),
          {"name": _v("t"), "shape": _v((4,)), "dtype": _v(np.float32)},
          {"name": h.bad_name(), "shape": st.one_of(h.bad_shape(), st.just((0,))), "dtype": h.bad_dtype()}),
    Entry("ModelSession.load_kernel", lambda w, kernel: w.ctx.session("k").load_kernel(kernel), {"kernel": lambda w: w.kernel},
          {"kernel": st.sampled_from([None, 1, "inc_bytes", object()])}),
    Entry("ModelSession.in_context", lambda w, budget: w.session.in_context(budget).__enter__(), {"budget": _v(None)},
          {"budget": st.sampled_from([1, "b", object(), 2.5])}),
    Entry("ModelSession.graph", lambda w, key, record: w.session.graph(key, record), {"key": _v("k"), "record": _v(lambda g: None)},
          {"key": st.sampled_from([[1], {1: 2}, {1}]), "record": h.bad_callable()}, {"key": ("key",), "record": ("record",)}),
    Entry("ModelSession.write", lambda w, tensor, data: w.session.write(tensor, data),
          {"tensor": lambda w: w.session.weights["w"], "data": _v(np.zeros(64, np.uint8))},
          {"tensor": st.sampled_from([None, 1, "t", h.Lazy("buffer", lambda w: w.buf2)]),
           "data": st.one_of(h.bad_host_data(), st.just(np.zeros(3, np.uint8)))}),
    Entry("ModelSession.read", lambda w, tensor, timeout: w.session.read(tensor, timeout=timeout),
          {"tensor": lambda w: w.session.weights["w"], "timeout": _v(10)},
          {"tensor": st.sampled_from([None, 1, "t", h.Lazy("buffer", lambda w: w.buf2),
                                      h.Lazy("tensor of another device", lambda w: __import__("hrx_core.model", fromlist=["x"]).DeviceTensor(
                                          w.foreign_buffer(), (4096,), np.uint8))]), "timeout": h.bad_timeout()}),
    Entry("ModelSession.freeze", lambda w, budget: w.ctx.session("f").freeze(budget=budget), {"budget": _v(None)},
          {"budget": st.sampled_from([1, "b", object()])}),
    Entry("ModelDefinition.prepare", lambda w, slot_factory, slots: w.definition.prepare(slot_factory, slots=slots),
          {"slot_factory": _v(lambda b: (_ for _ in ()).throw(AssertionError("must not run"))), "slots": _v(1)},
          {"slot_factory": h.bad_callable(), "slots": h.bad_count(1, None)}),
    Entry("ModelDefinition.fragment", lambda w, name, record, inputs, outputs: w.definition.fragment(
        name, record, inputs=inputs, outputs=outputs),
          {"name": _v("f"), "record": _v(lambda g, io: None), "inputs": _v({}), "outputs": _v({"y": ((4,), np.float32)})},
          {"name": st.one_of(h.bad_name(), st.just("a/b")), "record": h.bad_callable(),
           "inputs": st.sampled_from([None, 1, [], {"x": 1}, {"x": ((4,), "nope")}, {"x": ((-1,), np.float32)}, {"": ((1,), "f4")}]),
           "outputs": st.sampled_from([{}, None, {"y": ((0,), np.float32)}, {"y": (4, 5, 6)}, {"a/b": ((1,), "f4")}])},
          {"inputs": ("inputs",), "outputs": ("outputs",)}),
    Entry("PreparedModel.slot", lambda w, index: w.model.slot(index), {"index": _v(0)}, {"index": h.bad_count(0, 0)}),
    Entry("PreparedModel.acquire", lambda w, timeout: w.model.acquire(timeout).release(), {"timeout": _v(1)},
          {"timeout": h.bad_timeout()}),
    Entry("ModelSlot.submit", lambda w, inputs, entry, read, timeout: w.model.slot(0).submit(inputs, entry=entry, read=read, timeout=timeout),
          {"inputs": _v({"x": np.zeros(64, np.uint8)}), "entry": _v(None), "read": _v(()), "timeout": _v(10)},
          {"inputs": st.sampled_from([1, "x", [1], {"z": np.zeros(64, np.uint8)}, {"x": np.zeros(3, np.uint8)}, {"x": "text"},
                                      {"x": np.array([object()] * 64)}, {"x": np.full(64, 1.5)}, {"x": None}]),
           "entry": st.sampled_from(["nope", 1, b"main", []]), "read": st.sampled_from(["y", 1, ["z"], [1], {1: 2}]),
           "timeout": h.bad_timeout()},
          {"inputs": ("inputs",), "read": ("read",), "entry": ("entry",)}),
    Entry("ModelSlot.submit_host_with", lambda w, fill, inputs: w.model.slot(0).submit_host_with(fill, inputs=inputs),
          {"fill": _v(lambda staged: None), "inputs": _v(None)},
          {"fill": h.bad_callable(), "inputs": st.sampled_from(["x", 1, ["z"], [1], [None]])}, {"inputs": ("inputs",)}),
    Entry("ModelSlot.state", lambda w, name: w.model.slot(0).state(name), {"name": _v("x")},
          {"name": st.sampled_from(["nope", 1, None, [], ""])}),
    Entry("DeviceTensor", lambda w, view, shape, dtype, strides: __import__("hrx_core.model", fromlist=["x"]).DeviceTensor(
        view, shape, dtype, strides=strides),
          {"view": lambda w: w.buf.slice(0, 64), "shape": _v((16,)), "dtype": _v(np.float32), "strides": _v(None)},
          {"view": st.sampled_from([None, 1, np.zeros(4), h.Lazy("binding", lambda w: w.buf.binding())]),
           "shape": st.one_of(h.bad_shape(), st.just((17,)), st.just((4,))), "dtype": h.bad_dtype(),
           "strides": st.sampled_from([(-4,), (4.0,), (True,), (4, 4), "4", (2**62,), [h.Hostile()], (np.float32(4),)])},
          {"view": ("view",), "shape": ("shape",), "strides": ("strides", "shape")}),
    Entry("DeviceTensor.rows", lambda w, start, count: w.tensor().rows(start, count), {"start": _v(0), "count": _v(1)},
          {"start": h.bad_count(0, 4095), "count": h.bad_count(1, 4096)}, {"start": ("start", "rows"), "count": ("count", "rows")}),
    Entry("DeviceTensor.reshape", lambda w, shape: w.tensor().reshape(shape), {"shape": _v((64, 64))},
          {"shape": st.one_of(h.bad_shape(), st.just((4097,)))}, {"shape": ("shape",)}),
    Entry("TensorSpec", lambda w, shape, dtype: __import__("hrx_core.model", fromlist=["x"]).TensorSpec(shape, dtype),
          {"shape": _v((4,)), "dtype": _v("f32")}, {"shape": h.bad_shape(), "dtype": h.bad_dtype()}),
    # -- residency, plan cache, placement ------------------------------------------------------
    Entry("ResidencyManager", lambda w, limit_bytes, low_water, name: __import__(
        "hrx_core.execution.residency", fromlist=["x"]).ResidencyManager(limit_bytes, low_water=low_water, name=name),
          {"limit_bytes": _v(1 << 20), "low_water": _v(0.9), "name": _v("r")},
          {"limit_bytes": h.bad_count(0, None), "low_water": st.sampled_from([0, -1, 1.5, math.nan, "0.5", None, True]),
           "name": h.bad_name()}),
    Entry("PlanCache", lambda w, max_plans, max_concurrent: __import__("hrx_core.execution.plan_cache", fromlist=["x"]).PlanCache(
        max_plans, max_concurrent=max_concurrent), {"max_plans": _v(4), "max_concurrent": _v(2)},
          {"max_plans": h.bad_count(1, None), "max_concurrent": h.bad_count(1, None)}),
    Entry("Fabric.allocation_profiles", lambda w, devices, coherent: _fabric().allocation_profiles(devices, coherent),
          {"devices": lambda w: [w.dev], "coherent": _v(True)},
          {"devices": st.sampled_from([None, [], "host", [None], [1], 5]), "coherent": h.bad_bool()}),
    Entry("Fabric.allocate", lambda w, nbytes, placement: _fabric().allocate(nbytes, placement),
          {"nbytes": _v(64), "placement": lambda w: __import__("hrx_core.placement", fromlist=["x"]).MemoryPlacement.Shared(w.dev)},
          {"nbytes": h.bad_count(1, 2**62), "placement": st.sampled_from([None, 1, "shared", object()])}),
    Entry("Fabric.adopt", lambda w, buffer, device: _fabric().adopt(buffer, device),
          {"buffer": lambda w: w.shared, "device": lambda w: w.dev},
          {"buffer": st.sampled_from([None, 1, "b", h.Lazy("closed", lambda w: w.closed_buffer()), h.Lazy("view", lambda w: w.shared.view())]),
           "device": st.sampled_from([None, 1, "host", object()])}),
    Entry("prepare_release_host", lambda w, ranges: __import__("hrx_core.placement", fromlist=["x"]).prepare_release_host(ranges),
          {"ranges": lambda w: [w.shared]}, {"ranges": st.sampled_from([None, 1, "r", [None], [1], [h.Hostile()]])}),
    # -- artifacts -----------------------------------------------------------------------------
    Entry("artifacts.open", lambda w, path, format: hrx.artifacts.open(path, format=format),
          {"path": lambda w: w.st_path, "format": _v(None)},
          {"path": st.one_of(h.bad_path(), st.just("/nonexistent/file.safetensors")),
           "format": st.sampled_from([1, "nope", b"onnx", []])}, {"path": ("path", "nonexistent", "cannot"), "format": ("format",)}),
    Entry("FileView.open", lambda w, path, mode: __import__("hrx_core.artifacts.safetensors", fromlist=["x"]).FileView.open(path, mode),
          {"path": lambda w: w.st_path, "mode": _v("mapped")},
          {"path": h.bad_path(), "mode": st.sampled_from(["rw", None, 1, b"mapped"])}),
    Entry("FileView.info/numpy", lambda w, name: w.fileview.numpy(name), {"name": _v("a")},
          {"name": st.sampled_from(["nope", 1, None, [], b"a"])}, {"name": ("name", "nope", "tensor")}),
    Entry("FileView.advise", lambda w, names, advice: w.fileview.advise(names, advice), {"names": _v(None), "advice": _v("willneed")},
          {"names": st.sampled_from([1, ["nope"], [1], object()]), "advice": st.sampled_from(["now", None, 1])},
          {"names": ("names", "nope", "tensor")}),
    Entry("FileView.load", lambda w, stream, names, budget: w.fileview.load(stream, names, budget=budget),
          {"stream": lambda w: w.stream, "names": _v(["a"]), "budget": _v(None)},
          {"stream": st.sampled_from([None, 1, "s", object()]), "names": st.sampled_from([1, ["nope"], [None], object()]),
           "budget": st.sampled_from([1, "b", object()])}, {"names": ("names", "nope", "tensor")}),
    Entry("onnx.Model.load", lambda w, source, load_external_data, base_dir: __import__(
        "hrx_core.artifacts.onnx", fromlist=["x"]).Model.load(source, load_external_data=load_external_data, base_dir=base_dir),
          {"source": _v(b"\x08\x07"), "load_external_data": _v(True), "base_dir": _v(None)},
          {"source": st.one_of(h.bad_path(), st.just(b"\xff\xff garbage")), "load_external_data": h.bad_bool(),
           "base_dir": st.sampled_from([1, object(), "\x00", b"a\x00"])},
          {"source": ("source", "ONNX", "onnx", "path")}),
    # -- traces, profiles, caches ---------------------------------------------------------------
    Entry("TraceRecorder", lambda w, max_events: _trace_mod().TraceRecorder(max_events), {"max_events": _v(10)},
          {"max_events": h.bad_count(1, None)}),
    Entry("TraceRecorder.track", lambda w, name, group, sort_index: _trace_mod().TraceRecorder(10).track(name, group, sort_index=sort_index),
          {"name": _v("t"), "group": _v("g"), "sort_index": _v(None)},
          {"name": h.bad_name(), "group": h.bad_name(), "sort_index": h.not_int().filter(lambda v: v is not None)}),
    Entry("TraceRecorder.slice", lambda w, track, name, start, end: _trace().slice(track, name, start, end),
          {"track": _v(0), "name": _v("s"), "start": _v(0), "end": _v(10)},
          {"track": st.one_of(h.not_int(), st.just(999), st.just(-1)), "name": h.bad_name(),
           "start": h.not_int(), "end": st.one_of(h.not_int(), st.just(-1))},
          {"start": ("start", "ts", "end"), "end": ("end", "start", "ts")}),
    Entry("validate_trace", lambda w, data: _trace_mod().validate_trace(data), {"data": _v({"traceEvents": []})},
          {"data": st.sampled_from([None, 1, "x", [], {"traceEvents": None}, {"traceEvents": [1]}, {"traceEvents": [{"ph": "X"}]},
                                    {"traceEvents": [{"ph": "X", "name": 1, "ts": "a", "pid": 1, "tid": 1}]}])},
          {"data": ("trace", "event", "data")}),
    Entry("LatencyProfile.record", lambda w, name, seconds: w.rt.profile.record(name, seconds), {"name": _v("r"), "seconds": _v(0.1)},
          {"name": h.bad_name(), "seconds": st.sampled_from([None, "1", math.nan, -1.0, math.inf, [1], True])}),
    Entry("PlanCache.lease", lambda w, key, prepare: _plans().lease(key, prepare).close(), {"key": _v("k"), "prepare": _v(lambda: _Plan())},
          {"key": st.sampled_from([[1], {1: 2}, {3}]), "prepare": h.bad_callable()}),
    Entry("ResidencyManager.load_budgeted", lambda w, key, loader, pin: _residency().load_budgeted(key, loader, pin=pin).close(),
          {"key": _v("k"), "loader": _v(lambda budget: _Plan()), "pin": _v(False)},
          {"key": st.sampled_from([[1], {1: 2}]), "loader": h.bad_callable(), "pin": h.bad_bool()}),
    Entry("ResidencyManager.reserve", lambda w, nbytes: _residency().reserve(nbytes), {"nbytes": _v(1)}, {"nbytes": h.bad_count(0, None)}),
    Entry("UnitLease.workspace", lambda w, nbytes: _residency().load_budgeted("u", lambda b: _Plan()).workspace(nbytes),
          {"nbytes": _v(8)}, {"nbytes": h.bad_count(0, None)}),
    # -- interop -----------------------------------------------------------------------------------
    Entry("View.__dlpack__", lambda w, kw: w.buf.view().__dlpack__(**kw), {"kw": _v({})},
          {"kw": st.sampled_from([{"stream": "s"}, {"stream": -5}, {"max_version": "1"}, {"max_version": (1,)}, {"copy": "yes"},
                                  {"dl_device": "cpu"}, {"dl_device": (99, 0)}])},
          {"kw": ("stream", "max_version", "copy", "dl_device")}),
    # -- onnx models ---------------------------------------------------------------------------------
    Entry("onnx.Model.node/producer/consumers", lambda w, name, which: getattr(_onnx_model(w), which)(name),
          {"name": _v("id"), "which": _v("node")},
          {"name": st.sampled_from([1, None, [], "nope", b"id"])}, {"name": ("name", "node", "nope")}),
    Entry("onnx.Model.attr", lambda w, node, name, kind: _onnx_model(w).attr(node, name, kind, default=None),
          {"node": _v("id"), "name": _v("a"), "kind": _v("int")},
          {"node": st.sampled_from([1, None, "nope", []]), "name": st.sampled_from([1, None, []]),
           "kind": st.sampled_from(["nope", 1, None, []])}, {"node": ("node",), "name": ("name", "attribute")}),
    Entry("onnx.decode_tensor", lambda w, tensor, strings: __import__("hrx_core.artifacts.onnx", fromlist=["x"]).decode_tensor(
        tensor, strings=strings), {"tensor": lambda w: _onnx_tensor(), "strings": _v("str")},
          {"tensor": st.sampled_from([None, 1, "t", b"t", object()]), "strings": st.sampled_from(["utf8", 1, None, []])}),
    Entry("hf.Resolver.resolve", lambda w, filenames, sha256: _resolver(w).resolve(filenames, sha256=sha256),
          {"filenames": _v(["config.json"]), "sha256": _v(None)},
          {"filenames": st.sampled_from([None, 1, [], [1], ["/abs"], ["../x"], ["a//b"], ["a\\b"], [b"x"], ["a\x00"]]),
           "sha256": st.sampled_from([1, "x", {"config.json": "zz"}, {"other": "0" * 64}, {"config.json": 5}])}),
    # -- hrx_npu ---------------------------------------------------------------------------------------
    Entry("hrx_npu.open_device", lambda w, opt: _npu_mod().open_device("npu-host", **opt), {"opt": _v({})},
          {"opt": st.sampled_from([{"columns": 0}, {"columns": 10**9}, {"columns": "8"}, {"column_memory_bytes": 2**60},
                                   {"max_pending_invocations": -1}, {"npu_queues": 1.5}, {"bogus": 1}, {"jitter_us": 2**60}])},
          {"opt": ("columns", "column_memory_bytes", "max_pending_invocations", "npu_queues", "bogus", "jitter_us")}),
    Entry("BufferContract", lambda w, length, access, alignment: _contract().BufferContract(length, access, alignment),
          {"length": _v(256), "access": _v("read"), "alignment": _v(64)},
          {"length": h.bad_count(1, None), "access": st.sampled_from(["sideways", 5, b"read", []]),
           "alignment": st.one_of(h.bad_count(1, None), st.just(3), st.just(48))}),
    Entry("KernelContract", lambda w, buffers, scratch_bytes: _contract().KernelContract(buffers, scratch_bytes),
          {"buffers": lambda w: [_contract().BufferContract(256)], "scratch_bytes": _v(0)},
          {"buffers": st.sampled_from([None, 1, "b", [1], [None], {1: 2}]), "scratch_bytes": h.bad_count(0, None)}),
    Entry("NpuDevice.load_artifact", lambda w, artifact, columns, contract: w.npu.load_artifact(artifact, columns=columns, contract=contract),
          {"artifact": lambda w: w.npu_artifact, "columns": _v(1), "contract": lambda w: w.npu_contract},
          {"artifact": st.sampled_from([None, 1, "a", b"\x7fELF", lambda: None]), "columns": h.bad_count(1, 8),
           "contract": st.sampled_from([None, 1, "c", [], {}])}),
    Entry("NpuProgram.invocation", lambda w, bindings: w.npu_program.invocation(bindings), {"bindings": lambda w: [w.npu_buf]},
          {"bindings": st.one_of(h.bad_sequence(), st.sampled_from([[], [None], [1], "b", [h.Lazy("small", lambda w: w.npu_buf.slice(0, 64))],
                                                                    [h.Lazy("host device buffer", lambda w: w.buf.slice(0, 256))]]))},
          {"bindings": ("bindings", "binding")}),
    Entry("Invocation.launch", lambda w, stream, block, timeout: w.npu_program.invocation([w.npu_buf]).launch(stream, block=block, timeout=timeout),
          {"stream": _v(None), "block": _v(True), "timeout": _v(10)},
          {"stream": st.sampled_from([1, "s", h.Lazy("host stream", lambda w: w.stream)]), "block": h.bad_bool(), "timeout": h.bad_timeout()}),
    # -- hrx_tensor / hrx_image ------------------------------------------------------------------------
    Entry("TensorOps", lambda w, device, plan_cache, stream: _tensor_mod().TensorOps(device, plan_cache=plan_cache, stream=stream),
          {"device": lambda w: w.dev, "plan_cache": _v(None), "stream": _v(None)},
          {"device": st.sampled_from([None, 1, "host", object()]), "plan_cache": st.sampled_from([1, {}, "p"]),
           "stream": st.sampled_from([1, "s", h.Lazy("other device's stream", lambda w: w.other.stream())])}),
    Entry("TensorOps.gather_rows", lambda w, table, indices: w.tops.gather_rows(table, indices).close(),
          {"table": lambda w: w.ttable, "indices": _v([0, 1])},
          {"table": st.sampled_from([None, 1, h.Lazy("buffer", lambda w: w.buf2)]),
           "indices": st.sampled_from([None, [], [64], [-1], [0.5], "0", [[0]], np.array([True]), [2**63], np.array([object()]),
                                       [None], h.Hostile()])}),
    Entry("TensorOps.linear", lambda w, x, wt, out_dtype: w.tops.linear(x, wt, out_dtype).close(),
          {"x": lambda w: w.tx, "wt": lambda w: w.tw, "out_dtype": _v("f32")},
          {"x": st.sampled_from([None, 1, h.Lazy("w as x", lambda w: w.tw)]),
           "wt": st.sampled_from([None, 1, h.Lazy("f32 table", lambda w: w.ttable)]),
           "out_dtype": st.sampled_from(["f64", None, 1, "int8", object()])}, {"wt": ("w",)}),
    Entry("ImageOps.resize", lambda w, image, size, mode: w.iops.resize(image, size, mode=mode).close(),
          {"image": lambda w: w.image, "size": _v((4, 4)), "mode": _v("bilinear")},
          {"image": st.sampled_from([None, 1, h.Lazy("tensor", lambda w: w.tensor())]),
           "size": st.sampled_from([None, 0, (0, 4), (-1, 4), (4.5, 4), "4x4", (2**40, 2**40), (4, 4, 4)]),
           "mode": st.sampled_from(["cubic", None, 1, []])}),
    # -- hrx_models --------------------------------------------------------------------------------------
    Entry("Gpt2Config", lambda w, kw: _gpt2().Gpt2Config(**kw).validate(), {"kw": _v({})},
          {"kw": st.sampled_from([{"n_embd": 0}, {"n_embd": "768"}, {"n_head": 7}, {"layer_norm_epsilon": math.nan},
                                  {"activation_function": "relu"}, {"bogus": 1}, {"vocab_size": True}, {"n_layer": -1}])},
          {"kw": ("n_embd", "n_head", "layer_norm_epsilon", "activation_function", "bogus", "vocab_size", "n_layer")}),
    Entry("write_random_checkpoint", lambda w, directory, seed, std, dtype: _gpt2().write_random_checkpoint(
        directory, _gpt2().Gpt2Config(n_embd=128, n_layer=1, n_head=4, n_positions=8, vocab_size=16), seed=seed, std=std, dtype=dtype),
          {"directory": lambda w: w.tmp / "ckpt", "seed": _v(0), "std": _v(0.02), "dtype": _v("f32")},
          {"directory": st.one_of(h.bad_path(), st.just(h.Lazy("a file", lambda w: w.st_path))), "seed": st.one_of(h.not_int(), st.just(-1)),
           "std": st.sampled_from([math.nan, -1.0, 0.0, "0.1", None, math.inf]), "dtype": st.sampled_from(["f16", None, 1, []])}),
    Entry("Gpt2Decoder.generate", lambda w, prompt, max_new_tokens: w.decoder.generate(prompt, max_new_tokens),
          {"prompt": _v([1, 2]), "max_new_tokens": _v(2)},
          {"prompt": st.sampled_from([None, [], [-1], [16], [1.5], "12", [[1]], [True], np.array([1], np.float32), list(range(20)),
                                      h.Hostile(), [2**70]]),
           "max_new_tokens": st.one_of(h.bad_count(1, 6))}),
    Entry("hf.Resolver", lambda w, repo_id, revision, pin, offline: __import__("hrx_core.artifacts.hf", fromlist=["x"]).Resolver(
        repo_id, revision=revision, pin=pin, offline=offline),
          {"repo_id": _v("org/name"), "revision": _v(None), "pin": _v(False), "offline": _v(True)},
          {"repo_id": st.sampled_from([None, 1, "", "a/b/c", "../x", "x y", "a\x00"]),
           "revision": st.sampled_from([1, "", "  ", []]), "pin": st.sampled_from([1, "yes", None, []]),
           "offline": st.sampled_from([1, "yes", []])}),
    # -- resident GPU-NPU exchange ------------------------------------------------------------------
    Entry("resident.Layout", lambda w, slots, request_bytes: __import__("hrx_core.resident", fromlist=["x"]).Layout(
        slots, request_bytes, 8, 8, 8), {"slots": _v(2), "request_bytes": _v(8)},
          {"slots": h.bad_count(1, 1 << 16), "request_bytes": h.bad_count(1, 1 << 30)}),
    Entry("ResidentStartup", lambda w, start_timeout, idle_timeout: __import__("hrx_core.resident", fromlist=["x"]).ResidentStartup(
        w.dev, w.npu, __import__("hrx_core.resident", fromlist=["x"]).Layout(2, 8, 8, 8, 8), start_timeout=start_timeout,
        idle_timeout=idle_timeout).close(),
          {"start_timeout": _v(1.0), "idle_timeout": _v(1.0)},
          {"start_timeout": h.bad_timeout(), "idle_timeout": h.bad_timeout()}),
]


class _Plan:
    def close(self) -> None:
        pass


def _trace_mod() -> Any:
    import hrx_core.execution.trace as trace

    return trace


def _trace() -> Any:
    t = _trace_mod().TraceRecorder(100)
    t.track("t")
    return t


def _plans() -> Any:
    from hrx_core.execution.plan_cache import PlanCache

    return PlanCache(4)


def _residency() -> Any:
    from hrx_core.execution.residency import ResidencyManager

    return ResidencyManager(1 << 20)


def _onnx_model(w: World) -> Any:
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    from hrx_core.artifacts.onnx import Model

    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="id")], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    return Model.load(helper.make_model(g).SerializeToString())


def _onnx_tensor() -> Any:
    pytest.importorskip("onnx")
    from onnx import numpy_helper

    return numpy_helper.from_array(np.zeros(4, np.float32), "t")


def _resolver(w: World) -> Any:
    from hrx_core.artifacts.hf import Resolver

    return Resolver("org/name", offline=True, cache_dir=w.tmp / "hub")


def _npu_mod() -> Any:
    return pytest.importorskip("hrx_npu")


def _contract() -> Any:
    _npu_mod()
    import hrx_npu.contract as contract

    return contract


def _tensor_mod() -> Any:
    return pytest.importorskip("hrx_tensor")


def _gpt2() -> Any:
    return pytest.importorskip("hrx_models.gpt2")


def _fabric() -> Any:
    from hrx_core.placement import Fabric

    return Fabric()


def _session_run(w: World, model: Any, timeout: Any) -> Any:
    with w.rt.native_session() as ns:
        return ns.run(model, timeout=timeout)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("world"))
    yield w
    w.close()


def _mentions(exc: HRXError, names: tuple[str, ...]) -> bool:
    if isinstance(exc, hrx.BudgetExceeded):
        return True  # refused by a limit: the message names the bytes asked and the limit
    low = str(exc).lower()
    return any(n.lower() in low for n in names)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_bad_arguments_raise_typed_errors_and_change_nothing(world, entry):
    params = sorted(entry.bad)

    @settings(ATTACK)
    @given(data=st.data())
    def attack(data):
        param = data.draw(st.sampled_from(params), label="parameter")
        value = h.resolve(data.draw(entry.bad[param], label=param), world)
        kwargs = {p: make(world) for p, make in entry.good.items()}
        kwargs[param] = value
        world.settle()
        gc.disable()  # the collector freeing earlier garbage mid-call would move the counters
        try:
            before = world.snapshot()
            tried("bad-arguments", entry.name)
            outcome = _call(entry, world, kwargs)
            after = world.snapshot()
        finally:
            gc.enable()
        kind, result = outcome
        if kind == "error":
            exc = result
            names = entry.names.get(param, (param,))
            assert _mentions(exc, names), f"{entry.name}({param}={h.show(value)}): {type(exc).__name__} does not name {names}: {exc}"
        elif kind == "untyped":
            raise AssertionError(f"{entry.name}({param}={h.show(value)}): untyped {type(result).__name__}: {result}") from result
        else:
            raise AssertionError(f"{entry.name}({param}={h.show(value)}): accepted, returned {h.show(result)}")
        assert after == before, f"{entry.name}({param}={h.show(value)}): a refused call changed state"

    attack()


def _call(entry: Entry, world: World, kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "accepted", entry.call(world, **kwargs)
    except HRXError as exc:
        return "error", exc
    except BaseException as exc:  # noqa: BLE001 - the defect under test
        return "untyped", exc
