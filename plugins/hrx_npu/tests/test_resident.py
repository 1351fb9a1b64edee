"""Resident GPU-NPU exchange (hrx_core.resident): the specification's semantics,
fault injection, and random request streams against a serial reference.

Pairs: host + npu-host and host + xdna everywhere, amdgpu + xdna on the simulated
Strix Halo (the gfx1151 participant compiled by clang, run by the simulation through
its host reference), cuda + npu-host on a GPU machine (the persistent kernel; gpu
marker). Faults are injected on the NPU side (numpy builds of the participant) so
they apply to every GPU participant, and on the GPU side where it is the host engine.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from conftest import open_npu, simulated_amd
from hrx_npu.examples import resident_exchange as rx
from hrx_npu.resident import ProgramParticipant, load_participant, participant_numpy
from hrx_npu.transaction import Transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hrx_core as hrx
from hrx_core.errors import DeviceError, InvalidArgument, Overlap, Timeout, Unsupported
from hrx_core.resident import (
    KernelParticipant,
    Layout,
    ResidentSession,
    ResidentStartup,
    host_gpu_kernel,
    quarantined_sessions,
)
from hrx_core.resident import protocol as P
from hrx_core.testing import open_device

PAIRS = [
    pytest.param(("host", "npu-host"), id="host+npu-host"),
    pytest.param(("host", "xdna"), id="host+xdna"),
    pytest.param(("amdgpu", "xdna"), id="amdgpu+xdna"),
    pytest.param(("cuda", "npu-host"), id="cuda+npu-host", marks=pytest.mark.gpu),
]


@pytest.fixture(params=PAIRS)
def pair(request):
    gpu_engine, npu_engine = request.param
    if "xdna" == npu_engine or gpu_engine == "amdgpu":
        pytest.importorskip("hrx_amdf")
        if not simulated_amd():
            pytest.skip("the suites' participants are host builds; on hardware see the H200/Strix Halo commands")
    gpu = open_device(gpu_engine)
    npu = open_npu(npu_engine)
    yield gpu, npu
    npu.close()


@pytest.fixture
def host_pair():
    gpu = open_device("host")
    npu = open_npu("npu-host")
    yield gpu, npu
    npu.close()


def _request(rng, m=1):
    return rng.integers(0, 1 << 32, 64 * m, dtype=np.uint32)


def _session(gpu, npu, *, m=1, slots=4, step=None, budget=None, start_timeout=10.0, idle_timeout=10.0, gpu_kernel=None,
             npu_program=None):
    """A matmul-pipeline session; ``step`` (a numpy stage) replaces the NPU's C build."""
    nbytes = 256 * m
    layout = Layout(slots, nbytes, nbytes, nbytes, nbytes)
    startup = ResidentStartup(gpu, npu, layout, budget=budget, start_timeout=start_timeout, idle_timeout=idle_timeout)
    block = rx.BLOCK if gpu.info.kind == "gpu" else 1
    kernel = gpu_kernel or rx.gpu_participant_kernel()
    if npu_program is None:
        if step is None:
            npu_program = load_participant(npu, layout, "rs_test_matmul", step_c=rx.STEP_C, step_numpy=rx._step_numpy)
        else:
            npu_program = load_participant(npu, layout, "rs_test_faulty", step_numpy=step)
    session = ResidentSession(startup, KernelParticipant("gpu", gpu, kernel, block=block), ProgramParticipant(npu_program))
    session.program = npu_program
    return session


def _finish(session):
    released = session.close()
    session.program.close()
    return released


def _eventually(cond, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# -- the exchange ---------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["gpu-first", "npu-first"])
def test_payloads_round_trip_in_either_submission_order(pair, order):
    gpu, npu = pair
    budget = hrx.MemoryBudget(1 << 30)
    session = _session(gpu, npu, m=2, budget=budget)
    first, second = (session.submit_gpu, session.submit_npu) if order == "gpu-first" else (session.submit_npu, session.submit_gpu)
    first()
    second()
    assert session.accepted == {"gpu", "npu"}
    session.start()
    rng = np.random.default_rng(1)
    reqs = [_request(rng, 2) for _ in range(12)]
    outs = []
    for i, r in enumerate(reqs):  # two in flight at a time
        session.send(r)
        if i % 2:
            outs += [session.receive(timeout=30), session.receive(timeout=30)]
    assert all(np.array_equal(o.view(np.float32), rx.reference(r)) for r, o in zip(reqs, outs))
    counts = session.stop(timeout=30)
    assert counts == {"requests": 12, "responses": 12, "gpu": 12, "npu": 12}
    assert session.states()["gpu"] == session.states()["npu"] == "DONE"
    assert budget.used_bytes > 0  # owned until closed
    assert _finish(session) and not session.owned
    assert budget.used_bytes == 0


def test_start_only_after_both_participants_are_accepted(host_pair):
    gpu, npu = host_pair
    session = _session(gpu, npu)
    with pytest.raises(InvalidArgument, match="not accepted"):
        session.start()
    session.submit_gpu()
    with pytest.raises(InvalidArgument, match="npu participant is not accepted"):
        session.start()
    with pytest.raises(InvalidArgument, match="already submitted"):
        session.submit_gpu()
    with pytest.raises(InvalidArgument, match="not started"):
        session.send(b"x")
    assert session.states()["command"] == "WAIT"  # rejected calls changed nothing
    session.submit_npu()
    session.start()
    with pytest.raises(InvalidArgument, match="already running"):
        session.start()
    session.stop(timeout=30)
    assert _finish(session)


def test_abort_before_run_stops_both_without_running_work(pair):
    gpu, npu = pair
    session = _session(gpu, npu)
    session.submit_npu()
    session.submit_gpu()
    assert _eventually(lambda: session.states()["gpu"] == session.states()["npu"] == "WAITING")
    session.abort()
    states = session.wait(timeout=30)
    assert states["gpu"] == states["npu"] == "ABORTED"
    assert states["gpu_reason"] == states["npu_reason"] == "host command"
    assert session.counts() == {"requests": 0, "responses": 0, "gpu": 0, "npu": 0}
    with pytest.raises(InvalidArgument, match="aborted"):
        session.start()
    assert _finish(session)


def test_abort_is_refused_after_run(host_pair):
    gpu, npu = host_pair
    session = _session(gpu, npu)
    session.submit_gpu()
    session.submit_npu()
    session.start()
    with pytest.raises(InvalidArgument, match="running work is not cancelled"):
        session.abort()
    assert session.states()["command"] == "RUN"
    session.stop(timeout=30)
    assert _finish(session)


def test_abort_with_one_participant_submitted_releases_everything(host_pair):
    gpu, npu = host_pair
    budget = hrx.MemoryBudget(1 << 30)
    session = _session(gpu, npu, budget=budget)
    session.submit_gpu()
    session.abort()
    assert session.wait(timeout=30)["gpu"] == "ABORTED"
    assert session.states()["npu"] == "NOT_LAUNCHED"
    assert _finish(session) and budget.used_bytes == 0


# -- faults -----------------------------------------------------------------------------------


def test_a_participant_that_never_reaches_run_is_stopped_and_quarantined_until_it_ends(pair):
    gpu, npu = pair
    gate = threading.Event()
    inner = participant_numpy(rx._step_numpy)

    def late(memory, *, scratch, column, columns):  # accepted, but held before it can announce itself
        gate.wait(60)
        inner(memory, scratch=scratch, column=column, columns=columns)

    nbytes = 256
    layout = Layout(4, nbytes, nbytes, nbytes, nbytes)
    from hrx_npu import BufferContract, KernelContract

    prog = npu.load_artifact(hrx.compile(late, target="host", entry="late"), columns=1,
                             contract=KernelContract([BufferContract.read_write(layout.nbytes)]))
    budget = hrx.MemoryBudget(1 << 30)
    session = _session(gpu, npu, budget=budget, npu_program=prog)
    session.submit_gpu()
    session.submit_npu()
    session.start()  # both accepted: RUN is published
    session.send(_request(np.random.default_rng(2)))
    with pytest.raises(Timeout, match="nothing was cancelled"):
        session.receive(timeout=0.3)
    assert session.states()["npu"] == "NOT_LAUNCHED" and session.owned
    assert session.close(timeout=0.3) is False  # the NPU side cannot be proven done
    assert session.quarantined and session in quarantined_sessions()
    assert session.states()["command"] == "ABORT"
    assert _eventually(lambda: session.states()["gpu"] == "ABORTED")  # the GPU side was stopped
    held = budget.used_bytes
    assert held > 0  # the memory is not reused while owned
    gate.set()
    assert _eventually(lambda: session not in quarantined_sessions())
    assert session.states()["npu"] == "ABORTED"  # it saw ABORT and ran no work
    assert session.counts()["npu"] == 0
    assert not session.owned and budget.used_bytes == 0
    prog.close()


def test_a_participant_that_dies_mid_stream_ends_the_other_and_leaks_nothing(pair):
    gpu, npu = pair
    seen = []

    def dies(fwd, bwd):
        if len(seen) == 3:
            raise RuntimeError("injected NPU fault")
        seen.append(1)
        rx._step_numpy(fwd, bwd)

    budget = hrx.MemoryBudget(1 << 30)
    session = _session(gpu, npu, step=dies, budget=budget)
    session.submit_gpu()
    session.submit_npu()
    session.start()
    rng = np.random.default_rng(3)
    for _ in range(3):
        r = _request(rng)
        session.send(r)
        assert np.array_equal(session.receive(timeout=30).view(np.float32), rx.reference(r))
    session.send(_request(rng))
    with pytest.raises(DeviceError, match="GPU participant ended"):
        session.receive(timeout=30)
    with pytest.raises(DeviceError, match="npu participant failed"):
        session.wait(timeout=30)
    s = session.states()
    assert (s["npu"], s["npu_reason"]) == ("FAILED", "its stage raised")
    assert (s["gpu"], s["gpu_reason"]) == ("ABORTED", "the peer ended")
    assert _finish(session) and budget.used_bytes == 0


def _stalled_session(gpu, npu):
    """A running session whose NPU stage waits for ``gate`` (a stall)."""
    gate = threading.Event()

    def stalls(fwd, bwd):
        gate.wait(60)
        rx._step_numpy(fwd, bwd)

    budget = hrx.MemoryBudget(1 << 30)
    session = _session(gpu, npu, step=stalls, budget=budget)
    session.submit_npu()
    session.submit_gpu()
    session.start()
    return session, gate, budget


def test_a_stalled_participant_times_out_the_host_without_cancelling(host_pair):
    session, gate, budget = _stalled_session(*host_pair)
    r = _request(np.random.default_rng(4))
    session.send(r)
    with pytest.raises(Timeout):
        session.receive(timeout=0.2)
    with pytest.raises(Timeout, match="nothing was cancelled"):
        session.wait(timeout=0.1)
    assert session.states()["npu"] == "RUNNING" and session.owned and budget.used_bytes > 0
    gate.set()  # the work was not cancelled: it completes and the session goes on
    assert np.array_equal(session.receive(timeout=30).view(np.float32), rx.reference(r))
    session.stop(timeout=30)
    assert _finish(session) and budget.used_bytes == 0


def test_close_of_a_stalled_session_quarantines_it_until_the_stage_returns(host_pair):
    session, gate, budget = _stalled_session(*host_pair)
    session.send(_request(np.random.default_rng(5)))
    assert session.close(timeout=0.2) is False
    alloc = hrx.buffer.backing_of(session.startup.memory.buffer.allocation)
    assert alloc.quarantined == 1 and budget.used_bytes > 0
    with pytest.raises(InvalidArgument, match="still owns"):
        session.startup.close()
    gate.set()
    assert _eventually(lambda: not session.owned)
    assert session.states()["npu"] == "ABORTED" and alloc.quarantined == 0 and budget.used_bytes == 0
    session.program.close()


def test_participants_give_up_waiting_for_run_and_for_work(host_pair):
    gpu, npu = host_pair
    session = _session(gpu, npu, start_timeout=0.2)
    session.submit_gpu()
    session.submit_npu()
    s = session.wait(timeout=30)  # never started: both leave on their own clocks
    assert (s["gpu"], s["gpu_reason"]) == ("TIMED_OUT", "RUN never came (start timeout)")
    assert s["npu"] == "TIMED_OUT"
    assert _finish(session)

    session = _session(gpu, npu, idle_timeout=0.2)
    session.submit_gpu()
    session.submit_npu()
    session.start()
    s = session.wait(timeout=30)  # started, no work: the idle deadline ends them
    assert "TIMED_OUT" in (s["gpu"], s["npu"])
    assert {s["gpu"], s["npu"]} <= {"TIMED_OUT", "ABORTED"}
    with pytest.raises(DeviceError, match="ended"):
        session.send(b"\0" * 8)
    assert _finish(session)


def test_interpreter_exit_aborts_live_sessions(tmp_path):
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent("""
        import atexit, hrx_core as hrx, hrx_npu
        from hrx_npu.examples import resident_exchange as rx
        gpu, npu = hrx.device("host"), hrx_npu.device("npu-host")
        box = []
        # registered before HRX's handler (at the first session), so it runs after it
        atexit.register(lambda: print("states", box[0].wait(30)["gpu"], box[0].states()["npu"], flush=True))
        s = rx.open_session(gpu, npu, 1, 4, start_timeout=600, idle_timeout=600)
        box.append(s)
        s.submit_gpu(); s.submit_npu(); s.start()
        print("running", flush=True)
    """))
    t = time.monotonic()
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "running" in out.stdout and "states ABORTED ABORTED" in out.stdout, out.stdout + out.stderr
    assert time.monotonic() - t < 100


# -- contracts and arguments ------------------------------------------------------------------------


def test_participant_contracts_are_checked_before_anything_is_submitted(host_pair):
    gpu, npu = host_pair
    budget = hrx.MemoryBudget(1 << 30)
    layout = Layout(2, 64, 64, 64, 64)
    startup = ResidentStartup(gpu, npu, layout, budget=budget)
    assert startup.required_actions("gpu") == {"device-release-system", "device-acquire-system"}
    vis = startup.contracts[("gpu", "npu")]
    assert vis.coherent and vis.atomic_scopes[8] == "system"
    kernel = host_gpu_kernel("weak", lambda i, o: None, lambda i, o: None)
    weak = KernelParticipant("gpu", gpu, kernel, actions=frozenset({"device-release-system"}))
    prog = load_participant(npu, layout, "rs_contract", step_numpy=rx._step_numpy)
    with pytest.raises(Unsupported, match="device-acquire-system"):
        ResidentSession(startup, weak, ProgramParticipant(prog))
    with pytest.raises(InvalidArgument, match="expected a gpu Participant"):
        ResidentSession(startup, ProgramParticipant(prog), ProgramParticipant(prog))
    assert startup.owner is None and npu.stats.allocations >= 0
    startup.close()
    assert budget.used_bytes == 0
    prog.close()


def test_no_coherent_attachment_is_refused(host_pair, monkeypatch):
    gpu, npu = host_pair
    budget = hrx.MemoryBudget(1 << 30)
    monkeypatch.setattr(hrx.placement.Fabric, "allocation_profiles", lambda self, devices, coherent: [])
    with pytest.raises(Unsupported, match="allocation_profiles"):
        ResidentStartup(gpu, npu, Layout(2, 64, 64, 64, 64), budget=budget)
    assert budget.used_bytes == 0


@pytest.mark.parametrize("bad", [
    dict(slots=0), dict(slots=1 << 17), dict(request_bytes=0), dict(forward_bytes=-1), dict(response_bytes=True),
    dict(backward_bytes=1.5),
])
def test_bad_layouts_are_rejected(bad):
    args = dict(slots=2, request_bytes=8, forward_bytes=8, backward_bytes=8, response_bytes=8) | bad
    with pytest.raises(InvalidArgument):
        Layout(**args)


def test_bad_arguments_change_nothing(host_pair):
    gpu, npu = host_pair
    layout = Layout(2, 64, 64, 64, 64)
    for kwargs in ({"start_timeout": 0}, {"idle_timeout": -1}, {"start_timeout": True}, {"budget": 5}, {"fabric": "x"},
                   {"spin": -1e-6}, {"spin": 2}, {"spin": "0"}):
        with pytest.raises(InvalidArgument):
            ResidentStartup(gpu, npu, layout, **kwargs)
    with pytest.raises(InvalidArgument, match="same device"):
        ResidentStartup(gpu, gpu, layout)
    startup = ResidentStartup(gpu, npu, layout, spin=0.001, start_timeout=2, idle_timeout=3)
    with startup.memory.buffer.map("read") as host:  # the control block as written
        words = host[: P.CONTROL_BYTES].view(np.int64)
        assert (words[P.W_SPIN], words[P.W_START_TIMEOUT], words[P.W_IDLE_TIMEOUT]) == (1_000_000, 2 * 10**9, 3 * 10**9)
    startup.close()
    with pytest.raises(InvalidArgument, match="Layout"):
        ResidentStartup(gpu, npu, (2, 64, 64, 64, 64))
    session = _session(gpu, npu)
    session.submit_gpu()
    session.submit_npu()
    session.start()
    with pytest.raises(InvalidArgument, match="exceeds the request slot"):
        session.send(b"\0" * 257)
    with pytest.raises(InvalidArgument, match="bytes-like"):
        session.send(object())
    with pytest.raises(InvalidArgument, match="timeout"):
        session.send(b"\0", timeout=-1)
    with pytest.raises(InvalidArgument, match="every request sent"):
        session.receive(timeout=1)
    assert session.counts()["requests"] == 0
    session.stop(timeout=30)
    assert _finish(session)


# -- wrap_transaction --------------------------------------------------------------------------


def _xor_program(npu, nbytes, entry):
    from hrx_npu.programs import load_xor_copy

    return load_xor_copy(npu, nbytes)


def test_wrap_transaction_retains_storage_and_rejects_shared_records(host_pair):
    gpu, npu = host_pair
    budget = hrx.MemoryBudget(1 << 30)
    nbytes = 256
    layout = Layout(2, nbytes, nbytes, nbytes, nbytes)
    startup = ResidentStartup(gpu, npu, layout)
    prog = load_participant(npu, layout, "rs_wrapped", step_c=rx.STEP_C, step_numpy=rx._step_numpy)
    xor = _xor_program(npu, 64, "x")
    src, dst = npu.allocate(64), npu.allocate(64)
    npu.default_stream().upload_blocking(src, np.arange(64, dtype=np.uint8))
    extra = npu.allocate(4096, budget=budget)
    memory = startup.memory.on(npu)
    # records must not share the invocation's bytes or its hardware context
    with pytest.raises(Overlap, match="overlap"):
        prog.wrap_transaction([memory], suffix=[xor.invocation([src, memory.slice(0, 64)])])
    with pytest.raises(Overlap, match="own native resources"):
        prog.wrap_transaction([memory], prefix=[prog.invocation([memory])])
    with pytest.raises(InvalidArgument, match="command_bytes"):
        prog.wrap_transaction([memory], command_bytes=-1)
    # a session whose NPU side is wrapped: a suffix record chained after the participant
    part = ProgramParticipant(prog, suffix=[xor.invocation([src, dst])], retain=[extra], command_bytes=4096)
    session = ResidentSession(startup, KernelParticipant("gpu", gpu, rx.gpu_participant_kernel()), part)
    assert isinstance(part.transaction, Transaction)
    extra.close()  # the user's handle goes; the transaction keeps the storage alive
    assert budget.used_bytes == 4096 and part.transaction.command_storage is not None
    session.submit_npu()
    session.submit_gpu()
    session.start()
    r = _request(np.random.default_rng(6))
    session.send(r)
    assert np.array_equal(session.receive(timeout=30).view(np.float32), rx.reference(r))
    session.stop(timeout=30)
    # the suffix ran after the participant: its DMA traffic drained before the session's completion
    assert np.array_equal(npu.default_stream().download(dst), np.arange(64, dtype=np.uint8) ^ np.uint8(0x5A))
    assert budget.used_bytes == 4096  # held for the session's life
    assert session.close()
    assert budget.used_bytes == 0 and part.transaction is None
    for obj in (prog, xor, src, dst):
        obj.close()


# -- random request streams against a serial reference -------------------------------------------


def _pre(i, o):
    o[:] = 0
    n = min(len(i), len(o))
    o[:n] = (i[:n].astype(np.uint16) * 3 + 1).astype(np.uint8)


def _step(i, o):
    o[:] = np.roll(i, 1)[: len(o)] if len(i) >= len(o) else np.pad(np.roll(i, 1), (0, len(o) - len(i)))
    o ^= np.uint8(0xA5)


def _post(i, o):
    o[:] = 0
    n = min(len(i), len(o))
    o[:n] = i[:n][::-1]


def _serial(req, sizes):
    """The response to ``req`` computed serially, slot sizes as in the session."""
    rq, fw, bw, rs = (np.zeros(n, np.uint8) for n in sizes)
    rq[: len(req)] = req
    _pre(rq, fw)
    _step(fw, bw)
    _post(bw, rs)
    return rs


STEP_BYTES_C = r"""
static void hrx_resident_step(const uint8_t *in, int64_t in_bytes, uint8_t *out, int64_t out_bytes) {
    for (int64_t j = 0; j < out_bytes; ++j) {
        int64_t src = (j - 1 + in_bytes) % in_bytes;   /* np.roll(in, 1), zero padded */
        uint8_t v = j < in_bytes ? in[src] : 0;
        out[j] = (uint8_t)(v ^ 0xA5);
    }
}
"""


GPU_ROLE_C = r"""
static void gpu_pre(const hrx_u8 *in, hrx_i64 ib, hrx_u8 *out, hrx_i64 ob) {
    for (hrx_i64 j = 0; j < ob; ++j) out[j] = j < ib ? (hrx_u8)(in[j] * 3 + 1) : 0;
}
static void gpu_post(const hrx_u8 *in, hrx_i64 ib, hrx_u8 *out, hrx_i64 ob) {
    hrx_i64 n = ib < ob ? ib : ob;
    for (hrx_i64 j = 0; j < ob; ++j) out[j] = j < n ? in[n - 1 - j] : 0;
}
HRX_NPU_PROGRAM(rs_gpu_role_c) {   /* the C GPU role, single-threaded, as the cuda kernel's thread 0 runs it */
    (void)lengths; (void)nbuffers; (void)scratch; (void)scratch_bytes; (void)column; (void)columns;
    hrx_rs s;
    if (!hrx_rs_wait_run(&s, buffers[0], HRX_RS_W_GPU_STATE)) return;
    for (;;) {
        hrx_rs_work w = hrx_rs_gpu_poll(&s);
        if (w.op == HRX_RS_EXIT) return;
        if (w.op == HRX_RS_PRE) gpu_pre(w.in, s.bytes[0], w.out, s.bytes[1]);
        else if (w.op == HRX_RS_POST) gpu_post(w.in, s.bytes[2], w.out, s.bytes[3]);
        else continue;
        hrx_rs_gpu_commit(&s, w);
    }
}
"""


def _c_gpu_role_kernel():
    """A host-engine kernel running the protocol's C GPU role (what the persistent cuda
    kernel's thread 0 runs) on the CPU, through npu-host's C compiler."""
    from hrx_npu.compiler import load_entry
    from hrx_npu.resident import C_PRIMITIVES

    from hrx_core.resident.protocol import protocol_c

    art = hrx.compile(C_PRIMITIVES + protocol_c() + GPU_ROLE_C, target="npu-host-c", entry="rs_gpu_role_c")
    ffi, fn = load_entry(art.code)

    def participant(memory):
        fn(ffi.new("uint8_t *[]", [ffi.cast("uint8_t *", memory.ctypes.data)]), ffi.new("int64_t[]", [memory.nbytes]), 1,
           ffi.NULL, 0, 0, 1)

    return hrx.Kernel("rs_gpu_role_c", buffers=("read_write",), host=participant)


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    slots=st.integers(1, 4),
    sizes=st.tuples(*(st.integers(1, 96) for _ in range(4))),
    gpu_first=st.booleans(),
    gpu_c=st.booleans(),
    npu_c=st.booleans(),
    ops=st.lists(st.tuples(st.integers(0, 5), st.binary(max_size=96)), min_size=1, max_size=12),
)
def test_random_request_streams_match_a_serial_reference(host_pair, slots, sizes, gpu_first, gpu_c, npu_c, ops):
    """Either role in Python or in the protocol's C, random slot counts and sizes,
    random interleavings of sends and receives."""
    gpu, npu = host_pair
    layout = Layout(slots, *sizes)
    startup = ResidentStartup(gpu, npu, layout)
    kernel = _c_gpu_role_kernel() if gpu_c else host_gpu_kernel("rs_bytes", _pre, _post)
    prog = load_participant(npu, layout, "rs_bytes", **(dict(step_c=STEP_BYTES_C) if npu_c else dict(step_numpy=_step)))
    session = ResidentSession(startup, KernelParticipant("gpu", gpu, kernel), ProgramParticipant(prog))
    try:
        (session.submit_gpu if gpu_first else session.submit_npu)()
        (session.submit_npu if gpu_first else session.submit_gpu)()
        session.start()
        sent, got = [], []
        for receives, payload in ops:
            payload = payload[: layout.request_bytes]
            if len(sent) - len(got) == slots:  # keep the host's side from blocking forever: drain one first
                got.append(session.receive(timeout=30))
            session.send(payload)
            sent.append(np.frombuffer(payload, np.uint8))
            for _ in range(min(receives, len(sent) - len(got))):
                got.append(session.receive(timeout=30))
        while len(got) < len(sent):
            got.append(session.receive(timeout=30))
        assert session.stop(timeout=30)["responses"] == len(sent)
        for req, out in zip(sent, got):
            assert np.array_equal(out, _serial(req, sizes))
    finally:
        assert session.close()
        prog.close()


def test_docs_resident_section_runs_as_written(capsys):
    import re
    from pathlib import Path

    doc = Path(__file__).resolve().parents[3] / "docs" / "npu.md"
    section = doc.read_text().split("## Resident GPU-NPU exchange", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(doc), "exec"), {})  # noqa: S102 - the docs' example, run as written
    out = capsys.readouterr().out
    assert "[ 8 10 12 14]" in out and "'responses': 1" in out
