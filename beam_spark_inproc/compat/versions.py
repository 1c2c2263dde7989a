"""The driver's and the Spark workers' versions must match: Python (major.minor),
Apache Beam and PySpark.

A stage's DoFns are pickled in the driver and unpickled by Beam in Spark's Python
workers, and the runner's worker code sits on Beam's and PySpark's internals of the
release the driver has (``compat.beam``, ``compat.pyspark``). A worker with another
release fails in ways that do not say so (an unpickling error, a missing attribute
deep in Beam), and Spark's own check of the Python version
(``PYTHON_VERSION_MISMATCH``) reaches the driver inside a Java stack trace.

So every task the Spark engine runs carries the driver's versions
(``StageTask.versions``, set by ``spark.engine.SparkEngine.map_stage``), and the
worker compares them with its own before its first bundle (``check``): a
difference fails the task with ``VersionMismatch``, one line naming both sides
and the worker's interpreter, which the driver raises as it is
(``from_worker_error``, also for Spark's own Python check). A stage run in the
driver carries none: there both sides are one process.
"""

from __future__ import annotations

import re
import sys
from typing import NamedTuple
from typing import Optional

from beam_spark_inproc.errors import VersionMismatch

MARKER = '[beam-spark-inproc version mismatch] '
_REPORTED = re.compile(re.escape(MARKER) + r'([^\n]*)')
# Spark's own check (pyspark/worker.py), e.g. "[PYTHON_VERSION_MISMATCH] Python
# in worker has different version: 3.10 than that in driver: 3.11, ...";
# PySpark 3.5 words it "Python in worker has different version (3, 10) than
# that in driver 3.11, ...".
_SPARK_PYTHON = re.compile(
    r'Python in worker has different version:?\s*\(?([\d., ]+?)\)?\s+than that in driver:?\s*'
    r'([\d.]+)'
)


class Versions(NamedTuple):
    python: str  # major.minor
    beam: str
    pyspark: str

    def describe(self) -> str:
        return f'Python {self.python}, apache-beam {self.beam}, pyspark {self.pyspark}'


def local() -> Versions:
    """This process's versions."""
    from beam_spark_inproc.compat import beam as beam_compat
    from beam_spark_inproc.compat import pyspark as pyspark_compat
    from beam_spark_inproc.compat import python as python_compat

    return Versions(
        python_compat.VERSION_STRING, beam_compat.VERSION_STRING, pyspark_compat.VERSION_STRING
    )


def mismatch(driver: Versions, worker: Versions, interpreter: str) -> Optional[str]:
    """The one line that says how the worker's versions differ from the
    driver's, or None when they are the same."""
    if tuple(driver) == tuple(worker):
        return None
    differ = ', '.join(
        name for name, a, b in zip(('Python', 'Beam', 'PySpark'), driver, worker) if a != b
    )
    return (
        f"The Spark workers' {differ} differ from the driver's: driver "
        f'{driver.describe()}; worker ({interpreter}) {worker.describe()}. Install the '
        "driver's versions on the executors, or set spark.pyspark.python to an "
        'interpreter that has them.'
    )


def check(driver: tuple) -> None:
    """In a worker: raises ``VersionMismatch`` when its versions are not
    ``driver``'s (a ``Versions`` as a plain tuple)."""
    problem = mismatch(Versions(*driver), local(), sys.executable)
    if problem is not None:
        raise VersionMismatch(MARKER + problem)


def from_worker_error(text: str) -> Optional[VersionMismatch]:
    """The mismatch a failed Spark task's error text reports (``check``'s, or
    Spark's own check of the Python version), None if it reports none."""
    found = _REPORTED.search(text)
    if found is not None:
        return VersionMismatch(found.group(1).strip())
    found = _SPARK_PYTHON.search(text)
    if found is None:
        return None
    worker = '.'.join(re.findall(r'\d+', found.group(1))[:2])
    driver = found.group(2).rstrip('.')
    return VersionMismatch(
        f"The Spark workers' Python {worker} differs from the driver's Python {driver} "
        "(Spark's own check). Install Python "
        f'{driver} with the same apache-beam and pyspark on the executors, or set '
        'spark.pyspark.python to such an interpreter.'
    )
