"""RunInference on Spark: a model is loaded once per Python worker process
(Beam's ``Shared`` in RunInference's DoFn, kept by the per-process
BundleProcessor cache and Spark's worker reuse), not once per bundle or task;
the results are checked against values computed by hand."""
from __future__ import annotations

import os

import apache_beam as beam
from apache_beam.ml.inference import base
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner


class _Doubler:
    def predict(self, x: int) -> int:
        return 2 * x


class _LoggingHandler(base.ModelHandler):
    """Appends this process's id to ``loads`` on every model load."""

    def __init__(self, loads: str):
        super().__init__()
        self._loads = loads

    def load_model(self) -> _Doubler:
        with open(self._loads, 'a') as f:
            f.write(f'{os.getpid()}\n')
        return _Doubler()

    def run_inference(self, batch, model, inference_args=None):
        return [model.predict(x) for x in batch]


class _LogBundles(beam.DoFn):
    def __init__(self, bundles: str):
        self._bundles = bundles

    def start_bundle(self):
        with open(self._bundles, 'a') as f:
            f.write(f'{os.getpid()}\n')

    def process(self, x):
        yield x


def _lines(path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_model_loaded_once_per_worker_process(spark, tmp_path):
    loads, bundles = tmp_path / 'loads', tmp_path / 'bundles'
    data = list(range(4000))
    options = PipelineOptions(spark_small_data_kb=0, spark_parallelism=8)
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark),
                       options=options) as p:
        out = (p | beam.Create(data) | beam.Reshuffle()
               | beam.ParDo(_LogBundles(str(bundles)))
               | base.RunInference(_LoggingHandler(str(loads))))
        assert_that(out, equal_to([2 * x for x in data]))
    load_pids, bundle_pids = _lines(loads), _lines(bundles)
    assert len(bundle_pids) > len(set(bundle_pids))  # bundles shared processes
    assert sorted(load_pids) == sorted(set(load_pids))  # one load per process
    assert set(load_pids) <= set(bundle_pids)
    assert os.getpid() not in map(int, load_pids)  # loaded in Spark's workers

