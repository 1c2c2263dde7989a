"""A file the driver shipped to the workers (``spark.shipping``), read in a worker.

A large side input travels as one: the task carries only this small handle
(name and size), so a worker unpickling the task loads nothing of the driver's
Spark package.

A stream's large side inputs are not added to the Spark session (classic Spark
lists an added file, and every executor keeps its copy, until the process exits:
a side input that changes every micro-batch would fill the disks) but written
under the stream's checkpoint location, which the workers read anyway (their
state files live there), and removed once no micro-batch can read them: the
handle then carries that ``location``.
"""

from __future__ import annotations

import os

from beam_spark_inproc.worker import directory


class ShippedFile:
    """A file shipped with ``addArtifacts(file=True)``, read back in a worker;
    or, with ``location``, a file the workers read where the driver wrote it."""

    def __init__(self, name: str, size: int, location: str | None = None):
        self.name = name
        self.size = size
        self.location = location

    def path(self) -> str:
        if self.location is not None:
            return self.location
        from pyspark import SparkFiles  # in the worker: Spark set its root

        candidates = [
            SparkFiles.get(self.name),
            os.path.join(directory.worker_directory(), self.name),
        ]
        for candidate in candidates:
            if os.path.exists(candidate):
                return candidate
        raise FileNotFoundError(
            f'Shipped file {self.name!r} not found in the worker (looked in {candidates}).'
        )

    def read(self) -> bytes:
        with open(self.path(), 'rb') as f:
            return f.read()

    def __repr__(self) -> str:
        where = '' if self.location is None else f' at {self.location!r}'
        return f'ShippedFile({self.name!r}, {self.size} bytes{where})'
