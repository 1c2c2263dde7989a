"""The Python that Spark's workers run: can it run Beam?

Spark starts its Python workers with ``spark.pyspark.python`` (or the driver's
``PYSPARK_PYTHON``, else ``python3`` from PATH). A session the runner creates
sets it to the driver's interpreter; a user's own session keeps its settings,
and when they name a Python without Beam (PYSPARK_PYTHON unset and the driver
run from a virtualenv's python without activating it, or executors lacking the
packages) every task fails with ``ModuleNotFoundError: No module named
'apache_beam'`` before any transform runs.

When a run fails that way, ``explain_missing_modules`` asks the workers what
they run (a tiny Spark job whose function needs nothing but PySpark: it is
pickled by value and imports only the standard library) and returns an error
naming the interpreter, what it lacks and how to fix it. The answer is kept per
session: later runs on the same session fail at once, before any Spark job.
"""

from __future__ import annotations

import json
import re
import sys
import weakref
from typing import Optional

# What a worker needs to run a stage (their import names).
WORKER_MODULES = ('apache_beam', 'pyarrow', 'cloudpickle')

_MISSING = re.compile(
    r"No module named '(%s)[.']"
    % '|'.join(re.escape(m) for m in WORKER_MODULES + ('beam_spark_inproc',))
)
_KNOWN: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()


class WorkerEnvironmentError(RuntimeError):
    """Spark's Python workers run an interpreter that cannot run Beam."""


def known_problem(session) -> Optional[WorkerEnvironmentError]:
    """The error found earlier on this session, if any."""
    try:
        return _KNOWN.get(session)
    except TypeError:  # not weak-referenceable
        return None


def explain_missing_modules(error: BaseException, session) -> Optional[WorkerEnvironmentError]:
    """For a run that failed because workers miss a module Beam needs: the
    error to raise instead (also remembered for the session), else None."""
    named = _MISSING.search(str(error))
    if named is None:
        return None
    try:
        found = _probe(session)
    except Exception as probe_error:  # the workers cannot even run the probe
        found = {
            'executable': None,
            'version': None,
            'missing': [],
            'error': str(probe_error).strip().splitlines()[0][:300],
        }
    missing = found['missing'] or [named.group(1)]
    where = (
        f"Spark's Python workers run {found['executable']} (Python {found['version']})"
        if found['executable']
        else "Spark's Python workers' interpreter"
    )
    problem = WorkerEnvironmentError(
        f'{where}, which cannot import {", ".join(missing)}: this runner runs '
        "Beam's DoFns inside those workers, so they need the packages the "
        "driver has (apache-beam, pyarrow, and beam-spark-inproc's "
        "dependencies). Fix: run the workers with the driver's interpreter, "
        f'{sys.executable}: set PYSPARK_PYTHON to it before the SparkSession '
        'starts (spark-submit: --conf spark.pyspark.python=...; the option '
        'set on a SparkSession.builder in a running Python is not used), or '
        "install the packages into the workers' Python on every executor."
        + (f' (Asking the workers failed too: {found["error"]})' if found.get('error') else '')
    )
    try:
        _KNOWN[session] = problem
    except TypeError:
        pass
    return problem


def _probe(session) -> dict:
    from beam_spark_inproc.spark.engine import functions_for

    udf = functions_for(session).udf

    def probe():
        import importlib.util
        import json
        import sys

        return json.dumps(
            {
                'executable': sys.executable,
                'version': sys.version.split()[0],
                'missing': [m for m in modules if importlib.util.find_spec(m) is None],
            }
        )

    modules = list(WORKER_MODULES)
    [row] = session.range(1).select(udf(probe, useArrow=False)()).collect()
    return json.loads(row[0])
