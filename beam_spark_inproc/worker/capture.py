"""What a bundle's report is made of, captured in the worker while it runs:
its warnings and, in a worker process, its log records at the driver's level.

A report is produced only by a bundle that completed, and travels as a row of
the task's output (tag ``CONTROL_TAG``), so a failed task attempt, whose output
Spark discards, reports nothing. The driver logs the records again and
re-issues the warnings (``protocol.report``, which also holds the report's
encoding), where tests and users look for them; the bundle's monitoring infos
(user metrics among them) go with them, which the driver consolidates per
stage: committed metrics are exact because only the attempts Spark kept are
counted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from typing import Iterator


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
        self.records.append(
            (
                record.name,
                record.levelno,
                message,
                record.pathname,
                record.lineno,
                record.funcName,
                record.exc_text or None,
            )
        )


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
            records.append(
                (
                    __name__,
                    logging.WARNING,
                    f'{handler.dropped} more log records of this bundle '
                    f'dropped (at most {MAX_LOG_RECORDS} are sent to the '
                    'driver)',
                    __file__,
                    0,
                    'capture_logs',
                    None,
                )
            )
