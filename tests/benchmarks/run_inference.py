"""scikit-learn inference over many rows: this runner vs Beam's FnApiRunner vs
the same model in PySpark's ``mapInPandas``; wall time and model loads per run.

Run by hand, never by pytest (needs scikit-learn)::

    python tests/benchmarks/run_inference.py                 # 1,000,000 rows
    python tests/benchmarks/run_inference.py --rows 200000 --rounds 3

A logistic regression on 4 features is trained and pickled once. Each run
builds the rows itself (row i has features ``(i * k % 97) / 97`` for k in 1, 3,
7, 11, in 16 shards), predicts every row and sums the predicted classes, so the
three agree on one number:

- ``inproc``: ``InProcessSparkRunner`` on a local session, Beam's
  ``RunInference(SklearnModelHandlerNumpy)``;
- ``fnapi``: the same pipeline on Beam's ``FnApiRunner`` (in memory);
- ``pandas``: ``spark.range(rows).mapInPandas`` loading the model in each task
  and predicting whole Arrow batches (what a PySpark user writes);
- ``debug``: the same on the debug engine (the worker
  code in this process, so this process's CPU seconds are the work's).

Model loads are counted by the process that loads (a line per load in a file):
RunInference loads once per Python process (Beam's ``Shared``), the
``mapInPandas`` function once per task. The batches ``BatchElements`` made for
RunInference are counted the same way (a line per batch with its size). The
runners take turns within each round (interleaved, so a change of the
machine's load hits all of them alike). Prints per runner the median seconds
(warm: the session and workers already started by a first round), the loads
per run, the batches per run with their median and mean size, and the sum;
and this process's CPU seconds per run (the whole work for ``debug`` and
``fnapi``, the driver's share only for ``inproc*`` and ``pandas``).
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import tempfile
import time

import numpy as np

SHARDS = 16
WEIGHTS = (1, 3, 7, 11)


def features(start: int, stop: int) -> np.ndarray:
    i = np.arange(start, stop, dtype=np.int64)[:, None]
    return ((i * np.array(WEIGHTS)) % 97) / 97.0


def train(path: str) -> None:
    from sklearn.linear_model import LogisticRegression

    x = features(0, 5000)
    y = (x.sum(axis=1) > 2.0).astype(int)
    with open(path, 'wb') as f:
        pickle.dump(LogisticRegression().fit(x, y), f)


def _handler(model_path: str, loads: str):
    from apache_beam.ml.inference.sklearn_inference import SklearnModelHandlerNumpy

    class CountingHandler(SklearnModelHandlerNumpy):
        def load_model(self):
            with open(loads, 'a') as f:
                f.write(f'{os.getpid()}\n')
            return super().load_model()

        def run_inference(self, batch, model, inference_args=None):
            with open(loads + '.batches', 'a') as f:
                f.write(f'{len(batch)}\n')
            return super().run_inference(batch, model, inference_args)

    return CountingHandler(model_uri=model_path)


def beam_run(runner, rows: int, model_path: str, loads: str, flags: tuple = ()) -> int:
    import apache_beam as beam
    from apache_beam.ml.inference.base import RunInference
    from apache_beam.options.pipeline_options import PipelineOptions

    step = -(-rows // SHARDS)

    def shard(s):
        yield from features(s * step, min(rows, (s + 1) * step))

    with beam.Pipeline(runner=runner, options=PipelineOptions(list(flags))) as p:
        total = (
            p
            | beam.Create(range(SHARDS))
            | beam.FlatMap(shard)
            | RunInference(_handler(model_path, loads))
            | beam.Map(lambda r: int(r.inference))
            | beam.CombineGlobally(sum)
        )
        total | beam.Map(lambda t: _write(loads + '.sum', t))
    with open(loads + '.sum') as f:
        return int(f.read())


def _write(path: str, value) -> None:
    with open(path, 'w') as f:
        f.write(str(value))


def pandas_run(spark, rows: int, model_path: str, loads: str) -> int:
    import pandas as pd

    def predict(batches):
        with open(loads, 'a') as f:
            f.write(f'{os.getpid()}\n')
        with open(model_path, 'rb') as f:
            model = pickle.load(f)
        for batch in batches:
            i = batch['id'].to_numpy()[:, None]
            x = ((i * np.array(WEIGHTS)) % 97) / 97.0
            yield pd.DataFrame({'p': model.predict(x)})

    df = spark.range(0, rows, 1, SHARDS).mapInPandas(predict, 'p long')
    return int(df.groupBy().sum('p').collect()[0][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--runners', default='inproc,fnapi,pandas')
    args = parser.parse_args()
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.spark.session import get_or_create

    spark, _ = get_or_create('local[2]', None, {})
    folder = tempfile.mkdtemp(prefix='run_inference_bench_')
    model_path = os.path.join(folder, 'model.pkl')
    train(model_path)
    runs = {
        'inproc': lambda loads: beam_run(
            InProcessSparkRunner(spark=spark), args.rows, model_path, loads
        ),
        'debug': lambda loads: beam_run(
            InProcessSparkRunner(debug=True), args.rows, model_path, loads
        ),
        'fnapi': lambda loads: beam_run(FnApiRunner(), args.rows, model_path, loads),
        'pandas': lambda loads: pandas_run(spark, args.rows, model_path, loads),
    }
    print(
        f'rows={args.rows} rounds={args.rounds} (+1 warm-up) load average={os.getloadavg()[0]:.1f}'
    )
    names = args.runners.split(',')
    times, cpu, load_counts, batches, sums = ({n: [] for n in names} for _ in range(5))
    for round_ in range(args.rounds + 1):
        for name in names:
            loads = os.path.join(folder, f'{name}-{round_}.loads')
            start, cpu_start = time.monotonic(), time.process_time()
            sums[name].append(runs[name](loads))
            seconds = time.monotonic() - start
            cpu_seconds = time.process_time() - cpu_start
            with open(loads) as f:
                count = len(f.read().split())
            sizes = []
            if os.path.exists(loads + '.batches'):
                with open(loads + '.batches') as f:
                    sizes = [int(n) for n in f.read().split()]
            if round_:  # the first round starts workers: warm-up
                times[name].append(seconds)
                cpu[name].append(round(cpu_seconds, 2))
                load_counts[name].append(count)
                batches[name].append(sizes)
    print(f'load average after: {os.getloadavg()[0]:.1f}')
    for name in names:
        sizes = [n for run in batches[name] for n in run]
        shape = (
            f'batches per run {[len(run) for run in batches[name]]} '
            f'(median {statistics.median(sizes):.0f}, mean '
            f'{statistics.mean(sizes):.0f})  '
            if sizes
            else ''
        )
        print(
            f'{name:14s} median {statistics.median(times[name]):6.2f} s  '
            f'runs {[round(t, 2) for t in times[name]]}  CPU s {cpu[name]}  '
            f'model loads per '
            f'run {load_counts[name]}  {shape}sum {sorted(set(sums[name]))}'
        )


if __name__ == '__main__':
    main()
