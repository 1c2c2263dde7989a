"""Metrics pushed while a pipeline runs, to real receivers on 127.0.0.1.

Runs on the debug engine (the pusher, the sinks and the executor's per-job
hook are the same as on Spark; ``test_metrics_retry.py`` covers Spark and
failed attempts). The pipeline has a side input, so it runs as two jobs at
least: the side input's collection, then the leaves.
"""

from __future__ import annotations

import logging
import threading
import time

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.metrics.snapshot import KIND_NAMES
from beam_spark_inproc.metrics.snapshot import plain

from .receivers import Blackhole
from .receivers import GraphiteReceiver
from .receivers import HttpReceiver
from .receivers import PushgatewayStandIn
from .receivers import dead_url

N = 20
JOB = 'metrics-test'
# The debug engine runs DoFns in this process: a gated Measure waits for it.
GATE = threading.Event()


class Measure(beam.DoFn):
    def __init__(self, gated: bool = False):
        self._gated = gated

    def process(self, x, side):
        if self._gated:
            assert GATE.wait(120), 'the test never opened the gate'
        Metrics.counter('push', 'elements').inc()
        Metrics.distribution('push', 'values').update(x)
        Metrics.gauge('push', 'gauge').set(7)
        Metrics.string_set('push', 'parity').add('even' if x % 2 == 0 else 'odd')
        yield x + side[0]


class CountSide(beam.DoFn):
    def __init__(self, gated: bool = False):
        self._gated = gated

    def process(self, x):
        if self._gated:
            assert GATE.wait(120), 'the test never opened the gate'
        Metrics.counter('push', 'side elements').inc()
        yield x


def build(p, gated=False, gated_side=False):
    side = p | 'Side' >> beam.Create([100]) | 'Count side' >> beam.ParDo(CountSide(gated_side))
    out = (
        p
        | 'Main' >> beam.Create(range(N))
        | 'Measure values' >> beam.ParDo(Measure(gated), beam.pvalue.AsList(side))
    )
    assert_that(out, equal_to([x + 100 for x in range(N)]))


def run(sinks, *flags, gated=False, gated_side=False, wait=True):
    options = PipelineOptions(
        [f'--metrics_sink={url}' for url in sinks] + [f'--job_name={JOB}', *flags]
    )
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)
    build(p, gated, gated_side)
    result = p.run()
    if wait:
        assert result.wait_until_finish() == PipelineState.DONE
    return result


def jobs_run(caplog) -> int:
    return sum(
        1
        for r in caplog.records
        if r.name == 'beam_spark_inproc.progress' and ': done in ' in r.getMessage()
    )


def as_documents(result) -> list[dict]:
    """result.metrics() in the pushed JSON form, sorted as pushed."""
    records = []
    for kind, results in result.metrics().query().items():
        for r in results:
            name = KIND_NAMES[kind]
            records.append(
                {
                    'namespace': r.key.metric.namespace,
                    'name': r.key.metric.name,
                    'step': r.key.step,
                    'kind': name,
                    'attempted': plain(name, r.attempted),
                    'committed': plain(name, r.committed),
                }
            )
    return sorted(records, key=lambda m: (m['step'], m['namespace'], m['name'], m['kind']))


def test_pushed_values_match_result_metrics(caplog):
    caplog.set_level(logging.INFO, logger='beam_spark_inproc.progress')
    with HttpReceiver() as http, GraphiteReceiver() as graphite, PushgatewayStandIn() as gateway:
        result = run([http.url + '/beam', graphite.url, gateway.url], '--metrics_push_period=0')
        jobs = jobs_run(caplog)
        assert jobs >= 2
        expected = as_documents(result)
        assert {m['name'] for m in expected} == {
            'elements',
            'values',
            'gauge',
            'parity',
            'side elements',
        }

        # HTTP: one POST per push, the last one final and equal to result.metrics().
        docs = http.documents
        final = docs[-1]
        print('pushed JSON:', final)
        assert final['state'] == 'DONE' and final['job_name'] == JOB
        assert final['sequence'] == jobs + 1  # a push after each job, and the final one
        assert final['metrics'] == expected
        assert [d['sequence'] for d in docs] == sorted({d['sequence'] for d in docs})
        assert all(d['state'] == 'RUNNING' for d in docs[:-1])
        # A push after the first job (the side input) shows what it committed only.
        first = [d for d in docs if d['sequence'] == 1]
        for doc in first:
            assert [m['name'] for m in doc['metrics']] == ['side elements']
        assert {d['pipeline_id'] for d in docs} == {final['pipeline_id']}

        # Graphite: the last push's lines carry the same values.
        lines = graphite.pushes[-1]
        print('graphite lines:', *lines, sep='\n')
        values = {}
        for line in lines:
            path, value, when = line.split(' ')
            assert abs(int(when) - final['timestamp']) <= 1
            values[path] = float(value)
        base = f'beam.{JOB}'
        assert values[f'{base}.counter.Measure_values.push.elements.committed'] == N
        assert values[f'{base}.counter.Measure_values.push.elements.attempted'] == N
        assert values[f'{base}.counter.Count_side.push.side_elements.committed'] == 1
        assert values[f'{base}.distribution.Measure_values.push.values.committed.sum'] == sum(
            range(N)
        )
        assert values[f'{base}.distribution.Measure_values.push.values.committed.max'] == N - 1
        assert values[f'{base}.gauge.Measure_values.push.gauge.committed'] == 7
        assert values[f'{base}.string_set.Measure_values.push.parity.committed.size'] == 2
        assert all(' ' not in path for path in values)

        # Pushgateway: grouped by job and pipeline, the same values.
        path, samples = gateway.received[-1]
        assert path == f'/metrics/job/beam/pipeline/{final["pipeline_id"]}'
        found = {
            (name, labels.get('name'), labels.get('step')): value for name, labels, value in samples
        }
        assert found['beam_counter_committed', 'elements', 'Measure values'] == N
        assert found['beam_counter_attempted', 'side elements', 'Count side'] == 1
        assert found['beam_distribution_count_committed', 'values', 'Measure values'] == N
        assert ('beam_pipeline_state', None, None) in found
        assert ['DONE'] == [
            labels['state'] for name, labels, _ in samples if name == 'beam_pipeline_state'
        ]


def test_period_limits_pushes(caplog):
    caplog.set_level(logging.INFO, logger='beam_spark_inproc.progress')
    with HttpReceiver() as http:
        run([http.url], '--metrics_push_period=3600')
        assert jobs_run(caplog) >= 2
        docs = http.documents
    # One push after the first job, none for the later ones within the hour,
    # and the final one (sequence numbers count every push made).
    assert docs[-1]['state'] == 'DONE' and docs[-1]['sequence'] == 2
    assert [d['state'] for d in docs[:-1]] in ([], ['RUNNING'])


def test_dead_sinks_do_not_fail_the_pipeline(caplog):
    caplog.set_level(logging.INFO, logger='beam_spark_inproc.progress')
    with Blackhole() as hole, HttpReceiver() as http:
        dead = [dead_url('http'), dead_url('graphite'), f'http://127.0.0.1:{hole.port}/hangs']
        run(dead + [http.url], '--metrics_push_period=0', '--metrics_push_timeout=0.5')
        docs = http.documents
    assert jobs_run(caplog) >= 2
    # The working sink got the final values, after the dead ones timed out.
    assert docs[-1]['state'] == 'DONE'
    assert {m['name']: m['committed'] for m in docs[-1]['metrics']}['elements'] == N
    warnings = [
        r
        for r in caplog.records
        if r.name == 'beam_spark_inproc.metrics' and r.levelno == logging.WARNING
    ]
    # One warning per failing sink, however many pushes failed.
    assert sorted(w.args[0] for w in warnings) == sorted(dead), [w.getMessage() for w in warnings]


def test_failed_pipeline_pushes_failed_state():
    class Boom(beam.DoFn):
        def process(self, x):
            Metrics.counter('push', 'before boom').inc()
            raise ValueError('boom')

    with HttpReceiver() as http:
        p = beam.Pipeline(
            runner=InProcessSparkRunner(debug=True),
            options=PipelineOptions([f'--metrics_sink={http.url}']),
        )
        _ = p | beam.Create([1]) | beam.ParDo(Boom())
        with pytest.raises(ValueError, match='boom'):
            p.run()
        docs = http.documents
    assert docs[-1]['state'] == 'FAILED'


def test_unknown_sink_scheme_fails_before_running():
    p = beam.Pipeline(
        runner=InProcessSparkRunner(debug=True),
        options=PipelineOptions(['--metrics_sink=statsd://127.0.0.1:8125']),
    )
    _ = p | beam.Create([1]) | beam.Map(lambda x: 1 / 0)
    with pytest.raises(ValueError, match=r"unknown scheme 'statsd'.*graphite://"):
        p.run()


def test_result_metrics_between_jobs():
    """--no_wait_until_finish: the result answers while the last job runs."""
    GATE.clear()
    result = run([], '--no_wait_until_finish', gated=True, wait=False)
    try:
        deadline = time.monotonic() + 120
        while True:
            counters = {
                r.key.metric.name: r.committed for r in result.metrics().query()['counters']
            }
            if counters or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert result.state == PipelineState.RUNNING
        # The side input's job is done; the stage waiting at the gate is not.
        assert counters == {'side elements': 1}
    finally:
        GATE.set()
    assert result.wait_until_finish() == PipelineState.DONE
    counters = {r.key.metric.name: r.committed for r in result.metrics().query()['counters']}
    assert counters == {'side elements': 1, 'elements': N}


@pytest.mark.parametrize(
    'flag,message',
    [
        ('--metrics_push_period=-1', 'metrics_push_period must be >= 0'),
        ('--metrics_push_timeout=0', 'metrics_push_timeout must be > 0'),
        ('--metrics_sink=graphite://:2003', 'give a host and a port'),
    ],
)
def test_bad_push_settings_fail_before_running(flag, message):
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=PipelineOptions([flag]))
    _ = p | beam.Create([1]) | beam.Map(lambda x: 1 / 0)
    with pytest.raises(ValueError, match=message):
        p.run()


def test_cancel_stops_after_the_current_job_and_pushes_cancelled():
    GATE.clear()
    with HttpReceiver() as http:
        result = run([http.url], '--no_wait_until_finish', gated_side=True, wait=False)
        try:
            cancelling = threading.Thread(target=result.cancel)
            cancelling.start()
            assert result.cancel_requested.wait(60)
        finally:
            GATE.set()  # the first job (the side input) ends; the second never starts
        cancelling.join(120)
        assert result.state == PipelineState.CANCELLED
        assert result.wait_until_finish() == PipelineState.CANCELLED
        docs = http.documents
    assert docs[-1]['state'] == 'CANCELLED'
    assert [m['name'] for m in docs[-1]['metrics']] == ['side elements']
    counters = {r.key.metric.name: r.committed for r in result.metrics().query()['counters']}
    assert counters == {'side elements': 1}
