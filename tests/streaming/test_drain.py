"""Draining a stream (``execution.streaming.drain``, debug engine): it reads
nothing more, splittable DoFns truncate their restrictions, every pending
window and timer fires, the run ends DONE and its last commit record says
drained; a drained checkpoint is not resumed; a drain or cancel of an ended
run changes nothing."""

from __future__ import annotations

import glob
import json
import logging
import os
import pickle
import time

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.testing import test_stream
from apache_beam.transforms import userstate
from apache_beam.transforms import window
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.utils.timestamp import Duration

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.__main__ import main as cli
from beam_spark_inproc.execution.streaming import drain
from tests.streaming import oracle

# One TestStream event each: (kind, argument).
_EVENTS = [('wm', 0)]
for _i in range(8):
    _EVENTS += [('add', (f'k{_i % 2}', _i, 4 * _i)), ('wm', 4 * _i + 1)]
_EVENTS += [('wm', 60)]
_DRAIN_AT = 5  # the element whose micro-batch is the last before the drain


def _stream(events) -> test_stream.TestStream:
    stream = test_stream.TestStream()
    for kind, arg in events:
        if kind == 'add':
            key, value, ts = arg
            stream = stream.add_elements([window.TimestampedValue((key, value), ts)])
        elif kind == 'wm':
            stream = stream.advance_watermark_to(arg)
        else:
            stream = stream.advance_watermark_to_infinity()
    return stream


class _RequestDrainAt(beam.DoFn):
    """Writes the drain request file (as ``python -m beam_spark_inproc drain``
    does) when it sees element ``at``: the loop drains after this
    micro-batch."""

    def __init__(self, checkpoint: str, at: int):
        self._checkpoint, self._at = checkpoint, at

    def process(self, kv):
        if kv[1] == self._at:
            assert cli(['drain', self._checkpoint]) == 0
        yield kv


class _SumAtWindowEnd(beam.DoFn):
    """A stateful DoFn: a key's values in a window, summed when an event-time
    timer at the window's end fires."""

    VALUES = userstate.BagStateSpec('values', VarIntCoder())
    END = userstate.TimerSpec('end', userstate.TimeDomain.WATERMARK)

    def process(
        self,
        kv,
        w=beam.DoFn.WindowParam,
        values=beam.DoFn.StateParam(VALUES),
        end=beam.DoFn.TimerParam(END),
    ):
        values.add(kv[1])
        end.set(w.end)

    @userstate.on_timer(END)
    def fire(self, key=beam.DoFn.KeyParam, values=beam.DoFn.StateParam(VALUES)):
        yield ('timer', key, sum(values.read()))
        values.clear()


def _windowed_stateful(events, checkpoint=None):
    def build(p):
        kvs = p | _stream(events)
        if checkpoint is not None:
            kvs = kvs | beam.ParDo(_RequestDrainAt(checkpoint, _DRAIN_AT))
        windowed = kvs | beam.WindowInto(window.FixedWindows(20))
        panes = windowed | beam.GroupByKey() | beam.MapTuple(lambda k, vs: ('gbk', k, sorted(vs)))
        sums = windowed | beam.ParDo(_SumAtWindowEnd())
        return (panes, sums) | beam.Flatten()

    return build


def _records(folder: str) -> list:
    """The elements ``oracle.Record`` wrote into ``folder``."""
    found = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), 'rb') as f:
            found.append(pickle.load(f)[0])
    return found


def _last_record(checkpoint: str) -> dict:
    return drain.newest_record(checkpoint)


def test_a_drained_stream_fires_the_panes_of_what_it_read(tmp_path):
    """Drained by a request file after element 5 of 8: the records are
    BundleBasedDirectRunner's for the events read so far followed by a
    watermark at +inf (the TestStream's position at the drain is in the
    commit record), among them the panes and timers of the windows still open
    at the drain; the run ends DONE, its last record says drained, the
    request file is gone, and a rerun on the checkpoint is refused."""
    checkpoint = str(tmp_path / 'ck')
    got = oracle.run(
        _windowed_stateful(_EVENTS, checkpoint),
        InProcessSparkRunner(debug=True),
        f'--checkpoint_location={checkpoint}',
    )
    record = _last_record(checkpoint)
    stopped = record['drain']
    assert stopped['drained'] is True
    assert stopped['requested_by'] == 'python -m beam_spark_inproc drain'
    (position,) = [s['position'] for s in stopped['sources_stopped_at'].values()]
    read = _EVENTS[:position]
    # Mid-way: element 5 and its watermark were read, element 6 was not.
    assert ('add', ('k1', _DRAIN_AT, 4 * _DRAIN_AT)) in read
    assert ('add', ('k0', _DRAIN_AT + 1, 4 * (_DRAIN_AT + 1))) not in read
    expected = oracle.direct(_windowed_stateful(read + [('inf', None)]))
    assert got == expected
    # Window [20, 40) was open at the drain (watermark 21): its pane and
    # timers fired because of it.
    last_watermark = max(arg for kind, arg in read if kind == 'wm')
    assert any(r[1] == '[20.0, 40.0)' for r in got) and last_watermark < 40
    assert not os.path.exists(os.path.join(checkpoint, drain.REQUEST_FILE))

    with pytest.raises(drain.StreamDrainedError, match='was drained'):
        oracle.run(
            _windowed_stateful(_EVENTS, checkpoint),
            InProcessSparkRunner(debug=True),
            f'--checkpoint_location={checkpoint}',
        )


class _Countdown(beam.DoFn, beam.transforms.core.RestrictionProvider):
    """A bounded splittable DoFn: emits 0..n-1, one a bundle, each time asking
    to resume after ``delay`` seconds."""

    def __init__(self, n: int, delay: float):
        self._n, self._delay = n, delay

    def initial_restriction(self, element):
        return OffsetRange(0, self._n)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()

    def process(self, element, tracker=beam.DoFn.RestrictionParam()):
        position = tracker.current_restriction().start
        if tracker.try_claim(position):
            yield ('bounded', position)
            tracker.defer_remainder(Duration.of(self._delay))


def test_drain_truncates_splittable_dofns(tmp_path):
    """``result.drain()`` while PeriodicImpulse (unbounded: Beam's truncate
    drops it) ticks every 50 ms and a bounded splittable DoFn waits out a
    resume delay of 0.2 s between its 5 positions: the stream, endless
    otherwise, ends DONE; the bounded restriction is finished (every
    position), the ticks are the consecutive ticks from the start up to the
    drain and none after (the drain begins at the micro-batch boundary after
    the request: the micro-batch under way emits the ticks due until its
    end); the last commit record says drained with no residual pending."""
    checkpoint, out = str(tmp_path / 'ck'), str(tmp_path / 'out')
    os.makedirs(out)
    start = time.time()
    options = PipelineOptions([f'--checkpoint_location={checkpoint}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)
    ticks = (
        p
        | PeriodicImpulse(start_timestamp=start, fire_interval=0.05)
        | beam.Map(lambda t: ('tick', round(float(t) - start, 3)))
    )
    bounded = p | beam.Impulse() | beam.ParDo(_Countdown(5, 0.2))
    _ = (ticks, bounded) | beam.Flatten() | beam.ParDo(oracle.Record(out))
    result = p.run()
    deadline = time.monotonic() + 60
    while len(os.listdir(out)) < 3:
        assert time.monotonic() < deadline and not result.ended
        time.sleep(0.05)
    requested = time.time()
    assert result.drain(duration=30_000) == PipelineState.DONE
    records = _records(out)
    assert sorted(v for k, v in records if k == 'bounded') == list(range(5))
    offsets = sorted(v for k, v in records if k == 'tick')
    assert offsets == [round(0.05 * i, 3) for i in range(len(offsets))]
    record = _last_record(checkpoint)
    assert requested <= record['drain']['began_at']
    assert offsets and start + offsets[-1] <= record['drain']['began_at']
    assert record['drain']['drained'] is True
    assert record['drain']['requested_by'] == 'result.drain()'
    assert record['residuals'] == {}


class _CountdownAsking(_Countdown):
    """``_Countdown`` that asks for a drain (the request file) at position 0
    and fails at position ``fail_at`` once (a marker file remembers)."""

    def __init__(self, n, delay, checkpoint, fail_at, marker):
        super().__init__(n, delay)
        self._checkpoint, self._fail_at, self._marker = (checkpoint, fail_at, marker)

    def process(self, element, tracker=beam.DoFn.RestrictionParam()):
        position = tracker.current_restriction().start
        if position == 0:
            assert cli(['drain', self._checkpoint]) == 0
        if position == self._fail_at and not os.path.exists(self._marker):
            open(self._marker, 'w').close()
            raise RuntimeError('the driver dies mid-drain')
        yield from super().process(element, tracker)


def test_a_stream_that_failed_mid_drain_drains_on_when_rerun(tmp_path, caplog):
    """A drain that takes several micro-batches (a bounded splittable DoFn
    waiting out its resume delays; PeriodicImpulse truncated at once) fails
    at its third: the commit records before say draining, not drained. The
    rerun on the checkpoint drains on from them (the request file is gone
    by then) and ends DONE, its last record drained; each position of the
    bounded restriction was output once over both runs."""
    checkpoint, out = str(tmp_path / 'ck'), str(tmp_path / 'out')
    os.makedirs(out)
    start = time.time()

    def run():
        options = PipelineOptions([f'--checkpoint_location={checkpoint}'])
        options.view_as(StandardOptions).streaming = True
        p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)
        ticks = (
            p
            | PeriodicImpulse(start_timestamp=start, fire_interval=0.05)
            | beam.Map(lambda t: ('tick', 0))
        )
        bounded = (
            p
            | beam.Impulse()
            | beam.ParDo(_CountdownAsking(5, 0.1, checkpoint, 3, str(tmp_path / 'failed')))
        )
        _ = (ticks, bounded) | beam.Flatten() | beam.ParDo(oracle.Record(out))
        return p.run()

    with pytest.raises(RuntimeError, match='dies mid-drain'):
        run().wait_until_finish(30_000)
    record = _last_record(checkpoint)
    assert record['drain']['drained'] is False
    assert not os.path.exists(os.path.join(checkpoint, drain.REQUEST_FILE))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert run().wait_until_finish(30_000) == PipelineState.DONE
    assert 'continuing the drain' in caplog.text
    assert _last_record(checkpoint)['drain']['drained'] is True
    records = _records(out)
    assert sorted(v for k, v in records if k == 'bounded') == list(range(5))


def test_drain_or_cancel_of_an_ended_run_is_a_no_op(tmp_path, caplog):
    """A stream that ended (its TestStream done) stays DONE through drain()
    and cancel(), with nothing logged at WARNING or above; its checkpoint
    was not drained, so the drain command asks for a drain (a file the next
    run would see) and reports a drained checkpoint as such; a folder that is
    not a checkpoint is refused."""
    checkpoint = str(tmp_path / 'ck')
    events = _EVENTS[:5] + [('inf', None)]
    results = []
    oracle.run(
        _windowed_stateful(events),
        InProcessSparkRunner(debug=True),
        f'--checkpoint_location={checkpoint}',
        results=results,
    )
    (result,) = results
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert result.drain() == PipelineState.DONE
        assert result.cancel() == PipelineState.DONE
        assert result.drain() == PipelineState.DONE
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert _last_record(checkpoint)['drain'] is None

    assert cli(['drain', str(tmp_path)]) == 2  # not a checkpoint
    assert cli(['drain', checkpoint]) == 0
    assert os.path.exists(os.path.join(checkpoint, drain.REQUEST_FILE))


def test_drain_command_on_a_drained_checkpoint_says_so(tmp_path, capsys):
    checkpoint = str(tmp_path / 'ck')
    os.makedirs(os.path.join(checkpoint, 'commits'))
    with open(os.path.join(checkpoint, 'pipeline.json'), 'w') as f:
        json.dump({'stages': []}, f)
    with open(os.path.join(checkpoint, 'commits', '7.json'), 'w') as f:
        json.dump(
            {
                'micro_batch': 7,
                'drain': {
                    'drained': True,
                    'after_micro_batch': 5,
                    'requested_by': 'result.drain()',
                    'sources_stopped_at': {},
                },
            },
            f,
        )
    assert cli(['drain', checkpoint]) == 0
    assert 'already drained after micro-batch 5' in capsys.readouterr().out
    assert not glob.glob(os.path.join(checkpoint, drain.REQUEST_FILE))


def test_drain_on_spark(spark, tmp_path):
    """On Spark the splittable DoFn's drained descriptor runs in Spark's
    Python workers: PeriodicImpulse, endless otherwise, is truncated by
    ``result.drain()`` and the run ends DONE, its record drained with no
    residual pending; the ticks (none if the drain began before the first
    micro-batch) are consecutive from the start."""
    checkpoint, out = str(tmp_path / 'ck'), str(tmp_path / 'out')
    os.makedirs(out)
    start = time.time()
    options = PipelineOptions([f'--checkpoint_location={checkpoint}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options)
    _ = (
        p
        | PeriodicImpulse(start_timestamp=start, fire_interval=0.1)
        | beam.Map(lambda t: ('tick', round(float(t) - start, 3)))
        | beam.ParDo(oracle.Record(out))
    )
    # At once: the first or second micro-batch drains (each is Spark jobs).
    assert p.run().drain(duration=300_000) == PipelineState.DONE
    offsets = sorted(_records(out))
    assert offsets == [('tick', round(0.1 * i, 3)) for i in range(len(offsets))]
    record = _last_record(checkpoint)
    assert record['drain']['drained'] is True and record['residuals'] == {}
