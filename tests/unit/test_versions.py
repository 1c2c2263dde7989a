"""compat.versions: the one line a worker with other versions than the
driver's fails with, and the driver's reading of it (and of Spark's own
Python check) from a failed task's text. On Spark: tests/integration/test_versions.py."""

from __future__ import annotations

import sys

import pytest

from beam_spark_inproc.compat import beam as beam_compat
from beam_spark_inproc.compat import pyspark as pyspark_compat
from beam_spark_inproc.compat import python as python_compat
from beam_spark_inproc.compat import versions
from beam_spark_inproc.errors import VersionMismatch


def test_local_versions_are_this_processs():
    assert versions.local() == (
        '%d.%d' % sys.version_info[:2],
        beam_compat.VERSION_STRING,
        pyspark_compat.VERSION_STRING,
    )
    assert versions.local().python == python_compat.VERSION_STRING


def test_same_versions_pass():
    versions.check(tuple(versions.local()))
    assert versions.mismatch(versions.local(), versions.local(), '/bin/python') is None


@pytest.mark.parametrize(
    'field, value, named',
    [('python', '2.7', 'Python'), ('beam', '2.0.0', 'Beam'), ('pyspark', '1.0.0', 'PySpark')],
)
def test_a_difference_is_one_line_naming_both_sides(field, value, named):
    driver = versions.local()._replace(**{field: value})
    with pytest.raises(VersionMismatch) as raised:
        versions.check(tuple(driver))
    message = str(raised.value)
    assert '\n' not in message
    assert message.startswith(versions.MARKER)
    assert f"The Spark workers' {named} differ from the driver's" in message
    assert f'driver {driver.describe()}; worker ({sys.executable}) ' in message
    assert versions.local().describe() in message


def test_the_driver_reads_the_workers_line_out_of_sparks_text():
    driver = versions.local()._replace(beam='2.0.0')
    try:
        versions.check(tuple(driver))
    except VersionMismatch as e:
        line = str(e)
    text = (
        'An exception was thrown from the Python worker. Please see the stack trace below.\n'
        'Traceback (most recent call last):\n  File "worker.py", line 1\n'
        f'beam_spark_inproc.errors.VersionMismatch: {line}\n\n'
        '\tat org.apache.spark.api.python.BasePythonRunner...\n'
    )
    found = versions.from_worker_error(text)
    assert isinstance(found, VersionMismatch)
    assert str(found) == line[len(versions.MARKER) :]


@pytest.mark.parametrize(
    'spark_text',
    [
        # PySpark 4.x
        '[PYTHON_VERSION_MISMATCH] Python in worker has different version: 3.10 than that in '
        'driver: 3.11, PySpark cannot run with different minor versions.',
        # PySpark 3.5
        '[PYTHON_VERSION_MISMATCH] Python in worker has different version (3, 10) than that in '
        'driver 3.11, PySpark cannot run with different minor versions.',
    ],
)
def test_sparks_own_python_check_becomes_one_line(spark_text):
    found = versions.from_worker_error('pyspark.errors.PySparkRuntimeError: ' + spark_text)
    assert isinstance(found, VersionMismatch)
    message = str(found)
    assert '\n' not in message
    assert "workers' Python 3.10 differs from the driver's Python 3.11" in message


def test_other_failures_are_no_mismatch():
    assert versions.from_worker_error('ZeroDivisionError: division by zero') is None
