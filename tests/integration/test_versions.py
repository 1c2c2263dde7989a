"""The first stage on Spark fails in one line when the workers' versions are
not the driver's (``compat.versions``): simulated by a driver that reports
another Beam and PySpark than the workers have."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.compat import versions
from beam_spark_inproc.errors import VersionMismatch


def _run(spark, options=('--spark_small_data_kb', '0')):
    from apache_beam.options.pipeline_options import PipelineOptions

    with beam.Pipeline(
        runner=InProcessSparkRunner(spark=spark), options=PipelineOptions(list(options))
    ) as p:
        counted = (
            p | beam.Create(['a', 'b', 'a']) | beam.Map(lambda w: (w, 1)) | beam.CombinePerKey(sum)
        )
        assert_that(counted, equal_to([('a', 2), ('b', 1)]))


def test_matching_versions_run(spark):
    _run(spark)


def test_a_worker_with_other_versions_fails_in_one_line(spark, monkeypatch):
    real = versions.local()
    claimed = real._replace(beam='2.70.9', pyspark='3.5.99')
    monkeypatch.setattr(versions, 'local', lambda: claimed)  # the driver's side only
    with pytest.raises(VersionMismatch) as raised:
        _run(spark)
    message = str(raised.value)
    assert '\n' not in message
    assert "The Spark workers' Beam, PySpark differ from the driver's" in message
    assert f'driver {claimed.describe()}; worker (' in message
    assert real.describe() in message
