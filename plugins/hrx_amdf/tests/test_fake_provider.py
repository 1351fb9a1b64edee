"""The simulation's provider contract: endpoints, devices, user-queue creation and the
simulation-only registration calls refuse what libamdf refuses, with its status codes."""

from __future__ import annotations

import numpy as np
import pytest

from fakekit import memory
from hrx_amdf.constants import AddressKind, EngineKind, MemoryAccess, ProducerMode, QueuePriority, XdnaSchedulingMode
from hrx_amdf.errors import AmdfBusy, AmdfInvalidArgument, AmdfOutOfRange, AmdfUnsupported
from hrx_amdf.fake import SYSTEM_COHERENT, NpuBinding
from hrx_amdf.provider import DeviceAccess, Scratch


def refused(cls, call: str, match: str):
    """pytest.raises for an AmdfError of ``cls`` from ``call`` whose detail matches."""

    class _Check:
        def __enter__(self):
            self._raises = pytest.raises(cls, match=match)
            self.info = self._raises.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self._raises.__exit__(*exc)
            assert self.info.value.call == call, self.info.value
            return handled

    return _Check()


# -- endpoints and the provider ------------------------------------------------------------


def test_endpoint_info_of_the_other_kind_is_unsupported(provider):
    gpu_endpoint, npu_endpoint = provider.endpoint(EngineKind.GPU), provider.endpoint(EngineKind.XDNA)
    with refused(AmdfUnsupported, "gpu.endpoint_query_info", "not a GPU endpoint"):
        npu_endpoint.gpu_info()
    with refused(AmdfUnsupported, "xdna.endpoint_query_info", "not an XDNA endpoint"):
        gpu_endpoint.xdna_info()
    with refused(AmdfUnsupported, "gpu.endpoint_query_info", "not a GPU endpoint"):
        npu_endpoint.create_gpu_device()
    with refused(AmdfUnsupported, "xdna.endpoint_query_info", "not an XDNA endpoint"):
        gpu_endpoint.create_xdna_device()
    assert not gpu_endpoint._devices and not npu_endpoint._devices


def test_closed_endpoints_and_provider(provider):
    gpu_endpoint, npu_endpoint = provider.endpoint(EngineKind.GPU), provider.endpoint(EngineKind.XDNA)
    gpu = gpu_endpoint.create_gpu_device()
    with refused(AmdfBusy, "endpoint_close", "1 device"):
        gpu_endpoint.close()
    with refused(AmdfBusy, "instance_destroy", "1 device"):
        provider.close()
    assert not provider.closed
    gpu.destroy()
    gpu_endpoint.close()
    npu_endpoint.close()
    with refused(AmdfInvalidArgument, "gpu.device_create", "endpoint closed"):
        gpu_endpoint.create_gpu_device()
    with refused(AmdfInvalidArgument, "xdna.device_create", "endpoint closed"):
        npu_endpoint.create_xdna_device()
    provider.close()
    with refused(AmdfInvalidArgument, "endpoint_enumerate", "provider closed"):
        provider.endpoints()


# -- devices -------------------------------------------------------------------------------


def test_gpu_device_lifetime(provider, gpu):
    with refused(AmdfUnsupported, "gpu.kernel_queue_create", "user queues only"):
        gpu.create_kernel_queue(0)
    gpu.destroy()
    with refused(AmdfInvalidArgument, "device_destroy", "already destroyed"):
        gpu.destroy()
    with refused(AmdfInvalidArgument, "gpu.user_queue_create", "device destroyed"):
        gpu.create_user_queue(0)
    scope = provider.system_scopes()[0]
    with refused(AmdfInvalidArgument, "memory_create", r"accesses\[0\]: device destroyed"):
        scope.create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu)])


def test_npu_device_lifetime(npu):
    with refused(AmdfUnsupported, "xdna.context_create", "scheduling modes"):
        npu.create_context(1, modes=XdnaSchedulingMode(0))
    with refused(AmdfUnsupported, "xdna.context_create", "scheduling modes"):
        npu.create_context(1, modes=XdnaSchedulingMode.EXCLUSIVE)
    assert not npu._contexts
    context = npu.create_context(1)
    with refused(AmdfBusy, "device_destroy", "1 context"):
        npu.destroy()
    context.destroy()
    npu.destroy()
    with refused(AmdfInvalidArgument, "device_destroy", "already destroyed"):
        npu.destroy()
    with refused(AmdfInvalidArgument, "xdna.context_create", "device destroyed"):
        npu.create_context(1)


# -- user-queue creation -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, cls, match",
    [
        (dict(family=3), AmdfOutOfRange, "queue family 3 of 3"),
        (dict(family=-1), AmdfOutOfRange, "queue family -1"),
        (dict(family=0, ring_bytes=8192), AmdfOutOfRange, "ring of 8192 bytes"),
        (dict(family=2, ring_bytes=4096 + 64), AmdfOutOfRange, "power of two"),
        (dict(family=0, priority=QueuePriority.HIGH), AmdfUnsupported, "NORMAL priority"),
        (dict(family=1, producer=ProducerMode.MULTI), AmdfUnsupported, "SINGLE producer"),
    ],
    ids=["family", "negative-family", "ring-size", "ring-power-of-two", "priority", "producer"],
)
def test_user_queue_creation_is_checked(gpu, kwargs, cls, match):
    family = kwargs.pop("family")
    with refused(cls, "gpu.user_queue_create", match):
        gpu.create_user_queue(family, **kwargs)
    assert not gpu._queues


def test_scratch_must_be_live_provider_memory(provider, gpu):
    backing = memory(provider, gpu, 1 << 16)
    bad = [
        Scratch(np.zeros(16), 0, 4096, 64, 32),  # type: ignore[arg-type]  # not provider memory
        Scratch(backing, 0, 0, 64, 32),  # empty
        Scratch(backing, 4096, 1 << 16, 64, 32),  # past the end
    ]
    for scratch in bad:
        with refused(AmdfInvalidArgument, "gpu.user_queue_create", "live range"):
            gpu.create_user_queue(0, scratch=scratch)
    for scratch in (Scratch(backing, 0, 4096, 0, 32), Scratch(backing, 0, 4096, 64, 0)):
        with refused(AmdfInvalidArgument, "gpu.user_queue_create", "max_private_bytes and max_waves"):
            gpu.create_user_queue(0, scratch=scratch)
    freed = memory(provider, gpu)
    freed.destroy()
    with refused(AmdfInvalidArgument, "gpu.user_queue_create", "live range"):
        gpu.create_user_queue(0, scratch=Scratch(freed, 0, 4096, 64, 32))
    assert not gpu._queues
    queue = gpu.create_user_queue(0, scratch=Scratch(backing, 0, 1 << 16, 64, 32))
    assert queue.max_private_bytes == 64


# -- simulation-only registration ----------------------------------------------------------


def test_register_code_object_needs_live_gpu_memory(provider, gpu, npu):
    scope = provider.system_scopes()[0]
    freed = scope.create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu, MemoryAccess.READ | MemoryAccess.EXECUTE)])
    freed.destroy()
    with refused(AmdfInvalidArgument, "register_code_object", "not live memory"):
        provider.register_code_object(freed, 0, b"\x7fELF", {})
    with refused(AmdfInvalidArgument, "register_code_object", "not live memory"):
        provider.register_code_object(object(), 0, b"\x7fELF", {})  # type: ignore[arg-type]
    npu_only = scope.create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(npu, address_kinds=frozenset({AddressKind.XDNA_DMA}))])
    with refused(AmdfInvalidArgument, "register_code_object", "no GPU access"):
        provider.register_code_object(npu_only, 0, b"\x7fELF", {})


@pytest.mark.parametrize("patch", [(57, 0), (-1, 0), (0, 2), (0, -1)], ids=["past-template", "negative-offset", "binding-index", "negative-index"])
def test_register_npu_program_checks_patch_sites(provider, patch):
    template = bytes(64)
    with refused(AmdfInvalidArgument, "register_npu_program", "outside the template or the bindings"):
        provider.register_npu_program("p", template, [patch], [NpuBinding(64, MemoryAccess.READ), NpuBinding(64, MemoryAccess.READ)], lambda views: None)
    assert provider.npu_programs.find(template) is None
    provider.register_npu_program("p", template, [(56, 1)], [NpuBinding(64, MemoryAccess.READ), NpuBinding(64, MemoryAccess.READ)], lambda views: None)
    assert provider.npu_programs.find(template) is not None


def test_undefined_scheduling_mode_bits_are_refused(npu):
    with refused(AmdfUnsupported, "xdna.context_create", "scheduling modes"):
        npu.create_context(1, modes=XdnaSchedulingMode.SPATIAL | XdnaSchedulingMode(1 << 3))
