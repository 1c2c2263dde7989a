"""The driver's working directory, in a worker: relative local paths resolve
as they do for the driver.

A Spark Python worker runs in its own working directory (the executor's, with
the files Spark ships), not the driver's: ``ReadFromText('./name.txt')`` read
there matches nothing and raises nothing, and a relative write lands there. A
task carries the driver's working directory (``StageTask.working_directory``);
while it runs, the worker process works in that directory when it exists on the
worker's machine (local mode, or a cluster whose nodes share the file system).
Spark runs one task at a time in a Python worker process, and the task puts the
worker's own directory back when it ends. Where the driver's directory does not
exist (executors on other machines), a relative local path cannot mean the
driver's file: it resolves in the worker's directory, as on Beam's other
distributed runners.

Files Spark ships to the worker (``shipped``) are found in the worker's own
directory: ``worker_directory()``. A worker whose import path has entries
relative to its directory (an executor of a cluster, where Spark adds shipped
code as ``./name.zip``) stays in its own directory: relative local paths then
resolve there.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

_WORKER_DIRECTORY: str | None = None


def worker_directory() -> str:
    """The directory Spark started this worker in (also while a task works in
    the driver's)."""
    return _WORKER_DIRECTORY or os.getcwd()


def _imports_from_here() -> bool:
    """Whether this process imports code by paths relative to its working
    directory (an executor's ``./`` entries for files Spark ships, such as the
    runner's own code zip): working elsewhere would break those imports, so
    the worker stays where it is."""
    return any(entry and not os.path.isabs(entry) for entry in sys.path)


@contextlib.contextmanager
def driver_directory(path: str) -> Iterator[None]:
    """Works in ``path`` (the driver's working directory) while the block runs,
    when it exists here and is not already the working directory."""
    global _WORKER_DIRECTORY
    here = os.getcwd()
    if (
        not path
        or path == here
        or _WORKER_DIRECTORY is not None
        or not os.path.isdir(path)
        or _imports_from_here()
    ):
        yield
        return
    os.chdir(path)
    _WORKER_DIRECTORY = here
    try:
        yield
    finally:
        _WORKER_DIRECTORY = None
        os.chdir(here)
