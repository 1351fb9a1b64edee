"""The objects the bad-argument attack calls into, built once per module: devices,
streams, buffers, a runtime, a model, files. ``snapshot()`` is what a refused call
must leave unchanged."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions
from hrx_core.model import DeviceTensor, InferenceGraph, ModelContext

from ..kernels import ADD_U32, INC_BYTES, XOR_BYTES


def _npu_program(buf: Any, *, scratch: Any, column: int, columns: int) -> None:
    buf[:] = 1


class World:
    def __init__(self, tmp_path: Any) -> None:
        self.tmp = tmp_path
        self.dev = hrx.open_device("host")
        self.other = hrx.open_device("host")
        self.budget = hrx.MemoryBudget(1 << 30, name="attack")
        self.stream = self.dev.stream()
        self.buf = self.stream.allocate_from(np.zeros(4096, np.uint8))
        self.buf2 = self.dev.allocate(4096)
        self.shared = self.dev.allocate_shared(4096)
        self.small = self.stream.allocate_from(np.zeros(16, np.uint32))
        self.kernel = INC_BYTES
        self.add = ADD_U32
        self.xor = XOR_BYTES
        self.graph = self.stream.access_graph()
        self.graph.input("x", self.buf2)
        self.graph.fill(self.buf2, pattern=1)
        self.explicit = self.stream.graph()
        self.node = self.explicit.fill(self.buf2, pattern=1, deps=[])
        self.pool = self.dev.buffer_pool(max_free_bytes=1 << 20)
        self.rt = Runtime(self.dev, RuntimeOptions(observe=False, memory_budget=self.budget))
        self.rbuf = self.rt.allocate(256)
        self.tg = self.rt.graph("tg")
        self.up = self.tg.upload(self.rbuf, np.zeros(256, np.uint8))
        self.down = self.tg.download(self.rbuf)
        self.rt.submit(self.tg).wait(10)
        self.event = self.stream.record_event()
        self.completion = self.stream.fill(self.buf2, 0)
        self.completion.wait(10)
        self._foreign: Any = None
        self.files = self.tmp
        st_path = self.tmp / "w.safetensors"
        from safetensors.numpy import save_file

        save_file({"a": np.arange(16, dtype=np.float32), "b": np.ones((2, 3), np.int32)}, str(st_path))
        self.st_path = st_path
        from hrx_core.artifacts.safetensors import FileView

        self.fileview = FileView.open(st_path)
        # built now, so that no call under attack builds them (and changes the snapshot)
        for built in ("model", "session", "other_runtime", "npu_program", "npu_buf", "tops", "ttable", "tx", "tw", "iops",
                      "image", "decoder"):
            try:
                getattr(self, built)
            except ImportError:
                pass  # a plugin that is not installed: its entries skip

    # -- bad values that need the world ------------------------------------------------

    def closed_buffer(self) -> hrx.Buffer:
        b = self.dev.allocate(64)
        b.close()
        return b

    def foreign_buffer(self) -> hrx.Buffer:
        if self._foreign is None:
            self._foreign = self.other.allocate(4096)
        return self._foreign

    def timed_event(self) -> Any:
        """A complete event recorded with timing on the world's stream."""
        event = self.stream.record_event(timing=True)
        event.synchronize()
        return event

    def tensor(self) -> DeviceTensor:
        return DeviceTensor(self.buf2, (4096,), np.uint8)

    @functools.cached_property
    def other_runtime(self) -> Runtime:
        return Runtime(self.dev, RuntimeOptions(observe=False))

    # -- plugins -------------------------------------------------------------------------

    @functools.cached_property
    def npu(self) -> Any:
        import hrx_npu

        return hrx_npu.open_device("npu-host")

    @functools.cached_property
    def npu_contract(self) -> Any:
        from hrx_npu.contract import BufferContract, KernelContract

        return KernelContract([BufferContract.read_write(256)])

    @functools.cached_property
    def npu_artifact(self) -> Any:
        return hrx.compile(_npu_program, target="host", entry="npu_program")

    @functools.cached_property
    def npu_program(self) -> Any:
        return self.npu.load_artifact(self.npu_artifact, columns=1, contract=self.npu_contract)

    @functools.cached_property
    def npu_buf(self) -> Any:
        return self.npu.allocate(256)

    @functools.cached_property
    def tops(self) -> Any:
        import hrx_tensor

        return hrx_tensor.TensorOps(self.dev)

    @functools.cached_property
    def ttable(self) -> Any:
        return self.tops.upload(np.arange(64 * 4, dtype=np.float32).reshape(64, 4))

    @functools.cached_property
    def tx(self) -> Any:
        from ml_dtypes import bfloat16

        return self.tops.upload(np.ones((1, 128), bfloat16))

    @functools.cached_property
    def tw(self) -> Any:
        from ml_dtypes import bfloat16

        return self.tops.upload(np.ones((8, 128), bfloat16))

    @functools.cached_property
    def iops(self) -> Any:
        import hrx_image

        return hrx_image.ImageOps(self.dev)

    @functools.cached_property
    def image(self) -> Any:
        return self.tops.upload(np.zeros((8, 8, 3), np.uint8))

    @functools.cached_property
    def decoder(self) -> Any:
        from hrx_models.gpt2 import Gpt2Config, Gpt2Decoder, write_random_checkpoint

        cfg = Gpt2Config(n_embd=128, n_layer=1, n_head=4, n_positions=8, vocab_size=16)
        return Gpt2Decoder.load(write_random_checkpoint(self.tmp / "gpt2", cfg, seed=1), self.dev, max_slots=1)

    # -- the model layer ---------------------------------------------------------------

    @functools.cached_property
    def ctx(self) -> ModelContext:
        return ModelContext(runtime=self.rt)

    @functools.cached_property
    def session(self) -> Any:
        s = self.ctx.session("attack")
        s.load_kernel(XOR_BYTES)
        s.weight("w", np.zeros(64, np.uint8))
        return s

    @functools.cached_property
    def definition(self) -> Any:
        s = self.ctx.session("def")
        s.load_kernel(XOR_BYTES)
        s.weight("w", np.zeros(64, np.uint8))
        return s.freeze()

    @functools.cached_property
    def model(self) -> Any:
        def factory(b: Any) -> InferenceGraph:
            x, y = b.tensor(64, np.uint8), b.tensor(64, np.uint8)
            b.graph.compute("xor", lambda g: g.dispatch(b.kernel("xor_bytes"), 1, [x.read(), y.write()], scalars=(1, 64)))
            return InferenceGraph(inputs={"x": x}, outputs={"y": y}, graph=b.graph)

        return self.definition.prepare(factory, slots=1)

    # -- what a refused call must not change ---------------------------------------------

    def settle(self) -> None:
        """Let earlier work finish and its quarantines go, so the snapshot is stable."""
        import time

        self.dev.synchronize(30)
        self.other.synchronize(30)
        deadline = time.monotonic() + 10
        while (self.rt.quarantined or self.rt._idle_watch) and time.monotonic() < deadline:
            self.rt._prove_idle()
            time.sleep(0.001)

    def snapshot(self) -> tuple[Any, ...]:
        npu = self.__dict__.get("npu")
        return (
            self.dev.stats.snapshot(),
            self.other.stats.snapshot(),
            None if npu is None else (npu.stats.snapshot(), npu.npu_stats()),
            self.budget.used_bytes,
            self.rt.stats.snapshot()["submissions"],
            self.rt.quarantined,
        )

    def close(self) -> None:
        self.fileview.close()
