"""The reports a task sends the driver, and the failure record a failed bundle
leaves: their encoding, written in the worker and read in the driver.

A report is a control row's data (tag ``rows.CONTROL_TAG``): a pickled dict,
``{'stage', 'warnings', 'monitoring_infos', 'logs'}`` for a bundle (written
by ``encode``), or a streaming task's state report (``state.STATE_REPORT``).
``warnings`` are ``(category, message, filename, lineno)`` tuples; ``logs``
are ``(logger, level, message, path, lineno, function, exc_text)`` tuples
(``worker.capture.capture_logs``); ``monitoring_infos`` are serialized
MonitoringInfos. The driver decodes each (``decode``), logs the records again
(``relog``) and re-issues the warnings once (``rewarn``).

A failed bundle's exception leaves the worker as text (Spark sends the Python
worker's error to the driver as a string), so it carries a ``Failure`` record
as a note: one line, between markers, that the driver decodes to render the
user's error (stage, the transform that failed, exception type, message and the
worker's own formatting of the traceback, whose frames show the lines that
raised, where PySpark's simplified traceback shows each frame's current line).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import pickle
import re
import traceback
import warnings
from typing import Optional
from typing import Sequence

FAILURE_START = '[beam failure record '
FAILURE_END = ']'
_FAILURE = re.compile(re.escape(FAILURE_START) + r'([A-Za-z0-9+/=]+)' + re.escape(FAILURE_END))
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
        name = (
            kind.__qualname__
            if kind.__module__ == 'builtins'
            else f'{kind.__module__}.{kind.__qualname__}'
        )
        return cls(
            stage=stage.name,
            labels=tuple(stage.labels),
            transform=running[-1] if running else '',
            exception_type=name,
            message=str(error),
            traceback=''.join(traceback.format_exception(error)),
        )

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


def encode(stage: str, warnings: list, monitoring_infos: list, logs: Sequence = ()) -> bytes:
    """The report's bytes, or b'' when there is nothing to report."""
    if not warnings and not monitoring_infos and not logs:
        return b''
    infos = [info.SerializeToString() for info in monitoring_infos]
    try:
        return pickle.dumps(
            {'stage': stage, 'warnings': warnings, 'monitoring_infos': infos, 'logs': list(logs)}
        )
    except Exception:  # a category class the driver could not import
        return pickle.dumps(
            {
                'stage': stage,
                'monitoring_infos': infos,
                'logs': list(logs),
                'warnings': [
                    (RuntimeWarning, f'{c.__name__}: {m}', f, n) for c, m, f, n in warnings
                ],
            }
        )


def decode(data: bytes) -> dict:
    return pickle.loads(data)


def relog(reports: list[dict]) -> None:
    """Logs the workers' log records again on the driver (each one, by its
    logger), as the reports arrive: after each Spark job in batch, after each
    committed micro-batch in a stream (so a failed pipeline's earlier jobs and
    a running stream's micro-batches are not silent)."""
    for r in reports:
        for name, level, message, path, lineno, func, exc_text in r.get('logs', ()):
            record = logging.LogRecord(name, level, path, lineno, message, None, None, func)
            record.exc_text = exc_text
            record.beam_stage = r.get('stage', '')
            logging.getLogger(name).handle(record)


def rewarn(reports: list[dict]) -> None:
    """Re-issues workers' warnings on the driver, deduplicated across tasks
    (once, when the pipeline ends)."""
    seen = set()
    for r in reports:
        for category, message, filename, lineno in r.get('warnings', ()):
            if (category, message) in seen:
                continue
            seen.add((category, message))
            warnings.warn_explicit(message, category, filename, lineno)
