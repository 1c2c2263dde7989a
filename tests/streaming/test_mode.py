"""Streaming mode on the debug engine: the result's life cycle, rejection
before anything runs, and the checkpoint location's layout."""

from __future__ import annotations

import glob
import json
import os
import time

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window
from apache_beam.utils.timestamp import MAX_TIMESTAMP

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.errors import UnsupportedPipelineError
from beam_spark_inproc.execution.streaming.result import StreamingPipelineResult
from beam_spark_inproc.execution.streaming.store import CheckpointOwnedError
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from tests.streaming import oracle

SLOW: list = []


def _pipeline(*flags: str, streaming: bool = True) -> beam.Pipeline:
    options = PipelineOptions(list(flags))
    options.view_as(StandardOptions).streaming = streaming
    return beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)


def _slow(x):
    time.sleep(0.05)
    SLOW.append(x)
    beam.metrics.Metrics.counter('stream', 'slow').inc()
    return x


def _counter(result) -> int:
    counters = result.metrics().query(beam.metrics.MetricsFilter().with_name('slow'))['counters']
    return sum(c.committed for c in counters)


def test_run_returns_at_once_wait_times_out_and_cancel_stops():
    SLOW.clear()
    stream = TestStream()
    for i in range(400):
        # A processing-time step after each element: one element per
        # micro-batch (element events in a row would share one).
        stream = stream.add_elements([i]).advance_processing_time(1)
    p = _pipeline()
    _ = p | stream | beam.Map(_slow)
    start = time.monotonic()
    result = p.run()
    assert time.monotonic() - start < 5
    assert isinstance(result, StreamingPipelineResult)
    assert result.wait_until_finish(duration=300) == 'RUNNING'
    assert result.state == 'RUNNING'
    time.sleep(0.2)
    assert _counter(result) > 0  # metrics of committed micro-batches, while running
    assert result.cancel() == 'CANCELLED'
    assert result.wait_until_finish() == 'CANCELLED'
    seen = len(SLOW)
    assert 0 < seen < 400
    time.sleep(0.3)
    assert len(SLOW) == seen  # nothing runs after cancel
    assert _counter(result) == seen


class Boom(beam.DoFn):
    def process(self, element):
        if element == 3:
            raise ValueError(f'bad element {element}')
        yield element


def test_user_failure_ends_the_stream_failed():
    p = _pipeline()
    _ = p | TestStream().add_elements([1, 2]).add_elements([3]) | 'Explode' >> beam.ParDo(Boom())
    result = p.run()
    with pytest.raises(ValueError, match='bad element 3') as info:
        result.wait_until_finish()
    assert 'Explode' in str(info.value)  # Beam's [while running ...] note
    assert result.state == 'FAILED'


def _grouped(p):
    return (
        p
        | beam.Create([('a', 1), ('b', 2), ('a', 13)])
        | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
        | beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
    )


def test_streaming_flag_runs_a_bounded_pipeline_as_a_stream():
    expected = oracle.direct(_grouped)
    assert expected
    assert oracle.run(_grouped, InProcessSparkRunner(debug=True)) == expected


def test_what_the_mode_cannot_run_is_rejected_naming_the_transforms():
    # TestStreams served by a service: each one named, before any job.
    p = _pipeline()
    _ = p | 'Served' >> TestStream(endpoint='localhost:1')
    _ = p | 'AlsoServed' >> TestStream(endpoint='localhost:2')
    with pytest.raises(UnsupportedPipelineError) as info:
        p.run()
    message = str(info.value)
    assert "'Served'" in message and "'AlsoServed'" in message
    assert 'service' in message
    assert 'nothing was submitted to Spark' in message


def _side_after_grouping(p):
    stream = p | TestStream().add_elements([window.TimestampedValue(('a', 1), 1)])
    side = p | 'Side' >> beam.Create([1])
    return (
        stream
        | beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
        | 'WithSide' >> beam.Map(lambda kv, s: (kv[0], list(kv[1]), s), beam.pvalue.AsList(side))
    )


def test_side_input_after_a_group_by_key_is_not_rejected():
    # It used to be (the ParDo was fused into the stage making the panes);
    # the planner now gives it a stage of its own (test_side_inputs).
    expected = oracle.direct(_side_after_grouping)
    assert [r[0] for r in expected] == [('a', [1], [1])]
    assert oracle.run(_side_after_grouping, InProcessSparkRunner(debug=True)) == expected


def _many_keys(p):
    stream = (
        TestStream()
        .add_elements([(f'k{i}', i) for i in range(300)])
        .advance_watermark_to(5)
        .add_elements([('k7', 7)])
        .advance_watermark_to(6)  # with k7: its pane stays buffered
        .advance_watermark_to_infinity()
    )
    return (
        p
        | stream
        | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1] % 10))
        | beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
    )


def test_state_is_written_for_touched_buckets_only(tmp_path, monkeypatch):
    # Keep every commit record and state folder to read them afterwards.
    monkeypatch.setattr(CheckpointStore, 'RETAIN', 1000)
    location = str(tmp_path / 'checkpoint')
    expected = oracle.direct(_many_keys)
    assert (
        oracle.run(
            _many_keys, InProcessSparkRunner(debug=True), f'--checkpoint_location={location}'
        )
        == expected
    )
    commits = sorted(
        glob.glob(os.path.join(location, 'commits', '*.json')),
        key=lambda n: int(os.path.basename(n)[:-5]),
    )
    assert len(commits) >= 4  # one per micro-batch
    records = [json.load(open(name)) for name in commits]
    grouping = [i for i, s in enumerate(records[0]['stages']) if s['buckets']][0]
    first = records[0]['stages'][grouping]['buckets']
    assert sum(b['keys'] for b in first.values()) == 300
    # The micro-batch adding ('k7', 7) reads and rewrites k7's bucket only.
    touched = [
        r
        for r in records
        if r['micro_batch'] > 0
        and glob.glob(
            os.path.join(
                location, 'state', f'stage-{grouping}', f'mb-{r["micro_batch"]}', '*.parquet'
            )
        )
    ]
    table = pq.read_table(
        glob.glob(
            os.path.join(
                location,
                'state',
                f'stage-{grouping}',
                f'mb-{touched[0]["micro_batch"]}',
                '*.parquet',
            )
        )[0]
    )
    buckets = {h % 64 for h in table.column('hash').to_pylist()}
    assert len(buckets) == 1  # the key's crc32 in each row
    assert any(b'k7' in key for key in table.column('key').to_pylist())
    assert table.num_rows < 300 // 16  # 300 keys over 64 buckets
    final = records[-1]['stages'][grouping]
    assert final['output_watermark'] == MAX_TIMESTAMP.micros  # DONE at +inf
    assert final['buckets'] == {}  # expired windows' state is dropped


def test_a_checkpoint_location_of_another_pipeline_is_refused(tmp_path):
    location = str(tmp_path / 'checkpoint')
    oracle.run(_grouped, InProcessSparkRunner(debug=True), f'--checkpoint_location={location}')
    before = sorted(os.listdir(os.path.join(location, 'commits')))
    p = _pipeline(f'--checkpoint_location={location}')
    _ = p | beam.Create([1, 2]) | beam.Map(str)
    with pytest.raises(CheckpointOwnedError, match='cannot take over') as info:
        p.run()
    # The message names the state this pipeline would lose, by its label.
    assert "GroupByKey 'GroupByKey' holds state" in str(info.value)
    assert 'not in this pipeline' in str(info.value)
    assert sorted(os.listdir(os.path.join(location, 'commits'))) == before


def _commits(location: str) -> int:
    """Micro-batches committed: the newest record's number + 1 (older records
    are collected, ``CheckpointStore.RETAIN``)."""
    names = glob.glob(os.path.join(location, 'commits', '*.json'))
    return 1 + max((int(os.path.basename(n)[: -len('.json')]) for n in names), default=-1)


def _windowed_sum(trigger_fn):
    def build(p):
        stream = TestStream()
        for i in range(6):
            stream = stream.add_elements([('k', i)])
        stream = (
            stream.advance_watermark_to(3)
            .add_elements([('k', 6), ('j', 1)])
            .advance_watermark_to_infinity()
        )
        windowed = (
            p
            | stream
            | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
            | beam.WindowInto(
                window.FixedWindows(5),
                trigger=trigger_fn,
                accumulation_mode=beam.transforms.trigger.AccumulationMode.DISCARDING,
            )
        )
        return windowed | beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, sorted(vs)))

    return build


@pytest.mark.parametrize(
    'trigger_fn, micro_batches',
    [
        # Panes on the watermark only: the six element events and the watermark
        # step after them are one micro-batch, the last elements and +inf the
        # second, the end of the stream the third.
        (beam.transforms.trigger.AfterWatermark(), 3),
        # A count trigger sees bundles: one micro-batch per element event (the
        # sixth takes the watermark step along), then as above.
        (beam.transforms.trigger.AfterWatermark(early=beam.transforms.trigger.AfterCount(2)), 8),
    ],
    ids=['watermark', 'count'],
)
def test_element_events_share_a_micro_batch_where_bundles_are_invisible(
    tmp_path, trigger_fn, micro_batches
):
    location = str(tmp_path / 'checkpoint')
    build = _windowed_sum(trigger_fn)
    expected = oracle.direct(build)
    assert expected
    assert (
        oracle.run(build, InProcessSparkRunner(debug=True), f'--checkpoint_location={location}')
        == expected
    )
    assert _commits(location) == micro_batches


def test_metrics_are_committed_per_micro_batch_while_running(tmp_path):
    SLOW.clear()
    location = str(tmp_path / 'checkpoint')
    stream = TestStream()
    for i in range(40):
        stream = stream.add_elements([i]).advance_processing_time(1)
    p = _pipeline(f'--checkpoint_location={location}')
    _ = p | stream | beam.Map(_slow)
    result = p.run()
    seen = []  # (committed counter, micro-batches committed) while running
    while result.state == 'RUNNING':
        count = _counter(result)
        seen.append((count, _commits(location)))  # commits read after
        time.sleep(0.02)
    assert result.wait_until_finish() == 'DONE'
    counts = [c for c, _ in seen]
    assert counts == sorted(counts)  # committed counts never go back
    assert any(0 < c < 40 for c in counts)  # answered mid-stream
    # Never ahead of the micro-batches committed when it was asked:
    # one element per micro-batch of element events (every other one).
    assert all(c <= (commits + 1) // 2 for c, commits in seen)
    assert _counter(result) == 40


def test_spark_profile_dir_profiles_a_streams_bundles(tmp_path):
    """``--spark_profile_dir`` reaches a stream's tasks (it was dropped): each
    bundle of each micro-batch writes its profile."""
    from beam_spark_inproc.worker import profiling

    folder = str(tmp_path / 'profiles')
    stream = (
        TestStream()
        .add_elements([('a', 1), ('b', 2)])
        .advance_watermark_to(10)
        .add_elements([('a', 3)])
        .advance_watermark_to_infinity()
    )
    p = _pipeline(f'--spark_profile_dir={folder}')
    _ = p | stream | beam.WindowInto(window.FixedWindows(5)) | beam.GroupByKey()
    p.run().wait_until_finish()
    summary = profiling.summarize(folder)
    assert summary['bundles'] >= 3  # two micro-batches with elements, at least
    assert summary['seconds_by_category']
