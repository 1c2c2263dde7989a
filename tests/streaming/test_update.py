"""Updating a stream (``execution.streaming.update``): changed code run on the
checkpoint of a stopped stream takes its state over when every transform
holding state keeps its label (or is mapped) and coders; anything else is
refused before anything runs, naming the transforms, the checkpoint untouched.

The stream (debug engine): a TestStream of ``STEPS`` steps of four elements
over two keys, a stateful DoFn counting each key's elements so far
(``Running``), and per-key sums in 20 s windows (``Group``, then ``Sum``).
The first run is stopped (``cancel``, as Ctrl-C does) in the micro-batch
reading step ``STOP - 1``'s elements (a DoFn waits there until the stop is
asked): it ends after that micro-batch's commit, window [20, 40) half full
and the counts at 6. The updated run resumes after the events already read.
What it must print is computed here from the events: the counts go on from
7, window [20, 40)'s sums hold the elements read before the stop.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from typing import Tuple

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import userstate
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.update import IncompatibleUpdateError
from tests.streaming.test_sources import Ticks

STEPS, STOP, PER_STEP = 6, 3, 4
OUT: list[str] = []


def _events(steps: int) -> TestStream:
    stream = TestStream()
    for step in range(steps):
        stream = stream.add_elements(
            [
                window.TimestampedValue((f'k{i % 2}', step * 10 + i), step * 10 + i)
                for i in range(PER_STEP)
            ]
        )
        stream = stream.advance_watermark_to(step * 10 + 10)
    return stream.advance_watermark_to_infinity()


class RunningCount(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec('count', VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
        n = (count.read() or 0) + 1
        count.write(n)
        yield f'count {kv[0]} {n}'


def _collect(line: str) -> None:
    OUT.append(line)


PAUSE = {'at': None, 'reached': threading.Event(), 'go': threading.Event()}


def _keep(kv):
    if kv[1] == PAUSE['at']:  # the first run's stop (``stopped``)
        PAUSE['reached'].set()
        assert PAUSE['go'].wait(120)
    return kv


def _bytes_key(kv):
    return kv[0].encode(), kv[1]


def _plus_zero(kv):
    return kv[0], kv[1] + 0


def _sum(kv) -> str:
    return f'sum {kv[0]} {sum(kv[1])}'


def _total(kv) -> str:
    return f'total {kv[0]} {sum(kv[1])}'


def _share(kv, total: int) -> str:
    return f'share {kv[0]} {kv[1]} {total}'


def _tag(line: str) -> str:
    return f'tagged {line}'


def _run(
    checkpoint: str,
    *flags: str,
    group: str = 'Group',
    running: str = 'Running',
    sum_fn=_sum,
    tag: bool = False,
    key_bytes: bool = False,
    ticks: bool = False,
    plus: bool = False,
    side: bool = False,
) -> list[str]:
    """Runs the stream on ``checkpoint``; returns what it printed.
    ``ticks``: the elements come from an unbounded splittable DoFn
    (``test_sources.Ticks``) instead of a TestStream; ``plus``: a Map fused
    into its stage; ``side``: instead of the sums and counts, each element
    with its 20 s window's total as a side input (``Share``)."""
    OUT.clear()
    options = PipelineOptions([f'--checkpoint_location={checkpoint}', *flags])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)
    if ticks:
        source = p | beam.Impulse() | beam.ParDo(Ticks(STEPS * PER_STEP, PER_STEP, 2))
        if plus:
            source = source | 'Plus' >> beam.Map(_plus_zero)
    else:
        source = p | _events(STEPS)
    if side:
        windowed = (
            source
            | 'Keyed' >> beam.Map(_keep)
            | 'Window' >> beam.WindowInto(window.FixedWindows(20))
        )
        totals = windowed | beam.Values() | beam.CombineGlobally(sum).without_defaults()
        shares = windowed | 'Share' >> beam.Map(_share, beam.pvalue.AsSingleton(totals))
        _ = shares | 'CollectShares' >> beam.Map(_collect)
        if tag:
            _ = shares | 'Tag' >> beam.Map(_tag) | 'CollectTags' >> beam.Map(_collect)
        return _finish(p)
    keyed = (
        source | 'Keyed' >> beam.Map(_bytes_key).with_output_types(Tuple[bytes, int])
        if key_bytes
        else source | 'Keyed' >> beam.Map(_keep).with_output_types(Tuple[str, int])
    )
    sums = (
        source
        | 'Window' >> beam.WindowInto(window.FixedWindows(20))
        | group >> beam.GroupByKey()
        | 'Sum' >> beam.Map(sum_fn)
    )
    _ = sums | 'CollectSums' >> beam.Map(_collect)
    _ = keyed | running >> beam.ParDo(RunningCount()) | 'CollectCounts' >> beam.Map(_collect)
    if tag:
        _ = sums | 'Tag' >> beam.Map(_tag) | 'CollectTags' >> beam.Map(_collect)
    return _finish(p)


def _finish(p: beam.Pipeline) -> list[str]:
    """Runs ``p``: to its end, or stopped where ``PAUSE`` says."""
    result = p.run()
    if PAUSE['at'] is not None:  # stop it there
        assert PAUSE['reached'].wait(120)
        stop = threading.Thread(target=result.cancel)
        stop.start()
        while not result.cancel_requested.is_set():
            time.sleep(0.01)
        PAUSE['go'].set()
        stop.join()
    assert result.wait_until_finish() == ('DONE' if PAUSE['at'] is None else 'CANCELLED'), (
        result.state
    )
    return sorted(OUT)


def _expected(first: int, last: int, sum_word: str = 'sum', ticks: bool = False) -> list[str]:
    """What the stream prints for steps [first, last), by Beam's model: each
    key's running count, each complete 20 s window's per-key sum (``ticks``:
    tick i at time i, a bundle of ``PER_STEP`` ticks a step, the watermark at
    the next tick after it)."""
    lines, counts, windows = [], {}, {}
    for step in range(STEPS):
        for i in range(PER_STEP):
            key, value = f'k{i % 2}', step * (PER_STEP if ticks else 10) + i
            counts[key] = counts.get(key, 0) + 1
            windows.setdefault((value // 20, key), []).append(value)
            if first <= step < last:
                lines.append(f'count {key} {counts[key]}')
    for (start, key), values in windows.items():
        # the step whose watermark closes it
        closes = (
            min(start * 20 + 20, STEPS * PER_STEP) // PER_STEP - 1
            if ticks
            else (start * 20 + 20) // 10 - 1
        )
        if first <= closes < last:
            lines.append(f'{sum_word} {key} {sum(values)}')
    return sorted(lines)


def _pause_at(value: int) -> None:
    PAUSE['reached'].clear()
    PAUSE['go'].clear()
    PAUSE['at'] = value


@pytest.fixture(scope='module')
def stopped(tmp_path_factory) -> str:
    """A checkpoint of the stream stopped after ``STOP`` steps."""
    checkpoint = str(tmp_path_factory.mktemp('stopped') / 'ck')
    _pause_at((STOP - 1) * 10)  # step STOP - 1's first element
    try:
        assert _run(checkpoint) == _expected(0, STOP)
    finally:
        PAUSE['at'] = None
        PAUSE['go'].set()
    return checkpoint


@pytest.fixture(scope='module')
def stopped_ticks(tmp_path_factory) -> str:
    """The same stream from a splittable DoFn, ``PER_STEP`` ticks a bundle
    (a micro-batch), stopped in the one of ticks [8, 12): its residual
    [12, 24) waits in the driver's state."""
    checkpoint = str(tmp_path_factory.mktemp('stopped-ticks') / 'ck')
    _pause_at((STOP - 1) * PER_STEP)
    try:
        assert _run(checkpoint, ticks=True) == _expected(0, STOP, ticks=True)
    finally:
        PAUSE['at'] = None
        PAUSE['go'].set()
    return checkpoint


@pytest.fixture
def checkpoint(stopped, tmp_path) -> str:
    copy = str(tmp_path / 'ck')
    shutil.copytree(stopped, copy)
    return copy


def _contents(folder: str) -> dict[str, str]:
    found = {}
    for d, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(d, name), 'rb') as f:
                found[os.path.relpath(os.path.join(d, name), folder)] = hashlib.sha1(
                    f.read()
                ).hexdigest()
    return found


def _stages(checkpoint: str) -> list:
    import json

    with open(os.path.join(checkpoint, 'pipeline.json')) as f:
        return json.load(f)['stages']


def test_an_unchanged_rerun_resumes(checkpoint):
    assert _run(checkpoint) == _expected(STOP, STEPS)


def test_a_downstream_map_added(checkpoint):
    """'Tag' joins the stage reading the GroupByKey (fusion names that stage
    anew): its state is found by the GroupByKey's label; the new output
    includes the Map's lines."""
    before = _stages(checkpoint)
    got = _run(checkpoint, tag=True)
    expected = _expected(STOP, STEPS)
    assert got == sorted(
        expected + [f'tagged {line}' for line in expected if line.startswith('sum')]
    )
    after = _stages(checkpoint)
    [old] = [s for s, _ in before if 'Group/Read' in s]
    [new] = [s for s, _ in after if 'Group/Read' in s]
    assert old != new and 'Tag' in new


def test_a_changed_lambda(checkpoint):
    assert _run(checkpoint, sum_fn=_total) == _expected(STOP, STEPS, 'total')


def test_renamed_stateful_transforms_with_a_mapping(checkpoint):
    """The GroupByKey and the stateful DoFn renamed, named in the mapping:
    window [20, 40)'s buffered elements and the counts carry over (the
    DoFn's state rows name the old label and are read under the new one)."""
    got = _run(
        checkpoint,
        '--spark_transform_name_mapping={"Group": "GroupPerKey", "Running": "RunningCount"}',
        group='GroupPerKey',
        running='RunningCount',
    )
    assert got == _expected(STOP, STEPS)


def _refused(checkpoint: str, *flags: str, **changes) -> str:
    before = _contents(checkpoint)
    with pytest.raises(IncompatibleUpdateError) as refused:
        _run(checkpoint, *flags, **changes)
    assert OUT == []  # nothing ran
    assert _contents(checkpoint) == before
    return str(refused.value)


def test_a_renamed_group_by_key_without_mapping_is_refused(checkpoint):
    message = _refused(checkpoint, group='GroupPerKey')
    assert "GroupByKey 'Group' holds state in the checkpoint and is not in this pipeline" in message
    assert '--transform_name_mapping' in message
    # The resumed run of the old code still works.
    assert _run(checkpoint) == _expected(STOP, STEPS)


def test_a_changed_key_coder_of_a_stateful_dofn_is_refused(checkpoint):
    message = _refused(checkpoint, key_bytes=True)
    assert "stateful DoFn 'Running': key coder changed: string_utf8 -> bytes" in message


def test_a_mapping_to_an_unknown_label_is_refused(checkpoint):
    message = _refused(checkpoint, '--transform_name_mapping={"Group": "Nope"}')
    assert "maps 'Group' to 'Nope', which is not a transform of this pipeline" in message
    assert "GroupByKey 'Group' is mapped to 'Nope'" in message


def test_a_map_fused_into_a_splittable_dofns_stage(stopped_ticks, tmp_path):
    """The splittable DoFn's stage is named anew ('Plus' fused into it): its
    pending residual moves with it and reads on from tick 12; the counts and
    window [0, 20)'s sums go on from the stop."""
    checkpoint = str(tmp_path / 'ck')
    shutil.copytree(stopped_ticks, checkpoint)
    before = _stages(checkpoint)
    assert _run(checkpoint, ticks=True, plus=True) == _expected(STOP, STEPS, ticks=True)
    [old] = [s for s, _ in before if 'Process' in s]
    [new] = [s for s, _ in _stages(checkpoint) if 'Process' in s]
    assert old != new and 'Plus' in new


def _shares(first: int, last: int) -> list[str]:
    """Each element of steps [first, last) with its 20 s window's total, by
    Beam's model."""
    values = [(f'k{i % 2}', step * 10 + i) for step in range(STEPS) for i in range(PER_STEP)]
    totals: dict[int, int] = {}
    for _, v in values:
        totals[v // 20] = totals.get(v // 20, 0) + v
    return sorted(
        f'share {k} {v} {totals[v // 20]}' for k, v in values if first * 10 <= v < last * 10
    )


def test_a_map_fused_behind_a_side_input_reader(tmp_path):
    """Stopped in the micro-batch reading step 2, whose elements wait in the
    driver for their window's total (the side input is not ready before the
    watermark passes 40): 'Tag' fused behind 'Share' names its stage anew,
    the held elements move with it and are printed once the total is."""
    checkpoint = str(tmp_path / 'ck')
    _pause_at((STOP - 1) * 10)
    try:
        assert _run(checkpoint, side=True) == _shares(0, STOP - 1)
    finally:
        PAUSE['at'] = None
        PAUSE['go'].set()
    before = _stages(checkpoint)
    expected = _shares(STOP - 1, STEPS)
    assert _run(checkpoint, side=True, tag=True) == sorted(
        expected + [f'tagged {line}' for line in expected]
    )
    [old] = [s for s, _ in before if 'Share' in s]
    [new] = [s for s, _ in _stages(checkpoint) if 'Share' in s]
    assert old != new and 'Tag' in new
