"""A small keyed stream for the refusal tests, built the same way in the test
process and in a driver process of its own::

    python -m tests.streaming.refusal_pipeline CHECKPOINT VARIANT

VARIANT ``drains`` asks for a drain when element ``DRAIN_AT`` passes (as
``python -m beam_spark_inproc drain`` does); ``plain`` is the same stream
without that; ``renamed`` is ``plain`` with its GroupByKey under another label
(an update the checkpoint refuses). As a script it runs on Spark
(``local[1]``) and prints what the run raised (``REFUSED Class: first line``)
and whether a JVM was started in the process (``JVM True|False``): a refusal
read from the checkpoint comes before Spark starts.
"""

from __future__ import annotations

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window

DRAIN_AT = 3
VARIANTS = ('drains', 'plain', 'renamed')


class RequestDrain(beam.DoFn):
    def __init__(self, checkpoint: str):
        self._checkpoint = checkpoint

    def process(self, kv):
        if kv[1] == DRAIN_AT:
            from beam_spark_inproc.__main__ import main as cli

            assert cli(['drain', self._checkpoint]) == 0
        yield kv


def build(p: beam.Pipeline, checkpoint: str, variant: str):
    stream = TestStream()
    for i in range(8):
        stream = stream.add_elements([window.TimestampedValue(i, i)]).advance_watermark_to(i + 1)
    kvs = p | 'Events' >> stream | 'Key' >> beam.Map(lambda x: (x % 2, x))
    if variant == 'drains':
        kvs = kvs | 'Drain' >> beam.ParDo(RequestDrain(checkpoint))
    group = 'Group per key' if variant == 'renamed' else 'Group'
    return (
        kvs
        | 'Window' >> beam.WindowInto(window.FixedWindows(4))
        | group >> beam.GroupByKey()
        | 'Sum' >> beam.MapTuple(lambda k, vs: (k, sum(vs)))
    )


def main(checkpoint: str, variant: str) -> None:
    options = PipelineOptions(
        [
            '--runner=beam_spark_inproc.InProcessSparkRunner',
            '--streaming',
            '--spark_master=local[1]',
            f'--checkpoint_location={checkpoint}',
        ]
    )
    try:
        with beam.Pipeline(options=options) as p:
            build(p, checkpoint, variant)
    except Exception as e:
        print(f'REFUSED {type(e).__name__}: {str(e).splitlines()[0]}', flush=True)
    from pyspark import SparkContext

    print(f'JVM {SparkContext._gateway is not None}', flush=True)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
