"""What a task tells the driver besides its elements: a control row per bundle,
and a failure record when a bundle fails.

A report is produced only by a bundle that completed, and travels as a row of
the task's output (tag ``CONTROL_TAG``), so a failed task attempt, whose output
Spark discards, reports nothing. Reports carry the warnings user code and Beam
raised in the bundle (re-issued on the driver, where tests and users look for
them) and the bundle's monitoring infos (user metrics among them), which the
driver consolidates per stage: committed metrics are exact because only the
attempts Spark kept are counted.

A failed bundle's exception leaves the worker as text (Spark sends the Python
worker's error to the driver as a string), so it carries a ``Failure`` record
as a note: one line, between markers, that the driver decodes to render the
user's error (stage, the transform that failed, exception type, message and the
worker's own formatting of the traceback, whose frames show the lines that
raised, where PySpark's simplified traceback shows each frame's current line).
"""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import pickle
import re
import traceback
import warnings
from typing import Iterator, Optional

FAILURE_START = '[beam failure record '
FAILURE_END = ']'
_FAILURE = re.compile(re.escape(FAILURE_START) + r'([A-Za-z0-9+/=]+)' +
                      re.escape(FAILURE_END))
# Beam's DoFnRunner appends this to the message of an exception it re-raises.
_RUNNING = re.compile(r"\[while running '(.*?)'\]")


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a bundle failed: what the driver tells the user."""
    stage: str
    labels: tuple[str, ...]  # the stage's Beam transforms
    transform: str  # the one that failed, from Beam's annotation ('' if none)
    exception_type: str
    message: str
    traceback: str

    @classmethod
    def of(cls, error: BaseException, stage) -> 'Failure':
        # The annotation is in the message Beam built (``args[0]``), which a
        # user's exception class need not show in ``str``.
        texts = [str(a) for a in getattr(error, 'args', ())[:1]] + [str(error)]
        running = [m for text in texts for m in _RUNNING.findall(text)]
        kind = type(error)
        name = (kind.__qualname__ if kind.__module__ == 'builtins'
                else f'{kind.__module__}.{kind.__qualname__}')
        return cls(stage=stage.name, labels=tuple(stage.labels),
                   transform=running[-1] if running else '',
                   exception_type=name,
                   message=str(error),
                   traceback=''.join(traceback.format_exception(error)))

    def note(self) -> str:
        data = json.dumps(dataclasses.asdict(self)).encode()
        return FAILURE_START + base64.b64encode(data).decode() + FAILURE_END

    @classmethod
    def find(cls, text: str) -> Optional['Failure']:
        """The record a worker's error text carries, if any (the last one)."""
        found = _FAILURE.findall(text)
        if not found:
            return None
        fields = json.loads(base64.b64decode(found[-1]))
        fields['labels'] = tuple(fields['labels'])
        return cls(**fields)

    def summary(self) -> str:
        """The exception's line, as Python prints it."""
        first = self.message.strip().splitlines()[:1]
        return f'{self.exception_type}: {first[0]}' if first else self.exception_type


def drop_failure_note(error: BaseException) -> None:
    """Removes the record, where the exception itself reaches the user (debug mode)."""
    notes = getattr(error, '__notes__', None)
    if notes:
        notes[:] = [n for n in notes if not n.startswith(FAILURE_START)]


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
