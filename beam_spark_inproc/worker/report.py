"""What a task tells the driver besides its elements: a control row per bundle.

A report is produced only by a bundle that completed, and travels as a row of
the task's output (tag ``CONTROL_TAG``), so a failed task attempt, whose output
Spark discards, reports nothing. Reports carry the warnings user code and Beam
raised in the bundle (re-issued on the driver, where tests and users look for
them) and the bundle's monitoring infos (user metrics among them), which the
driver consolidates per stage: committed metrics are exact because only the
attempts Spark kept are counted.
"""
from __future__ import annotations

import contextlib
import pickle
import warnings
from typing import Iterator

# A failed bundle's exception carries, as a note, the worker's own formatting of
# its traceback between these lines (PySpark's simplified traceback shows each
# frame's current line rather than the line that raised).
TRACEBACK_START = '[beam worker traceback]'
TRACEBACK_END = '[end of beam worker traceback]'


def drop_traceback_note(error: BaseException) -> None:
    """Removes that note, where the exception itself reaches the user (debug mode)."""
    notes = getattr(error, '__notes__', None)
    if notes:
        notes[:] = [n for n in notes if not n.startswith(TRACEBACK_START)]


@contextlib.contextmanager
def capture_warnings() -> Iterator[list]:
    """Records the bundle's warnings as (category, message, filename, lineno)."""
    caught: list = []
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter('always')
        try:
            yield caught
        finally:
            seen = set()
            for w in records:
                item = (w.category, str(w.message), w.filename, w.lineno)
                if item not in seen:
                    seen.add(item)
                    caught.append(item)


def encode(stage: str, warnings: list, monitoring_infos: list) -> bytes:
    """The report's bytes, or b'' when there is nothing to report."""
    if not warnings and not monitoring_infos:
        return b''
    infos = [info.SerializeToString() for info in monitoring_infos]
    try:
        return pickle.dumps(
            {'stage': stage, 'warnings': warnings, 'monitoring_infos': infos})
    except Exception:  # a category class the driver could not import
        return pickle.dumps({'stage': stage, 'monitoring_infos': infos,
                             'warnings': [
                                 (RuntimeWarning, f'{c.__name__}: {m}', f, n)
                                 for c, m, f, n in warnings]})


def decode(data: bytes) -> dict:
    return pickle.loads(data)


def reissue(reports: list[dict]) -> None:
    """Re-issues workers' warnings on the driver (deduplicated across tasks)."""
    seen = set()
    for r in reports:
        for category, message, filename, lineno in r.get('warnings', ()):
            if (category, message) in seen:
                continue
            seen.add((category, message))
            warnings.warn_explicit(message, category, filename, lineno)
