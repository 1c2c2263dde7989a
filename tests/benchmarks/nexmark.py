"""Nexmark on this runner, batch and streaming, next to Beam's own runners.

Throughput, not fixed costs: for each query it prints the result count,
runtime, events per second and CPU seconds (this process and every process
under it: Spark's JVM and Python workers) of

* **batch**: ``--events`` events (bounded ``ReadEvents``) on this runner (debug
  engine, or Spark with ``--spark``) and on FnApiRunner;
* **paced**: a stream of ``--stream-events`` events from the unbounded,
  paced ``ReadEvents`` at ``--rate`` events per second of wall time (a call
  at most every ``--period`` s, so about ``rate * period`` events a call
  while the runner keeps up, the backlog in larger calls when it falls
  behind). Events/s here is at most the rate; **behind** is how long after
  the last event arrived (``(n - 1) / rate`` after the stream's start) the
  stream finished, pipeline start and the last windows' firing included:
  the rate was sustained when it stays near one micro-batch;
* **stream max**: the same stream with every event arrived at once
  (``--max-per-call`` events a call, so a micro-batch of that many), the
  throughput a stream reaches with a backlog, next to BundleBasedDirectRunner
  reading the same events from a TestStream in steps of the same size (it
  cannot run the paced splittable DoFn).

On Spark, an untimed warm-up (query 0, batch and stream, 2,000 events) first:
the session's start and the first jobs' JIT are not in the figures.

As Nexmark's dashboards do, the output sizes are the functional check, against
the batch reference (this runner's batch output, itself checked against
FnApiRunner where FnApiRunner runs the query, and against hand references in
``tests/nexmark`` where it cannot):

* batch: output = FnApiRunner's;
* streaming, default triggers (0, 1, 2, 4, 5, 7, 8, 9; 3 too: its
  ``AfterCount(30)`` fires in neither mode): output = batch output (over the
  same events: the stream's count, so the batch line is rerun at that
  count when it differs from ``--events``);
* 6 (accumulating ``AfterCount(1)`` panes, as many as bundles): one last
  pane per seller = batch;
* 11 (early firings after ``max_log_events``, discarding: panes depend on the
  bundles): the panes' counts add up to the number of bids, on both runners;
* 10: the files it writes to a local folder (log files without their shard,
  which is ``hash(event)``, and index files) = batch's (the folder travels in
  the query's writing DoFns, ``queries.query10_files``, so Spark's workers
  write there too);
* 12 (processing-time panes, ``window_size_sec`` 1), paced only: on the real
  clock, the panes' counts add up to the number of bids (every bid once);
  runtime until the last bid was counted (the DirectRunner's TestStream
  clock never advances: not run).

A mismatch prints ``MISMATCH`` and makes the script exit 1.

    python tests/benchmarks/nexmark.py --spark --events 100000 \\
        --stream-events 20000 --rate 2000 [--queries 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time

from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.benchmarks.nexmark.queries import query6

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from beam_spark_inproc import InProcessSparkRunner  # noqa: E402
from beam_spark_inproc.nexmark.generator import events  # noqa: E402
from tests.integration.test_semantics import run_on  # noqa: E402
from tests.nexmark import queries  # noqa: E402
from tests.nexmark import test_nexmark_streaming as streaming  # noqa: E402
from tests.nexmark.test_nexmark import OPTIONS  # noqa: E402
from tests.nexmark.test_nexmark import MovingMeanSellingPrice  # noqa: E402

QUERIES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
# FnApiRunner cannot merge AuctionOrBidWindowFn (4, 6, 9) and has no clock
# for 12's processing-time trigger.
NO_FN_API = {4, 6, 9, 12}
# BundleBasedDirectRunner: 3 fails in its executor ("exceptions must derive
# from BaseException"); 12 never finishes on a TestStream (its clock never
# advances).
NO_DIRECT = {3, 12}
SAME_AS_BATCH = set(streaming.DEFAULT_TRIGGERS) | {3}


def _tree_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of this process and every process under
    it, by pid, from /proc."""
    tick = os.sysconf('SC_CLK_TCK')
    parent, cpu = {}, {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open(f'/proc/{pid}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parent[int(pid)] = int(fields[1])
        cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / tick
    mine, me = {}, os.getpid()
    for pid in cpu:
        p = pid
        while p in parent and p != me and p > 1:
            p = parent[p]
        if p == me:
            mine[pid] = cpu[pid]
    return mine


def _timed(fn):
    """(result or exception, wall seconds, CPU seconds of the process tree)."""
    before = _tree_cpu()
    start = time.perf_counter()
    try:
        result = fn()
    except Exception as e:  # reported in the table, the run goes on
        result = e
    seconds = time.perf_counter() - start
    after = _tree_cpu()
    cpu = sum(v - before.get(pid, 0.0) for pid, v in after.items())
    return result, seconds, cpu


def _cell(result, seconds: float, cpu: float, n: int) -> str:
    if isinstance(result, Exception):
        return f'{"error " + type(result).__name__:>33}'
    return f'{len(result):>7} {seconds:7.2f}s {n / seconds:7.0f}/s {cpu:6.1f}cpu'


NOT_RUN = f'{"-":>33}'


def _files(run, folder: str) -> list[str]:
    """Query 10: the files written (see the module doc) as its results."""
    os.makedirs(folder)
    with queries.query10_files(folder):
        run()
    return streaming._written(folder)


def _query12_stream(runner, n: int, rate: float, period: float, folder: str) -> list[dict]:
    """Query 12 on the real clock until every bid is counted (or 300 s)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.transforms.periodicsequence import PeriodicImpulse

    from beam_spark_inproc.nexmark import ReadEvents

    bids = _bids(n)
    os.makedirs(folder)
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=runner, options=options)
    hold = (
        p
        | PeriodicImpulse(start_timestamp=time.time(), fire_interval=3600)
        | beam.Filter(lambda _: False)
    )
    read = (p | ReadEvents(n, events_per_second=rate, period=period), hold) | beam.Flatten()
    metadata = dict(queries.METADATA, window_size_sec=1)
    _ = (
        queries.load(12)(read, metadata, p.options)
        | beam.Map(queries.describe)
        | beam.ParDo(queries._Lines(folder))
    )
    result = p.run()
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            if sum(c['bid_count'] for c in streaming._counts(folder)) >= bids:
                break
            time.sleep(0.1)
    finally:
        result.cancel()
    return streaming._counts(folder)


def _bids(n: int) -> int:
    return sum(1 for e in events(n) if type(e).__name__ == 'Bid')


def _bid_total(lines: list[str]) -> int:
    """Query 11: the panes' counts added up."""
    return sum(json.loads(line.split(' @ ', 1)[0])['bid_count'] for line in lines)


class _MicroBatches(logging.Handler):
    """Counts the micro-batches a stream commits (one progress line each,
    ``beam_spark_inproc.progress``) and their job seconds."""

    def __init__(self):
        super().__init__()
        self.count, self.job_seconds = 0, 0.0
        logger = logging.getLogger('beam_spark_inproc.progress')
        logger.setLevel(logging.INFO)
        logger.propagate = False
        logger.addHandler(self)

    def emit(self, record):
        self.count += 1
        found = re.search(r'\(jobs ([0-9.]+) s', record.getMessage())
        self.job_seconds += float(found.group(1)) if found else 0.0

    def take(self) -> str:
        """'micro-batches, job seconds' since the last take."""
        taken = f'{self.count} mb, jobs {self.job_seconds:.1f} s'
        self.count, self.job_seconds = 0, 0.0
        return taken


class Bench:
    def __init__(self, args, ours):
        self.args, self.ours = args, ours
        self.bad = 0
        self.micro_batches = _MicroBatches()

    def batch(self, q, n, runner, folder):
        def run():
            return run_on(runner, queries.pipeline(q, n), folder, OPTIONS.get(q))

        if q == 10:
            return _files(run, folder + '-files')
        return run()

    def stream(self, q, n, runner, build, folder):
        def run():
            return queries.run_stream(runner, build, OPTIONS.get(q))

        if q == 10:
            return _files(run, folder + '-files')
        return run()

    def check_stream(self, q, n, lines, batch) -> list[str]:
        if isinstance(lines, Exception):
            return ['MISMATCH (error %s)' % lines]
        if q == 12:
            counted = sum(c['bid_count'] for c in lines)
            return [
                f'{counted} of {_bids(n)} bids counted once'
                if counted == _bids(n)
                else f'MISMATCH {counted} of {_bids(n)} bids'
            ]
        if q == 11:
            total = _bid_total(lines)
            return [
                'every bid once' if total == _bids(n) else f'MISMATCH {total} of {_bids(n)} bids'
            ]
        if isinstance(batch, Exception):
            return ['MISMATCH (batch error)']
        if q in SAME_AS_BATCH or q == 10:
            return ['=batch' if lines == batch else 'MISMATCH batch']
        if q == 6:
            return [
                'last panes =batch'
                if streaming._last_panes(lines) == streaming._last_panes(batch)
                else 'MISMATCH last panes'
            ]
        return []

    def line(self, q, mode, ours, ref, checks):
        self.bad += any('MISMATCH' in c for c in checks)
        print(f'{q:>5} {mode:>10} | {ours} | {ref} | {" ".join(checks)}', flush=True)

    def query(self, q, modes):
        a = self.args
        folder = tempfile.mkdtemp(prefix=f'nexmark-q{q}-')
        n, sn = a.events, a.stream_events
        batch, batch_s, batch_c = _timed(
            lambda: self.batch(q, n, self.ours(), os.path.join(folder, 'b'))
        )
        if 'batch' in modes:
            if q in NO_FN_API:
                ref, checks = NOT_RUN, ['hand reference in tests']
                checks = ['MISMATCH (error %s)' % batch] if isinstance(batch, Exception) else checks
            else:
                fn, fn_s, fn_c = _timed(
                    lambda: self.batch(q, n, FnApiRunner(), os.path.join(folder, 'f'))
                )
                ref = _cell(fn, fn_s, fn_c, n)
                checks = [
                    '=FnApiRunner'
                    if not isinstance(batch, Exception) and batch == fn
                    else 'MISMATCH FnApiRunner'
                ]
            self.line(q, 'batch', _cell(batch, batch_s, batch_c, n), ref, checks)
        if sn != n:  # the streams' batch reference, untimed
            batch = _timed(lambda: self.batch(q, sn, self.ours(), os.path.join(folder, 'bs')))[0]
        if 'paced' in modes:
            if q == 12:
                build = None
                run = lambda: _query12_stream(  # noqa: E731
                    self.ours(), sn, a.rate, a.period, os.path.join(folder, 'p')
                )
            else:
                build = queries.streaming_pipeline(q, sn, a.rate, a.period)
                run = lambda: self.stream(  # noqa: E731
                    q, sn, self.ours(), build, os.path.join(folder, 'p')
                )
            self.micro_batches.take()
            lines, secs, cpu = _timed(run)
            behind = secs - (sn - 1) / a.rate
            self.line(
                q,
                f'@{a.rate:.0f}/s',
                _cell(lines, secs, cpu, sn),
                f'{"behind " + format(behind, ".1f") + " s":>33}',
                self.check_stream(q, sn, lines, batch) + [self.micro_batches.take()],
            )
        if 'max' in modes and q != 12:
            build = queries.streaming_pipeline(q, sn, 1e9, 0.0, a.max_per_call)
            self.micro_batches.take()
            lines, secs, cpu = _timed(
                lambda: self.stream(q, sn, self.ours(), build, os.path.join(folder, 'm'))
            )
            checks = self.check_stream(q, sn, lines, batch)
            micro_batches = self.micro_batches.take()
            if q in NO_DIRECT:
                ref = NOT_RUN
            else:
                direct = queries.test_stream_pipeline(q, sn, a.max_per_call)
                d, d_s, d_c = _timed(
                    lambda: self.stream(
                        q, sn, BundleBasedDirectRunner(), direct, os.path.join(folder, 'd')
                    )
                )
                ref = _cell(d, d_s, d_c, sn)
                if q in (6, 11) or isinstance(d, Exception):
                    checks += ['direct: ' + ' '.join(self.check_stream(q, sn, d, batch))]
                else:
                    # Timestamps at millisecond precision (Beam's wire
                    # coders keep milliseconds, the DirectRunner never
                    # encodes them).
                    checks.append(
                        '=direct'
                        if streaming._milliseconds(d) == streaming._milliseconds(lines)
                        else 'MISMATCH direct'
                    )
            self.line(q, 'max', _cell(lines, secs, cpu, sn), ref, checks + [micro_batches])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('--events', type=int, default=100_000, help='events of the batch runs')
    parser.add_argument('--stream-events', type=int, default=20_000)
    parser.add_argument(
        '--rate', type=float, default=2000, help='events per second of the paced stream'
    )
    parser.add_argument(
        '--period', type=float, default=0.5, help="seconds between the paced source's calls"
    )
    parser.add_argument(
        '--max-per-call',
        type=int,
        default=5000,
        help='events a call of the unpaced stream (and a TestStream step for the DirectRunner)',
    )
    parser.add_argument('--modes', nargs='*', default=['batch', 'paced', 'max'])
    parser.add_argument('--spark', action='store_true')
    parser.add_argument('--no-warm-up', action='store_true')
    parser.add_argument('--queries', type=int, nargs='*', default=QUERIES)
    args = parser.parse_args()
    query6.MovingMeanSellingPriceFn = MovingMeanSellingPrice
    if args.spark:
        from beam_spark_inproc.spark import session

        spark, _ = session.get_or_create('local[2]', None, {})
        ours = lambda: InProcessSparkRunner(spark=spark)  # noqa: E731
    else:
        ours = lambda: InProcessSparkRunner(debug=True)  # noqa: E731
    engine = 'spark local[2]' if args.spark else 'debug engine'
    bench = Bench(args, ours)
    if not args.no_warm_up:
        warm = tempfile.mkdtemp(prefix='nexmark-warm-')
        _, secs, _ = _timed(
            lambda: (
                bench.batch(0, 2000, ours(), os.path.join(warm, 'b')),
                bench.stream(
                    0,
                    2000,
                    ours(),
                    queries.streaming_pipeline(0, 2000, 1e9, 0.0, 500),
                    os.path.join(warm, 's'),
                ),
            )
        )
        print(f'warm-up (untimed in the table): {secs:.1f} s')
    print(
        f'batch events={args.events} stream events={args.stream_events} '
        f'rate={args.rate:.0f}/s period={args.period} '
        f'max_per_call={args.max_per_call} engine={engine} '
        f'load={os.getloadavg()[0]:.1f} {time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}'
    )
    print(
        f'{"query":>5} {"mode":>10} | {"this runner: results, s, ev/s, cpu":^33} | '
        f'{"reference":^33} | check'
    )
    for q in args.queries:
        bench.query(q, args.modes)
    print(
        f'end load={os.getloadavg()[0]:.1f} {time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}'
    )
    return 1 if bench.bad else 0


if __name__ == '__main__':
    sys.exit(main())
