"""The amdgpu engine's encoders against literal words.

Golden words are quoted from libamdf's conformance tests (ROCm/hrx-system; file and
commit per test), which derive them from the HSA System Architecture 1.2 tables and
PAL's gfx11 encodings, or spelled out from the packet layouts where no test lists them.
"""

from __future__ import annotations

import pytest

from hrx_gpu.amdgpu.encode import aql, pm4, sdma


class TestAql:
    # ROCm/hrx-system 7c086fc5, libamdf/cts/gpu/aql/encoding/packets_test.cc

    def test_barrier_and_null(self):
        assert aql.words(aql.barrier_and()) == [0x1503] + [0] * 15

    def test_barrier_and_five_dependencies(self):
        deps = (0x2345678998765400, 0x3456789AA9876500, 0x456789ABBA987600, 0x56789ABCCBA98700, 0x6789ABCDDCBA9800)
        packet = aql.barrier_and(deps, completion=0x1234567887654300, barrier=False)
        assert aql.words(packet) == [0x1403, 0, 0x98765400, 0x23456789, 0xA9876500, 0x3456789A, 0xBA987600, 0x456789AB,
                                     0xCBA98700, 0x56789ABC, 0xDCBA9800, 0x6789ABCD, 0, 0, 0x87654300, 0x12345678]  # fmt: skip

    def test_dispatch_1d(self):
        packet = aql.kernel_dispatch(0x1234567887654300, 0x2345678998765400, (64, 1, 1), (1024, 1, 1), 1, group_segment=128,
                                     private_segment=68, completion=0x3456789AA9876500, barrier=False)  # fmt: skip
        assert aql.words(packet) == [0x00011402, 0x00010040, 0x00000001, 0x00000400, 0x00000001, 0x00000001, 0x00000044, 0x00000080,
                                     0x87654300, 0x12345678, 0x98765400, 0x23456789, 0, 0, 0xA9876500, 0x3456789A]  # fmt: skip

    def test_dispatch_3d_with_barrier(self):
        packet = aql.kernel_dispatch(0x1234567887654300, 0x2345678998765400, (8, 4, 2), (24, 8, 4), 3, completion=0x3456789AA9876500, barrier=False)
        assert aql.words(packet)[:6] == [0x00031402, 0x00040008, 0x00000002, 0x00000018, 0x00000008, 0x00000004]
        packet = aql.kernel_dispatch(0x1234567887654300, 0x2345678998765400, (64, 1, 1), (1024, 1, 1), 1, completion=0x3456789AA9876500, barrier=True)
        assert aql.words(packet)[0] == 0x00011502

    def test_pm4_indirect_buffer(self):
        packet = aql.pm4_indirect_buffer(0x123498765400, 7, completion=0x3456789AA9876500, barrier=False, acquire=aql.NONE, release=aql.NONE)
        assert aql.words(packet) == [0x00010000, 0xC0023F00, 0x98765400, 0x00001234, 0x00800007, 0x0000000A] + [0] * 8 + [0xA9876500, 0x3456789A]
        packet = aql.pm4_indirect_buffer(0xABCD98765400, 14, completion=0x3456789AA9876500, barrier=True)
        assert aql.words(packet)[:5] == [0x00011500, 0xC0023F00, 0x98765400, 0x0000ABCD, 0x0080000E]

    def test_barrier_value_less_than(self):
        packet = aql.barrier_value(0x2345678998765400, 0x0000000200000001, condition=aql.LT, mask=(1 << 63) - 1)
        assert aql.words(packet) == [0x00020100, 0, 0x98765400, 0x23456789, 0x00000001, 0x00000002, 0xFFFFFFFF, 0x7FFFFFFF,
                                     0x00000002] + [0] * 7  # fmt: skip

    def test_refusals(self):
        with pytest.raises(ValueError):
            aql.kernel_dispatch(0, 8, (1, 1, 1), (1, 1, 1), 1)
        with pytest.raises(ValueError):
            aql.barrier_and((1, 2, 3, 4, 5, 6))


class TestPm4:
    # ROCm/hrx-system 659c2333, libamdf/cts/gpu/pm4/encoding/commands.cc (MakeHeader,
    # BindCompute, DispatchWave32, CallIndirectBuffer, AcquireMemory, SystemBarrier,
    # Release32, WaitMemory32/64, DmaCopyL2, Noop) and profile.cc (the gfx11 GCRs).

    def test_header(self):
        assert pm4.header(0x49, 8) == 0xC0064900
        assert pm4.header(0x76, 4, compute=True) == 0xC0027602

    def test_gfx11_gcr_profile(self):
        assert pm4.SYSTEM_ACQUIRE_GCR == 0xC3A1  # also the CTS's code-cache GCR for gfx 11.5.1
        assert pm4.SYSTEM_RELEASE_GCR == 0x30E
        assert pm4.GL2_WRITEBACK_GCR == 0x8000

    def test_set_sh_reg_program_address(self):
        entry = 0x123456789A00
        assert pm4.set_sh_reg(pm4.COMPUTE_PGM_LO, [entry >> 8 & 0xFFFFFFFF, entry >> 40]) == [0xC0027602, 0x20C, 0x3456789A, 0x12]

    def test_dispatch_wave32(self):
        assert pm4.dispatch_direct(256, 1, 1) == [0xC0031502, 256, 1, 1, 0x8025]
        assert pm4.dispatch_direct(4, 1, 1, thread_dimensions=False)[-1] == 0x8005

    def test_indirect_buffer(self):
        assert pm4.indirect_buffer(0x123498765400, 7) == [0xC0023F00, 0x98765400, 0x1234, 0x00800007]

    def test_acquire_and_system_barrier(self):
        assert pm4.acquire_mem() == [0xC0065800, 0, 0xFFFFFFFF, 0xFF, 0, 0, 0x0A, 0xC3A1]
        assert pm4.cs_partial_flush() == [0xC0004600, 7 | (4 << 8)]

    def test_release_mem(self):
        words = pm4.release_mem(0x1000, 0x55, data="32", gcr=0)
        assert words == [0xC0064900, 0x28 | (5 << 8), (1 << 29) | (3 << 24) | (1 << 16), 0x1000, 0, 0x55, 0, 0]
        system = pm4.release_mem(0x1000, 1, data="64")
        assert system[1] == 0x28 | (5 << 8) | (0x30E << 12) and system[2] == (2 << 29) | (3 << 24) | (1 << 16)
        assert pm4.release_mem(0x1008, data="clock", gcr=0)[2] == (3 << 29) | (3 << 24) | (1 << 16)
        with pytest.raises(ValueError):
            pm4.release_mem(0x1004, 1)

    def test_waits(self):
        assert pm4.wait_reg_mem(0x1000, 7, function=pm4.EQUAL) == [0xC0053C00, 3 | (1 << 4), 0x1000, 0, 7, 0xFFFFFFFF, 4]
        assert pm4.wait_reg_mem64(0x1000, 0x100000002, function=pm4.EQUAL) == [0xC0079300, 3 | (1 << 4), 0x1000, 0, 2, 1, 0xFFFFFFFF, 0xFFFFFFFF, 4]

    def test_dma_data(self):
        assert pm4.dma_data_copy(0x1000, 0x2000, 64) == [0xC0055000, (3 << 29) | (3 << 20), 0x1000, 0, 0x2000, 0, 64 | (1 << 30)]
        assert pm4.dma_data_drain() == [0xC0055000, 0, 0, 0, 0, 0, 0]
        assert pm4.dma_data_fill(0x2000, 0xDEADBEEF, 16)[1:3] == [(2 << 29) | (3 << 20), 0xDEADBEEF]
        with pytest.raises(ValueError):
            pm4.dma_data_copy(0, 0, 1 << 26)

    def test_padding_ends_on_eight_dwords(self):
        for used in range(0, 40):
            pad = pm4.pad_to(used)
            assert (used + len(pad)) % 8 == 0 and len(pad) != 1
        assert pm4.pad_to(7) == pm4.nop(9)


class TestSdma:
    # ROCm/hrx-system 659c2333, libamdf/cts/gpu/sdma/encoding/commands.cc

    def test_copy_fill_fence(self):
        assert sdma.copy_linear(0x1122334455, 0x66778899AA, 100) == [1, 99, 0, 0x22334455, 0x11, 0x778899AA, 0x66]
        assert sdma.const_fill(0x1000, 0xCAFEF00D, 64) == [11 | (2 << 30), 0x1000, 0, 0xCAFEF00D, 63]
        assert sdma.fence(0x1000, 7) == [5, 0x1000, 0, 7]

    def test_poll_timestamp_gcr(self):
        assert sdma.poll_regmem(0x1000, 3, function=sdma.EQUAL) == [8 | (3 << 28) | (1 << 31), 0x1000, 0, 3, 0xFFFFFFFF, (0xFFF << 16) | 4]
        assert sdma.timestamp(0x1008) == [13 | (2 << 8), 0x1008, 0]
        assert sdma.gcr(sdma.ACQUIRE_FROM_SYSTEM_GCR) == [17 | (1 << 8), 0, 0xC3C0 << 16, 0, 0]
        assert sdma.gcr(sdma.RELEASE_TO_SYSTEM_GCR) == [17 | (1 << 8), 0, 0x8040 << 16, 0, 0]

    def test_limits(self):
        assert sdma.copy_linear(0, 1 << 31, sdma.MAX_BYTES)[1] == (1 << 30) - 1
        with pytest.raises(ValueError):
            sdma.copy_linear(0, 1 << 31, sdma.MAX_BYTES + 1)
        with pytest.raises(ValueError):
            sdma.const_fill(0x1002, 0, 8)
