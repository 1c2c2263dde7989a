"""A stream for the restart tests, runnable as a script (a driver to kill).

``python -m tests.streaming.restart_pipeline OUT CHECKPOINT [--kill MARKER]
[--spark] [--variant timers|side|sdf|text|parquet]``: ``timers`` (``build``): windowed
GroupByKey sums and a stateful DoFn with event-time timers
(``test_triggers.BufferUntilTimer``); ``side``: each element with its window's
sum as a side input (elements wait in the driver for the side input's
window to close); ``sdf``: windowed sums over an unbounded splittable DoFn
(``test_sources.Ticks``: ``defer_remainder`` residuals held by the driver).
Each writes with Beam's ``fileio.WriteToFiles`` into OUT; ``text``: lines
written with Beam's ``WriteToText`` per window, ``parquet``: the same records
with Beam's ``WriteToParquet`` (both killed when step 7's first element
arrives). With ``--kill``, the others' driver SIGKILLs itself
the first time (MARKER absent) the files of window [20, 30) have been moved
into OUT (on Spark: a worker kills the driver), i.e. in the middle of a micro-batch whose output is
already visible
and whose commit record is not written. Prints the committed counters as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window

from tests.streaming.test_sources import Ticks
from tests.streaming.test_triggers import BufferUntilTimer

STEPS, PER_STEP, KEYS = 12, 8, 5
DRIVER_PID = 'RESTART_PIPELINE_DRIVER_PID'  # inherited by Spark's workers


def events() -> TestStream:
    stream = TestStream()
    for step in range(STEPS):
        stream = stream.add_elements(
            [
                window.TimestampedValue((f'k{i % KEYS}', step * PER_STEP + i), step * 5 + i % 5)
                for i in range(PER_STEP)
            ]
        )
        stream = stream.advance_watermark_to(step * 5 + 5)
    return stream.advance_watermark_to_infinity()


def _count(element):
    Metrics.counter('restart', 'elements').inc()
    return element


def _kill_driver_once(marker: str) -> None:
    """SIGKILLs the driver unless MARKER exists (then it is left alone)."""
    if marker and not os.path.exists(marker):
        open(marker, 'w').close()
        # The driver: this process on the debug engine, the Python process
        # that started Spark when this runs in a Spark worker.
        os.kill(int(os.environ.get(DRIVER_PID, os.getpid())), signal.SIGKILL)
        os._exit(9)


def _kill_once(result, marker: str):
    if result.window.start == 20:
        _kill_driver_once(marker)
    return result


def build(p: beam.Pipeline, out: str, marker: str = '') -> None:
    source = p | events() | 'Count' >> beam.Map(_count)
    sums = (
        source
        | 'Window' >> beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
        | 'Sum' >> beam.Map(lambda kv: f'sum {kv[0]} {sum(kv[1])}')
    )
    buffered = (
        source
        | beam.ParDo(BufferUntilTimer())
        | 'Slot' >> beam.WindowInto(window.FixedWindows(10))
        | 'Show' >> beam.Map(lambda kv: f'buffer {kv[0]} {kv[1]}')
    )
    written = (
        (sums, buffered)
        | beam.Flatten()
        | fileio.WriteToFiles(path=out, file_naming=fileio.default_file_naming('out', '.txt'))
    )
    _ = written | 'Kill' >> beam.Map(_kill_once, marker)


def _write(lines, out: str, marker: str) -> None:
    written = lines | fileio.WriteToFiles(
        path=out, file_naming=fileio.default_file_naming('out', '.txt')
    )
    _ = written | 'Kill' >> beam.Map(_kill_once, marker)


def build_side(p: beam.Pipeline, out: str, marker: str = '') -> None:
    # Allowed lateness: the gate keeps a window's side value 20 s after the
    # main input's watermark passed the window (``side_inputs.drop_expired``).
    windowed = (
        p
        | events()
        | 'Count' >> beam.Map(_count)
        | 'Window' >> beam.WindowInto(window.FixedWindows(10), allowed_lateness=20)
    )
    totals = windowed | beam.Values() | beam.CombineGlobally(sum).without_defaults()
    _write(
        windowed
        | 'Share'
        >> beam.Map(
            lambda kv, total: f'share {kv[0]} {kv[1]} {total}', beam.pvalue.AsSingleton(totals)
        ),
        out,
        marker,
    )


TICKS, TICKS_PER_BUNDLE = 60, 4


def build_sdf(p: beam.Pipeline, out: str, marker: str = '') -> None:
    _write(
        p
        | beam.Impulse()
        | beam.ParDo(Ticks(TICKS, TICKS_PER_BUNDLE, KEYS))
        | 'Count' >> beam.Map(_count)
        | 'Window' >> beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
        | 'Sum' >> beam.Map(lambda kv: f'sum {kv[0]} {sum(kv[1])}'),
        out,
        marker,
    )


def _kill_at(element, marker: str):
    """Kills the driver the first time (MARKER absent) step 7's first element
    arrives: windows before [30, 40) are written, the micro-batch is not
    committed."""
    if element[1] == 7 * PER_STEP:
        _kill_driver_once(marker)
    return element


def build_text(p: beam.Pipeline, out: str, marker: str = '') -> None:
    # Beam's WriteToText on unbounded input: its windowed WriteImpl reads side
    # inputs after a GroupByKey and names a file per window.
    _ = (
        p
        | events()
        | 'Count' >> beam.Map(_count)
        | 'Kill' >> beam.Map(_kill_at, marker)
        | 'Window' >> beam.WindowInto(window.FixedWindows(10))
        | 'Line' >> beam.Map(lambda kv: f'text {kv[0]} {kv[1]}')
        | beam.io.WriteToText(os.path.join(out, 'text'), num_shards=1)
    )


def build_parquet(p: beam.Pipeline, out: str, marker: str = '') -> None:
    # Beam's WriteToParquet on unbounded input: the same windowed WriteImpl.
    import pyarrow as pa

    _ = (
        p
        | events()
        | 'Count' >> beam.Map(_count)
        | 'Kill' >> beam.Map(_kill_at, marker)
        | 'Window' >> beam.WindowInto(window.FixedWindows(10))
        | 'Record' >> beam.Map(lambda kv: {'key': kv[0], 'n': kv[1]})
        | beam.io.WriteToParquet(
            os.path.join(out, 'parquet'),
            pa.schema([('key', pa.string()), ('n', pa.int64())]),
            file_name_suffix='.parquet',
            num_shards=1,
        )
    )


VARIANTS = {
    'timers': build,
    'side': build_side,
    'sdf': build_sdf,
    'text': build_text,
    'parquet': build_parquet,
}
# Elements the Count step sees in a fault-free run of each variant.
ELEMENTS = {
    'timers': STEPS * PER_STEP,
    'side': STEPS * PER_STEP,
    'sdf': TICKS,
    'text': STEPS * PER_STEP,
    'parquet': STEPS * PER_STEP,
}


def run(runner, out: str, checkpoint: str, marker: str = '', variant: str = 'timers') -> dict:
    options = PipelineOptions([f'--checkpoint_location={checkpoint}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=runner, options=options)
    VARIANTS[variant](p, out, marker)
    result = p.run()
    assert result.wait_until_finish() == 'DONE', result.state
    counters = result.metrics().query(MetricsFilter().with_namespace('restart'))['counters']
    return {c.key.metric.name: c.committed for c in counters}


def outputs(out: str) -> dict[str, list[str]]:
    """The final files (not Beam's hidden temporary folders): name -> lines
    (a Parquet file's records, one line each)."""
    found = {}
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if os.path.isfile(path) and not name.startswith('.'):
            if name.endswith('.parquet'):
                import pyarrow.parquet as pq

                found[name] = sorted(
                    json.dumps(r, sort_keys=True) for r in pq.read_table(path).to_pylist()
                )
                continue
            with open(path) as f:
                found[name] = sorted(f.read().splitlines())
    return found


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('out')
    parser.add_argument('checkpoint')
    parser.add_argument('--kill', default='')
    parser.add_argument('--spark', action='store_true')
    parser.add_argument('--variant', default='timers', choices=sorted(VARIANTS))
    args = parser.parse_args(argv)
    from beam_spark_inproc import InProcessSparkRunner

    os.environ[DRIVER_PID] = str(os.getpid())
    runner = InProcessSparkRunner(debug=not args.spark)
    print(json.dumps(run(runner, args.out, args.checkpoint, args.kill, args.variant)))


if __name__ == '__main__':
    main(sys.argv[1:])
