"""RunInference on Spark: a model is loaded once per Python worker process
(Beam's ``Shared`` in RunInference's DoFn, kept by the per-process
BundleProcessor cache and Spark's worker reuse), not once per bundle or task;
with ``large_model=True`` once per machine, shared by its Python workers
(Beam's ``MultiProcessShared``, docs/batch-semantics.md). Results are checked
against values computed by hand and against FnApiRunner's."""

from __future__ import annotations

import os
import signal
import time
import uuid

import apache_beam as beam
from apache_beam.ml.inference import base
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner


class _Doubler:
    def predict(self, x: int) -> int:
        return 2 * x


class _LoggingHandler(base.ModelHandler):
    """Appends this process's id to ``loads`` on every model load."""

    def __init__(self, loads: str, **kwargs):
        super().__init__(**kwargs)
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
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options) as p:
        out = (
            p
            | beam.Create(data)
            | beam.Reshuffle()
            | beam.ParDo(_LogBundles(str(bundles)))
            | base.RunInference(_LoggingHandler(str(loads)))
        )
        assert_that(out, equal_to([2 * x for x in data]))
    load_pids, bundle_pids = _lines(loads), _lines(bundles)
    assert len(bundle_pids) > len(set(bundle_pids))  # bundles shared processes
    assert sorted(load_pids) == sorted(set(load_pids))  # one load per process
    assert set(load_pids) <= set(bundle_pids)
    assert os.getpid() not in map(int, load_pids)  # loaded in Spark's workers


def _large_model_run(
    runner, options, loads: str, bundles: str, data: list, identifier: str
) -> list:
    """Runs RunInference with ``large_model=True`` (Beam's
    ``MultiProcessShared``); returns its output."""
    out_file = loads + '.out'

    def write(xs):
        with open(out_file, 'w') as f:
            f.write(' '.join(map(str, xs)))

    with beam.Pipeline(runner=runner, options=options) as p:
        (
            p
            | beam.Create(data)
            | beam.Reshuffle()
            | beam.ParDo(_LogBundles(bundles))
            | base.RunInference(
                _LoggingHandler(loads, large_model=True), model_identifier=identifier
            )
            | beam.combiners.ToList()
            | beam.Map(write)
        )
    with open(out_file) as f:
        return sorted(map(int, f.read().split()))


def test_large_model_loaded_once_per_machine(spark, tmp_path):
    """``large_model=True``: one model for all Python workers of the machine,
    as on Beam's FnApiRunner; after the worker holding it is gone (Spark stops
    Python workers idle for a minute) the next run loads it once again."""
    data = list(range(2000))
    identifier = uuid.uuid4().hex  # MultiProcessShared's tag, per machine
    expected = _large_model_run(
        FnApiRunner(),
        PipelineOptions(),
        str(tmp_path / 'ref-loads'),
        str(tmp_path / 'ref-bundles'),
        data,
        uuid.uuid4().hex,
    )
    assert expected == [2 * x for x in data]
    assert len(_lines(tmp_path / 'ref-loads')) == 1

    loads, bundles = tmp_path / 'loads', tmp_path / 'bundles'
    options = PipelineOptions(spark_small_data_kb=0, spark_parallelism=4)
    runner = InProcessSparkRunner(spark=spark)
    assert _large_model_run(runner, options, str(loads), str(bundles), data, identifier) == expected
    load_pids, bundle_pids = _lines(loads), _lines(bundles)
    assert len(set(bundle_pids)) >= 2  # RunInference ran in several processes
    assert len(load_pids) == 1  # ... sharing one model
    assert load_pids[0] in bundle_pids and int(load_pids[0]) != os.getpid()

    holder = int(load_pids[0])
    os.kill(holder, signal.SIGKILL)  # what Spark does to idle workers
    for _ in range(100):  # until Spark's daemon has reaped it
        try:
            os.kill(holder, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    assert _large_model_run(runner, options, str(loads), str(bundles), data, identifier) == expected
    again = _lines(loads)
    assert len(again) == 2 and again[1] != load_pids[0]
