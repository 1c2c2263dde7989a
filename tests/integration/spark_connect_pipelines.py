"""Pipelines that test_spark_connect.py runs on FnApiRunner, classic Spark and Spark Connect.

Imported, this module only defines the pipelines. Run as a script it is the Spark
Connect *client*: a process with no JVM of its own that connects to a running
Connect server, runs the pipelines with ``InProcessSparkRunner(spark=session)``
and writes a JSON status file::

    python spark_connect_pipelines.py --remote sc://127.0.0.1:PORT [--wait SECONDS] \
        --out DIR --status DIR/status.json [NAME ...]

Why a separate process: a classic SparkSession and a Spark Connect session do not
coexist in one Python process (see the notes in test_spark_connect.py).

Each pipeline checks itself with ``assert_that`` and writes every output, one
``repr`` per line, with ``WriteToText`` to ``DIR/NAME-*`` so the test can
compare engines; DoFns run in Spark's Python workers, so a list in the test
process would stay empty.

Callables used inside pipelines are lambdas or nested functions on purpose:
cloudpickle ships those by value, whereas a module-level function of this file
would be pickled by reference and Spark's workers cannot import ``tests.*``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sys
import time
import traceback

import apache_beam as beam
from apache_beam.pvalue import AsDict
from apache_beam.pvalue import AsList
from apache_beam.pvalue import AsSingleton
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.transforms import window

PIPELINES = {}


def _pipeline(build):
    PIPELINES[build.__name__] = build
    return build


# --- data and expected results, computed in plain Python -------------------

FIXED_SIZE = 10
SESSION_GAP = 5


def _timestamped_events(n=150, keys=4, seed=7, span=200):
    rnd = random.Random(seed)
    return [(f'k{rnd.randrange(keys)}', i, rnd.randrange(span)) for i in range(n)]


def _expected_fixed(events):
    groups = {}
    for key, value, ts in events:
        start = ts // FIXED_SIZE * FIXED_SIZE
        groups.setdefault((key, start, start + FIXED_SIZE), []).append(value)
    return [(k, s, e, sorted(v)) for (k, s, e), v in groups.items()]


def _expected_sessions(events):
    """Beam's Sessions merging: windows [ts, ts+gap) merge while they overlap."""
    by_key = {}
    for key, value, ts in events:
        by_key.setdefault(key, []).append((ts, value))
    result = []
    for key, items in by_key.items():
        current = None
        for ts, value in sorted(items):
            if current is not None and ts < current[1]:
                current[1] = max(current[1], ts + SESSION_GAP)
                current[2].append(value)
            else:
                if current is not None:
                    result.append((key, current[0], current[1], sorted(current[2])))
                current = [ts, ts + SESSION_GAP, [value]]
        result.append((key, current[0], current[1], sorted(current[2])))
    return result


def _grouped_by_window(pcoll, windowfn, label):
    """(key, value, ts) -> (key, window start s, window end s, sorted values)."""

    def with_window(kv, w=beam.DoFn.WindowParam):
        return (kv[0], w.start.micros // 1000000, w.end.micros // 1000000, sorted(kv[1]))

    return (
        pcoll
        | f'Stamp {label}' >> beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2]))
        | f'Window {label}' >> beam.WindowInto(windowfn)
        | f'Group {label}' >> beam.GroupByKey()
        | f'WithWindow {label}' >> beam.Map(with_window)
    )


# --- the pipelines: build(p) -> {label: PCollection} -------------------------


@_pipeline
def gbk_windows(p):
    events = _timestamped_events()
    data = p | 'Events' >> beam.Create(events)
    fixed = _grouped_by_window(data, window.FixedWindows(FIXED_SIZE), 'fixed')
    sessions = _grouped_by_window(data, window.Sessions(SESSION_GAP), 'sessions')
    assert_that(fixed, equal_to(_expected_fixed(events)), label='Check fixed')
    assert_that(sessions, equal_to(_expected_sessions(events)), label='Check sessions')
    return {'fixed': fixed, 'sessions': sessions}


@_pipeline
def side_inputs(p):
    main = p | 'Main' >> beam.Create(list(range(1, 21)))
    # Computed on the engine (not a Create), so the side input is a real stage output.
    total = main | 'Total' >> beam.CombineGlobally(sum)
    letters = p | 'Letters' >> beam.Create(['x', 'y', 'z'])
    names = (
        p | 'Odd' >> beam.Create(list(range(1, 21, 2))) | 'Name' >> beam.Map(lambda i: (i, f'n{i}'))
    )
    nothing = p | 'Nothing' >> beam.Create([]).with_output_types(int)

    singleton = main | 'UseSingleton' >> beam.Map(
        lambda x, total, missing: (x, x * 1000 // total, missing),
        total=AsSingleton(total),
        missing=AsSingleton(nothing, default_value=-1),
    )
    as_list = main | 'UseList' >> beam.Map(
        lambda x, letters, empty: (x, sorted(letters), empty),
        letters=AsList(letters),
        empty=AsList(nothing),
    )
    as_dict = main | 'UseDict' >> beam.Map(lambda x, names: (x, names.get(x)), names=AsDict(names))

    assert_that(
        singleton,
        equal_to([(x, x * 1000 // 210, -1) for x in range(1, 21)]),
        label='Check singleton',
    )
    assert_that(
        as_list, equal_to([(x, ['x', 'y', 'z'], []) for x in range(1, 21)]), label='Check list'
    )
    assert_that(
        as_dict,
        equal_to([(x, f'n{x}' if x % 2 else None) for x in range(1, 21)]),
        label='Check dict',
    )
    return {'singleton': singleton, 'list': as_list, 'dict': as_dict}


@_pipeline
def combine(p):
    pairs = p | 'Pairs' >> beam.Create([(f'k{i % 5}', i) for i in range(200)])
    per_key = pairs | 'SumPerKey' >> beam.CombinePerKey(sum)
    total = pairs | 'Values' >> beam.Values() | 'SumAll' >> beam.CombineGlobally(sum)
    empty = (
        p
        | 'NoInts' >> beam.Create([]).with_output_types(int)
        | 'SumNothing' >> beam.CombineGlobally(sum)
    )

    assert_that(
        per_key,
        equal_to([(f'k{k}', sum(range(k, 200, 5))) for k in range(5)]),
        label='Check per key',
    )
    assert_that(total, equal_to([sum(range(200))]), label='Check global')
    assert_that(empty, equal_to([0]), label='Check empty global')
    return {'per_key': per_key, 'global': total, 'global_empty': empty}


@_pipeline
def flatten(p):
    evens = p | 'Evens' >> beam.Create(list(range(10))) | 'Double' >> beam.Map(lambda x: 2 * x)
    hundreds = p | 'Hundreds' >> beam.Create(list(range(100, 105)))
    two = (evens, hundreds) | 'FlattenTwo' >> beam.Flatten()
    same_twice = (evens, evens) | 'FlattenSame' >> beam.Flatten()
    grouped = (
        two
        | 'ByParity' >> beam.Map(lambda x: (x % 2, x))
        | 'GroupParity' >> beam.GroupByKey()
        | 'SortGroup' >> beam.Map(lambda kv: (kv[0], sorted(kv[1])))
    )

    evens_expected = [2 * x for x in range(10)]
    assert_that(two, equal_to(evens_expected + list(range(100, 105))), label='Check two')
    assert_that(same_twice, equal_to(evens_expected * 2), label='Check same twice')
    assert_that(
        grouped,
        equal_to([(0, sorted(evens_expected + [100, 102, 104])), (1, [101, 103])]),
        label='Check grouped',
    )
    return {'two': two, 'same_twice': same_twice, 'grouped': grouped}


# A side input bigger than a task's closure may be over Spark Connect (128 MB):
# the runner ships it as a file (an artifact) instead.
LARGE_ENTRIES, LARGE_VALUE_BYTES = 220_000, 1000


@_pipeline
def large_side_input(p):
    big = (
        p
        | 'Blocks' >> beam.Create(list(range(220)))
        | 'Entries'
        >> beam.FlatMap(
            lambda b, n=LARGE_ENTRIES // 220: [
                (i, (f'{i:08d}' * (LARGE_VALUE_BYTES // 8))) for i in range(b * n, (b + 1) * n)
            ]
        )
    )
    probes = p | 'Probes' >> beam.Create(list(range(0, LARGE_ENTRIES + 500, 733)))
    looked_up = probes | 'Lookup' >> beam.Map(
        lambda k, d: (k, len(d[k]) if k in d else None, d[k][:16] if k in d else None, len(d)),
        d=AsDict(big),
    )
    assert_that(
        looked_up,
        equal_to(
            [
                (k, LARGE_VALUE_BYTES, f'{k:08d}' * 2, LARGE_ENTRIES)
                if k < LARGE_ENTRIES
                else (k, None, None, LARGE_ENTRIES)
                for k in range(0, LARGE_ENTRIES + 500, 733)
            ]
        ),
        label='Check lookups',
    )
    return {'lookups': looked_up}


@_pipeline
def semantics(p):
    """The scenarios of the semantics suite that cross what Connect changes
    (``test_semantics.SCENARIOS``), as one pipeline. Its DoFns are module-level
    functions of ``tests.integration.test_semantics``, pickled by reference:
    the runner ships the ``tests`` package (code from outside site-packages)
    to the Connect server's workers."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if root not in sys.path:  # run as a script: the repository is not on the path
        sys.path.insert(0, root)
    from tests.integration import test_semantics

    return {'semantics': test_semantics.branches(**test_semantics.SCENARIOS)(p)}


# --- running and reading back ------------------------------------------------


def run(name, runner, out_dir):
    """Runs pipeline ``name`` on ``runner``; its outputs go to ``out_dir/NAME-*``.

    All outputs share one ``WriteToText`` (lines ``label<TAB>repr(element)``):
    every write adds stages and side-input collections, i.e. Spark jobs.
    """
    with beam.Pipeline(runner=runner) as p:
        outputs = PIPELINES[name](p)
        lines = [
            pcoll | f'Format {label}' >> beam.Map(lambda x, label=label: f'{label}\t{x!r}')
            for label, pcoll in sorted(outputs.items())
        ]
        _ = (
            tuple(lines)
            | 'All outputs' >> beam.Flatten()
            | 'Write' >> beam.io.WriteToText(os.path.join(out_dir, name))
        )


def read_outputs(out_dir, name):
    """{label: sorted lines} written by ``run`` for pipeline ``name``."""
    result = {}
    for path in sorted(glob.glob(os.path.join(out_dir, f'{name}-*-of-*'))):
        with open(path, encoding='utf-8') as f:
            for line in f.read().splitlines():
                label, _, value = line.partition('\t')
                result.setdefault(label, []).append(value)
    return {label: sorted(lines) for label, lines in result.items()}


class _CountThenFail(beam.DoFn):
    def process(self, x):
        from apache_beam.metrics import Metrics

        Metrics.counter('attempts', 'seen').inc()
        if x == 99:
            raise RuntimeError('fails on purpose after counting')
        yield x


def attempt_metrics(session) -> dict:
    """A pipeline whose task fails (no retries on ``local[2]``): its attempt's
    counts reach ``attempted`` over the attempt channel, ``committed`` stays 0."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_spark_inproc import InProcessSparkRunner

    p = beam.Pipeline(
        runner=InProcessSparkRunner(spark=session),
        options=PipelineOptions(['--no_wait_until_finish']),
    )
    _ = p | beam.Create(range(100)) | beam.ParDo(_CountThenFail())
    result = p.run()
    try:
        result.wait_until_finish()
        error = None
    except Exception as e:
        error = f'{type(e).__name__}: {e}'[:500]
    [counter] = result.metrics().query()['counters']
    return {
        'state': str(result.state),
        'error': error,
        'attempted': counter.attempted,
        'committed': counter.committed,
    }


# A user's own values for settings the runner sets while it runs
# (``spark.session.runtime_settings``); maxBytesPerBatch is left unset.
USER_SETTINGS = {
    'spark.sql.adaptive.enabled': 'true',
    'spark.sql.execution.arrow.maxRecordsPerBatch': '777',
    'spark.sql.execution.arrow.maxBytesPerBatch': None,
}


def runtime_settings(session, streaming: bool = False) -> dict:
    """A user's session with its own values: the settings each of the runner's
    queries saw (read where the engine collects), and the session's values
    before and after the run (classic Spark and Connect alike); ``streaming``:
    the same pipeline fed by a TestStream, run as a stream."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.spark.engine import SparkEngine

    keys = sorted(USER_SETTINGS)
    values = lambda: {k: session.conf.get(k, None) for k in keys}  # noqa: E731
    original, collect, seen = values(), SparkEngine.collect, []

    def spying(self, data, elements=True, started=None):
        seen.append(values())
        return collect(self, data, elements, started)

    try:
        for key, value in USER_SETTINGS.items():
            if value is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, value)
        before = values()
        SparkEngine.collect = spying
        elements = [('a', 1), ('b', 2), ('a', 3)]
        with beam.Pipeline(
            runner=InProcessSparkRunner(spark=session),
            options=PipelineOptions(['--spark_small_data_kb=0'] + ['--streaming'] * streaming),
        ) as p:
            source = (
                TestStream().add_elements(elements[:2]).add_elements(elements[2:])
                | beam.WindowInto(window.FixedWindows(60))
                if streaming
                else beam.Create(elements)
            )
            assert_that(
                p | source | beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, sum(vs))),
                equal_to([('a', 4), ('b', 2)]),
            )
        after = values()
    finally:
        SparkEngine.collect = collect
        for key, value in original.items():
            if value is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, value)
    return {'before': before, 'during': seen, 'after': after}


def _wait_for_server(remote, seconds):
    import socket
    import urllib.parse

    url = urllib.parse.urlparse('http' + remote[2:])
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((url.hostname, url.port or 15002), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--remote', required=True, help='sc://host:port')
    parser.add_argument(
        '--wait', type=float, default=0, help='seconds to wait for the server to listen'
    )
    parser.add_argument('--out', required=True)
    parser.add_argument('--status', required=True)
    parser.add_argument('names', nargs='*')
    args = parser.parse_args(argv)
    names = args.names or sorted(PIPELINES)

    from pyspark.sql import SparkSession

    from beam_spark_inproc import InProcessSparkRunner

    status = {'pipelines': {}}

    def save():
        tmp = args.status + '.tmp'
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump(status, f, indent=1)
        os.replace(tmp, args.status)

    start = time.monotonic()
    _wait_for_server(args.remote, args.wait)
    status['server_wait_seconds'] = round(time.monotonic() - start, 2)
    start = time.monotonic()
    session = SparkSession.builder.remote(args.remote).getOrCreate()
    try:
        import pyspark
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        status['session_type'] = type(session).__module__ + '.' + type(session).__name__
        status['is_connect'] = isinstance(session, ConnectSession)
        # A pure Connect client: no SparkContext (JVM) in this process.
        status['local_jvm'] = pyspark.SparkContext._active_spark_context is not None
        status['session_seconds'] = round(time.monotonic() - start, 2)
        save()
        for name in names:
            began = time.monotonic()
            entry = status['pipelines'][name] = {'ok': False}
            try:
                run(name, InProcessSparkRunner(spark=session), args.out)
                entry['ok'] = True
            except Exception as e:  # report everything, including assert_that
                entry['error'] = f'{type(e).__name__}: {e}'[-6000:]
                entry['traceback'] = traceback.format_exc()[-6000:]
            entry['seconds'] = round(time.monotonic() - began, 2)
            save()
        try:
            status['runtime_settings'] = runtime_settings(session)
        except Exception:
            status['runtime_settings'] = {'error': traceback.format_exc()[-4000:]}
        save()
        try:
            status['attempt_metrics'] = attempt_metrics(session)
        except Exception:
            status['attempt_metrics'] = {'error': traceback.format_exc()[-4000:]}
        save()
        if not args.names:
            # Spark interop cases on the same session; checked by the
            # interop tests at the end of test_spark_connect.py.
            import spark_interop_pipelines

            status['interop'] = spark_interop_pipelines.run_all(session, args.out)
            save()
            # Streaming: the micro-batch loop in this client.
            import spark_connect_streaming

            status['streaming'] = spark_connect_streaming.run_all(session)
            save()
    finally:
        session.stop()
        status['stopped'] = True
        status['total_seconds'] = round(time.monotonic() - start, 2)
        save()
    return (
        0
        if all(
            e['ok']
            for e in [
                *status['pipelines'].values(),
                *status.get('interop', {}).values(),
                *status.get('streaming', {}).values(),
            ]
        )
        else 1
    )


if __name__ == '__main__':
    sys.exit(main())
