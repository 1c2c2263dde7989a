"""Run as a script by test_metrics_retry.py: a pipeline whose tasks fail once.

Needs its own SparkSession (``local[2,2]``: two task attempts), so it runs in a
subprocess; prints the metric results as JSON, with the last JSON document and
Graphite lines the run pushed to receivers on 127.0.0.1 (``receivers.py``).
"""

from __future__ import annotations

import json
import sys

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from receivers import GraphiteReceiver
from receivers import HttpReceiver

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.spark.session import get_or_create

N = 1000


class FailFirstAttempt(beam.DoFn):
    def __init__(self):
        self.seen = Metrics.counter('retry', 'seen')
        self.sizes = Metrics.distribution('retry', 'value')

    def process(self, x):
        from pyspark import TaskContext

        self.seen.inc()
        self.sizes.update(x)
        if x == N - 1 and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError('first attempt fails after counting')
        yield x


def main() -> None:
    spark, _ = get_or_create('local[2,2]', None, {})
    with HttpReceiver() as http, GraphiteReceiver() as graphite:
        options = PipelineOptions(
            [
                f'--metrics_sink={http.url}/beam',
                f'--metrics_sink={graphite.url}',
                '--job_name=retry',
                # Spark's task retry is under test: every stage on Spark, none of
                # these small stages in the driver (``execution.small``).
                '--spark_small_data_kb=0',
            ]
        )
        with beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options) as p:
            (
                p
                | beam.Create(range(N))
                | beam.ParDo(FailFirstAttempt())
                | beam.combiners.Count.Globally()
            )
        result = p.result
        pushed, lines = http.documents[-1], graphite.pushes[-1]
    counters = result.metrics().query(MetricsFilter().with_name('seen'))['counters']
    dists = result.metrics().query(MetricsFilter().with_name('value'))['distributions']
    json.dump(
        {
            'state': str(result.state),
            'committed': counters[0].committed,
            'attempted': counters[0].attempted,
            'dist_count': dists[0].committed.count,
            'dist_sum': dists[0].committed.sum,
            'dist_attempted_count': dists[0].attempted.count,
            'pushed': pushed,
            'graphite': lines,
        },
        sys.stdout,
    )
    spark.stop()


if __name__ == '__main__':
    main()
