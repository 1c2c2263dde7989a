"""A file the driver shipped to the workers (``spark.shipping``), read in a worker.

A large side input travels as one: the task carries only this small handle
(name and size), so a worker unpickling the task loads nothing of the driver's
Spark package.
"""
from __future__ import annotations

import os


class ShippedFile:
    """A file shipped with ``addArtifacts(file=True)``, read back in a worker."""

    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size

    def path(self) -> str:
        from pyspark import SparkFiles  # in the worker: Spark set its root
        candidates = [SparkFiles.get(self.name), os.path.join(os.getcwd(), self.name)]
        for candidate in candidates:
            if os.path.exists(candidate):
                return candidate
        raise FileNotFoundError(
            f'Shipped file {self.name!r} not found in the worker (looked in '
            f'{candidates}).')

    def read(self) -> bytes:
        with open(self.path(), 'rb') as f:
            return f.read()

    def __repr__(self) -> str:
        return f'ShippedFile({self.name!r}, {self.size} bytes)'
