"""A stream for the restart tests, runnable as a script (a driver to kill).

``python -m tests.streaming.restart_pipeline OUT CHECKPOINT [--kill MARKER]
[--spark]``: windowed GroupByKey sums and a stateful DoFn with event-time
timers (``test_triggers.BufferUntilTimer``), both written by Beam's
``fileio.WriteToFiles`` into OUT. With ``--kill``, the driver SIGKILLs itself
the first time (MARKER absent) the files of window [20, 30) have been moved
into OUT (on Spark: a worker kills the driver), i.e. in the middle of a micro-batch whose output is already visible
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

from tests.streaming.test_triggers import BufferUntilTimer

STEPS, PER_STEP, KEYS = 12, 8, 5
DRIVER_PID = 'RESTART_PIPELINE_DRIVER_PID'  # inherited by Spark's workers


def events() -> TestStream:
    stream = TestStream()
    for step in range(STEPS):
        stream = stream.add_elements([
            window.TimestampedValue((f'k{i % KEYS}', step * PER_STEP + i),
                                    step * 5 + i % 5)
            for i in range(PER_STEP)])
        stream = stream.advance_watermark_to(step * 5 + 5)
    return stream.advance_watermark_to_infinity()


def _count(element):
    Metrics.counter('restart', 'elements').inc()
    return element


def _kill_once(result, marker: str):
    if (marker and result.window.start == 20
            and not os.path.exists(marker)):
        open(marker, 'w').close()
        # The driver: this process on the debug engine, the Python process
        # that started Spark when this runs in a Spark worker.
        os.kill(int(os.environ.get(DRIVER_PID, os.getpid())), signal.SIGKILL)
        os._exit(9)
    return result


def build(p: beam.Pipeline, out: str, marker: str = '') -> None:
    source = p | events() | 'Count' >> beam.Map(_count)
    sums = (source
            | 'Window' >> beam.WindowInto(window.FixedWindows(10))
            | beam.GroupByKey()
            | 'Sum' >> beam.Map(lambda kv: f'sum {kv[0]} {sum(kv[1])}'))
    buffered = (source
                | beam.ParDo(BufferUntilTimer())
                | 'Slot' >> beam.WindowInto(window.FixedWindows(10))
                | 'Show' >> beam.Map(lambda kv: f'buffer {kv[0]} {kv[1]}'))
    written = ((sums, buffered)
               | beam.Flatten()
               | fileio.WriteToFiles(
                   path=out, file_naming=fileio.default_file_naming('out', '.txt')))
    _ = written | 'Kill' >> beam.Map(_kill_once, marker)


def run(runner, out: str, checkpoint: str, marker: str = '') -> dict:
    options = PipelineOptions([f'--checkpoint_location={checkpoint}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=runner, options=options)
    build(p, out, marker)
    result = p.run()
    assert result.wait_until_finish() == 'DONE', result.state
    counters = result.metrics().query(
        MetricsFilter().with_namespace('restart'))['counters']
    return {c.key.metric.name: c.committed for c in counters}


def outputs(out: str) -> dict[str, list[str]]:
    """The final files (not Beam's hidden temporary folders): name -> lines."""
    found = {}
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if os.path.isfile(path) and not name.startswith('.'):
            with open(path) as f:
                found[name] = sorted(f.read().splitlines())
    return found


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('out')
    parser.add_argument('checkpoint')
    parser.add_argument('--kill', default='')
    parser.add_argument('--spark', action='store_true')
    args = parser.parse_args(argv)
    from beam_spark_inproc import InProcessSparkRunner
    os.environ[DRIVER_PID] = str(os.getpid())
    runner = InProcessSparkRunner(debug=not args.spark)
    print(json.dumps(run(runner, args.out, args.checkpoint, args.kill)))


if __name__ == '__main__':
    main(sys.argv[1:])
