"""An endless stream for the stop tests, runnable as a script (a driver to
signal): ``python -m tests.streaming.stop_pipeline OUT CHECKPOINT``.

PeriodicImpulse ticks every 0.2 s (Beam's unbounded splittable DoFn); each
tick leaves a file in OUT named by its timestamp (a side effect the test
watches to know the stream is under way). Runs on the debug engine with
``--checkpoint_location`` until it is stopped, with the default logging.
"""

from __future__ import annotations

import os
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse


class Mark(beam.DoFn):
    def __init__(self, out: str):
        self._out = out

    def process(self, tick):
        with open(os.path.join(self._out, f'{float(tick):.3f}'), 'w'):
            pass
        yield tick


def main(out: str, checkpoint: str) -> None:
    options = PipelineOptions(
        [
            '--runner=beam_spark_inproc.InProcessSparkRunner',
            '--streaming',
            '--inproc_debug',
            f'--checkpoint_location={checkpoint}',
        ]
    )
    with beam.Pipeline(options=options) as p:
        _ = (
            p
            | PeriodicImpulse(start_timestamp=time.time(), fire_interval=0.2)
            | beam.ParDo(Mark(out))
        )


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
