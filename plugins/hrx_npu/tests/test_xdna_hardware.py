"""The xdna engine on a real Strix Halo NPU5 through libamdf (scripts/test-npu-hardware.sh).

Skipped everywhere else: CI runs the engine on the simulated Strix Halo. Programs here
are compiled images from HRX's compiler in ``$HRX_XDNA_IMAGES`` (``copy_i32.xdna`` from
ROCm/hrx's driver smoke fixtures; ``hrx_matmul8x8_bf16.xdna`` and ``hrx_xor_copy.xdna``
for the examples); a test whose image is missing skips and says which file it wants.
Nothing in this file has run yet -- its first run on an NPU is the first evidence.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import hrx_core as hrx

pytest.importorskip("hrx_amdf")
if os.environ.get("HRX_AMDF_PROVIDER", "fake") != "libamdf":
    pytest.skip("needs an NPU: HRX_AMDF_PROVIDER=libamdf on a Strix Halo (scripts/test-npu-hardware.sh)", allow_module_level=True)

import hrx_npu  # noqa: E402
from hrx_npu.xdna import contract_of, image_artifact  # noqa: E402

IMAGES = os.environ.get("HRX_XDNA_IMAGES", "")


@pytest.fixture(scope="module")
def npu():
    status = hrx.engine_status().get("xdna")
    if status is None or not status.available:
        pytest.skip(f"xdna unavailable on libamdf: {status.reason if status else 'not installed'}")
    dev = hrx_npu.open_device("xdna")
    yield dev
    dev.close()


def image(name: str):
    path = os.path.join(IMAGES, name)
    if not IMAGES or not os.path.isfile(path):
        pytest.skip(f"needs HRX's compiled {name} in $HRX_XDNA_IMAGES")
    return path


def test_the_device_is_a_strix_halo_npu5(npu):
    p = npu.info.properties
    assert p["pci"] == "1022:17f0 rev 11" and p["architecture"] == "AIE2P" and p["target_id"] == "amd.xdna.strix_halo.17f0_11"
    assert p["rows"] == 6 and p["columns"] >= 1 and "TIME_SLICED" in p["scheduling"]
    print("xdna device:", npu.info.name, dict(p))


def test_contexts_beyond_the_array_time_share(npu):
    from hrx_amdf.constants import XdnaSchedulingMode

    xdna = npu.native.xdna
    contexts = []
    try:
        for _ in range(npu.columns + 1):
            contexts.append(xdna.create_context(1))
        modes = [c.info.scheduling_mode for c in contexts]
        print("context modes:", [m.name for m in modes])
        assert XdnaSchedulingMode.TIME_SLICED in modes
    finally:
        for c in contexts:
            c.destroy()


@pytest.mark.parametrize("shared", [False, True], ids=["cached", "coherent"])
def test_queue_copies_follow_the_cache_protocol(npu, shared):
    s = npu.stream()
    data = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)
    buf = npu.allocate_shared(len(data)) if shared else npu.allocate(len(data))
    s.upload_blocking(buf, data)
    assert np.array_equal(s.download(buf), data)


def test_copy_i32_exact_and_pipelined(npu):
    art = image_artifact(image("copy_i32.xdna"), entry="copy_i32")
    c = contract_of(art)
    prog = npu.load_artifact(art, columns=1, contract=c)
    s = npu.stream()
    n = c.used[0].length
    src = s.allocate_from(np.random.default_rng(1).integers(0, 2**31, n // 4, dtype=np.int32))
    dst = s.allocate_from(np.full(n // 4, -7, np.int32))          # a sentinel exposes missing writes
    prog.invoke([src, dst], stream=s).wait(timeout=30)
    assert np.array_equal(s.download(dst), s.download(src))
    for _ in range(300):                                           # past the 128-invocation window
        prog.invoke([src, dst], stream=s)
    s.synchronize(timeout=60)
    assert prog.pending == 0 and np.array_equal(s.download(dst), s.download(src))
    print("npu stats:", npu.npu_stats())


def test_time_shared_programs_each_establish_their_state(npu):
    art = image_artifact(image("copy_i32.xdna"), entry="copy_i32")
    c = contract_of(art)
    progs = [npu.load_artifact(art, columns=1, contract=c) for _ in range(npu.columns + 1)]
    assert any(p.executable.scheduling.name == "TIME_SLICED" for p in progs)
    s = npu.stream()
    n = c.used[0].length // 4
    for k, p in enumerate(progs):
        src = s.allocate_from(np.full(n, k, np.int32))
        dst = s.allocate(4 * n)
        p.invoke([src, dst], stream=s).wait(timeout=30)
        assert (s.download(dst).view(np.int32) == k).all()
    for p in progs:
        p.close()


def test_matmul8x8_bf16_exact(npu, monkeypatch):
    monkeypatch.setenv("HRX_XDNA_IMAGES", os.path.dirname(image("hrx_matmul8x8_bf16.xdna")))
    m = 1024
    prog = hrx_npu.load_matmul8x8(npu, m)
    assert prog.target == "xdna"
    rng = np.random.default_rng(2)
    a = rng.standard_normal(64 * m).astype(ml_dtypes.bfloat16).view(np.uint16)
    b = rng.standard_normal(64 * m).astype(ml_dtypes.bfloat16).view(np.uint16)
    s = npu.stream()
    bufs = [s.allocate_from(a), s.allocate_from(b), s.allocate(256 * m)]
    prog.invoke(bufs, stream=s).wait(timeout=30)
    got = s.download(bufs[2]).view(np.float32).reshape(-1, 8, 8)
    assert np.array_equal(got, hrx_npu.matmul8x8_reference(a, b))


def test_gpu_npu_gpu_through_imported_memory(npu):
    """amdgpu writes shared memory, the NPU copies it through its import, the GPU reads
    the copy: a dma-buf export/import between the real drivers."""
    from hrx_core.placement import Fabric

    status = hrx.engine_status().get("amdgpu")
    if status is None or not status.available:
        pytest.skip("amdgpu is unavailable")
    gpu = hrx.device("amdgpu")
    art = image_artifact(image("copy_i32.xdna"), entry="copy_i32")
    c = contract_of(art)
    prog = npu.load_artifact(art, columns=1, contract=c)
    f = Fabric()
    profile = f.allocation_profiles([gpu, npu], coherent=True)[0]
    n = c.used[0].length
    with profile.allocate(n, fabric=f) as src, profile.allocate(n, fabric=f) as dst:
        data = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8)
        gpu.stream().upload_blocking(src.on(gpu), data)
        prog.invoke([src.on(npu), dst.on(npu)]).wait(timeout=30)
        assert np.array_equal(gpu.stream().download(dst.on(gpu)), data)
