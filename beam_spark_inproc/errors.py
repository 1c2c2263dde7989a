"""Errors the runner raises to its callers."""

from __future__ import annotations

import dataclasses
import re

# pdb raises this when it has no terminal to read commands from.
_BDB_QUIT = re.compile(r'\bbdb\.BdbQuit\b|\bBdbQuit\b')


@dataclasses.dataclass(frozen=True)
class Problem:
    """One transform the runner cannot execute, and what to do about it."""

    label: str
    urn: str
    environment: str
    reason: str
    remedy: str

    def __str__(self) -> str:
        env = self.environment or '(none)'
        return (
            f'- {self.label!r} (URN {self.urn or "(none)"}, '
            f'environment {env}): {self.reason} {self.remedy}'
        )


class UnsupportedPipelineError(ValueError):
    """The pipeline needs something this runner cannot do; nothing was run."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        lines = [
            'InProcessSparkRunner cannot run this pipeline; nothing was '
            f'submitted to Spark. {len(self.problems)} transform(s) are '
            'unsupported:'
        ]
        lines += [str(problem) for problem in self.problems]
        super().__init__('\n'.join(lines))


class PipelineExecutionError(RuntimeError):
    """A Beam transform failed while the pipeline ran on Spark.

    ``stage`` and ``labels`` name the fused stage and its Beam transforms;
    ``transform`` the one that failed (when Beam named it); ``exception_type``
    the worker exception's class name; ``worker_traceback`` is the Python
    traceback from the Spark worker; ``failure`` the record it came from
    (``protocol.report.Failure``), if the worker sent one.
    """

    def __init__(
        self,
        message: str,
        stage: str | None = None,
        labels: tuple[str, ...] = (),
        worker_traceback: str = '',
        failure=None,
    ):
        super().__init__(message)
        self.stage = stage
        self.labels = labels
        self.worker_traceback = worker_traceback
        self.failure = failure
        self.transform = failure.transform if failure is not None else ''
        self.exception_type = failure.exception_type if failure is not None else ''


def remedy(worker_error: str) -> str:
    """A line telling the user what to do about a worker's failure (its
    summary and traceback), when the failure says; '' otherwise."""
    if _BDB_QUIT.search(worker_error):
        return (
            "breakpoint() or pdb in a DoFn has no terminal in Spark's "
            'Python workers, so the debugger quit at once: run with '
            '--inproc_debug (or InProcessSparkRunner(debug=True)) to stop '
            'at it in this process.'
        )
    return ''


class SparkMasterError(ValueError):
    """The Spark master for a session the runner creates is malformed or
    cannot be reached; no JVM was started."""


class UnsupportedBeamVersion(ImportError):
    """The installed Apache Beam is outside the range this package supports
    (``compat.beam.SUPPORTED``); raised when the runner is imported, before
    anything runs."""


class UnsupportedPySparkVersion(ImportError):
    """The installed PySpark is outside the range this package supports
    (``compat.pyspark.SUPPORTED``); raised where the runner first touches
    PySpark (a session made or used, a DataFrame converted), before any Spark
    job runs."""


class SparkConnectUnavailable(ImportError):
    """``--spark_remote`` was given and this installation cannot use Spark
    Connect (``compat.pyspark.connect_client_error`` says why)."""


class VersionMismatch(RuntimeError):
    """The Spark workers' Python (major.minor), Beam or PySpark differ from
    the driver's (``compat.versions``): one line naming both sides."""
