"""What a Spark Python worker loads to unpickle a StageTask, and how long it takes.

    python tests/benchmarks/worker_imports.py [--runs 5]

Plans a small pipeline (Create -> Map with a side input -> GroupByKey), pickles
the StageTask of its side-input stage with cloudpickle as Spark does (the side
input as a shipped file, as one over ``--spark_inline_side_input_mb``), then
unpickles it in fresh interpreters that have imported only what PySpark's worker
imports itself (pyspark.serializers, pyarrow). Prints the median time of the
unpickling and the package's modules it loaded, and how many modules in all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# Run in a fresh interpreter: what PySpark's worker has loaded before a task,
# then the task's unpickling.
PROBE = r"""
import json, sys, time
import pyarrow, pyspark.serializers, cloudpickle
before = set(sys.modules)
start = time.perf_counter()
with open(sys.argv[1], 'rb') as f:
    task = cloudpickle.load(f)
seconds = time.perf_counter() - start
loaded = sorted(set(sys.modules) - before)
print(json.dumps({'seconds': seconds, 'loaded': loaded}))
"""


def pickled_task(path: str) -> None:
    """Writes a StageTask, as Spark ships it, to ``path``."""
    import apache_beam as beam
    import cloudpickle
    from apache_beam.pipeline import Pipeline

    from beam_spark_inproc.planning.planner import plan_pipeline
    from beam_spark_inproc.worker.stage_task import StageTask

    p = Pipeline()
    side = p | 'Side' >> beam.Create([1, 2])
    (
        p
        | beam.Create([1, 2, 3])
        | beam.Map(lambda x, s: (x % 2, x + sum(s)), beam.pvalue.AsList(side))
        | beam.GroupByKey()
    )
    plan = plan_pipeline(p.to_runner_api(), False)
    stage = next(s for s in plan.stages if s.side_inputs)
    try:  # a side input over the inline size travels as a shipped file
        from beam_spark_inproc.worker.shipped import ShippedFile
    except ImportError:  # before the worker boundary: the Spark package's own
        from beam_spark_inproc.spark.shipping import ShippedFile
    task = StageTask('job', stage, (ShippedFile('beam-side-input-x.bin', 1),))
    with open(path, 'wb') as f:
        cloudpickle.dump(task, f)


def probe(path: str) -> dict:
    out = subprocess.run(
        [sys.executable, '-c', PROBE, path], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, 'task.pkl')
        pickled_task(path)
        results = [probe(path) for _ in range(args.runs)]
    seconds = statistics.median(r['seconds'] for r in results)
    loaded = results[-1]['loaded']
    ours = [m for m in loaded if m.split('.')[0] == 'beam_spark_inproc']
    print(
        f'unpickling a StageTask: median {seconds * 1000:.0f} ms over '
        f'{args.runs} fresh interpreters; {len(loaded)} modules loaded, '
        f"{sum(m.startswith('apache_beam') for m in loaded)} of them Beam's, "
        f"{sum(m.startswith('pyspark') for m in loaded)} PySpark's"
    )
    print('beam_spark_inproc modules loaded (%d):' % len(ours))
    for m in ours:
        print('  ' + m)


if __name__ == '__main__':
    main()
