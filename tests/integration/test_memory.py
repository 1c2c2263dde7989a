"""Bounded memory: a stage's outputs leave in bounded batches while the bundle runs."""

from __future__ import annotations

import pathlib
import resource

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from beam_spark_inproc import InProcessSparkRunner

ELEMENTS = 150_000
ELEMENT_BYTES = 2000  # 300 MB of output from one input element
LIMIT_MB = 150


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Explode(beam.DoFn):
    """One element -> ELEMENTS strings; reports how much this worker's peak RSS grew."""

    def start_bundle(self):
        self._start_mb = _peak_mb()

    def process(self, n):
        payload = 'x' * ELEMENT_BYTES
        for i in range(n):
            yield '%09d%s' % (i, payload)

    def finish_bundle(self):
        yield WindowedValue(
            ('growth_mb', _peak_mb() - self._start_mb),
            GlobalWindow().max_timestamp(),
            [GlobalWindow()],
        )


def test_flatmap_explosion_streams_out_with_bounded_worker_memory(spark, tmp_path):
    out = tmp_path / 'out'
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        (
            p
            | beam.Create([ELEMENTS])
            | beam.ParDo(_Explode())
            # The exploded elements cross a stage boundary, one row each.
            | beam.Reshuffle()
            | beam.Map(lambda e: e if isinstance(e, tuple) else ('n', 1))
            | beam.GroupByKey()
            | beam.MapTuple(lambda k, vs: '%s %d' % (k, sum(vs) if k == 'n' else max(vs)))
            | beam.io.WriteToText(str(out), shard_name_template='')
        )
    result = dict(line.split() for line in pathlib.Path(out).read_text().splitlines())
    assert int(result['n']) == ELEMENTS
    growth = int(result['growth_mb'])
    print(f'peak RSS growth of the producing Python worker: {growth} MB')
    # Holding the bundle's output would grow the producing worker by > 300 MB.
    assert growth < LIMIT_MB, f'producing Python worker grew by {growth} MB'
