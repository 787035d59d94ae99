"""Read-ahead: the items of an iterator made on a daemon thread, one item (a chunk of
tasks, in :mod:`passage_jax.data.stream`) ahead of its consumer, errors handed over in
order (:class:`ReadAhead`).

The thread holds only the shared state (:class:`_AheadState`), never the
:class:`ReadAhead`, so dropping the ReadAhead stops its thread; every reader still
alive is closed at interpreter exit (:func:`close_read_aheads`).
"""
from __future__ import annotations

import atexit
import collections
import threading
import weakref
from collections.abc import Callable, Iterator

from passage_jax.checks import is_int

__all__ = ["ReadAhead", "close_read_aheads"]


class _AheadState:
    """What the read-ahead thread shares with its :class:`ReadAhead` (the thread holds this,
    never the ReadAhead, so dropping the ReadAhead stops the thread)."""

    def __init__(self, ahead: int):
        self.ahead = ahead
        self.stop = threading.Event()
        self.cond = threading.Condition()
        self.ready: collections.deque = collections.deque()  # (kind, value): item, error, end
        self.taken = 0  # items handed to the caller
        self.started = 0  # items the thread began making
        self.finished = False  # the thread has left its loop

    def may_start(self) -> bool:
        return self.stop.is_set() or self.started < self.taken + self.ahead

    def post(self, kind: str, value) -> None:
        with self.cond:
            self.ready.append((kind, value))
            self.cond.notify_all()

    def halt(self) -> None:
        self.stop.set()
        with self.cond:
            self.ready.clear()
            self.cond.notify_all()


def _read_ahead(state: _AheadState, make_items) -> None:
    """The read-ahead thread: make items while allowed, post each (or the error, or the end)."""
    items = None
    try:
        items = iter(make_items(state.stop))
        while True:
            with state.cond:
                state.cond.wait_for(state.may_start)
                if state.stop.is_set():
                    return
                state.started += 1
            try:
                item = next(items)
            except StopIteration:
                state.post("end", None)
                return
            if state.stop.is_set():
                return
            state.post("item", item)
            del item
    except BaseException as e:  # handed to the caller, unchanged, when its turn comes
        state.post("error", e)
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            try:
                close()  # on this thread: the iterator's own pools shut down here
            except Exception:  # noqa: S110 - the items are being discarded
                pass
        with state.cond:
            state.finished = True
            state.cond.notify_all()


#: the read-ahead readers alive (closed at interpreter exit, see :func:`close_read_aheads`)
_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def close_read_aheads() -> None:
    """Close every read-ahead reader still alive (run at interpreter exit, before the
    modules go: a thread is then stopped in order, never left to the interpreter's end)."""
    for r in list(_LIVE):
        try:
            r.close()
        except Exception:  # noqa: S110 - exiting
            pass


class ReadAhead:
    """The items of an iterator made on a daemon thread, at most ``ahead`` items beyond
    the one last taken: the next chunk is read (decoded, validated, hashed) while the
    caller works on the current one.

    ``make_items(stop)`` is called on the thread and returns the iterator; ``stop`` (a
    :class:`threading.Event`) is set when the reader closes, and an item made of many
    parts should check it between them and end early. The thread begins item ``m`` only
    once ``m - ahead + 1`` items have been taken: beside the item the caller holds, at
    most ``ahead`` are made or being made (a bounded queue of ``ahead``). An exception
    raised while making an item is raised by :meth:`take` unchanged, in that item's
    turn (the items before it are handed out first); the reader then ends.

    :meth:`close` (also on leaving a ``with`` block, or when the ReadAhead is garbage
    collected) stops the thread, waits for it, and the iterator is closed on it. The
    thread is a daemon: it never holds up the interpreter's exit. ``ahead=0`` makes the
    items on the calling thread as they are taken (no thread; for comparisons and
    debugging).
    """

    #: seconds :meth:`close` waits for the thread to finish the part it is in
    JOIN_TIMEOUT = 60.0

    def __init__(self, make_items: Callable[[threading.Event], Iterator], ahead: int = 1,
                 name: str = "passage-read-ahead"):
        if not is_int(ahead) or ahead < 0:
            raise ValueError(f"ahead must be a non-negative integer, got {ahead!r}")
        ahead = int(ahead)
        self._state = _AheadState(ahead)
        self._closed = False
        self._items: Iterator | None = None
        self._thread: threading.Thread | None = None
        if ahead == 0:
            self._items = iter(make_items(self._state.stop))
            return
        self._thread = threading.Thread(target=_read_ahead, args=(self._state, make_items),
                                        name=name, daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, self._state.halt)
        self._finalizer.atexit = False
        _LIVE.add(self)

    @property
    def ahead(self) -> int:
        return self._state.ahead

    @property
    def taken(self) -> int:
        """Items handed out so far (with a thread)."""
        return self._state.taken

    def take(self):
        """The next item; raises the exception that making it raised, or StopIteration
        at the end."""
        if self._closed:
            raise ValueError("the read-ahead is closed")
        if self._thread is None:
            return next(self._items)
        st = self._state
        with st.cond:
            st.cond.wait_for(lambda: st.ready or st.finished)
            if not st.ready:
                raise StopIteration
            kind, value = st.ready[0]
            if kind == "item":
                st.ready.popleft()
                st.taken += 1
                st.cond.notify_all()
                return value
            if kind == "error":  # raised once; the reader has ended
                st.ready[0] = ("end", None)
        if kind == "error":
            raise value
        raise StopIteration

    def __iter__(self):
        return self

    def __next__(self):
        return self.take()

    def close(self) -> bool:
        """Stop the thread and wait for it (at most :attr:`JOIN_TIMEOUT` seconds); what it
        read ahead is dropped. True when no thread is left running. Idempotent."""
        if self._closed:
            return not self.running
        self._closed = True
        if self._thread is None:
            items, self._items = self._items, None
            close = getattr(items, "close", None)
            if close is not None:
                close()
            return True
        self._finalizer.detach()
        self._state.halt()
        if self._thread is not threading.current_thread():
            self._thread.join(self.JOIN_TIMEOUT)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
