"""Why a Beam test does not run on this runner: one table per cause.

Keys are ``<module>__<Class>::<test>`` (or a prefix ``<module>__<Class>`` for
the whole class) as the wrapper modules name them. docs/conformance.md lists
them with the counts.
"""
from __future__ import annotations

STREAMING = 'TestStream / streaming pipeline: streaming is issue #13'

# (b) Cannot hold on any multi-process runner.
MULTI_PROCESS: dict[str, str] = {}

# Runner gaps being fixed in issue #18 (the `batch` work): error and reason.
RUNNER_GAPS: dict[str, str] = {}

# Streaming tests (TestStream, unbounded sources): issue #13.
STREAMING_TESTS: set[str] = set()

# Only on Spark (the debug engine runs these).
SPARK_ONLY: dict[str, str] = {}


def reason(test_id: str, engine: str) -> str:
    tables = [(STREAMING_TESTS, STREAMING), (MULTI_PROCESS, None),
              (RUNNER_GAPS, None)]
    if engine == 'spark':
        tables.append((SPARK_ONLY, None))
    for table, fixed in tables:
        for key in table:
            if test_id == key or test_id.startswith(key + '::'):
                return fixed or table[key]
    return ''
