"""Nexmark on this runner, batch and streaming, next to Beam's own runners.

For each query and mode it prints the result count, the runtime and events per
second on this runner (debug engine, or Spark with ``--spark``) and on Beam's
reference runner for the mode, in the same run: FnApiRunner for batch,
BundleBasedDirectRunner for streaming.

Sources (``beam_spark_inproc.nexmark.ReadEvents``): batch reads the bounded
form; streaming on this runner reads the unbounded, rate-limited form
(``--rate`` events per second, ``--per-step`` per call; the default rate is
high enough that the runner, not the pacing, sets the speed), its watermark
estimator following the event time. The DirectRunner cannot run that paced
splittable DoFn: it reads the same events from a TestStream in the same steps.

As Nexmark's dashboards do, the output sizes are the functional check, against
the batch reference (this runner's batch count, itself checked against
FnApiRunner where FnApiRunner runs the query, and against hand references in
``tests/nexmark`` where it cannot):

* batch: count = FnApiRunner's;
* streaming, default triggers (0, 1, 2, 4, 5, 7, 8, 9; 3 too: its
  ``AfterCount(30)`` fires in neither mode): count = batch count (and =
  DirectRunner's where it runs);
* 6 (accumulating ``AfterCount(1)`` panes, as many as bundles): one last
  pane per seller = batch count; 11 (early firings): = DirectRunner's;
* 10: the files it writes to a local folder (log files without their shard,
  which is ``hash(event)``, and index files) = batch's (the folder travels in
  the query's writing DoFns, ``queries.query10_files``, so Spark's workers
  write there too);
* 12 (processing-time panes, ``window_size_sec`` 1): on the real clock, the
  panes' counts add up to the number of bids (every bid once); runtime until
  the last bid was counted (the DirectRunner's TestStream clock never
  advances: not run).

A mismatch prints ``MISMATCH`` and makes the script exit 1.

    python tests/benchmarks/nexmark.py --events 2000 [--spark] [--queries 0 1 2]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.benchmarks.nexmark.queries import query6

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

from beam_spark_inproc import InProcessSparkRunner  # noqa: E402
from beam_spark_inproc.nexmark.generator import events  # noqa: E402
from tests.integration.test_semantics import run_on  # noqa: E402
from tests.nexmark import queries  # noqa: E402
from tests.nexmark import test_nexmark_streaming as streaming  # noqa: E402
from tests.nexmark.test_nexmark import MovingMeanSellingPrice  # noqa: E402
from tests.nexmark.test_nexmark import OPTIONS  # noqa: E402

QUERIES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
# FnApiRunner cannot merge AuctionOrBidWindowFn (4, 6, 9) and has no clock
# for 12's processing-time trigger.
NO_FN_API = {4, 6, 9, 12}
# BundleBasedDirectRunner: 3 fails in its executor ("exceptions must derive
# from BaseException"); 12 never finishes on a TestStream (its clock never
# advances).
NO_DIRECT = {3, 12}
SAME_AS_BATCH = set(streaming.DEFAULT_TRIGGERS) | {3}


def _timed(fn):
    start = time.perf_counter()
    try:
        return fn(), time.perf_counter() - start
    except Exception as e:  # reported in the table, the run goes on
        return e, time.perf_counter() - start


def _cell(result, seconds: float, n: int) -> str:
    if isinstance(result, Exception):
        return f'{"error":>7} {type(result).__name__:<22}'
    return f'{len(result):>7} {seconds:8.2f}s {n / seconds:9.0f}/s'


def _files(run, folder: str) -> list[str]:
    """Query 10: the files written (see the module doc) as its results."""
    os.makedirs(folder)
    with queries.query10_files(folder):
        run()
    return streaming._written(folder)


def _query12_stream(runner, n: int, folder: str) -> list[dict]:
    """Query 12 on the real clock until every bid is counted (or 120 s)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.transforms.periodicsequence import PeriodicImpulse
    from beam_spark_inproc.nexmark import ReadEvents
    bids = sum(1 for e in events(n) if type(e).__name__ == 'Bid')
    os.makedirs(folder)
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=runner, options=options)
    hold = (p | PeriodicImpulse(start_timestamp=time.time(), fire_interval=3600)
            | beam.Filter(lambda _: False))
    read = (p | ReadEvents(n, events_per_second=1e6, period=0.1), hold) | beam.Flatten()
    metadata = dict(queries.METADATA, window_size_sec=1)
    _ = (queries.load(12)(read, metadata, p.options) | beam.Map(queries.describe)
         | beam.ParDo(queries._Lines(folder)))
    result = p.run()
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if sum(c['bid_count'] for c in streaming._counts(folder)) >= bids:
                break
            time.sleep(0.1)
    finally:
        result.cancel()
    return streaming._counts(folder)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('--events', type=int, default=2000)
    parser.add_argument('--per-step', type=int, default=250)
    parser.add_argument('--rate', type=float, default=1e6,
                        help='events per second of the paced source')
    parser.add_argument('--spark', action='store_true')
    parser.add_argument('--queries', type=int, nargs='*', default=QUERIES)
    args = parser.parse_args()
    query6.MovingMeanSellingPriceFn = MovingMeanSellingPrice
    n = args.events
    period = args.per_step / args.rate
    if args.spark:
        from beam_spark_inproc.spark import session
        spark, _ = session.get_or_create('local[2]', None, {})
        ours = lambda: InProcessSparkRunner(spark=spark)  # noqa: E731
    else:
        ours = lambda: InProcessSparkRunner(debug=True)  # noqa: E731
    engine = 'spark local[2]' if args.spark else 'debug engine'
    print(f'events={n} per_step={args.per_step} rate={args.rate:.0f}/s '
          f'engine={engine} load={os.getloadavg()[0]:.1f}')
    print(f'{"query":>5} {"mode":>9} | {"this runner":^36} | '
          f'{"reference runner":^36} | check')
    bad = 0
    bids = sum(1 for e in events(n) if type(e).__name__ == 'Bid')
    for q in args.queries:
        options = OPTIONS.get(q)
        folder = tempfile.mkdtemp(prefix=f'nexmark-q{q}-')

        def batch_on(runner, name):
            run = lambda: run_on(runner, queries.pipeline(q, n),  # noqa: E731
                                 os.path.join(folder, name), options)
            if q == 10:
                return _files(run, os.path.join(folder, name + '-files'))
            return run()
        batch, batch_s = _timed(lambda: batch_on(ours(), 'b'))
        if q in NO_FN_API:
            ref, ref_s = None, 0.0
        else:
            ref, ref_s = _timed(lambda: batch_on(FnApiRunner(), 'f'))
        batch_ok = not isinstance(batch, Exception)
        if ref is None:
            check = 'hand reference in tests' if batch_ok else 'MISMATCH (error)'
        else:
            check = ('ok' if batch_ok and not isinstance(ref, Exception)
                     and batch == ref else 'MISMATCH')
        bad += 'MISMATCH' in check
        ref_cell = (_cell(ref, ref_s, n) if ref is not None
                    else f'{"(FnApiRunner cannot)":>36}')
        print(f'{q:>5} {"batch":>9} | {_cell(batch, batch_s, n)} | '
              f'{ref_cell} | {check}', flush=True)

        def stream_on(runner, name):
            if q == 12:
                return _query12_stream(runner, n, os.path.join(folder, name))
            build = (queries.streaming_pipeline(q, n, args.rate, period)
                     if runner is not None else None)
            run = lambda: queries.run_stream(runner, build, options)  # noqa: E731
            if q == 10:
                return _files(run, os.path.join(folder, name + '-files'))
            return run()

        def direct():
            build = queries.test_stream_pipeline(q, n, args.per_step)
            run = lambda: queries.run_stream(  # noqa: E731
                BundleBasedDirectRunner(), build, options)
            if q == 10:
                return _files(run, os.path.join(folder, 'd-files'))
            return run()
        stream, stream_s = _timed(lambda: stream_on(ours(), 's'))
        if q in NO_DIRECT:
            ref, ref_s = None, 0.0
        else:
            ref, ref_s = _timed(direct)
        checks = []
        if isinstance(stream, Exception):
            checks.append('MISMATCH (error %s)' % stream)
        elif q == 12:
            counted = sum(c['bid_count'] for c in stream)
            checks.append(f'{counted} of {bids} bids counted once'
                          if counted == bids else
                          f'MISMATCH {counted} of {bids} bids')
        else:
            if (q in SAME_AS_BATCH or q == 10) and batch_ok:
                checks.append('=batch' if stream == batch else 'MISMATCH batch')
            if q == 6 and batch_ok:
                last = streaming._last_panes(stream)
                checks.append('last panes =batch'
                              if last == streaming._last_panes(batch)
                              else 'MISMATCH last panes')
            if ref is not None and not isinstance(ref, Exception) and q != 6:
                checks.append('=direct' if len(stream) == len(ref)
                              else 'MISMATCH direct')
        bad += any('MISMATCH' in c for c in checks)
        ref_cell = (_cell(ref, ref_s, n) if ref is not None
                    else f'{"(not run, see doc)":>36}')
        print(f'{q:>5} {"streaming":>9} | {_cell(stream, stream_s, n)} | '
              f'{ref_cell} | {" ".join(checks)}', flush=True)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
