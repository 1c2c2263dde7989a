"""A stream's progress: ``result.progress()``/``recent_progress()``,
the INFO line per micro-batch, the gauges pushed to a metrics sink, and
``python -m beam_spark_inproc status`` on the checkpoint it leaves.

One TestStream-driven stream on the debug engine (run once for the module):
TestStream -> WindowInto(FixedWindows(10), OUTPUT_AT_EARLIEST) -> GroupByKey
-> Map. Its watermarks after each micro-batch follow from Beam's model as
BundleBasedDirectRunner implements it: the source's output watermark is the
TestStream's; the WindowInto stage holds nothing (input = output); the
GroupByKey stage's output watermark is min(input watermark, earliest hold),
where a buffered pane holds at its output time minus one microsecond
(``trigger.InMemoryUnmergedState.get_earliest_hold``), the output time of
OUTPUT_AT_EARLIEST being the pane's earliest element timestamp.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing import test_stream
from apache_beam.transforms import window
from apache_beam.transforms.window import TimestampCombiner
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.__main__ import main
from beam_spark_inproc.execution.streaming.progress import GAUGE_NAMESPACE
from tests.integration.receivers import HttpReceiver
from tests.streaming import oracle
from tests.streaming import test_sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ELEMENTS = [('a', 1), ('b', 2), ('a', 12)]  # (key, event time in seconds)


def _at(seconds: float) -> str:
    return Timestamp(micros=round(seconds * 1e6)).to_rfc3339()


def _seconds(mark: str) -> float:
    if mark in ('-inf', '+inf'):
        return float(mark)
    return Timestamp.from_rfc3339(mark).micros / 1e6


# Source watermark -> (GroupByKey stage's output watermark, its state keys,
# its earliest event-time timer): by hand from Beam's model (module doc).
# TestStream events and micro-batches need not match one to one (events no
# transform can tell apart may share one), so entries are found by the
# source's watermark.
EXPECTED = {
    _at(0): (_at(0), 0, '+inf'),  # nothing buffered: min(0, no hold)
    # [0, 10) buffers a@1 and b@2: hold 1 s - 1 us; the trigger's timer at
    # the window's end (``DefaultTrigger.on_element``)
    _at(5): (_at(1 - 1e-6), 2, _at(10)),
    # [0, 10) fired at 15; [10, 20) buffers a@12: hold 12 s - 1 us
    _at(15): (_at(12 - 1e-6), 1, _at(20)),
    '+inf': ('+inf', 0, '+inf'),
}


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _run(checkpoint: str, *flags: str):
    options = PipelineOptions([f'--checkpoint_location={checkpoint}', *flags])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)
    events = (
        test_stream.TestStream()
        .advance_watermark_to(0)
        .add_elements([window.TimestampedValue(e, e[1]) for e in ELEMENTS[:2]])
        .advance_watermark_to(5)
        .add_elements([window.TimestampedValue(ELEMENTS[2], 12)])
        .advance_watermark_to(15)
        .advance_watermark_to_infinity()
    )
    _ = (
        p
        | events
        | beam.WindowInto(
            window.FixedWindows(10), timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST
        )
        | beam.GroupByKey()
        | beam.Map(lambda kv: kv)
    )
    result = p.run()
    assert result.wait_until_finish() == 'DONE'
    return result


@pytest.fixture(scope='module')
def stream(tmp_path_factory):
    """(result, checkpoint, INFO messages, documents the sink received)."""
    checkpoint = str(tmp_path_factory.mktemp('progress') / 'ck')
    handler = _Records()
    logger = logging.getLogger('beam_spark_inproc.progress')
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with HttpReceiver() as sink:
            result = _run(checkpoint, f'--metrics_sink={sink.url}/beam', '--metrics_push_period=0')
            documents = sink.documents
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return result, checkpoint, handler.messages, documents


def test_progress_has_the_models_watermarks_and_counts(stream):
    result, _, _, _ = stream
    recent = result.recent_progress()
    assert recent[-1] == result.progress()
    assert [r['micro_batch'] for r in recent] == list(range(len(recent)))
    seen = set()
    for progress in recent:
        source, window_into, gbk = progress['stages']
        assert source['name'] == 'TestStream'
        assert window_into['reads'] == [1] and gbk['reads'] == [2]
        assert gbk['name'].startswith('GroupByKey+Map(')
        wm = source['output_watermark']
        output, keys, timer = EXPECTED[wm]
        seen.add(wm)
        assert (
            window_into['input_watermark'],
            window_into['output_watermark'],
            gbk['input_watermark'],
        ) == (wm, wm, wm)
        assert (gbk['output_watermark'], gbk['state_keys'], gbk['next_event_timer']) == (
            output,
            keys,
            timer,
        ), progress
        assert gbk['timer_buckets'] >= min(keys, 1)
        assert (gbk['state_bytes'] > 0) == (keys > 0)
        # Elements: what the TestStream emitted so far, every one read.
        emitted = sum(1 for _, t in ELEMENTS if t < _seconds(wm))
        assert source['total_elements_out'] == emitted
        assert window_into['total_elements_in'] == emitted
        assert window_into['total_elements_out'] == emitted
        # The GroupByKey's reader reads fired panes: one per key and window
        # whose end the watermark passed.
        fired = {(k, t // 10) for k, t in ELEMENTS if t // 10 * 10 + 10 - 1e-6 <= _seconds(wm)}
        assert gbk['total_elements_in'] == len(fired)
        assert gbk['elements_out'] is None  # a leaf writes nothing
        # Lag behind the wall clock at the commit.
        for stage in progress['stages']:
            for which in ('input', 'output'):
                mark = stage[f'{which}_watermark']
                lag = stage[f'{which}_watermark_lag_seconds']
                if mark in ('-inf', '+inf'):
                    assert lag is None
                else:
                    expected = (
                        Timestamp.from_rfc3339(progress['timestamp']) - Timestamp.from_rfc3339(mark)
                    ).micros / 1e6
                    assert abs(lag - expected) < 0.01
        assert (
            abs(progress['job_seconds'] + progress['driver_seconds'] - progress['duration_seconds'])
            < 1e-3
        )
        assert progress['backlog'] == {
            'due_residuals': 0,
            'pending_residuals': 0,
            'timer_buckets': gbk['timer_buckets'],
            'held_side_input_elements': 0,
        }
    assert seen == set(EXPECTED)
    # Per micro-batch counts add up to the input.
    assert sum(r['elements_in'] for r in recent) == len(ELEMENTS)
    assert sum(r['stages'][1]['elements_in'] for r in recent) == len(ELEMENTS)


def test_one_info_line_per_micro_batch(stream):
    result, _, messages, _ = stream
    lines = [m for m in messages if ' micro-batch ' in m and m.startswith('Stream ')]
    assert len(lines) == len(result.recent_progress())
    for line, progress in zip(lines, result.recent_progress()):
        assert line.startswith(
            f'Stream {progress["stream"]} micro-batch {progress["micro_batch"]}: '
        )
        assert '\n' not in line
        assert f'{progress["elements_in"]} elements in' in line


def test_metrics_sink_receives_the_progress_as_gauges(stream):
    result, _, _, documents = stream
    by_id = {p['micro_batch']: p for p in result.recent_progress()}
    assert documents and documents[-1]['state'] == 'DONE'
    checked = 0
    for doc in documents:
        gauges = {
            (m['step'], m['name']): m['committed']['value']
            for m in doc['metrics']
            if m['namespace'] == GAUGE_NAMESPACE
        }
        if not gauges:
            continue
        progress = by_id[gauges['stream', 'micro_batch']]
        assert gauges['stream', 'elements_in'] == progress['elements_in']
        assert gauges['stream', 'timer_buckets'] == progress['backlog']['timer_buckets']
        assert gauges['stream', 'caught_up'] == int(progress['caught_up'])
        [read] = progress['sources']
        assert gauges['source:TestStream', 'events'] == read['backlog']['events']
        assert gauges['source:TestStream', 'elements'] == read['elements']
        for stage in progress['stages']:
            step = f'{stage["stage"]}:{stage["name"]}'
            for which in ('input', 'output'):
                mark = stage[f'{which}_watermark']
                if mark in ('-inf', '+inf'):
                    assert (step, f'{which}_watermark_seconds') not in gauges
                else:
                    assert (
                        gauges[step, f'{which}_watermark_seconds']
                        == Timestamp.from_rfc3339(mark).micros / 1e6
                    )
            if stage['total_elements_in'] is not None:
                assert gauges[step, 'total_elements_in'] == stage['total_elements_in']
        checked += 1
    assert checked >= 2
    final = {(m['step'], m['name']): m['committed']['value'] for m in documents[-1]['metrics']}
    assert final['stream', 'micro_batch'] == result.progress()['micro_batch']
    assert final['2:WindowInto(WindowIntoFn)', 'total_elements_in'] == len(ELEMENTS)


def test_status_prints_a_stopped_streams_progress(stream, capsys, tmp_path):
    result, checkpoint, _, _ = stream
    progress = result.progress()
    assert main(['status', checkpoint]) == 0
    out = capsys.readouterr().out
    assert f'micro-batch {progress["micro_batch"]} committed' in out
    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}
    for stage in progress['stages']:
        row = rows[str(stage['stage'])].split()
        assert stage['input_watermark'] in row and stage['output_watermark'] in row
        total = stage['total_elements_in']
        assert str(total if total is not None else '-') in row
    assert main(['status', checkpoint, '--json']) == 0
    assert json.loads(capsys.readouterr().out) == progress
    page = tmp_path / 'status.html'
    assert main(['status', checkpoint, '--html', str(page)]) == 0
    text = page.read_text()
    assert text.startswith('<!DOCTYPE html>') and text.count('<svg') == 2
    assert 'src=' not in text and 'href="http' not in text  # self-contained
    for stage in progress['stages']:
        assert f'out wm {stage["output_watermark"]}' in text


def test_status_of_a_folder_that_is_not_a_checkpoint(tmp_path, capsys):
    (tmp_path / 'commits').mkdir()  # a commits folder alone is not enough
    assert main(['status', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is not a stream's checkpoint location" in err
    assert main(['status', str(tmp_path / 'absent')]) == 2
    assert 'no such folder' in capsys.readouterr().err
    done = subprocess.run(
        [sys.executable, '-m', 'beam_spark_inproc', 'status', str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ''
    assert "is not a stream's checkpoint location" in done.stderr


def test_status_of_a_checkpoint_with_nothing_committed(tmp_path, capsys):
    (tmp_path / 'commits').mkdir()
    (tmp_path / 'pipeline.json').write_text('{"stages": []}')
    assert main(['status', str(tmp_path)]) == 0
    assert 'no committed micro-batch yet' in capsys.readouterr().out


def test_a_restarted_stream_goes_on_counting(stream, tmp_path):
    """Run again on (a copy of) the stopped stream's checkpoint: it resumes
    after the last commit, and its progress continues the totals and the
    history the commit record carries."""
    result, checkpoint, _, _ = stream
    before = result.progress()
    copy = str(tmp_path / 'ck')
    shutil.copytree(checkpoint, copy)
    again = _run(copy)
    recent = again.recent_progress()
    assert recent[0] == before  # the resumed commit record's
    after = again.progress()
    assert after['micro_batch'] > before['micro_batch']
    assert after['elements_in'] == 0
    for old, new in zip(before['stages'], after['stages']):
        assert (new['total_elements_in'], new['total_elements_out']) == (
            old['total_elements_in'],
            old['total_elements_out'],
        )
        assert new['output_watermark'] == '+inf'
    with open(os.path.join(copy, 'commits', f'{after["micro_batch"]}.json')) as f:
        history = json.load(f)['progress']['recent']
    assert [h['micro_batch'] for h in history] == list(range(after['micro_batch'] + 1))


def test_progress_of_an_unbounded_splittable_dofn():
    """``test_sources.Ticks``: 12 ticks at event times 0..11, 3 per bundle,
    the estimator's watermark set to the next bundle's first tick, the rest
    deferred. By hand, per micro-batch k (one bundle each): the splittable
    stage emits 3 ticks, holds its output watermark at 3(k + 1) by its
    pending residual (+inf after the last bundle, when none is left); the
    GroupByKey (FixedWindows(4), one key) reads the windows whose end the
    watermark passed, and one state bucket waits with a timer until the end.

    A micro-batch that begins before the residual's 10 ms resume delay has
    passed (the loop runs one before it waits for a residual) runs nothing:
    it moves no watermark and is left out of the count."""

    def sdf_and_gbk(progress):
        sdf = next(s for s in progress['stages'] if s['name'].startswith('ParDo(Ticks)/Process'))
        return sdf, progress['stages'][-1]

    results = []
    oracle.run(test_sources._ticks, InProcessSparkRunner(debug=True), results=results)
    recent = []
    for progress in results[0].recent_progress():
        if progress['elements_in'] == 0 and recent:
            assert [(s['elements_out'], s['output_watermark']) for s in sdf_and_gbk(progress)] == [
                (None if s['elements_out'] is None else 0, s['output_watermark'])
                for s in sdf_and_gbk(recent[-1])
            ], progress
            continue
        recent.append(progress)
    assert len(recent) == 4, [  # what each micro-batch ran, if not 4
        (
            r['micro_batch'],
            r['elements_in'],
            [(s['name'][:20], s['elements_out'], s['output_watermark']) for s in r['stages']],
        )
        for r in recent
    ]
    fired = 0
    for k, progress in enumerate(recent):
        sdf, gbk = sdf_and_gbk(progress)
        last = k == len(recent) - 1
        mark = '+inf' if last else _at(3 * (k + 1))
        assert (sdf['output_watermark'], gbk['input_watermark']) == (mark, mark)
        assert sdf['elements_out'] == 3 and progress['elements_in'] == 3
        assert sdf['pending_residuals'] == (0 if last else 1)
        assert 0 <= sdf['due_residuals'] <= sdf['pending_residuals']
        now_fired = len({t // 4 for t in range(12) if t // 4 * 4 + 4 <= _seconds(mark)})
        assert gbk['elements_in'] == now_fired - fired
        fired = now_fired
        assert gbk['timer_buckets'] == (0 if last else 1)
        assert progress['backlog'] == {
            'due_residuals': sdf['due_residuals'],
            'pending_residuals': sdf['pending_residuals'],
            'timer_buckets': gbk['timer_buckets'],
            'held_side_input_elements': 0,
        }
    assert sdf['total_elements_out'] == 12


def test_elements_in_of_a_splittable_dofn_fused_into_a_leaf_stage():
    """``Ticks`` fused with the recording sink into one stage that writes
    nothing: each micro-batch's elements in are the 3 ticks its bundle
    emitted, 12 in all (the stage's elements out are what the DoFn emitted)."""
    results = []
    records = oracle.run(
        lambda p: p | beam.Impulse() | beam.ParDo(test_sources.Ticks()),
        InProcessSparkRunner(debug=True),
        results=results,
    )
    assert sorted(r[0] for r in records) == list(range(12))
    recent = results[0].recent_progress()
    assert [r['elements_in'] for r in recent if r['elements_in']] == [3] * 4
    sdf = next(s for s in recent[-1]['stages'] if s['name'].startswith('ParDo(Ticks)/Process'))
    assert sdf['total_elements_out'] == 12


def test_status_of_a_commit_record_without_progress(stream, tmp_path, capsys):
    """A commit record written by a runner without progress still gives
    each stage's watermarks from its own fields (micros, converted without
    Beam): here set to known instants."""
    _, checkpoint, _, _ = stream
    copy = tmp_path / 'ck'
    shutil.copytree(checkpoint, copy)
    newest = max((copy / 'commits').glob('*.json'), key=lambda f: int(f.stem))
    record = json.loads(newest.read_text())
    del record['progress']
    marks = [(1_000_000, 999_999), (-9223372036854775000, 12_345_678)]
    for stage, (input_wm, output_wm) in zip(record['stages'], marks):
        stage['input_watermark'], stage['output_watermark'] = input_wm, output_wm
    newest.write_text(json.dumps(record))
    assert main(['status', str(copy)]) == 0
    out = capsys.readouterr().out
    assert f'micro-batch {record["micro_batch"]} committed' in out
    rows = [line for line in out.splitlines() if line[:1].isdigit()]
    assert len(rows) == len(record['stages'])
    assert ' 1970-01-01T00:00:01Z ' in rows[0]
    assert ' 1970-01-01T00:00:00.999999Z' in rows[0]
    assert ' -inf ' in rows[1] and ' 1970-01-01T00:00:12.345678Z' in rows[1]
    assert rows[2].count(' +inf ') == 2


def test_status_says_when_a_stream_drains(stream, tmp_path, capsys):
    """The commit record's drain (``execution.streaming.drain``) is shown:
    draining since a micro-batch, or drained."""
    _, checkpoint, _, _ = stream
    copy = tmp_path / 'ck'
    shutil.copytree(checkpoint, copy)
    newest = max((copy / 'commits').glob('*.json'), key=lambda f: int(f.stem))
    record = json.loads(newest.read_text())
    for drained, said in [
        (False, 'draining since micro-batch 3 (requested by result.drain())'),
        (True, 'drained: every window and timer fired'),
    ]:
        record['drain'] = {
            'drained': drained,
            'after_micro_batch': 3,
            'requested_by': 'result.drain()',
            'sources_stopped_at': {},
        }
        newest.write_text(json.dumps(record))
        assert main(['status', str(copy)]) == 0
        assert said in capsys.readouterr().out


def test_progress_says_what_each_read_has_left(stream, capsys):
    """The TestStream (6 events, 3 elements): per commit, the events it has
    not replayed, the elements it emitted so far, and caught up only once
    every event is read; ``status`` says so, naming the read by its label."""
    result, checkpoint, _, _ = stream
    total = 6
    before = total
    for progress in result.recent_progress():
        [read] = progress['sources']
        left = read['backlog']['events']
        assert (read['source'], read['kind'], read['stage']) == ('TestStream', 'TestStream', 1)
        assert read['position'] in (f'event {total - left} of {total}', f'all {total} events read')
        assert left <= before
        before = left
        assert read['caught_up'] is (left == 0) and progress['caught_up'] is (left == 0)
    assert left == 0 and read['elements'] == len(ELEMENTS)
    assert main(['status', checkpoint]) == 0
    out = capsys.readouterr().out
    assert '  caught up: every read has read what there was when it last looked\n' in out
    assert (
        "    'TestStream' (TestStream, stage 1): caught up; 3 elements read, at all 6 events "
        'read; every event read\n'
    ) in out


def test_a_splittable_dofns_backlog_is_its_due_restrictions():
    """``Ticks`` (12 ticks, 3 per bundle, each residual due 10 ms later): the
    read is the DoFn's label; its elements are the ticks emitted so far; it is
    caught up exactly when no restriction is due at the commit, and at the
    end nothing is left."""
    results = []
    oracle.run(test_sources._ticks, InProcessSparkRunner(debug=True), results=results)
    emitted = 0
    for progress in results[0].recent_progress():
        [read] = progress['sources']
        sdf = next(s for s in progress['stages'] if s['name'].startswith('ParDo(Ticks)/Process'))
        assert (read['source'], read['kind'], read['stage']) == (
            'ParDo(Ticks)',
            'splittable DoFn',
            sdf['stage'],
        )
        emitted += sdf['elements_out']
        assert read['elements'] == emitted
        b = read['backlog']
        assert b['due_restrictions'] == sdf['due_residuals']
        assert b['due_restrictions'] + b['waiting_restrictions'] == sdf['pending_residuals']
        assert read['caught_up'] is (b['due_restrictions'] == 0)
    assert emitted == 12
    assert b == {'due_restrictions': 0, 'waiting_restrictions': 0, 'next_due_in_seconds': None}


class _SlowBundles(beam.DoFn):
    """300 ms at the end of each bundle (one per micro-batch): after the read
    has claimed every due tick and deferred the rest 50 ms ahead, so that
    residual is due by the commit however loaded the machine is."""

    def process(self, tick):
        yield tick

    def finish_bundle(self):
        import time

        time.sleep(0.3)


def test_a_read_slower_than_its_polls_is_behind():
    """PeriodicImpulse every 50 ms, each micro-batch ending with 300 ms
    downstream in the same stage: at each commit its next tick is already
    due, so the stream is never caught up."""
    import time

    from apache_beam.transforms.periodicsequence import PeriodicImpulse

    options = PipelineOptions(['--streaming'])
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)
    _ = (
        p
        | 'Ticks' >> PeriodicImpulse(start_timestamp=time.time(), fire_interval=0.05)
        | beam.ParDo(_SlowBundles())
    )
    result = p.run()
    while len(result.recent_progress()) < 3:
        assert result.wait_until_finish(200) == 'RUNNING'
    result.cancel()
    for progress in result.recent_progress()[1:]:
        [read] = progress['sources']
        assert read['source'] == 'Ticks' and read['backlog']['due_restrictions'] == 1, read
        assert read['caught_up'] is False and progress['caught_up'] is False


def test_a_file_stream_says_when_it_has_read_every_file(tmp_path):
    """``fileio.MatchContinuously`` over a folder holding three files: the
    progress names the read by its label, counts the files it matched, and
    says caught up once it has matched all three (what docs/streaming.md
    tells a user to watch)."""
    from apache_beam.io import fileio

    inbox = tmp_path / 'inbox'
    inbox.mkdir()
    for i in range(3):
        (inbox / f'f{i}.txt').write_text(f'line {i}\n')
    options = PipelineOptions(['--streaming'])
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)
    _ = (
        p
        | 'Watch inbox' >> fileio.MatchContinuously(str(inbox / '*.txt'), interval=0.2)
        | fileio.ReadMatches()
        | beam.Map(lambda f: f.read_utf8())
    )
    result = p.run()
    try:
        while True:
            progress = result.progress()
            if progress and progress['caught_up'] and progress['sources'][0]['elements'] == 3:
                break
            assert result.wait_until_finish(200) == 'RUNNING'
    finally:
        result.cancel()
    [read] = progress['sources']
    assert (read['source'], read['kind']) == ('Watch inbox', 'splittable DoFn')
    assert read['backlog']['waiting_restrictions'] == 1  # the next poll
