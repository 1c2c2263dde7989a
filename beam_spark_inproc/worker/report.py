"""What a task tells the driver besides its elements: a control row per bundle,
and a failure record when a bundle fails.

A report is produced only by a bundle that completed, and travels as a row of
the task's output (tag ``CONTROL_TAG``), so a failed task attempt, whose output
Spark discards, reports nothing. Reports carry the warnings user code and
Beam raised in the bundle and, from worker processes, the log records it
emitted at the driver's level (re-issued and logged again on the driver, where
tests and users look for them), and the bundle's monitoring infos (user
metrics among them), which the driver consolidates per stage: committed
metrics are exact because only the attempts Spark kept are counted.

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
import logging
import os
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


# Log records a bundle sends back at most (a DoFn logging every element at
# the driver's level); past it, one record says how many were dropped.
MAX_LOG_RECORDS = 1000


class _Collect(logging.Handler):
    def __init__(self, records: list):
        super().__init__()
        self.records = records
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) >= MAX_LOG_RECORDS:
            self.dropped += 1
            return
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: as logging would show it
            message = f'{record.msg!r} % {record.args!r}'
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        self.records.append((record.name, record.levelno, message,
                             record.pathname, record.lineno, record.funcName,
                             record.exc_text or None))


@contextlib.contextmanager
def capture_logs(driver: tuple) -> Iterator[list]:
    """Records the log records the bundle's code emits in a worker process, to
    be logged again on the driver (``relog``), as Beam's Fn API logging
    service does for its SDK workers. Nothing in the driver's own process
    (``driver``: ``logs.driver_level()``; debug mode), where they are logged
    already. The worker's root level is the driver's (``logs.apply``)."""
    records: list = []
    if not driver or driver[0] == os.getpid():
        yield records
        return
    handler = _Collect(records)
    root = logging.getLogger()
    # The driver logs them: not printed here too (a local master's workers
    # share the driver's terminal).
    own, root.handlers = root.handlers, [handler]
    try:
        yield records
    finally:
        root.handlers = own
        if handler.dropped:
            records.append((__name__, logging.WARNING,
                            f'{handler.dropped} more log records of this bundle '
                            f'dropped (at most {MAX_LOG_RECORDS} are sent to the '
                            'driver)', __file__, 0, 'capture_logs', None))


def encode(stage: str, warnings: list, monitoring_infos: list,
           logs: list = ()) -> bytes:
    """The report's bytes, or b'' when there is nothing to report."""
    if not warnings and not monitoring_infos and not logs:
        return b''
    infos = [info.SerializeToString() for info in monitoring_infos]
    try:
        return pickle.dumps({'stage': stage, 'warnings': warnings,
                             'monitoring_infos': infos, 'logs': list(logs)})
    except Exception:  # a category class the driver could not import
        return pickle.dumps({'stage': stage, 'monitoring_infos': infos,
                             'logs': list(logs), 'warnings': [
                                 (RuntimeWarning, f'{c.__name__}: {m}', f, n)
                                 for c, m, f, n in warnings]})


def decode(data: bytes) -> dict:
    return pickle.loads(data)


def relog(reports: list[dict]) -> None:
    """Logs the workers' log records again on the driver (each one, by its
    logger), as the reports arrive: after each Spark job in batch, after each
    committed micro-batch in a stream (so a failed pipeline's earlier jobs and
    a running stream's micro-batches are not silent)."""
    for r in reports:
        for name, level, message, path, lineno, func, exc_text in r.get('logs', ()):
            record = logging.LogRecord(name, level, path, lineno, message, None,
                                       None, func)
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
