"""Inputs the public API used to accept and mishandle (issue 14, "accepted bad input").

Each test feeds the input that got through and asserts a typed refusal that names
the argument and changes nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.buffer import Binding, View

from ..kernels import ADD_U32, INC_BYTES
from .tally import tried


def _host():
    return hrx.open_device("host")


def test_grid_validation_is_not_memoised_by_equality():
    # grid=1 was memoised under the key (1,); 1.0 == 1 then hit the memo and passed
    dev = _host()
    s = dev.stream()
    buf = dev.allocate(64)
    s.dispatch(INC_BYTES, 1, [buf], block=1, scalars=(4,))
    for grid in (1.0, np.float64(1.0), True, (1.0,), (1, 1.0)):
        tried("bad-arguments", "Stream.dispatch")
        with pytest.raises(hrx.InvalidArgument, match="grid"):
            s.dispatch(INC_BYTES, grid, [buf], block=1, scalars=(4,))
        g = s.access_graph()
        tried("bad-arguments", "Graph.dispatch")
        with pytest.raises(hrx.InvalidArgument, match="grid"):
            g.dispatch(INC_BYTES, grid, [buf], block=1, scalars=(4,))
    for block in (1.0, (2.0,)):
        tried("bad-arguments", "Stream.dispatch")
        with pytest.raises(hrx.InvalidArgument, match="block"):
            s.dispatch(INC_BYTES, 1, [buf], block=block, scalars=(4,))
    s.synchronize()


@pytest.mark.parametrize("scalars", [(None, 1), (1, None), (True, 1), (1, False), (np.bool_(True), 1),
                                     ("1", 1), (1.5, 1), (2**32, 1), (-1, 1), ([1], 1), (np.array([1]), 1)])
def test_scalars_are_exactly_the_declared_type(scalars):
    # None became NaN (float) or 0; True became 1 for uint32
    dev = _host()
    s = dev.stream()
    buf = s.allocate_from(np.zeros(4, np.uint32))
    tried("bad-arguments", "Stream.dispatch(scalars=)")
    with pytest.raises(hrx.InvalidArgument, match=r"scalars\[[01]\]"):
        s.dispatch(ADD_U32, 1, [buf], block=4, scalars=scalars)
    assert (s.download(buf).view(np.uint32) == 0).all()  # nothing ran


def test_scalars_must_be_a_sequence():
    dev = _host()
    s = dev.stream()
    buf = dev.allocate(16)
    for bad in (5, "ab", b"ab", np.array([1, 2], np.uint32), {1: 2}):
        tried("bad-arguments", "Stream.dispatch(scalars=)")
        with pytest.raises(hrx.InvalidArgument, match="scalars"):
            s.dispatch(ADD_U32, 1, [buf], block=4, scalars=bad)


def test_binding_access_is_checked():
    dev = _host()
    buf = dev.allocate(64)
    view = buf.view()
    b = Binding(view, "read")  # a str is coerced, not stored raw
    assert b.access is hrx.Access.READ and not b.access.writes
    for bad in ("bogus", 0, 7, None, hrx.Access(0)):
        tried("bad-arguments", "Binding")
        with pytest.raises(hrx.InvalidArgument, match="access"):
            Binding(view, bad)
    tried("bad-arguments", "Binding")
    with pytest.raises(hrx.InvalidArgument, match="view"):
        Binding(buf, hrx.Access.READ)


def test_view_constructor_checks_its_range():
    dev = _host()
    buf = dev.allocate(64)
    for offset, length in ((-1, 4), (0, 0), (60, 8), (0.0, 4), (True, 4), (None, 4)):
        tried("bad-arguments", "View")
        with pytest.raises(hrx.InvalidArgument):
            View(buf, offset, length)
    assert View(buf, 8, 8).start == 8


def test_overlapping_copy_between_aliases_of_one_backing_is_refused():
    pytest.importorskip("hrx_npu")
    import hrx_npu
    from hrx_core.placement import Fabric, MemoryPlacement

    gpu = _host()
    npu = hrx_npu.open_device("npu-host")
    f = Fabric()
    owner = f.allocate(4096, MemoryPlacement.Shared(gpu))
    a1, a2 = f.adopt(owner, npu), f.adopt(owner, npu)  # two imports of one backing
    s = npu.stream()
    tried("bad-arguments", "Stream.copy")
    with pytest.raises(hrx.Overlap):
        s.copyto(a2.slice(32, 64), a1.slice(0, 64))
    g = s.access_graph()
    tried("bad-arguments", "Graph.copy")
    with pytest.raises(hrx.Overlap):
        g.copyto(a2.slice(32, 64), a1.slice(0, 64))
    s.copyto(a2.slice(64, 64), a1.slice(0, 64)).wait()  # disjoint ranges are fine


def test_an_untied_lm_head_is_refused(tmp_path):
    gpt2 = pytest.importorskip("hrx_models.gpt2")
    from safetensors.numpy import load_file, save_file

    cfg = gpt2.Gpt2Config(n_embd=128, n_layer=1, n_head=4, n_positions=16, vocab_size=64)
    d = gpt2.write_random_checkpoint(tmp_path / "ckpt", cfg, seed=1)
    tensors = load_file(str(d / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["wte.weight"].copy()
    save_file(tensors, str(d / "model.safetensors"))
    dev = hrx.open_device("host")
    w = gpt2.load_weights(d, dev.stream())  # a tied copy is fine
    w.close()
    tensors["lm_head.weight"] = tensors["wte.weight"] * 2
    save_file(tensors, str(d / "model.safetensors"))
    tried("hostile-files", "load_weights (untied lm_head)")
    with pytest.raises(hrx.Unsupported, match="untied lm_head"):
        gpt2.load_weights(d, dev.stream())


def test_use_after_close_is_refused():
    dev = hrx.open_device("host")
    s = dev.stream()
    buf = s.allocate_from(np.zeros(64, np.uint8))
    prepared = s.prepare(INC_BYTES, 1, [buf], scalars=(4,))
    dev.close()
    calls = {
        "Device.allocate": lambda: dev.allocate(64),
        "Device.allocate_shared": lambda: dev.allocate_shared(64),
        "Device.stream": lambda: dev.stream(),
        "Stream.dispatch": lambda: s.dispatch(INC_BYTES, 1, [buf], scalars=(4,)),
        "Stream.fill": lambda: s.fill(buf, pattern=1),
        "Stream.copy": lambda: s.copyto(buf.slice(8, 8), buf.slice(0, 8)),
        "Stream.upload": lambda: s.upload(buf, np.ones(64, np.uint8)),
        "PreparedLaunch.launch": prepared.launch,
        "Graph.launch": lambda: _recorded(s, buf).launch(),
    }
    for name, call in calls.items():
        tried("bad-arguments", f"{name} (closed device)")
        with pytest.raises(hrx.InvalidArgument, match="closed"):
            call()


def _recorded(s, buf):
    g = s.access_graph()
    g.fill(buf, pattern=3)
    return g


def test_model_context_use_after_close_is_refused():
    from hrx_core.model import ModelContext, ModelSession

    ctx = ModelContext(_host())
    ctx.close()
    for name, call in {"ModelContext.session": lambda: ctx.session("m"),
                       "ModelContext.kernel": lambda: ctx.kernel(INC_BYTES),
                       "ModelSession": lambda: ModelSession(ctx, "m"),
                       "Runtime.allocate": lambda: ctx.runtime.allocate(64),
                       "Runtime.graph": lambda: ctx.runtime.graph()}.items():
        tried("bad-arguments", f"{name} (closed context)")
        with pytest.raises(hrx.InvalidArgument, match="closed"):
            call()


def test_double_release_is_refused():
    from hrx_core.model import SharedHold

    hold = SharedHold(lambda: None)
    hold.release()
    tried("bad-arguments", "SharedHold.release (twice)")
    with pytest.raises(hrx.InvalidArgument, match="released"):
        hold.release()
