"""Peak Python worker memory of a stateful DoFn as the number of keys grows.

    python tests/benchmarks/state_memory.py [--keys 100000 1000000]

Each key gets 3 elements; a bag state holds ~1 KB per key until an event-time
timer fires at the end of the key's input and emits the key's total. If state
were kept for every key of a task, memory would grow with the number of keys;
the runner processes keys in sorted order and releases each key's state when
the key is done, so the peak stays flat. Prints, per key count: wall time and
the largest growth of ru_maxrss seen by a bundle of the stateful stage.
Run by hand; not part of the test suite.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import tempfile
import time

import apache_beam as beam
from apache_beam.coders import StrUtf8Coder
from apache_beam.transforms import userstate
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.spark.session import get_or_create


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class KeepThenEmit(beam.DoFn):
    BAG = userstate.BagStateSpec('bag', StrUtf8Coder())
    DONE = userstate.TimerSpec('done', userstate.TimeDomain.WATERMARK)

    def start_bundle(self):
        self._start = _peak_mb()

    def process(self, kv, bag=beam.DoFn.StateParam(BAG), done=beam.DoFn.TimerParam(DONE)):
        bag.add('x' * 340)
        done.set(0)

    @userstate.on_timer(DONE)
    def emit(self, key=beam.DoFn.KeyParam, bag=beam.DoFn.StateParam(BAG)):
        yield 'n', sum(len(v) for v in bag.read())

    def finish_bundle(self):
        yield WindowedValue(
            ('growth_mb', _peak_mb() - self._start),
            GlobalWindow().max_timestamp(),
            [GlobalWindow()],
        )


def run(spark, keys: int, out_dir: str) -> tuple[float, float, int]:
    prefix = os.path.join(out_dir, f'state-{keys}')
    start = time.time()
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        (
            p
            | beam.Create(range(40))
            | beam.FlatMap(lambda i, n=keys: ((k, 1) for k in range(i, n, 40) for _ in range(3)))
            | beam.ParDo(KeepThenEmit())
            | beam.CombinePerKey(_sum_or_max)
            | beam.MapTuple(lambda k, v: f'{k} {v}')
            | beam.io.WriteToText(prefix)
        )
    wall = time.time() - start
    values = {}
    for path in glob.glob(prefix + '*'):
        for line in open(path):
            k, v = line.split()
            values[k] = float(v)
    return wall, values['growth_mb'], int(values['n'])


def _sum_or_max(values):
    """Sums the state sizes (ints), keeps the largest memory growth (floats)."""
    values = list(values)
    return max(values) if values and isinstance(values[0], float) else sum(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--keys', type=int, nargs='+', default=[100_000, 1_000_000])
    parser.add_argument('--master', default='local[2]')
    args = parser.parse_args()
    spark, _ = get_or_create(args.master, None, {})
    print('| keys | wall s | peak growth of a stateful bundle (MB) | state bytes read |')
    print('|---:|---:|---:|---:|')
    with tempfile.TemporaryDirectory() as tmp:
        for keys in args.keys:
            wall, growth, n = run(spark, keys, tmp)
            assert n == keys * 3 * 340, (n, keys)
            print(f'| {keys:,} | {wall:.1f} | {growth:.0f} | {n:,} |', flush=True)


if __name__ == '__main__':
    main()
