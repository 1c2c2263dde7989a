"""The Python interpreter where the supported releases (3.10-3.13) differ.

The rest of the package imports the names below and never reads
``sys.version_info`` itself.

* ``EXCEPTION_NOTES`` (3.11): ``BaseException.add_note`` and notes that
  tracebacks print. The runner notes on a failing DoFn's exception which
  stage and transforms it ran in, and the failure record the driver renders
  the user's error from (``protocol.report.Failure``). ``add_note`` gives
  3.10 the same: the note goes into ``__notes__`` (where the driver reads a
  failure of a stage run in the driver), and, since 3.10's ``traceback``
  prints no notes, into the traceback text too: as the message of an
  ``ExceptionNotes`` at the root of the exception's chain, which
  ``traceback`` prints before the exception itself. The text of a failure in
  a Spark Python worker is the traceback PySpark formats there, so the
  failure record, and with it the transform's label, reaches the driver on
  every release.
"""

from __future__ import annotations

import sys

# (major, minor) of this interpreter.
VERSION: tuple[int, int] = (sys.version_info[0], sys.version_info[1])
VERSION_STRING = '%d.%d' % VERSION

EXCEPTION_NOTES: bool = hasattr(BaseException, 'add_note')


class ExceptionNotes(Exception):
    """The notes of an exception, as text a Python 3.10 traceback prints:
    set as the context at the root of the exception's chain by ``add_note``.
    Its message is the notes' current list (a note removed from
    ``__notes__`` leaves it too)."""

    def __init__(self, notes: list[str]):
        super().__init__()
        self.notes = notes

    def __str__(self) -> str:
        return '\n'.join(n for n in self.notes if isinstance(n, str))


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``; on Python 3.10 see the module doc."""
    if EXCEPTION_NOTES:
        error.add_note(note)  # type: ignore[attr-defined]  # 3.11+, checked above
        return
    notes = getattr(error, '__notes__', None)
    if not isinstance(notes, list):
        notes = []
        try:
            error.__notes__ = notes  # type: ignore[attr-defined]
        except AttributeError:  # an exception type with __slots__
            return
    notes.append(note)
    _print_notes(error, notes)


def _print_notes(error: BaseException, notes: list[str]) -> None:
    """An ``ExceptionNotes`` of ``notes`` at the root of ``error``'s chain
    (once), where a traceback prints it: the context of the last exception
    of the chain, or its cause where its context is suppressed."""
    seen: set[int] = set()
    last = error
    while id(last) not in seen:
        seen.add(id(last))
        if isinstance(last, ExceptionNotes) and last.notes is notes:
            return  # printed already
        following = last.__cause__ or (None if last.__suppress_context__ else last.__context__)
        if following is None:
            break
        last = following
    carrier = ExceptionNotes(notes)
    if last.__suppress_context__:
        last.__cause__ = carrier
    else:
        last.__context__ = carrier


def notes(error: BaseException) -> list[str]:
    """The notes on ``error`` (``__notes__``), [] when it has none."""
    found = getattr(error, '__notes__', None)
    return list(found) if isinstance(found, list) else []
