"""A stream writing windowed totals with WriteToSpark, for ``test_spark_sinks``;
runnable as a script (a driver to kill).

``python -m tests.streaming.spark_sink_pipeline OUT CHECKPOINT [--kill-mid
MARKER] [--spark]``: TestStream events -> FixedWindows(10)
with allowed lateness -> sum per key -> ``WriteToSpark(path=OUT)`` with the
window and pane in columns. ``--kill-mid``: the driver SIGKILLs itself (once:
MARKER absent) while publishing micro-batch ``KILL_MID`` or later, after its
files were renamed into OUT and before its published record was written.
(``KILL_AFTER``: the test's later fault, after a publish and before the
micro-batch's commit record.)
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import typing

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window

STEPS, PER_STEP, KEYS = 6, 6, 3
KILL_MID, KILL_AFTER = 3, 5
COLUMNS = dict(window_start='window_start', window_end='window_end',
               pane_timing='pane_timing', pane_index='pane_index')


# Built by call: this module's annotations are strings (``__future__``).
Total = typing.NamedTuple('Total', [('key', str), ('total', int)])


beam.coders.registry.register_coder(Total, beam.coders.RowCoder)


def events() -> TestStream:
    """Elements every 5 s, the watermark following them; then two late
    elements (within the allowed lateness) for windows already fired."""
    stream = TestStream()
    for step in range(STEPS):
        stream = stream.add_elements([
            window.TimestampedValue((f'k{i % KEYS}', step * PER_STEP + i),
                                    step * 5 + i % 5)
            for i in range(PER_STEP)])
        stream = stream.advance_watermark_to(step * 5 + 5)
    stream = stream.add_elements([window.TimestampedValue(('k0', 1000), 3),
                                  window.TimestampedValue(('k1', 2000), 12)])
    return stream.advance_watermark_to_infinity()


def totals(p: beam.Pipeline):
    return (p | events()
            | 'Window' >> beam.WindowInto(window.FixedWindows(10),
                                          allowed_lateness=60)
            | beam.CombinePerKey(sum)
            | 'Total' >> beam.Map(lambda kv: Total(*kv)).with_output_types(Total))


def build(p: beam.Pipeline, out: str, spark) -> None:
    from beam_spark_inproc.transforms import WriteToSpark
    _ = totals(p) | WriteToSpark(path=out, mode='append', spark=spark, **COLUMNS)


class _Rows(beam.DoFn):
    """What the write's columns hold, from Beam's own window and pane."""

    def process(self, total, w=beam.DoFn.WindowParam,
                pane=beam.DoFn.PaneInfoParam):
        from apache_beam.utils.windowed_value import PaneInfoTiming
        yield (total.key, total.total, w.start.micros, w.end.micros,
               PaneInfoTiming.to_string(pane.timing), pane.index)


def expected() -> list[tuple]:
    """The rows, from Beam's BundleBasedDirectRunner on the same stream."""
    from tests.streaming import oracle
    return sorted(record[0] for record in oracle.direct(
        lambda p: totals(p) | beam.ParDo(_Rows())))


def table(out: str) -> list[tuple]:
    """The rows at OUT as ``expected`` gives them (pyarrow's reader skips
    the ``_``-folders, as Spark's does)."""
    data = pq.read_table(out)
    micros = {name: data.column(name).cast(pa.timestamp('us', tz='UTC'))
              .cast(pa.int64()).to_pylist()
              for name in ('window_start', 'window_end')}
    return sorted(zip(data.column('key').to_pylist(),
                      data.column('total').to_pylist(),
                      micros['window_start'], micros['window_end'],
                      data.column('pane_timing').to_pylist(),
                      data.column('pane_index').to_pylist()))


def run(runner, out: str, checkpoint: str, spark) -> str:
    options = PipelineOptions([f'--checkpoint_location={checkpoint}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=runner, options=options)
    build(p, out, spark)
    result = p.run()
    return result.wait_until_finish()


def _kill(marker: str) -> None:
    open(marker, 'w').close()
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(kill_mid: str) -> None:
    """Test hooks: SIGKILL this driver at a point of the sink's protocol."""
    from beam_spark_inproc.transforms import stream_runtime as spark_sinks
    if kill_mid and not os.path.exists(kill_mid):
        record = spark_sinks._write_atomically

        def killing_record(path, data):
            published = json.loads(data)
            if path.endswith('published.json') and \
                    published['micro_batch'] >= KILL_MID and published['files']:
                _kill(kill_mid)  # files renamed, record not written
            record(path, data)
        spark_sinks._write_atomically = killing_record


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('out')
    parser.add_argument('checkpoint')
    parser.add_argument('--kill-mid', default='')
    parser.add_argument('--spark', action='store_true')
    args = parser.parse_args(argv)
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.spark import session
    spark, _ = session.get_or_create('local[2]', None, {})
    _arm(args.kill_mid)
    print(run(InProcessSparkRunner(debug=not args.spark, spark=spark),
              args.out, args.checkpoint, spark))


if __name__ == '__main__':
    main(sys.argv[1:])
