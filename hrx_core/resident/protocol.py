"""The resident exchange's wire protocol: one control block and four payload rings
in one coherent allocation, and the WAIT/RUN/ABORT state machine both participants
run on it. Engine-neutral: the layout and state codes are defined here once, in
Python (:class:`Layout`, the host side and the host-engine participant) and as the
portable C text :data:`PROTOCOL_C` that native participants compile with their own
memory-order primitives (npu-host C: GCC ``__atomic`` acquire/release; cuda:
``ld.acquire.sys`` / ``st.release.sys``).

Rings (single producer, single consumer, ``slots`` fixed-size slots each)::

    host --request--> GPU --forward--> NPU --backward--> GPU --response--> host

Every ring has a ``head`` (the producer's count of published slots) and a ``tail``
(the consumer's count of consumed slots), each a monotonic 64-bit sequence number on
its own 64-byte line. A producer writes slot ``head % slots`` and then publishes
``head + 1`` with a release store; a consumer reads ``head`` with an acquire load,
reads the slot, and hands it back by publishing ``tail + 1`` with a release store.

Command word (written by the host): WAIT -> RUN -> STOP, or ABORT at any point
(STOP is published only after RUN, so a participant that first sees STOP runs and
drains; before RUN the host ends a session with ABORT).
Participant state words: WAITING (launched, waiting for RUN) -> RUNNING -> DONE,
ABORTED, TIMED_OUT or FAILED. Every wait a participant does is bounded: it reads
the command word on every poll, gives up waiting for RUN after ``start_timeout`` and
stops after ``idle_timeout`` without progress, measured on its own clock, so a
participant never spins forever even if the host process is gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs
import numpy as np

from ..errors import InvalidArgument, show
from ..timeouts import yield_thread

MAGIC = 0x48525852_45534431  # "HRXRESD1"
VERSION = 1

# -- commands (host -> participants) ---------------------------------------------------
WAIT, RUN, STOP, ABORT = 0, 1, 2, 3
COMMAND_NAMES = {WAIT: "WAIT", RUN: "RUN", STOP: "STOP", ABORT: "ABORT"}

# -- participant states ------------------------------------------------------------------
NOT_LAUNCHED, WAITING, RUNNING, DONE, ABORTED, TIMED_OUT, FAILED = 0, 1, 2, 3, 4, 5, 6
STATE_NAMES = {NOT_LAUNCHED: "NOT_LAUNCHED", WAITING: "WAITING", RUNNING: "RUNNING", DONE: "DONE",
               ABORTED: "ABORTED", TIMED_OUT: "TIMED_OUT", FAILED: "FAILED"}
TERMINAL = frozenset({DONE, ABORTED, TIMED_OUT, FAILED})

# -- reasons (beside a terminal state) -------------------------------------------------------
REASON_NONE, REASON_COMMAND, REASON_PEER, REASON_START, REASON_IDLE, REASON_ERROR = 0, 1, 2, 3, 4, 5
REASON_NAMES = {REASON_NONE: "", REASON_COMMAND: "host command", REASON_PEER: "the peer ended",
                REASON_START: "RUN never came (start timeout)", REASON_IDLE: "no progress (idle timeout)",
                REASON_ERROR: "its stage raised"}

# -- control block: int64 words; hot words each on their own 64-byte line -------------------
W_MAGIC, W_VERSION, W_SLOTS, W_START_TIMEOUT, W_IDLE_TIMEOUT, W_SESSION, W_SPIN = 0, 1, 2, 3, 4, 5, 6
W_REQ_OFF, W_REQ_STRIDE, W_FWD_OFF, W_FWD_STRIDE, W_BWD_OFF, W_BWD_STRIDE, W_RSP_OFF, W_RSP_STRIDE = range(8, 16)
W_COMMAND = 16
W_GPU_STATE, W_GPU_COUNT, W_GPU_REASON = 24, 25, 26
W_NPU_STATE, W_NPU_COUNT, W_NPU_REASON = 32, 33, 34
W_REQ_HEAD, W_REQ_TAIL, W_FWD_HEAD, W_FWD_TAIL = 40, 48, 56, 64
W_BWD_HEAD, W_BWD_TAIL, W_RSP_HEAD, W_RSP_TAIL = 72, 80, 88, 96
W_REQ_BYTES, W_FWD_BYTES, W_BWD_BYTES, W_RSP_BYTES = 104, 105, 106, 107
CONTROL_BYTES = 1024
SLOT_ALIGN = 64
MAX_SLOTS = 1 << 16
MAX_SLOT_BYTES = 1 << 30

_WORDS = {k: v for k, v in globals().items() if k.startswith("W_")}


def _align(n: int, a: int = SLOT_ALIGN) -> int:
    return -(-n // a) * a


def _positive(name: str, value: object, limit: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 1 <= int(value) <= limit:
        raise InvalidArgument(f"{name}: expected an int in [1, {limit}], got {show(value)}")
    return int(value)


def _slots(value: object) -> int:
    return _positive("slots", value, MAX_SLOTS)


def _request_bytes(value: object) -> int:
    return _positive("request_bytes", value, MAX_SLOT_BYTES)


def _forward_bytes(value: object) -> int:
    return _positive("forward_bytes", value, MAX_SLOT_BYTES)


def _backward_bytes(value: object) -> int:
    return _positive("backward_bytes", value, MAX_SLOT_BYTES)


def _response_bytes(value: object) -> int:
    return _positive("response_bytes", value, MAX_SLOT_BYTES)


def _seconds(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise InvalidArgument(f"{name}: expected seconds in (0, 3600], got {show(value)}")
    return int(value * 1e9)


@attrs.frozen
class Layout:
    """Sizes of the four rings (bytes per slot) and their slot count; offsets follow.

    ``request_bytes``: host -> GPU, ``forward_bytes``: GPU -> NPU, ``backward_bytes``:
    NPU -> GPU, ``response_bytes``: GPU -> host."""

    slots: int = attrs.field(converter=_slots)
    request_bytes: int = attrs.field(converter=_request_bytes)
    forward_bytes: int = attrs.field(converter=_forward_bytes)
    backward_bytes: int = attrs.field(converter=_backward_bytes)
    response_bytes: int = attrs.field(converter=_response_bytes)

    def rings(self) -> tuple[tuple[int, int], ...]:
        """(offset, slot stride) of the request, forward, backward and response rings."""
        out, offset = [], CONTROL_BYTES
        for nbytes in (self.request_bytes, self.forward_bytes, self.backward_bytes, self.response_bytes):
            stride = _align(nbytes)
            out.append((offset, stride))
            offset += stride * self.slots
        return tuple(out)

    @property
    def nbytes(self) -> int:
        offset, stride = self.rings()[-1]
        return offset + stride * self.slots

    def initialize(self, memory: np.ndarray, *, start_timeout_ns: int, idle_timeout_ns: int, session: int, spin_ns: int = 0) -> None:
        """Write a fresh control block (every sequence number 0, command WAIT)."""
        words = memory[:CONTROL_BYTES].view(np.int64)
        words[:] = 0
        words[W_SLOTS], words[W_START_TIMEOUT], words[W_IDLE_TIMEOUT], words[W_SESSION] = \
            self.slots, start_timeout_ns, idle_timeout_ns, session
        words[W_SPIN] = spin_ns
        sizes = (self.request_bytes, self.forward_bytes, self.backward_bytes, self.response_bytes)
        for i, (offset, stride) in enumerate(self.rings()):
            words[W_REQ_OFF + 2 * i], words[W_REQ_OFF + 2 * i + 1] = offset, stride
            words[W_REQ_BYTES + i] = sizes[i]
        words[W_VERSION] = VERSION
        words[W_MAGIC] = MAGIC  # last: a participant checks it first


def slot(memory: np.ndarray, words: np.ndarray, ring: int, seq: int, nbytes: int) -> np.ndarray:
    """Slot ``seq % slots`` of ring ``ring`` (0 request, 1 forward, 2 backward, 3 response)."""
    offset, stride = int(words[W_REQ_OFF + 2 * ring]), int(words[W_REQ_OFF + 2 * ring + 1])
    start = offset + (seq % int(words[W_SLOTS])) * stride
    return memory[start : start + nbytes]


class Backoff:
    """A bounded spin that yields the CPU when nothing happens: for ``spin_ns`` after
    the last progress it only yields the interpreter (``timeouts.yield_thread``: no timer
    slack); then a few hundred polls back to back, yielding, and sleeps growing to
    ``ceiling`` seconds."""

    __slots__ = ("ceiling", "idle", "since", "spin_ns")

    def __init__(self, ceiling: float = 200e-6, spin_ns: int = 0) -> None:
        self.idle = 0
        self.ceiling = ceiling
        self.spin_ns = spin_ns
        self.since = time.monotonic_ns() if spin_ns else 0

    def reset(self) -> None:
        self.idle = 0
        if self.spin_ns:
            self.since = time.monotonic_ns()

    def pause(self) -> None:
        if self.spin_ns and time.monotonic_ns() - self.since < self.spin_ns:
            yield_thread()
            return
        self.idle += 1
        if self.idle < 64:
            return
        if self.idle < 256:
            yield_thread()
        else:
            time.sleep(min(self.ceiling, 1e-6 * (self.idle - 255)))


# -- the participants, in Python (host-engine GPU participant, numpy NPU build) ----------------
#
# x86-64 orders aligned 8-byte loads and stores (TSO): a numpy store of a sequence word
# after the slot's bytes is a release, a load before reading the slot an acquire; the
# Python interpreter does not reorder them. Native participants use PROTOCOL_C.

Stage = Callable[[np.ndarray, np.ndarray], None]


def _wait_run(words: np.ndarray, state: int) -> bool:
    if int(words[W_MAGIC]) != MAGIC or int(words[W_VERSION]) != VERSION:
        words[state + 2] = REASON_ERROR
        words[state] = FAILED
        return False
    words[state] = WAITING
    start, limit, backoff = time.monotonic_ns(), int(words[W_START_TIMEOUT]), Backoff()
    while True:
        command = int(words[W_COMMAND])
        if command in (RUN, STOP):  # the host publishes STOP only after RUN
            words[state] = RUNNING
            return True
        if command == ABORT:
            words[state + 2] = REASON_COMMAND
            words[state] = ABORTED
            return False
        if time.monotonic_ns() - start > limit:
            words[state + 2] = REASON_START
            words[state] = TIMED_OUT
            return False
        backoff.pause()


def _end(words: np.ndarray, state: int, value: int, reason: int) -> None:
    words[state + 2] = reason
    words[state] = value


#: What one poll of a role returns: True (it did a unit of work), None (idle), or the
#: terminal (state, reason) to end with.
Poll = Callable[[], "bool | tuple[int, int] | None"]


def _serve(words: np.ndarray, state: int, poll: Poll) -> int:
    """WAITING until RUN, then ``poll`` until it ends the role or the idle timeout does."""
    if not _wait_run(words, state):
        return int(words[state])
    idle_limit = int(words[W_IDLE_TIMEOUT])
    last, backoff = time.monotonic_ns(), Backoff(spin_ns=int(words[W_SPIN]))
    try:
        while True:
            outcome = poll()
            if outcome is True:
                last = time.monotonic_ns()
                backoff.reset()
                continue
            if outcome:
                _end(words, state, *outcome)
                break
            if time.monotonic_ns() - last > idle_limit:
                _end(words, state, TIMED_OUT, REASON_IDLE)
                break
            backoff.pause()
    except BaseException:
        _end(words, state, FAILED, REASON_ERROR)
        raise
    return int(words[state])


def run_gpu_role(memory: np.ndarray, pre: Stage, post: Stage) -> int:
    """The GPU participant: request -> ``pre`` -> forward; backward -> ``post`` ->
    response (returned payloads first, for latency). Returns the final state."""
    words = memory[:CONTROL_BYTES].view(np.int64)
    req_b, fwd_b, bwd_b, rsp_b = (int(words[W_REQ_BYTES + i]) for i in range(4))
    slots = int(words[W_SLOTS])
    seq = {w: int(words[w]) for w in (W_REQ_TAIL, W_FWD_HEAD, W_BWD_TAIL, W_RSP_HEAD)}

    def poll() -> bool | tuple[int, int] | None:
        command = int(words[W_COMMAND])
        if command == ABORT:
            return ABORTED, REASON_COMMAND
        req_tail, fwd_head, bwd_tail, rsp_head = seq[W_REQ_TAIL], seq[W_FWD_HEAD], seq[W_BWD_TAIL], seq[W_RSP_HEAD]
        if bwd_tail < int(words[W_BWD_HEAD]) and rsp_head - int(words[W_RSP_TAIL]) < slots:
            post(slot(memory, words, 2, bwd_tail, bwd_b), slot(memory, words, 3, rsp_head, rsp_b))
            words[W_BWD_TAIL] = seq[W_BWD_TAIL] = bwd_tail + 1
            words[W_RSP_HEAD] = seq[W_RSP_HEAD] = rsp_head + 1
            words[W_GPU_COUNT] += 1
            return True
        if req_tail < int(words[W_REQ_HEAD]) and fwd_head - int(words[W_FWD_TAIL]) < slots:
            pre(slot(memory, words, 0, req_tail, req_b), slot(memory, words, 1, fwd_head, fwd_b))
            words[W_REQ_TAIL] = seq[W_REQ_TAIL] = req_tail + 1
            words[W_FWD_HEAD] = seq[W_FWD_HEAD] = fwd_head + 1
            return True
        peer = int(words[W_NPU_STATE])
        if peer in TERMINAL and (peer != DONE or fwd_head != bwd_tail):
            return ABORTED, REASON_PEER
        if command == STOP and req_tail == int(words[W_REQ_HEAD]) and fwd_head == bwd_tail:
            return DONE, REASON_NONE
        return None

    return _serve(words, W_GPU_STATE, poll)


def run_npu_role(memory: np.ndarray, step: Stage) -> int:
    """The NPU participant: forward -> ``step`` -> backward. Returns the final state."""
    words = memory[:CONTROL_BYTES].view(np.int64)
    fwd_b, bwd_b = int(words[W_FWD_BYTES]), int(words[W_BWD_BYTES])
    slots = int(words[W_SLOTS])
    seq = {W_FWD_TAIL: int(words[W_FWD_TAIL]), W_BWD_HEAD: int(words[W_BWD_HEAD])}

    def poll() -> bool | tuple[int, int] | None:
        if int(words[W_COMMAND]) == ABORT:
            return ABORTED, REASON_COMMAND
        peer = int(words[W_GPU_STATE])
        if peer in TERMINAL and peer != DONE:
            return ABORTED, REASON_PEER
        fwd_tail, bwd_head = seq[W_FWD_TAIL], seq[W_BWD_HEAD]
        if fwd_tail < int(words[W_FWD_HEAD]) and bwd_head - int(words[W_BWD_TAIL]) < slots:
            step(slot(memory, words, 1, fwd_tail, fwd_b), slot(memory, words, 2, bwd_head, bwd_b))
            words[W_FWD_TAIL] = seq[W_FWD_TAIL] = fwd_tail + 1
            words[W_BWD_HEAD] = seq[W_BWD_HEAD] = bwd_head + 1
            words[W_NPU_COUNT] += 1
            return True
        if peer == DONE:
            return DONE, REASON_NONE
        return None

    return _serve(words, W_NPU_STATE, poll)


# -- the same protocol in portable C --------------------------------------------------------


def c_constants() -> str:
    """``#define``s of every word index, command, state and reason, from this module."""
    names = dict(_WORDS)
    names.update(MAGIC=MAGIC, VERSION=VERSION, CONTROL_BYTES=CONTROL_BYTES)
    names.update({f"CMD_{v}": k for k, v in COMMAND_NAMES.items()})
    names.update({f"S_{v}": k for k, v in STATE_NAMES.items()})
    names.update(R_COMMAND=REASON_COMMAND, R_PEER=REASON_PEER, R_START=REASON_START, R_IDLE=REASON_IDLE, R_ERROR=REASON_ERROR)
    return "\n".join(f"#define HRX_RS_{k} {v}LL" for k, v in names.items()) + "\n"


#: The protocol in C. A participant defines the types ``hrx_i64`` (64-bit signed) and
#: ``hrx_u8`` (a byte), ``HRX_RS_FN`` (function qualifiers), ``HRX_LOAD_ACQUIRE(p)`` /
#: ``HRX_STORE_RELEASE(p, v)`` (64-bit, at the scope the fabric's visibility requires:
#: system), ``HRX_NOW_NS()`` (a monotonic clock in ns) and ``HRX_PAUSE(n)`` (back off
#: after ``n`` idle polls, once the control block's spin window has passed), then includes this text. A participant keeps an ``hrx_rs``
#: (its own sequence numbers, the layout, the peers' last-read heads and tails) so a
#: poll reads shared memory only for what may have changed: the command word, and a
#: peer's head or tail only when the cached one says "empty" or "full" -- on a GPU
#: every such read crosses the bus. ``hrx_rs_*_poll`` decide the next unit of work
#: (or the exit, with the state written); ``hrx_rs_*_commit`` publish it. Decisions
#: and commits are one thread's; the work between them may be a whole thread block's.
PROTOCOL_C = r"""
#define HRX_RS_IDLE 0
#define HRX_RS_PRE 1
#define HRX_RS_POST 2
#define HRX_RS_STEP 3
#define HRX_RS_EXIT 4

typedef struct {
    hrx_i64 *c;
    hrx_u8 *base;
    hrx_i64 slots, idle_limit, spin, off[4], stride[4], bytes[4];
    hrx_i64 req_tail, fwd_head, bwd_tail, rsp_head, fwd_tail, bwd_head;  /* this side's own */
    hrx_i64 req_head_seen, fwd_head_seen, bwd_head_seen;                 /* peers' heads, last read */
    hrx_i64 fwd_tail_seen, bwd_tail_seen, rsp_tail_seen;                 /* peers' tails, last read */
    hrx_i64 count, last, idle;
    hrx_i64 polls, command, peer;                                        /* re-read every 16 polls */
} hrx_rs;

typedef struct { hrx_i64 op; hrx_u8 *in; hrx_u8 *out; } hrx_rs_work;

HRX_RS_FN hrx_u8 *hrx_rs_slot(const hrx_rs *s, int ring, hrx_i64 seq) {
    return s->base + s->off[ring] + (seq % s->slots) * s->stride[ring];
}

HRX_RS_FN void hrx_rs_end(hrx_i64 *c, int state, hrx_i64 value, hrx_i64 reason) {
    c[state + 2] = reason;
    HRX_STORE_RELEASE(c + state, value);
}

/* WAITING until RUN: 1 to run (s filled from the control block); 0 to exit (state written). */
HRX_RS_FN int hrx_rs_wait_run(hrx_rs *s, hrx_u8 *base, int state) {
    hrx_i64 *c = (hrx_i64 *)base;
    if (HRX_LOAD_ACQUIRE(c + HRX_RS_W_MAGIC) != HRX_RS_MAGIC || c[HRX_RS_W_VERSION] != HRX_RS_VERSION) {
        hrx_rs_end(c, state, HRX_RS_S_FAILED, HRX_RS_R_ERROR);
        return 0;
    }
    HRX_STORE_RELEASE(c + state, HRX_RS_S_WAITING);
    hrx_i64 start = HRX_NOW_NS(), limit = c[HRX_RS_W_START_TIMEOUT], idle = 0;
    for (;;) {
        hrx_i64 command = HRX_LOAD_ACQUIRE(c + HRX_RS_W_COMMAND);
        /* the host publishes STOP only after RUN: both mean run (STOP: then drain) */
        if (command == HRX_RS_CMD_RUN || command == HRX_RS_CMD_STOP) break;
        if (command == HRX_RS_CMD_ABORT) { hrx_rs_end(c, state, HRX_RS_S_ABORTED, HRX_RS_R_COMMAND); return 0; }
        if (HRX_NOW_NS() - start > limit) { hrx_rs_end(c, state, HRX_RS_S_TIMED_OUT, HRX_RS_R_START); return 0; }
        HRX_PAUSE(++idle);
    }
    s->c = c;
    s->base = base;
    s->slots = c[HRX_RS_W_SLOTS];
    s->idle_limit = c[HRX_RS_W_IDLE_TIMEOUT];
    s->spin = c[HRX_RS_W_SPIN];
    for (int r = 0; r < 4; ++r) {
        s->off[r] = c[HRX_RS_W_REQ_OFF + 2 * r];
        s->stride[r] = c[HRX_RS_W_REQ_OFF + 2 * r + 1];
        s->bytes[r] = c[HRX_RS_W_REQ_BYTES + r];
    }
    s->req_tail = c[HRX_RS_W_REQ_TAIL]; s->fwd_head = c[HRX_RS_W_FWD_HEAD];
    s->bwd_tail = c[HRX_RS_W_BWD_TAIL]; s->rsp_head = c[HRX_RS_W_RSP_HEAD];
    s->fwd_tail = c[HRX_RS_W_FWD_TAIL]; s->bwd_head = c[HRX_RS_W_BWD_HEAD];
    s->req_head_seen = s->req_tail; s->fwd_head_seen = s->fwd_tail; s->bwd_head_seen = s->bwd_tail;
    s->fwd_tail_seen = s->fwd_tail; s->bwd_tail_seen = s->bwd_tail; s->rsp_tail_seen = c[HRX_RS_W_RSP_TAIL];
    s->count = 0;
    s->idle = 0;
    s->polls = 0;
    s->last = HRX_NOW_NS();
    HRX_STORE_RELEASE(c + state, HRX_RS_S_RUNNING);
    return 1;
}

/* Is there an unread slot at `tail` (refreshing the peer's head only when the cached one says empty)? */
HRX_RS_FN int hrx_rs_readable(hrx_rs *s, hrx_i64 tail, hrx_i64 *seen, int word) {
    if (tail == *seen) *seen = HRX_LOAD_ACQUIRE(s->c + word);
    return tail < *seen;
}

/* Is there a free slot at `head` (refreshing the peer's tail only when the cached one says full)? */
HRX_RS_FN int hrx_rs_writable(hrx_rs *s, hrx_i64 head, hrx_i64 *seen, int word) {
    if (head - *seen >= s->slots) *seen = HRX_LOAD_ACQUIRE(s->c + word);
    return head - *seen < s->slots;
}

HRX_RS_FN hrx_rs_work hrx_rs_exit(hrx_rs *s, int state, hrx_i64 value, hrx_i64 reason) {
    hrx_rs_work w = {HRX_RS_EXIT, 0, 0};
    hrx_rs_end(s->c, state, value, reason);
    return w;
}

HRX_RS_FN hrx_rs_work hrx_rs_idle(hrx_rs *s, int state) {
    hrx_rs_work w = {HRX_RS_IDLE, 0, 0};
    hrx_i64 quiet = HRX_NOW_NS() - s->last;
    if (quiet > s->idle_limit) return hrx_rs_exit(s, state, HRX_RS_S_TIMED_OUT, HRX_RS_R_IDLE);
    if (quiet >= s->spin) HRX_PAUSE(++s->idle);   /* within the spin window: poll again at once */
    return w;
}

/* The command word and the peer's state, re-read on every 16th poll: ABORT and STOP
   are seen within 16 polls, and an idle poll on a GPU costs two bus reads, not four. */
HRX_RS_FN void hrx_rs_refresh(hrx_rs *s, int peer_state) {
    if ((s->polls++ & 15) == 0) {
        s->command = HRX_LOAD_ACQUIRE(s->c + HRX_RS_W_COMMAND);
        s->peer = HRX_LOAD_ACQUIRE(s->c + peer_state);
    }
}

/* GPU role, one decision: a returned payload to respond with first (latency), else a new request. */
HRX_RS_FN hrx_rs_work hrx_rs_gpu_poll(hrx_rs *s) {
    hrx_rs_work w = {HRX_RS_IDLE, 0, 0};
    hrx_rs_refresh(s, HRX_RS_W_NPU_STATE);
    hrx_i64 command = s->command, peer = s->peer;
    if (command == HRX_RS_CMD_ABORT) return hrx_rs_exit(s, HRX_RS_W_GPU_STATE, HRX_RS_S_ABORTED, HRX_RS_R_COMMAND);
    if (hrx_rs_readable(s, s->bwd_tail, &s->bwd_head_seen, HRX_RS_W_BWD_HEAD)
            && hrx_rs_writable(s, s->rsp_head, &s->rsp_tail_seen, HRX_RS_W_RSP_TAIL)) {
        w.op = HRX_RS_POST; w.in = hrx_rs_slot(s, 2, s->bwd_tail); w.out = hrx_rs_slot(s, 3, s->rsp_head);
        return w;
    }
    if (hrx_rs_readable(s, s->req_tail, &s->req_head_seen, HRX_RS_W_REQ_HEAD)
            && hrx_rs_writable(s, s->fwd_head, &s->fwd_tail_seen, HRX_RS_W_FWD_TAIL)) {
        w.op = HRX_RS_PRE; w.in = hrx_rs_slot(s, 0, s->req_tail); w.out = hrx_rs_slot(s, 1, s->fwd_head);
        return w;
    }
    if (peer >= HRX_RS_S_DONE && (peer != HRX_RS_S_DONE || s->fwd_head != s->bwd_tail))
        return hrx_rs_exit(s, HRX_RS_W_GPU_STATE, HRX_RS_S_ABORTED, HRX_RS_R_PEER);
    /* STOP was read before the request head (refreshed when caught up, after it): every request is in */
    if (command == HRX_RS_CMD_STOP && s->req_tail == s->req_head_seen && s->fwd_head == s->bwd_tail)
        return hrx_rs_exit(s, HRX_RS_W_GPU_STATE, HRX_RS_S_DONE, 0);
    return hrx_rs_idle(s, HRX_RS_W_GPU_STATE);
}

HRX_RS_FN void hrx_rs_gpu_commit(hrx_rs *s, hrx_rs_work w) {
    if (w.op == HRX_RS_POST) {
        HRX_STORE_RELEASE(s->c + HRX_RS_W_BWD_TAIL, ++s->bwd_tail);
        HRX_STORE_RELEASE(s->c + HRX_RS_W_RSP_HEAD, ++s->rsp_head);
        HRX_STORE_RELEASE(s->c + HRX_RS_W_GPU_COUNT, ++s->count);
    } else if (w.op == HRX_RS_PRE) {
        HRX_STORE_RELEASE(s->c + HRX_RS_W_REQ_TAIL, ++s->req_tail);
        HRX_STORE_RELEASE(s->c + HRX_RS_W_FWD_HEAD, ++s->fwd_head);
    }
    s->last = HRX_NOW_NS();
    s->idle = 0;
}

/* NPU role, one decision. */
HRX_RS_FN hrx_rs_work hrx_rs_npu_poll(hrx_rs *s) {
    hrx_rs_work w = {HRX_RS_IDLE, 0, 0};
    hrx_rs_refresh(s, HRX_RS_W_GPU_STATE);
    hrx_i64 peer = s->peer;
    if (s->command == HRX_RS_CMD_ABORT)
        return hrx_rs_exit(s, HRX_RS_W_NPU_STATE, HRX_RS_S_ABORTED, HRX_RS_R_COMMAND);
    if (peer >= HRX_RS_S_DONE && peer != HRX_RS_S_DONE)
        return hrx_rs_exit(s, HRX_RS_W_NPU_STATE, HRX_RS_S_ABORTED, HRX_RS_R_PEER);
    if (hrx_rs_readable(s, s->fwd_tail, &s->fwd_head_seen, HRX_RS_W_FWD_HEAD)
            && hrx_rs_writable(s, s->bwd_head, &s->bwd_tail_seen, HRX_RS_W_BWD_TAIL)) {
        w.op = HRX_RS_STEP; w.in = hrx_rs_slot(s, 1, s->fwd_tail); w.out = hrx_rs_slot(s, 2, s->bwd_head);
        return w;
    }
    /* the GPU reports DONE only once every forward returned: nothing is left */
    if (peer == HRX_RS_S_DONE) return hrx_rs_exit(s, HRX_RS_W_NPU_STATE, HRX_RS_S_DONE, 0);
    return hrx_rs_idle(s, HRX_RS_W_NPU_STATE);
}

HRX_RS_FN void hrx_rs_npu_commit(hrx_rs *s) {
    HRX_STORE_RELEASE(s->c + HRX_RS_W_FWD_TAIL, ++s->fwd_tail);
    HRX_STORE_RELEASE(s->c + HRX_RS_W_BWD_HEAD, ++s->bwd_head);
    HRX_STORE_RELEASE(s->c + HRX_RS_W_NPU_COUNT, ++s->count);
    s->last = HRX_NOW_NS();
    s->idle = 0;
}
"""


def protocol_c() -> str:
    """The constants and :data:`PROTOCOL_C`, ready to include after the primitives."""
    return c_constants() + PROTOCOL_C
