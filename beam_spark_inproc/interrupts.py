"""Ctrl-C while the runner waits for a run: the runner's, then the program's again.

While a run is waited for on the main thread (a batch run's ``run()``, a
stream's or a background run's ``wait_until_finish``), SIGINT belongs to the
runner (``owned``). Without this, the handler PySpark's Spark context
installs on the main thread would answer it: ``cancelAllJobs()``, then a
``KeyboardInterrupt`` raised wherever the main thread is, often inside a Py4J
call. That cancels the micro-batch a stream was finishing (so its commit
never comes) and ends in a long chained traceback.

The runner's handler never raises and never calls into the JVM itself:

* it counts the presses and calls the run's ``first`` or ``second`` callback
  (a stream: stop after the micro-batch under way, then cancel its Spark
  jobs; a batch run: cancel its Spark jobs, then stop waiting for their
  tasks to end), each of which prints one line saying what it does
  (``say``) and starts any Spark call in a thread of its own
  (``in_thread``): a Py4J call made from a signal handler would run on the
  main thread's own connection, which may be in the middle of another call;
* the waiting code sees the run stop, leaves the block (the handler that was
  there before is back: the program's own, or PySpark's), and raises a
  ``KeyboardInterrupt`` saying where the run stopped (``interrupted``),
  which a program may catch as usual; uncaught, it shows as that one line
  (``sys.excepthook``) and Python exits as killed by SIGINT (status 130 in a
  shell), as for any uncaught ``KeyboardInterrupt``.

A Spark context created on the main thread while the runner owns SIGINT (a
run's session made when a stage first needs Spark) installs PySpark's
handler over the runner's: ``reclaim`` takes SIGINT back, and PySpark's
handler is the one restored afterwards.

Only the main thread can set signal handlers: a run waited for on another
thread leaves SIGINT as it is.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any
from typing import Callable
from typing import Optional

# Set on the KeyboardInterrupt ``interrupted`` makes. A plain KeyboardInterrupt,
# not a subclass: Python exits as killed by SIGINT only for that exact type.
_MARK = '_beam_spark_inproc_stopped'


def is_interrupted(error: BaseException | None) -> bool:
    """Whether ``error`` is the KeyboardInterrupt of a run Ctrl-C stopped."""
    return isinstance(error, KeyboardInterrupt) and getattr(error, _MARK, False)


_previous_hook: list = []  # the ``sys.excepthook`` that ``_excepthook`` wraps


def _excepthook(kind, value, tb) -> None:
    if is_interrupted(value):
        say(f'KeyboardInterrupt: {value}')
        return
    (_previous_hook[0] if _previous_hook else sys.__excepthook__)(kind, value, tb)


def _show_briefly() -> None:
    """Installs the hook that shows an uncaught ``interrupted`` KeyboardInterrupt in one line
    (once; any other exception goes to the hook that was there)."""
    if sys.excepthook is _excepthook:
        return
    _previous_hook[:] = [sys.excepthook]
    sys.excepthook = _excepthook


def interrupted(message: str) -> KeyboardInterrupt:
    """The KeyboardInterrupt to raise once an interrupted run has stopped:
    shown as one line when uncaught (``message``)."""
    _show_briefly()
    error = KeyboardInterrupt(message)
    setattr(error, _MARK, True)
    return error


def say(line: str) -> None:
    """One line on stderr, from a signal handler too (a write that would
    re-enter a buffered stderr goes straight to the file descriptor)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (RuntimeError, ValueError, OSError):  # reentrant call, closed stream
        import os

        try:
            os.write(2, (line + '\n').encode('utf-8', 'replace'))
        except OSError:
            pass


def in_thread(step: Callable[[], None], name: str) -> threading.Thread:
    """Runs ``step`` (a Spark call) in a thread of its own, not a daemon:
    the interpreter waits for it before it finalizes."""
    thread = threading.Thread(target=_quietly(step), name=name)
    thread.start()
    return thread


def _quietly(step: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            step()
        except Exception:
            import logging

            logging.getLogger(__name__).debug('Could not cancel the Spark jobs', exc_info=True)

    return run


_current: list[Owned] = []  # the ownership in force (main thread only)


class Owned:
    """SIGINT owned by the runner while in the block (see the module doc).

    ``first``, ``second``: called from the handler on the first and second
    Ctrl-C (later ones are ignored); they must return at once. ``presses``:
    how many came; ``pressed``: set at the first."""

    def __init__(self, first: Callable[[], None], second: Callable[[], None]):
        self._first, self._second = first, second
        self.presses = 0
        self.pressed = threading.Event()
        self.second_pressed = threading.Event()
        self._previous: Any = None  # the handler to put back
        self._active = False

    def _handler(self, signum, frame) -> None:
        self.presses += 1
        if self.presses == 1:
            self.pressed.set()
            self._first()
        elif self.presses == 2:
            self.second_pressed.set()
            self._second()

    def __enter__(self) -> Owned:
        if threading.current_thread() is not threading.main_thread():
            return self
        try:
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handler)
        except (ValueError, OSError):  # no signals here (embedded interpreters)
            return self
        self._active = True
        _current.append(self)
        return self

    def reclaim(self) -> None:
        """SIGINT back to the runner if another handler replaced its own
        (that one is restored at the end)."""
        if not self._active:
            return
        handler = signal.getsignal(signal.SIGINT)
        if handler != self._handler:
            self._previous = handler
            signal.signal(signal.SIGINT, self._handler)

    def __exit__(self, *exc) -> None:
        if not self._active:
            return
        self._active = False
        _current.remove(self)
        if signal.getsignal(signal.SIGINT) == self._handler:
            signal.signal(
                signal.SIGINT,
                self._previous if self._previous is not None else signal.default_int_handler,
            )


def owned(first: Callable[[], None], second: Callable[[], None]) -> Owned:
    return Owned(first, second)


def reclaim() -> None:
    """After a Spark context was made on the main thread: SIGINT back to the
    run that owns it, if one does (``Owned.reclaim``)."""
    if _current and threading.current_thread() is threading.main_thread():
        _current[-1].reclaim()


def current() -> Optional[Owned]:
    return _current[-1] if _current else None
