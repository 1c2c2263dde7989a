"""Inside Spark's Python workers: the objects kept between tasks are frozen out
of PySpark's garbage collection after every task (``worker.gc_epochs``), and
bundles sample at the runner's state-sampler period
(``worker.processors.SAMPLING_MS``).

The unit tests (``tests/unit/test_gc_epochs.py``) check the policy; this checks
that a real worker is recognized as one forked by PySpark's daemon.
"""

from __future__ import annotations

import gc

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.worker import statesampler

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.worker import gc_epochs
from beam_spark_inproc.worker import processors
from tests.integration.outputs import run_to_lines


class _Probe(beam.DoFn):
    def process(self, element):
        yield (
            element,
            gc_epochs.forked_by_pyspark_daemon(),
            gc.get_freeze_count() > 0,
            statesampler.get_current_tracker().sampling_period_ms,
        )


def test_workers_freeze_and_sample_at_the_runners_period(spark, tmp_path):
    lines = run_to_lines(
        InProcessSparkRunner(spark=spark),
        lambda p: p | beam.Create(range(4)) | beam.Reshuffle() | beam.ParDo(_Probe()),
        str(tmp_path / 'out'),
        # Spark's Python workers are under test: every stage on Spark, none
        # of these small stages in the driver (``execution.small``).
        PipelineOptions(['--spark_small_data_kb=0']),
    )
    assert lines == [repr((i, True, True, processors.SAMPLING_MS)) for i in range(4)]
