"""SIGINT and SIGTERM as one exception, so every ``finally`` on the way out runs.

The one mechanism the harness uses to stop when told to: the CLI around a whole command, the
chaos job around its runs (first stopping every attempt through ``on_signal``), a supervisor
around its attempts when nobody else handles SIGTERM.  The first signal raises
:class:`Interrupted` in the main thread; repeats are ignored until the block ends, so a second
Ctrl-C cannot interrupt the cleanup the first one started.

Bottom layer: standard library only.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["Interrupted", "last_signal", "signals_raise", "terminate_as_exception"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The harness was told to stop (SIGINT or SIGTERM); ``code`` is the exit status (130/143).

    A BaseException (like KeyboardInterrupt, which it is not): no ``except Exception`` swallows it.
    ``reported`` is set by a front end that already said so; ``result`` may hold what was done.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.code = 128 + signum
        self.reported = False
        self.result: Any = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


_received: list[int] = []


def last_signal() -> int | None:
    """The last stop signal a :func:`signals_raise` block received (None: none since it began)."""
    return _received[-1] if _received else None


def _is_default(handler: Any) -> bool:
    return handler in (signal.SIG_DFL, signal.default_int_handler, None)


@contextlib.contextmanager
def signals_raise(
    on_signal: Callable[[], None] | None = None,
    *,
    signals: Sequence[signal.Signals] = STOP_SIGNALS,
    only_default: bool = False,
) -> Iterator[bool]:
    """While inside, ``signals`` run ``on_signal`` then raise :class:`Interrupted` in the main thread.

    Elsewhere a no-op (signals can only be handled there).  ``only_default``: leave a signal alone
    when someone installed their own handler.  The previous handlers come back on exit.  Yields
    whether it installed any handler (an outer block's Interrupted is not this block's).
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {sig: signal.getsignal(sig) for sig in signals}
    ours = [sig for sig in signals if not only_default or _is_default(previous[sig])]

    def _raise(signum: int, frame: object) -> None:
        for sig in ours:  # repeats must not interrupt the unwinding (kills, reaping, reports)
            signal.signal(sig, signal.SIG_IGN)
        _received.append(signum)
        if on_signal is not None:
            on_signal()
        raise Interrupted(signum)

    for sig in ours:
        signal.signal(sig, _raise)
    if ours:  # a nested block that installs nothing keeps the outer block's record
        _received.clear()
    try:
        yield bool(ours)
    finally:
        for sig in ours:
            handler = previous[sig]
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def terminate_as_exception() -> Iterator[None]:
    """While a supervisor's attempts run, turn a default-handled SIGTERM into SystemExit(143)
    raised here, so every ``finally`` (killing the attempts' trees) runs.  Only from the main
    thread and only when nobody installed their own handler (the CLI and the chaos job do)."""
    with signals_raise(signals=(signal.SIGTERM,), only_default=True) as ours:
        try:
            yield
        except Interrupted as stop:
            if not ours:  # the CLI's or the chaos job's: theirs to handle
                raise
            raise SystemExit(stop.code) from None
