"""The evaluator's own SIGINT and SIGTERM, told apart from what a planner raises.

A planner call contains every exception the planner raises, ``KeyboardInterrupt`` and
``SystemExit`` included (:func:`passage_jax.run.execution.timing.call_planner` records it as the
request's ``runtime_error``). A real signal delivered to the evaluator must still stop
the run, so while a run executes (:func:`stop_on_signals`, entered by
:func:`passage_jax.run.loop.run_spec`) SIGINT and SIGTERM are caught here: the signal is
remembered and :class:`RunInterrupted` (a ``KeyboardInterrupt``) is raised where the
main thread is, planner code or not. A planner call re-raises it whenever a signal was
received during the call (:func:`raise_if_received`), even if the planner swallowed the
exception or turned it into another one; the run then stops as a ``KeyboardInterrupt``
always stopped it (every completed record durable, ``run --resume`` continues).

Outside a run (a planner called through :func:`passage_jax.run.execution.timing.execute` by
``conform`` or a library caller) :func:`planner_call` installs the SIGINT handler for
the call alone, when it runs in the main thread and SIGINT has Python's default
handler, so Ctrl-C still stops such a caller. A supervised worker opts out
(:func:`contain_all`): it holds no run, and every exception in it is the planner's.
"""
from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["RunInterrupted", "stop_on_signals", "planner_call", "received", "raise_if_received",
           "contain_all"]

_SIGNALS = ("SIGINT", "SIGTERM")
_STATE: dict = {"depth": 0, "received": None, "contain_all": False}


class RunInterrupted(KeyboardInterrupt):
    """The evaluator received SIGINT or SIGTERM (``signal_name``) while a run executed."""

    def __init__(self, signal_name: str):
        super().__init__(f"stopped by {signal_name}")
        self.signal_name = signal_name


def received() -> str | None:
    """The name of the signal the evaluator received while its handlers were installed
    (None: none)."""
    return _STATE["received"]


def raise_if_received() -> None:
    """Raise :class:`RunInterrupted` when the evaluator received a signal."""
    name = _STATE["received"]
    if name is not None:
        raise RunInterrupted(name)


def _handler(signum, _frame):
    name = signal.Signals(signum).name
    _STATE["received"] = _STATE["received"] or name
    raise RunInterrupted(name)


@contextlib.contextmanager
def stop_on_signals(names=_SIGNALS):
    """Catch the signals ``names`` (default SIGINT and SIGTERM) in the block: each raises
    :class:`RunInterrupted` in the main thread. Nested blocks reuse the outer one; outside
    the main thread nothing is installed, nor for a signal the process ignores (``nohup``,
    a background job). The previous handlers are restored after."""
    if _STATE["depth"]:
        _STATE["depth"] += 1
        try:
            yield
        finally:
            _STATE["depth"] -= 1
        return
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    try:
        for n in names:
            sig = getattr(signal, n)
            if signal.getsignal(sig) is not signal.SIG_IGN:  # a signal the launcher ignores stays so
                previous[sig] = signal.signal(sig, _handler)
        _STATE["depth"] = 1
        yield
    finally:
        _STATE["depth"] = 0
        for sig, old in previous.items():
            signal.signal(sig, old)
        _STATE["received"] = None


@contextlib.contextmanager
def planner_call():
    """The block of one planner call: inside a run nothing more (:func:`stop_on_signals`
    holds); otherwise SIGINT caught for the block when it runs in the main thread with
    Python's default SIGINT handler and the process has not opted out (:func:`contain_all`)."""
    if (_STATE["depth"] or _STATE["contain_all"]
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    with stop_on_signals(("SIGINT",)):
        yield


def contain_all() -> None:
    """This process holds no run (a supervised worker): a planner call never installs the
    SIGINT handler, and whatever a planner raises, ``KeyboardInterrupt`` included, is the
    planner's."""
    _STATE["contain_all"] = True
