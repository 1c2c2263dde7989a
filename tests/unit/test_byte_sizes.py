"""Sampled byte sizes (``worker.byte_sizes``): none by default, Beam's with
``--spark_sampled_byte_sizes``; element counts either way (debug engine: the
same worker code, no Spark)."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import monitoring_infos
from apache_beam.metrics.monitoring_infos import ELEMENT_COUNT_URN
from apache_beam.metrics.monitoring_infos import SAMPLED_BYTE_SIZE_URN
from apache_beam.options.pipeline_options import PipelineOptions

from beam_spark_inproc import InProcessSparkRunner


def _samples(*flags: str) -> tuple[int, int]:
    """(elements counted, byte sizes sampled) over every PCollection."""
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True),
                      options=PipelineOptions(list(flags)))
    _ = (p | beam.Create(list(range(100))) | beam.BatchElements(min_batch_size=10)
         | beam.Map(len))
    result = p.run()
    result.wait_until_finish()
    counted = sampled = 0
    for info in result.monitoring_metrics().monitoring_infos():
        if info.urn == ELEMENT_COUNT_URN:
            counted += monitoring_infos.extract_counter_value(info)
        elif info.urn == SAMPLED_BYTE_SIZE_URN:
            sampled += monitoring_infos.extract_distribution(info)[0]
    return counted, sampled


def test_no_byte_size_samples_by_default():
    counted, sampled = _samples()
    assert counted >= 100 and sampled == 0


def test_byte_size_samples_when_asked_for():
    counted, sampled = _samples('--spark_sampled_byte_sizes')
    assert counted >= 100 and sampled > 0
