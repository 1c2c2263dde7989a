"""Faults Spark survives leave results exact: nothing lost, nothing doubled.

On separate executors with ``spark.task.maxFailures=4``, a DoFn injects a fault
the first time it reaches a chosen element (a marker file, created atomically,
makes it once per test across processes): it raises, its Python worker dies
(``os._exit``), or it kills its own executor JVM while the stage runs after a
shuffle (whose outputs that executor held). Each pipeline's output must equal
the fault-free result (``equal_to`` compares as multisets: a duplicate fails),
and committed metrics must count each element exactly once.
"""

from __future__ import annotations

import os
import signal

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc import PipelineExecutionError

N, KEYS = 2000, 20
# Faults in Spark's tasks and their retries: every stage on Spark, none of
# these small stages in the driver (``execution.small``).
ON_SPARK = ['--spark_small_data_kb=0']


def _runner_pipeline(spark) -> beam.Pipeline:
    return beam.Pipeline(
        runner=InProcessSparkRunner(spark=spark), options=PipelineOptions(ON_SPARK)
    )


def _first_time(marker: str) -> bool:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _executor_jvm() -> int:
    """The pid of the java process this Python worker runs under."""
    pid = os.getppid()
    while pid > 1:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            cmdline = f.read().split(b'\0')
        if os.path.basename(cmdline[0]) == b'java':
            return pid
        with open(f'/proc/{pid}/stat') as f:
            pid = int(f.read().rsplit(')', 1)[1].split()[1])
    raise RuntimeError('no java ancestor')


class _Faulty(beam.DoFn):
    def __init__(self, fault: str, marker: str, at_key: int):
        self._fault, self._marker, self._at = fault, marker, at_key
        self.groups = Metrics.counter('faults', 'groups')
        self.values = Metrics.counter('faults', 'values')

    def process(self, kv):
        key, values = kv
        self.groups.inc()
        self.values.inc(len(values))
        if self._fault and key == self._at and _first_time(self._marker):
            if self._fault == 'raise':
                raise RuntimeError('injected: first attempt fails')
            if self._fault == 'exit':
                os._exit(3)
            if self._fault == 'kill_executor':
                os.kill(_executor_jvm(), signal.SIGKILL)
                os._exit(3)
            if self._fault == 'always':
                os.remove(self._marker)
                raise RuntimeError('injected: fails on every attempt')
        yield key, sum(values), len(values)


def _pipeline(p, fault: str, marker: str):
    out = (
        p
        | beam.Create(range(N))
        | beam.Reshuffle()
        | 'Key' >> beam.Map(lambda x: (x % KEYS, x))
        | beam.GroupByKey()
        | 'Faulty' >> beam.ParDo(_Faulty(fault, marker, at_key=7))
        | 'Spread' >> beam.FlatMap(lambda t: [t] * 3)
    )
    return out


_GOT: list = []


def _collect(element):
    """Top-level, so FnApiRunner (in this process) appends to this module's list."""
    _GOT.append(element)


def _expected():
    """The fault-free run, on Beam's FnApiRunner."""
    _GOT.clear()
    with beam.Pipeline(runner=fn_runner.FnApiRunner()) as p:
        _pipeline(p, '', '') | beam.Map(_collect)
    return list(_GOT)


@pytest.fixture(scope='module')
def expected():
    result = _expected()
    assert len(result) == KEYS * 3
    return result


def _counter(result, name):
    [counter] = result.metrics().query(MetricsFilter().with_name(name))['counters']
    return counter


@pytest.mark.parametrize('fault', ['raise', 'exit', 'kill_executor'])
def test_exact_output_and_metrics_after_fault(spark, tmp_path, expected, fault):
    marker = str(tmp_path / 'fault-injected')
    p = _runner_pipeline(spark)
    assert_that(_pipeline(p, fault, marker), equal_to(expected))
    result = p.run()
    result.wait_until_finish()
    assert os.path.exists(marker), 'the fault was never injected'
    groups, values = _counter(result, 'groups'), _counter(result, 'values')
    assert (groups.committed, values.committed) == (KEYS, N)
    assert groups.attempted >= groups.committed
    assert values.attempted >= values.committed


def test_user_error_after_retries_then_session_usable(spark, tmp_path, expected):
    marker = str(tmp_path / 'always')
    with pytest.raises(PipelineExecutionError) as info:
        with _runner_pipeline(spark) as p:
            _pipeline(p, 'always', marker)
    assert "'Faulty'" in str(info.value).splitlines()[0]
    assert 'injected: fails on every attempt' in str(info.value)
    with _runner_pipeline(spark) as p:
        assert_that(_pipeline(p, '', ''), equal_to(expected))
