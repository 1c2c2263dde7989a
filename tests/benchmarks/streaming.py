"""Streaming throughput, latency and micro-batch overhead.

Two pipelines over the same TestStream, on this runner (Spark, and the debug
engine if asked) and on Beam's BundleBasedDirectRunner, in one run:

* **windowed count**: ``--events`` element events of ``--per-event`` elements
  over ``--keys`` keys; event i's elements have event time i and the watermark
  steps to i + 1 right after them, so the one-second fixed window of event i
  closes with it; a CombinePerKey counts per key and window;
* **stateful**: the same events into a stateful DoFn keeping a count per key
  (ValueState) and emitting it with every element.

Printed per pipeline and runner: throughput (elements per second over the
whole run; for this runner also from the end of the first micro-batch on:
the steady state, without starting the run), and end-to-end latency p50/p99:
from the event going in (the start of the micro-batch that took it; on the
DirectRunner, its first transform seeing it) to the pane (or output element)
coming out of the last transform.

Then the micro-batch overhead with 0, 10k and 1M keys of state
(``streaming_state.measure``: a micro-batch touching one key, after N keys of
buffered GroupByKey state), and the state bytes it wrote.

    python tests/benchmarks/streaming.py [--events 20] [--per-event 20000]
        [--keys 1000] [--debug] [--overhead-keys 0,10000,1000000]
        [--spread-kb 256,0] [--warm-runs 0] [--runner-flags "--spark_conf K=V"]

Each element event is one micro-batch here (a watermark event follows it), so
``--per-event`` is the micro-batch's size. At the reference 20,000 about three
quarters of a stateful micro-batch on Spark is its fixed cost (~0.19 s a
micro-batch with 20 elements: Spark's job and query, the overhead part below);
under load a micro-batch holds what arrived since the last one (an unbounded
source that reads what is there), so the throughput of a stream under load is
the figure at ``--per-event 100000`` (docs/performance.md), where
the work per element outweighs that fixed cost.

Before the timed runs, this runner runs each pipeline on a tiny stream (2 x 10)
to start Spark's session and Python workers. ``--warm-runs N`` adds N untimed
runs of the full-size stream on Spark first: the driver JVM's JIT compiler
(C1) is still compiling Spark's hot paths through the first few full-size runs
(the JVM's CPU a run falls from ~4.4 to ~2.4 s over 4 runs of 20 x 20,000,
docs/performance.md), which a stream that runs for hours has long
paid. The BundleBasedDirectRunner, pure Python, has nothing to warm.
"""

from __future__ import annotations

import argparse
import glob
import os
import pickle
import shlex
import statistics
import tempfile
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import userstate
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming import loop

# (start time, each source's position after it) of every micro-batch of the
# run going on in this process (this runner's driver loop, instrumented).
MICRO_BATCHES: list[tuple[float, dict]] = []


def _instrument() -> None:
    run = loop.StreamingExecutor._run_micro_batch

    def timed(self, source_rows):
        start = time.time()
        try:
            return run(self, source_rows)
        finally:
            MICRO_BATCHES.append((start, {i: s.position for i, s in self.sources.items()}))

    loop.StreamingExecutor._run_micro_batch = timed


def stream(events: int, per_event: int, keys: int) -> TestStream:
    s = TestStream()
    for i in range(events):
        s = s.add_elements(
            [window.TimestampedValue((f'k{j % keys}', i), i) for j in range(per_event)]
        )
        s = s.advance_watermark_to(i + 1)
    return s.advance_watermark_to_infinity()


def _stamp(kv):
    return kv[0], (kv[1], time.time())


class _CountFirst(beam.CombineFn):
    """(count, first event, its time at the first transform)."""

    def create_accumulator(self):
        return 0, None, None

    def add_input(self, acc, value):
        event, at = value
        if acc[1] is None or event < acc[1]:
            return acc[0] + 1, event, at
        return acc[0] + 1, acc[1], acc[2]

    def merge_accumulators(self, accs):
        count, event, at = 0, None, None
        for c, e, a in accs:
            count += c
            if e is not None and (event is None or e < event):
                event, at = e, a
        return count, event, at

    def extract_output(self, acc):
        return acc


class _StatefulCount(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec('count', beam.coders.VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
        n = (count.read() or 0) + 1
        count.write(n)
        event, at = kv[1]
        yield kv[0], (n, event, at)


class _Sink(beam.DoFn):
    """Writes (time out, event, time at the first transform, elements) per
    output, a file per bundle."""

    def __init__(self, folder: str):
        self._folder = folder

    def start_bundle(self):
        self._seen = []

    def process(self, kv):
        count, event, at = kv[1]
        self._seen.append((time.time(), event, at, count))

    def finish_bundle(self):
        if self._seen:
            name = os.path.join(self._folder, f'{os.getpid()}-{id(self)}-{time.time_ns()}.pkl')
            with open(name, 'wb') as f:
                pickle.dump(self._seen, f)


def windowed_count(p, source, folder):
    _ = (
        p
        | source
        | beam.Map(_stamp)
        | beam.WindowInto(window.FixedWindows(1))
        | beam.CombinePerKey(_CountFirst())
        | beam.ParDo(_Sink(folder))
    )


def stateful(p, source, folder):
    _ = (
        p
        | source
        | beam.Map(_stamp)
        | beam.ParDo(_StatefulCount())
        | beam.Map(lambda kv: (kv[0], (1, kv[1][1], kv[1][2])))
        | beam.ParDo(_Sink(folder))
    )


PIPELINES = {'windowed count': windowed_count, 'stateful': stateful}


def run_one(
    name: str, runner_name: str, args, spread_kb: str = '', flags: list | tuple = ()
) -> dict:
    folder = tempfile.mkdtemp(prefix='bench-streaming-')
    options = PipelineOptions(
        (['--spark_stream_spread_kb', spread_kb] if spread_kb else []) + list(flags)
    )
    options.view_as(StandardOptions).streaming = True
    runner = {
        'direct': BundleBasedDirectRunner,
        'spark': lambda: InProcessSparkRunner(),
        'debug': lambda: InProcessSparkRunner(debug=True),
    }[runner_name]()
    p = beam.Pipeline(runner=runner, options=options)
    PIPELINES[name](p, stream(args.events, args.per_event, args.keys), folder)
    MICRO_BATCHES.clear()
    start = time.time()
    result = p.run()
    result.wait_until_finish()
    end = time.time()
    outputs = []
    for path in glob.glob(os.path.join(folder, '*.pkl')):
        with open(path, 'rb') as f:
            outputs.extend(pickle.load(f))
    elements = sum(count for _, _, _, count in outputs)
    expected = args.events * args.per_event
    assert elements == expected, (name, runner_name, elements, expected)
    figures = {'elements': elements, 'seconds': end - start, 'throughput': elements / (end - start)}
    batches = list(MICRO_BATCHES)
    if batches:
        # Element event i is event 2i of the TestStream: the micro-batch that
        # took it is the first whose position went past it.
        def took(event: int) -> float:
            for at, positions in batches:
                if max(positions.values()) > 2 * event:
                    return at
            return batches[-1][0]

        latencies = [out - took(event) for out, event, _, _ in outputs]
        first_end = batches[1][0] if len(batches) > 1 else end
        steady = [c for out, event, _, c in outputs if took(event) >= first_end]
        if steady:
            figures['steady throughput'] = sum(steady) / (end - first_end)
        figures['micro-batches'] = len(batches)
    else:
        latencies = [out - at for out, _, at, _ in outputs]
    latencies.sort()
    figures['p50'] = latencies[len(latencies) // 2]
    figures['p99'] = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--events', type=int, default=20)
    parser.add_argument('--per-event', type=int, default=20_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--debug', action='store_true', help='also run on the debug engine')
    parser.add_argument('--pipelines', default=','.join(PIPELINES))
    parser.add_argument(
        '--spread-kb',
        default='',
        help='--spark_stream_spread_kb values to run this '
        'runner with, comma-separated, e.g. "256,0" for an A/B '
        "in one run (default: the option's default)",
    )
    parser.add_argument(
        '--overhead-keys',
        default='0,10000,1000000',
        help='keys of state for the overhead part ("" to skip)',
    )
    parser.add_argument(
        '--warm-runs',
        type=int,
        default=0,
        help='untimed full-size runs of each pipeline on Spark '
        "before the timed ones (the JVM's JIT warm-up)",
    )
    parser.add_argument(
        '--runner-flags',
        default='',
        help='pipeline options for every run on this runner, '
        'the first one (which starts the session) included, '
        'e.g. "--spark_conf spark.driver.extraJavaOptions=..."',
    )
    args = parser.parse_args()
    flags = shlex.split(args.runner_flags)
    _instrument()
    print(
        f'load average {os.getloadavg()}; {args.events} events x '
        f'{args.per_event} elements, {args.keys} keys'
        + (
            f'; {args.warm_runs} full-size warm-up runs a pipeline on Spark'
            if args.warm_runs
            else ''
        )
    )
    spreads = args.spread_kb.split(',')
    runners = [('direct', '')] + [
        (r, kb) for r in ['spark'] + (['debug'] if args.debug else []) for kb in spreads
    ]
    # Start Spark (session, Python workers) before anything is timed.
    warm = argparse.Namespace(events=2, per_event=10, keys=2)
    for name in PIPELINES:
        run_one(name, 'spark', warm, flags=flags)
    for _ in range(args.warm_runs):
        for name in [n for n in args.pipelines.split(',') if n]:
            run_one(name, 'spark', args, flags=flags)
    for name in [n for n in args.pipelines.split(',') if n]:
        base = None
        for runner_name, kb in runners:
            if runner_name == 'spark':
                # Spark ends Python workers idle for a minute (the
                # DirectRunner's run takes longer): whichever Spark run came
                # first paid for starting them again.
                run_one(name, 'spark', warm, kb, flags)
            f = run_one(name, runner_name, args, kb, flags if runner_name != 'direct' else ())
            if runner_name == 'direct':
                base = f['throughput']
            ratio = f' ({f["throughput"] / base:.1f}x direct)' if base else ''
            steady = f', steady {f["steady throughput"]:,.0f}/s' if 'steady throughput' in f else ''
            label = runner_name + (f' spread {kb}' if kb else '')
            print(
                f'{name:15s} {label:7s} {f["elements"]:>9,} elements '
                f'in {f["seconds"]:6.2f} s: {f["throughput"]:>9,.0f}/s{ratio}'
                f'{steady}; latency p50 {f["p50"]:.2f} s, p99 {f["p99"]:.2f} s'
                + (f'; {f["micro-batches"]} micro-batches' if 'micro-batches' in f else '')
                + f'  [load {os.getloadavg()[0]:.1f}]',
                flush=True,
            )
    from tests.benchmarks.streaming_state import measure

    for keys in [int(k) for k in args.overhead_keys.split(',') if k]:
        rows = measure(keys, 5, spark=True)
        # Micro-batches 2, 4, ..., 10 take the one-key events (the odd ones
        # only step the clock).
        touches = [s for n, s, _ in rows[2:12:2]]
        written = [w for n, _, w in rows[2:12:2]]
        print(
            f'overhead spark  {keys:>9,} keys of state: first micro-batch '
            f'{rows[0][1]:.2f} s ({rows[0][2]:,} B), one-key micro-batch '
            f'median {statistics.median(touches):.2f} s '
            f'(min {min(touches):.2f}, max {max(touches):.2f}), state written '
            f'{min(written):,}-{max(written):,} B'
            f'  [load {os.getloadavg()[0]:.1f}]',
            flush=True,
        )


if __name__ == '__main__':
    main()
