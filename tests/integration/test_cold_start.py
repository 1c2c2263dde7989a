"""A run in a new process starts Spark's JVM only when a stage needs Spark
(``spark.session.LazySession``): each case runs in a process of its own, as
the test run's shared session would otherwise be the active one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import json, sys, tempfile, threading
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from beam_spark_inproc import InProcessSparkRunner

    times = {'read': 500, 'bigread': 100_000}.get(sys.argv[1])
    with beam.Pipeline(runner=InProcessSparkRunner(),
                       argv=['--spark_master=local[2]']) as p:
        if times:
            path = tempfile.mkdtemp() + '/lines.txt'
            with open(path, 'w') as f:
                f.write('a b\\nb c\\n' * times)
            words = p | beam.io.ReadFromText(path) | beam.FlatMap(str.split)
            expected = [('a', times), ('b', 2 * times), ('c', times)]
        else:
            words = p | beam.Create(['a b', 'b c']) | beam.FlatMap(str.split)
            expected = [('a', 1), ('b', 2), ('c', 1)]
        assert_that(words | beam.combiners.Count.PerElement(), equal_to(expected))
    starting = any(t.name == 'beam-spark-session-start'
                   for t in threading.enumerate())
    print(json.dumps({'session': SparkSession.getActiveSession() is not None,
                      'gateway': SparkContext._gateway is not None or starting}))
""")


def _run(case: str) -> dict:
    """The script's findings, run with the defaults a user gets."""
    from beam_spark_inproc.options import SMALL_DATA_ENV

    env = {k: v for k, v in os.environ.items() if k != SMALL_DATA_ENV}
    out = subprocess.run(
        [sys.executable, '-c', _SCRIPT, case],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_pipeline_that_stays_in_the_driver_starts_no_jvm():
    assert _run('create') == {'session': False, 'gateway': False}


def test_a_tiny_read_stays_in_the_driver():
    assert _run('read') == {'session': False, 'gateway': False}


def test_a_read_past_the_limits_starts_the_session_meanwhile():
    """Its stages go on in the driver while the JVM starts (and hand the rest
    to Spark if it is ready first): the session is made or under way at the
    end, the results are right either way, and the process ends cleanly."""
    assert _run('bigread')['gateway'] is True
