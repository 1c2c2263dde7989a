"""A stream run for a long time, then stopped and restarted.

A stateful DoFn counts per key (``--keys`` keys) in fixed event-time windows
of ``--window`` seconds, fed at a steady rate by an endless splittable DoFn
(``streaming_scale.KeyedElements``: ``--rate`` elements per call, one call per
``--period`` seconds, its event time ``--step`` seconds further each call, its
watermark following, so windows close and their state expires as the stream
goes); ``--combine`` adds a windowed ``Count.PerKey`` (a GroupByKey's buffered
panes). It runs on ``--master`` (``local-cluster[2,1,2048]`` by default,
``local[2]`` works too) with a checkpoint location for ``--minutes``, is
stopped (``result.cancel()``), and is run again on the same checkpoint for
``--restart-minutes``: the second run resumes after the first one's last
commit record. Every ``--every`` seconds it prints one line:

* ``mb``: the micro-batch running; ``p50 s`` (``max``): the median (largest)
  duration of the micro-batches of the interval that ran something (an idle
  micro-batch, waiting for the source's resume delay, is not counted), and
  how many ran;
* ``driver``: the Python driver's RSS; ``jvm d``: the driver JVM's RSS and
  heap used (``jstat -gc``); ``jvm x``: the executors' (summed); ``py``: the
  Python workers' proportional set size (the pyspark daemons and the workers
  they fork share pages) and their number; MB;
* ``ckpt``: the checkpoint folder's size (MB) and file count; ``commits``:
  commit records on disk; ``state``: the bytes of the state files the newest
  commit record names (the live state), MB; ``keys``: the keys it holds;
* ``sql``: SQL executions Spark's status store retains (classic Spark);
  ``load``: the 1-minute load average.

The series must level off: memory and micro-batch duration follow the live
state (which returns to the same level at every window's expiry), not the
number of micro-batches run. Not part of the test run.

    python -m tests.benchmarks.soak --minutes 30 --restart-minutes 5 \\
        --keys 1000000 --rate 100000 --period 60 --window 100 --step 10
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import threading
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from tests.benchmarks.streaming_scale import CountPerKey
from tests.benchmarks.streaming_scale import KeyedElements
from tests.benchmarks.streaming_scale import _descendants
from tests.benchmarks.streaming_scale import _is_jvm
from tests.benchmarks.streaming_scale import _jvm_role
from tests.benchmarks.streaming_scale import _pss_kb
from tests.benchmarks.streaming_scale import _rss_kb
from tests.benchmarks.streaming_scale import heap_used_kb
from tests.benchmarks.streaming_scale import jstat_gc


class Durations:
    """Times each micro-batch of a running stream (wraps the executor's
    ``_run_micro_batch``); ``take()`` returns those that ran something since
    the last call."""

    def __init__(self, executor):
        self._lock = threading.Lock()
        self._seen: list[float] = []
        run = executor._run_micro_batch

        def timed(source_rows):
            started = time.monotonic()
            moved = run(source_rows)
            if moved:
                with self._lock:
                    self._seen.append(time.monotonic() - started)
            return moved

        executor._run_micro_batch = timed

    def take(self) -> list[float]:
        with self._lock:
            seen, self._seen = self._seen, []
        return seen


def heap_used_mb(pid: int) -> float:
    """Heap used by a JVM (``jstat -gc``: survivors, eden, old), MB."""
    stats = jstat_gc(pid)
    return float('nan') if stats is None else heap_used_kb(stats) / 1024


def checkpoint_figures(root: str) -> dict:
    """Size and files on disk, commit records, and the live state: the files
    the newest commit record names, their bytes, and its keys."""
    size = files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                size += os.path.getsize(os.path.join(folder, name))
                files += 1
            except OSError:  # collected meanwhile
                pass
    commits_folder = os.path.join(root, 'commits')
    commits = sorted(
        int(n[:-5])
        for n in (os.listdir(commits_folder) if os.path.isdir(commits_folder) else ())
        if n.endswith('.json') and n[:-5].isdigit()
    )
    live = set()
    keys = 0
    for n in reversed(commits):
        try:
            with open(os.path.join(commits_folder, f'{n}.json')) as f:
                record = json.load(f)
        except (OSError, ValueError):  # collected or being written
            continue
        for stage in record['stages']:
            for bucket in stage['buckets'].values():
                live.add(os.path.join(root, bucket['path']))
                keys += bucket['keys']
        break
    state = 0
    for path in live:
        try:
            state += os.path.getsize(path)
        except OSError:
            pass
    return {'size': size, 'files': files, 'commits': len(commits), 'state': state, 'keys': keys}


def sql_executions(spark) -> str:
    try:
        store = spark._jsparkSession.sharedState().statusStore()
        return str(store.executionsCount())
    except Exception:  # Connect, or not there
        return '?'


HEADER = (
    f'{"t s":>6} {"mb":>5} {"p50 s":>6} {"max":>6} {"n":>3} '
    f'{"driver":>6} {"jvm d":>5} {"heap":>5} {"jvm x":>6} {"heap":>5} '
    f'{"py":>5} {"(n)":>4} {"ckpt":>6} {"files":>5} {"commits":>7} '
    f'{"state":>6} {"keys":>8} {"sql":>4} {"load":>5}'
)


def sample(t: float, executor, durations: Durations, root: str, spark) -> str:
    me = os.getpid()
    pids = _descendants(me)
    jvms = [pid for pid in pids if _is_jvm(pid)]
    driver_jvms = [pid for pid in jvms if _jvm_role(pid) == 'driver']
    executors = [pid for pid in jvms if _jvm_role(pid).startswith('executor')]
    if not executors:  # local[N]: the driver JVM runs the tasks
        executors = []
    workers = [_pss_kb(pid) for pid in pids if not _is_jvm(pid)]
    seen = durations.take()
    ckpt = checkpoint_figures(root)
    p50 = statistics.median(seen) if seen else float('nan')
    return (
        f'{t:6.0f} {executor.micro_batch:5d} {p50:6.2f} '
        f'{max(seen, default=float("nan")):6.2f} {len(seen):3d} '
        f'{_rss_kb(me) / 1024:6.0f} '
        f'{sum(_rss_kb(p) for p in driver_jvms) / 1024:5.0f} '
        f'{sum(heap_used_mb(p) for p in driver_jvms):5.0f} '
        f'{sum(_rss_kb(p) for p in executors) / 1024:6.0f} '
        f'{sum(heap_used_mb(p) for p in executors):5.0f} '
        f'{sum(workers) / 1024:5.0f} {len(workers):4d} '
        f'{ckpt["size"] / 2**20:6.1f} {ckpt["files"]:5d} '
        f'{ckpt["commits"]:7d} {ckpt["state"] / 2**20:6.1f} '
        f'{ckpt["keys"]:8d} {sql_executions(spark):>4} '
        f'{os.getloadavg()[0]:5.1f}'
    )


def run(args, spark, location: str, minutes: float, started: float) -> int:
    """Runs (or resumes) the stream for ``minutes``, printing samples;
    cancels it; returns the last micro-batch it ran."""
    options = PipelineOptions([f'--checkpoint_location={location}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options)
    keyed = (
        p
        | beam.Impulse()
        | beam.ParDo(KeyedElements(args.keys, args.rate, args.step, args.period))
        | beam.WindowInto(window.FixedWindows(args.window))
    )
    _ = keyed | beam.ParDo(CountPerKey())
    if args.combine:
        _ = keyed | beam.combiners.Count.PerKey() | beam.Filter(lambda kv: kv[1] < 0)
    result = p.run()
    executor = result.executor
    durations = Durations(executor)
    end = time.time() + minutes * 60
    state = 'RUNNING'
    while time.time() < end and state == 'RUNNING':
        state = result.wait_until_finish(
            duration=int(min(args.every, max(end - time.time(), 0.1)) * 1000)
        )
        print(sample(time.time() - started, executor, durations, location, spark), flush=True)
    result.cancel()
    state = result.wait_until_finish()
    print(f'# stopped: {state} after micro-batch {executor.micro_batch - 1}', flush=True)
    return executor.micro_batch - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--keys', type=int, default=1_000_000)
    parser.add_argument('--rate', type=int, default=100_000, help='elements per source call')
    parser.add_argument(
        '--period', type=float, default=60.0, help='seconds per source call (the pace)'
    )
    parser.add_argument('--step', type=int, default=10, help='event-time seconds per source call')
    parser.add_argument('--window', type=int, default=100)
    parser.add_argument(
        '--combine', action='store_true', help='also a windowed Count.PerKey (GroupByKey state)'
    )
    parser.add_argument('--minutes', type=float, default=30)
    parser.add_argument('--restart-minutes', type=float, default=5)
    parser.add_argument('--every', type=float, default=60)
    parser.add_argument('--master', default='local-cluster[2,1,2048]')
    parser.add_argument(
        '--checkpoint',
        default='',
        help='checkpoint location (default: a new temporary folder, removed at the end)',
    )
    parser.add_argument(
        '--conf', action='append', default=[], help='KEY=VALUE Spark settings for the session'
    )
    args = parser.parse_args()
    # Where the restarted stream resumes, and how many micro-batches each ran.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter('# %(message)s'))
    log = logging.getLogger('beam_spark_inproc.execution.streaming.run')
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    location = args.checkpoint or tempfile.mkdtemp(prefix='bench-soak-')
    from beam_spark_inproc.spark import session

    spark, _ = session.get_or_create(args.master, None, dict(c.split('=', 1) for c in args.conf))
    print(
        f'# {time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())} '
        f'keys={args.keys} {args.rate / args.period:.0f} elements/s '
        f'window={args.window}s step={args.step}s combine={args.combine} '
        f'master={args.master} checkpoint={location}',
        flush=True,
    )
    print(HEADER, flush=True)
    started = time.time()
    last = run(args, spark, location, args.minutes, started)
    if args.restart_minutes > 0:
        print(f'# restarting from the checkpoint (last commit {last})', flush=True)
        run(args, spark, location, args.restart_minutes, started)
    print(
        f'# {time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())} load {os.getloadavg()}',
        flush=True,
    )
    spark.stop()
    if not args.checkpoint:
        import shutil

        shutil.rmtree(location, ignore_errors=True)


if __name__ == '__main__':
    main()
