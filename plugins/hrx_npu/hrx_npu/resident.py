"""The NPU participant of a resident GPU-NPU exchange (hrx_core.resident).

:func:`load_participant` loads an NPU program that runs the protocol's NPU role --
wait for RUN, then forward slot -> ``step`` -> backward slot until STOP or ABORT --
around a user step, from the same sources on every NPU engine:

* ``npu-host-c`` / the xdna simulation's reference: :data:`hrx_core.resident.protocol.PROTOCOL_C`
  with GCC ``__atomic`` acquire loads and release stores (system scope on the host
  CPU), ``CLOCK_MONOTONIC`` deadlines and a bounded spin that yields the CPU;
* ``host`` (numpy, where no C compiler exists): the protocol in Python.

The step's C source defines ``static void hrx_resident_step(const uint8_t *in, int64_t
in_bytes, uint8_t *out, int64_t out_bytes)``; its numpy build is a callable
``step(in_slot, out_slot)`` over uint8 arrays. The program is immutable: its one
binding is the session's memory, fixed when the session submits it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hrx_core.buffer import Buffer
from hrx_core.completion import Completion
from hrx_core.errors import InvalidArgument, show
from hrx_core.resident import SYSTEM_SCOPE, Layout, Participant, host_npu_step
from hrx_core.resident.protocol import protocol_c
from hrx_core.stream import Stream

from .contract import BufferContract, KernelContract
from .device import NpuDevice, NpuProgram
from .programs import artifact_for
from .transaction import Transaction

C_PRIMITIVES = r"""
#include <time.h>
#include <sched.h>
typedef int64_t hrx_i64;
typedef uint8_t hrx_u8;
#define HRX_RS_FN static inline
#define HRX_LOAD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define HRX_STORE_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
static inline int64_t hrx_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}
#define HRX_NOW_NS() hrx_now_ns()
/* spin briefly, then yield, then sleep up to 200 us: an idle participant gives the CPU back */
static inline void hrx_pause(int64_t n) {
    if (n < 64) return;
    if (n < 256) { sched_yield(); return; }
    struct timespec t = {0, (long)((n - 255) * 1000 < 200000 ? (n - 255) * 1000 : 200000)};
    nanosleep(&t, 0);
}
#define HRX_PAUSE(n) hrx_pause(n)
"""

PROGRAM_C = r"""
HRX_NPU_PROGRAM(%(entry)s) {
    (void)nbuffers; (void)scratch; (void)scratch_bytes; (void)columns;
    if (column != 0) return;                      /* one column runs the protocol */
    hrx_i64 *c = (hrx_i64 *)buffers[0];
    if (lengths[0] < HRX_RS_CONTROL_BYTES) return;
    if (c[HRX_RS_W_RSP_OFF] + c[HRX_RS_W_SLOTS] * c[HRX_RS_W_RSP_STRIDE] > lengths[0]) {
        hrx_rs_end(c, HRX_RS_W_NPU_STATE, HRX_RS_S_FAILED, HRX_RS_R_ERROR);
        return;
    }
    hrx_rs s;
    if (!hrx_rs_wait_run(&s, buffers[0], HRX_RS_W_NPU_STATE)) return;
    for (;;) {
        hrx_rs_work w = hrx_rs_npu_poll(&s);
        if (w.op == HRX_RS_EXIT) return;
        if (w.op == HRX_RS_STEP) {
            hrx_resident_step(w.in, s.bytes[1], w.out, s.bytes[2]);
            hrx_rs_npu_commit(&s);
        }
    }
}
"""


def participant_c(step_c: str, entry: str) -> str:
    """The npu-host C source of an NPU participant around ``step_c``."""
    if not isinstance(step_c, str) or "hrx_resident_step" not in step_c:
        raise InvalidArgument("step_c: expected C source defining hrx_resident_step(in, in_bytes, out, out_bytes)")
    return C_PRIMITIVES + protocol_c() + step_c + PROGRAM_C % {"entry": entry}


def participant_numpy(step: Callable[[np.ndarray, np.ndarray], None]) -> Callable[..., None]:
    """The numpy build: the protocol in Python around ``step``, on column 0."""
    run = host_npu_step(step)

    def program(memory: np.ndarray, *, scratch: np.ndarray, column: int, columns: int) -> None:
        if column == 0:
            run(memory)

    return program


def load_participant(npu: NpuDevice, layout: Layout, entry: str, *, step_c: str | None = None,
                     step_numpy: Callable[[np.ndarray, np.ndarray], None] | None = None, columns: int = 1) -> NpuProgram:
    """Load the NPU participant for sessions of ``layout`` (its contract: one
    read_write binding of ``layout.nbytes``)."""
    if not isinstance(layout, Layout):
        raise InvalidArgument(f"layout: expected a resident Layout, got {type(layout).__name__}")
    if not isinstance(entry, str) or not entry.isidentifier():
        raise InvalidArgument(f"entry: expected a C identifier, got {show(entry)}")
    sources: dict[str, Any] = {}
    if step_c is not None:
        sources["npu-host-c"] = participant_c(step_c, entry)
    if step_numpy is not None:
        sources["host"] = participant_numpy(step_numpy)
    if not sources:
        raise InvalidArgument("load_participant: give step_c, step_numpy or both")
    contract = KernelContract([BufferContract.read_write(layout.nbytes, name="session")])
    return npu.load_artifact(artifact_for(npu, entry, sources), columns=columns, contract=contract, name=f"resident {entry}")


class ProgramParticipant(Participant):
    """An NPU program (or a wrapped transaction around it) as the session's NPU side."""

    def __init__(self, program: NpuProgram, *, prefix: Sequence[Any] = (), suffix: Sequence[Any] = (),
                 retain: Sequence[Buffer] = (), command_bytes: int = 0) -> None:
        if not isinstance(program, NpuProgram):
            raise InvalidArgument(f"program: expected an NpuProgram, got {type(program).__name__}")
        program._check_open()
        self.role = "npu"
        self.program = program
        self.device = program.device
        self.name = program.name
        self.actions = SYSTEM_SCOPE
        self._prefix, self._suffix, self._retain, self._command_bytes = prefix, suffix, retain, command_bytes
        self.transaction: Transaction | None = None

    def prepare(self, memory: Buffer) -> None:
        """Build the wrapped transaction on the session memory (every check runs here,
        before anything is submitted)."""
        self.transaction = self.program.wrap_transaction([memory], prefix=self._prefix, suffix=self._suffix,
                                                         retain=self._retain, command_bytes=self._command_bytes)

    def launch(self, stream: Stream, memory: Buffer) -> Completion:
        if self.transaction is None:
            self.prepare(memory)
        assert self.transaction is not None
        return self.transaction.launch(stream)

    def close(self) -> None:
        if self.transaction is not None:
            self.transaction.close()
            self.transaction = None


__all__ = ["ProgramParticipant", "load_participant", "participant_c", "participant_numpy"]
