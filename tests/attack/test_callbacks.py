"""Done-callbacks that raise KeyboardInterrupt or SystemExit: the notifier thread
survives, the rest of the batch runs, and the interrupt reaches the user's thread."""

from __future__ import annotations

import threading
import time

import pytest

import hrx_core as hrx

from ..kernels import SLEEPY
from .conftest import join_all
from .tally import tried


def _pending(dev, ns: int = 100_000_000):
    s = dev.stream()
    flag = dev.allocate(8)
    return s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(ns,)), s, flag


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_interrupt_in_a_callback_keeps_the_notifier_and_reaches_the_registering_thread(exc):
    dev = hrx.open_device("host")
    done, s, _flag = _pending(dev)
    ran: list[int] = []
    seen: list[BaseException] = []

    def raiser(_):
        raise exc()

    def worker():
        done.add_done_callback(raiser)
        for i in range(5):
            done.add_done_callback(lambda _, i=i: ran.append(i))
        later, _, _ = _pending(dev, 200_000_000)
        try:
            later.wait(10)  # the interrupt surfaces at this thread's next HRX wait
        except BaseException as e:  # noqa: BLE001
            seen.append(e)

    t = threading.Thread(target=worker, daemon=True, name="registers-callbacks")
    tried("faults", "Completion.add_done_callback (interrupt)", 6)
    t.start()
    join_all([t], 20)
    assert sorted(ran) == [0, 1, 2, 3, 4]  # the rest of the batch ran
    assert len(seen) == 1 and isinstance(seen[0], exc)
    again, _, _ = _pending(dev, 1_000_000)
    got = threading.Event()
    again.add_done_callback(lambda _: got.set())
    assert got.wait(10)  # the notifier is alive


def test_keyboard_interrupt_in_a_callback_interrupts_the_main_thread():
    assert threading.current_thread() is threading.main_thread()
    dev = hrx.open_device("host")
    done, _, _ = _pending(dev, 20_000_000)

    def ctrl_c(_):
        raise KeyboardInterrupt

    tried("faults", "Completion.add_done_callback (Ctrl-C)")
    with pytest.raises(KeyboardInterrupt):
        done.add_done_callback(ctrl_c)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.01)  # the KeyboardInterrupt arrives here, as from Ctrl-C
    later, _, _ = _pending(dev, 1_000_000)
    later.wait(10)  # nothing pending is left behind for this thread


def test_callback_exceptions_are_logged_not_raised(caplog):
    dev = hrx.open_device("host")
    done, _, _ = _pending(dev, 5_000_000)
    ran = threading.Event()

    def bad(_):
        raise ValueError("callback bug")

    done.add_done_callback(bad)
    done.add_done_callback(lambda _: ran.set())
    tried("faults", "Completion.add_done_callback (exception)", 2)
    assert ran.wait(10)
    done.wait(10)
