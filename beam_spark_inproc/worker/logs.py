"""Logging in Spark's Python workers: the driver's level, not Beam's import noise.

Beam logs "apitools not found, and bigquery client libraries are not available
..." when the GCP extra is absent, with the module-level ``logging.warning``: on
the root logger, in every process that imports Beam (which also runs
``logging.basicConfig`` there). The driver prints it once when the user's script
imports Beam, as with any runner; every Spark Python worker imported Beam again
and printed it once more. ``import_beam_quietly`` (run by the package's
``__init__`` before anything of ours imports Beam) drops that one record and
changes nothing else.

A worker process starts with logging unconfigured (root at WARNING), whatever
the driver set: a DoFn's ``logging.info`` was lost when the driver asked for
INFO. ``driver_level()`` is read when the driver builds a stage's task and
``apply`` sets it as the workers' root level: the lowest level the driver's root
logger prints (WARNING when it has no handler, as ``logging.lastResort`` prints
no lower). In debug mode the task runs in the driver and nothing changes.
"""

from __future__ import annotations

import logging
import os
import sys

_BEAM_IMPORT_NOISE = 'apitools not found, and bigquery client libraries'


class _DropBeamImportNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_BEAM_IMPORT_NOISE)


def import_beam_quietly() -> None:
    """Imports Beam without its import-time "apitools not found" warning."""
    if 'apache_beam' in sys.modules:
        return
    root = logging.getLogger()
    noise = _DropBeamImportNoise()
    root.addFilter(noise)
    try:
        import apache_beam  # noqa: F401
    finally:
        root.removeFilter(noise)


def driver_level() -> tuple[int, int]:
    """(pid, level): this process and the lowest level its root logger prints."""
    root = logging.getLogger()
    level = root.getEffectiveLevel()
    if not root.handlers:
        level = max(level, logging.lastResort.level if logging.lastResort else logging.WARNING)
    return os.getpid(), level


def apply(driver: tuple[int, int] | tuple[()]) -> None:
    """Sets the driver's level in this worker process (not in the driver)."""
    if not driver:
        return
    pid, level = driver
    root = logging.getLogger()
    if pid != os.getpid() and root.level != level:
        root.setLevel(level)
