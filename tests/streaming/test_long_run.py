"""What a stream keeps grows with its live state, not with its age.

On the debug engine, a stream of many micro-batches: its checkpoint holds
the newest ``CheckpointStore.RETAIN`` commit records and only the state files
they name (superseded versions and older records are collected), and its
result keeps its workers' warnings once, not every micro-batch's reports.
That a restart resumes from a collected checkpoint is
``test_restart.test_driver_killed_mid_micro_batch_then_restarted`` (killed
after several micro-batches, with the default ``RETAIN``); the soak benchmark
(``tests/benchmarks/soak.py``) shows the same for hours on Spark.
"""

from __future__ import annotations

import os
import warnings

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import userstate

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from tests.streaming import oracle

STEPS, KEYS = 8, 4


class _Count(beam.DoFn):
    """A running count per key (global window: the state lives all along)."""

    COUNT = userstate.ReadModifyWriteStateSpec('count', VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
        n = (count.read() or 0) + 1
        count.write(n)
        yield kv[0], n


def _steady(p):
    """``STEPS`` micro-batches, each touching every key (a processing-time
    step after each element event keeps them apart)."""
    stream = TestStream()
    for step in range(STEPS):
        stream = stream.add_elements(
            [(f'k{i}', step) for i in range(KEYS)]
        ).advance_processing_time(1)
    return p | stream.advance_watermark_to_infinity() | beam.ParDo(_Count())


def _files(root: str) -> set[str]:
    return {
        os.path.join(folder, name)
        for folder, _, names in os.walk(os.path.join(root, 'state'))
        for name in names
    }


def test_a_long_stream_keeps_only_the_retained_generations(tmp_path):
    location = str(tmp_path / 'checkpoint')
    assert oracle.run(
        _steady, InProcessSparkRunner(debug=True), f'--checkpoint_location={location}'
    ) == oracle.direct(_steady)
    commits = sorted(int(n[:-5]) for n in os.listdir(os.path.join(location, 'commits')))
    # Every element event was a micro-batch of its own, each rewriting the
    # keys' bucket: STEPS versions of the state were written.
    assert commits[-1] >= STEPS - 1
    assert len(commits) == CheckpointStore.RETAIN
    assert commits == list(range(commits[-1] - CheckpointStore.RETAIN + 1, commits[-1] + 1))
    named = set()
    for n in commits:
        record = CheckpointStore.read_commit(type('S', (), {'root': location})(), n)
        for stage in record['stages']:
            named |= {os.path.join(location, b['path']) for b in stage['buckets'].values()}
    # The state files on disk are those the retained records name, no more.
    assert _files(location) == named
    assert (
        len(
            os.listdir(
                os.path.join(location, 'state', os.listdir(os.path.join(location, 'state'))[0])
            )
        )
        <= CheckpointStore.RETAIN
    )


class _Warns(beam.DoFn):
    def process(self, element):
        warnings.warn('deprecated thing used', DeprecationWarning, stacklevel=1)
        yield element


def test_a_stream_result_keeps_warnings_not_reports(tmp_path):
    """Each micro-batch's reports go to the metrics and the log when they
    arrive; the result keeps only its workers' distinct warnings, issued again
    once when the stream ends."""
    options = PipelineOptions([f'--checkpoint_location={tmp_path / "checkpoint"}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)
    stream = TestStream()
    for step in range(STEPS):
        stream = stream.add_elements([step]).advance_processing_time(1)
    counted = beam.metrics.Metrics.counter('soak', 'elements')
    _ = (
        p
        | stream.advance_watermark_to_infinity()
        | beam.ParDo(_Warns())
        | beam.Map(lambda x: counted.inc())
    )
    with warnings.catch_warnings(record=True) as issued:
        warnings.simplefilter('always')
        result = p.run()
        assert result.wait_until_finish() == 'DONE'
    assert [str(w.message) for w in issued if w.category is DeprecationWarning] == [
        'deprecated thing used'
    ]
    assert [len(r['warnings']) for r in result.reports] == [1]
    [counter] = result.metrics().query()['counters']
    assert counter.committed == STEPS
