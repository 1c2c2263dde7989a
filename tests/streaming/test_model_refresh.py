"""Model refresh in a stream (debug engine): ``RunInference`` with Beam's
``WatchFilePattern`` as its model side input picks up a model file that lands
while the stream runs; elements released after the poll that found it are
inferred with the new model, those before with the old one.

The file lands between micro-batches (the loop's ``after_micro_batch`` hook),
and the main input is a TestStream, so the loop's clock is TestStream's
virtual one: the Watch's next poll is due when the TestStream advances
processing time past its interval. No sleep, no race: the expected output is
computed by hand from which model applies in which micro-batch."""

from __future__ import annotations

import ast
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap

import apache_beam as beam
from apache_beam.ml.inference import base
from apache_beam.ml.inference.utils import WatchFilePattern
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.loop import StreamingExecutor
from tests.streaming import oracle


class Factor:
    def __init__(self, factor: int):
        self.factor = factor


class FileFactorHandler(base.ModelHandler):
    """A model is a file holding a factor; each load is logged (its path) to
    ``loads``."""

    def __init__(self, model_uri: str, loads: str):
        super().__init__()
        self._model_uri = model_uri
        self._loads = loads

    def load_model(self) -> Factor:
        with open(self._loads, 'a') as f:
            f.write(self._model_uri + '\n')
        with open(self._model_uri) as f:
            return Factor(int(f.read()))

    def update_model_path(self, model_path: str | None = None) -> None:
        self._model_uri = model_path or self._model_uri

    def run_inference(self, batch, model, inference_args=None):
        return [x * model.factor for x in batch]


def _write(path, factor: int) -> None:
    with open(path, 'w') as f:
        f.write(str(factor))


def run_refresh(runner, tmp_path, monkeypatch, *flags: str):
    """Model 1 (factor 10) exists when the stream starts; model 2 (factor
    100) lands after micro-batch 0. Micro-batches: 0 elements 1, 2 (model
    1); 1 element 3 (model 2 landed, not polled yet: model 1); 2 processing
    time +30 s, the Watch (interval 10 s) polls and finds model 2; 3
    elements 4, 5 (model 2); the hook cancels the stream after 4 (the Watch
    polls forever). Returns the outputs and the model paths loaded."""
    models, out = tmp_path / 'models', tmp_path / 'out'
    models.mkdir()
    out.mkdir()
    loads = str(tmp_path / 'loads')
    _write(models / 'model_1.txt', 10)
    init = StreamingExecutor.__init__

    def with_hook(executor, *args, **kwargs):
        init(executor, *args, **kwargs)

        def after(micro_batch: int) -> None:
            if micro_batch == 0:
                _write(models / 'model_2.txt', 100)
            if micro_batch == 4:
                executor.cancelled.set()

        executor.after_micro_batch = after

    monkeypatch.setattr(StreamingExecutor, '__init__', with_hook)

    p = beam.Pipeline(runner=runner, options=PipelineOptions(['--streaming', *flags]))
    main = (
        p
        | TestStream()
        .add_elements([1, 2])
        .add_elements([3])
        .advance_processing_time(30)
        .add_elements([4, 5])
        .advance_watermark_to_infinity()
    )
    side = p | WatchFilePattern(str(models / '*.txt'), interval=10)
    _ = (
        main
        | base.RunInference(
            FileFactorHandler(str(models / 'model_1.txt'), loads), model_metadata_pcoll=side
        )
        | beam.ParDo(oracle.Record(str(out)))
    )
    result = p.run()
    assert result.wait_until_finish(600_000) == 'CANCELLED'
    outputs = []
    for name in os.listdir(out):
        with open(out / name, 'rb') as f:
            outputs.append(pickle.load(f)[0])
    with open(loads) as f:
        loaded = [os.path.basename(line) for line in f.read().split()]
    return sorted(outputs), loaded


def test_watch_file_pattern_refreshes_the_model(tmp_path, monkeypatch):
    outputs, loaded = run_refresh(InProcessSparkRunner(debug=True), tmp_path, monkeypatch)
    assert outputs == [10, 20, 30, 400, 500]
    # Each model loaded once, in this order (one process).
    assert loaded == ['model_1.txt', 'model_2.txt']


def test_watch_file_pattern_refreshes_the_model_on_spark(tmp_path):
    """The same on Spark, where the polls, the file's state and the inference
    run in Spark's Python workers, and Spark starts workers while a stream
    runs (a second one where a task chains two stages, a new one after an
    idle one timed out). Beam's ``WatchFilePattern`` compares a file's time
    with its module's import time, so a worker started after model 2 landed
    ignored it (``io.watch_file_pattern``). Here worker reuse is off, so
    every task's worker is a new one; models load in order."""
    script = textwrap.dedent("""
        import pathlib, sys
        import pytest
        from pyspark.sql import SparkSession
        from beam_spark_inproc import InProcessSparkRunner
        from tests.streaming.test_model_refresh import run_refresh
        spark = (SparkSession.builder.master('local[2]')
                 .config('spark.python.worker.reuse', 'false').getOrCreate())
        outputs, loaded = run_refresh(
            InProcessSparkRunner(spark=spark), pathlib.Path(sys.argv[1]),
            pytest.MonkeyPatch(), '--spark_small_data_kb=0')
        print(outputs, loaded, sep='\\t')
    """)
    root = pathlib.Path(__file__).parents[2]
    out = subprocess.run(
        [sys.executable, '-c', script, str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get('PYTHONPATH')])),
        ),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    outputs, loaded = map(ast.literal_eval, out.stdout.strip().splitlines()[-1].split('\t'))
    assert outputs == [10, 20, 30, 400, 500]
    assert 'model_1.txt' in loaded and 'model_2.txt' in loaded
    assert loaded.index('model_1.txt') < loaded.index('model_2.txt')
