"""Smoke tests of examples/*.py: each runs as a script, in a fresh process, on local[2].

Each test checks the printed result against what it computes itself in plain
Python from the example's own data generator (imported from the example module
by path), not against stored values. Every run starts its own JVM (~15-25 s).
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import importlib
import importlib.util
import io
import os
import pathlib
import re
import subprocess
import sys

import pytest

from beam_spark_inproc.compat import pyspark as pyspark_compat

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / 'examples'
TIMEOUT = 120  # seconds per example; each normally takes 20-30 s


def load_example(name: str):
    """examples/NAME.py as a module (for its data generators), without running it."""
    spec = importlib.util.spec_from_file_location(f'_example_{name}', EXAMPLES / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(name: str, *args: str, cwd: pathlib.Path, timeout: int = TIMEOUT) -> list[str]:
    """Runs examples/NAME.py on local[2]; returns its stdout lines.

    In the cluster tier (``tests/cluster``) the example runs in this process on
    the shared local-cluster session instead, imported by name from its folder
    as a user's module next to their script would be: executors get it only
    from what the runner ships (every stage on Spark there: none in the
    driver, which has the module).
    """
    from tests.conftest import CLUSTER

    if CLUSTER:
        return _run_example_here(name, *args, cwd=cwd)
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / f'{name}.py'), *args, '--spark_master=local[2]'],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(cwd),
        env=env,
    )
    assert proc.returncode == 0, (
        f'{name} exited {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\n'
        f'stderr:\n{proc.stderr[-4000:]}'
    )
    return proc.stdout.splitlines()


def _run_example_here(name: str, *args: str, cwd: pathlib.Path) -> list[str]:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    module = importlib.import_module(name)
    out = io.StringIO()
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out):
            module.run([*args, '--spark_small_data_kb=0'])
    finally:
        os.chdir(previous)
    return out.getvalue().splitlines()


def test_wordcount(tmp_path):
    lines = run_example('wordcount', cwd=tmp_path)
    text = (EXAMPLES / 'data' / 'sonnets.txt').read_text().lower()
    counts = collections.Counter(re.findall(r"[\w']+", text))
    top = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    assert lines[-10:] == [f'{w}: {n}' for w, n in top[:10]]


def test_custom_windows(tmp_path):
    example = load_example('custom_windows')
    num_events, seed = 60, 11
    events = example.generate_events(num_events, seed)
    assert {status for status, _ in events} == {'HEALTHY', 'FAILURE'}

    # HEALTHY: its 10-minute window; FAILURE: that window and the next three.
    expected = collections.Counter()
    for status, t in events:
        start = t // 600 * 600
        for i in range(4 if status == 'FAILURE' else 1):
            expected[(start + 600 * i, status)] += 1

    lines = run_example(
        'custom_windows', '--num_events', str(num_events), '--seed', str(seed), cwd=tmp_path
    )
    row = re.compile(
        r'^(\d{4}-\d\d-\d\d \d\d:\d\d)-(\d\d:\d\d)  '
        r'(HEALTHY|FAILURE)  (\d+)$'
    )
    printed = []
    for line in lines:
        m = row.match(line)
        if m:
            start = datetime.datetime.strptime(m[1], '%Y-%m-%d %H:%M').replace(
                tzinfo=datetime.timezone.utc
            )
            start = int(start.timestamp())
            end = (start + 600) % 86400 // 60
            assert m[2] == f'{end // 60:02d}:{end % 60:02d}', line
            printed.append((start, m[3], int(m[4])))
    assert printed == sorted((start, status, n) for (start, status), n in expected.items())
    failures = sum(1 for status, _ in events if status == 'FAILURE')
    assert f'{num_events} events, {failures} failures;' in lines[-len(printed) - 1]


def test_stateful_join(tmp_path):
    example = load_example('stateful_join')
    num_persons, num_auctions, seed = 10, 40, 5
    persons = example.generate_persons(num_persons, seed)
    auctions = example.generate_auctions(persons, num_auctions, seed)
    names = {pid: name for pid, name, _ in persons}
    expected_joins = sorted((names[seller], aid) for aid, seller, _ in auctions if seller in names)
    expected_unmatched = sorted((seller, aid) for aid, seller, _ in auctions if seller not in names)
    assert expected_joins and expected_unmatched  # both paths are exercised

    lines = run_example(
        'stateful_join',
        '--num_persons',
        str(num_persons),
        '--num_auctions',
        str(num_auctions),
        '--seed',
        str(seed),
        cwd=tmp_path,
    )
    joins = [
        (m[1], int(m[2]))
        for m in (re.match(r'^joined: (.+) <- auction (\d+)$', line) for line in lines)
        if m
    ]
    unmatched = [
        (int(m[2]), int(m[1]))
        for m in (
            re.match(r'^unmatched: auction (\d+) \(no person (\d+)\)$', line) for line in lines
        )
        if m
    ]
    assert joins == expected_joins
    assert unmatched == expected_unmatched
    assert (
        f'{num_persons} persons, {num_auctions} auctions: '
        f'{len(expected_joins)} joined, {len(expected_unmatched)} unmatched' in lines
    )


def test_sdf_expand(tmp_path):
    example = load_example('sdf_expand')
    spec = 'a=3,b=7001,c=0,d=2000,e=1'
    inputs = example.parse_inputs(spec)
    assert inputs == [('a', 3), ('b', 7001), ('c', 0), ('d', 2000), ('e', 1)]

    lines = run_example('sdf_expand', '--inputs', spec, cwd=tmp_path)
    assert lines[-len(inputs) - 1 :] == (
        [f'{x}: {n} of {n}' for x, n in inputs]
        + [f'OK: all {sum(n for _, n in inputs)} (x, i) pairs appear exactly once']
    )


def test_sdf_expand_check_catches_duplicates_and_gaps():
    """The driver-side check the example relies on reports what is wrong."""
    example = load_example('sdf_expand')
    inputs = [('a', 3), ('b', 0)]
    counts, problems = example.check(inputs, ['a\t0', 'a\t1', 'a\t2'])
    assert counts == {'a': 3, 'b': 0} and problems == []
    _, problems = example.check(inputs, ['a\t0', 'a\t0', 'a\t2', 'b\t0'])
    assert len(problems) == 3  # a/1 missing, b/0 unexpected, a/0 twice


def test_spark_tables(tmp_path):
    example = load_example('spark_tables')
    num_clicks, seed = 300, 4
    counts = collections.Counter()
    for _, page, ts in example.generate_clicks(num_clicks, seed):
        minute = ts.replace(second=0, microsecond=0)
        counts[(f'{minute:%H:%M}', page)] += 1
    expected = [f'{minute} {page} {n}' for (minute, page), n in sorted(counts.items())]

    lines = run_example(
        'spark_tables', '--num_clicks', str(num_clicks), '--seed', str(seed), cwd=tmp_path
    )
    assert lines[-len(expected) - 1 : -1] == expected
    assert lines[-1] == f'{num_clicks} clicks -> {len(expected)} rows in clicks_per_minute'


def test_kafka_stream_over_landing_files(tmp_path):
    """examples/kafka_stream.py with ``--landing``: the Kafka pipeline's code
    path (ReadFromSpark.stream, event time from the record's timestamp) over
    Spark's file source, into a Parquet folder with WriteToSpark in the
    stream; the table's rows equal the counts per page and minute computed
    here from the same records (no record is later than the example's 10 s
    of out-of-orderness)."""
    import json as _json

    example = load_example('kafka_stream')
    files = example.generate_clicks(4, 25, seed=5)
    counts = collections.Counter()
    for records in files:
        for r in records:
            at = datetime.datetime.fromisoformat(r['timestamp'])
            counts[(f'{at:%H:%M}', _json.loads(r['value'])['page'])] += 1
    expected = [f'{m} {page} {n}' for (m, page), n in sorted(counts.items())]
    example.land(str(tmp_path / 'landing'), files)
    lines = run_example(
        'kafka_stream',
        '--landing',
        str(tmp_path / 'landing'),
        '--out',
        str(tmp_path / 'out'),
        cwd=tmp_path,
        timeout=300,
    )  # a stream: Spark's query, then the loop
    assert lines[-len(expected) :] == expected


@pytest.mark.skipif(
    not pyspark_compat.PYTHON_STREAM_READ_LIMITS,
    reason='the source limits its batches (ReadMaxRows): Python streaming readers do from '
    f'PySpark 4.2, this is {pyspark_compat.VERSION_STRING}',
)
def test_sensor_stream_into_a_table(tmp_path):
    """examples/sensor_stream.py: a Python streaming data source with offsets
    -> ReadFromSpark.stream -> a stateful DoFn (state and an event-time timer
    per sensor and window) -> WriteToSpark into an external Parquet catalog
    table in the stream; the table's rows equal the count, sum and maximum
    per sensor and 10-second window computed here from the source's
    readings."""
    example = load_example('sensor_stream')
    readings, start = 240, int(example.START.timestamp())
    groups: dict = {}
    for n in range(readings):
        sensor, value, at = example.reading(n)
        second = int(at.timestamp()) // 10 * 10 - start
        groups.setdefault((sensor, second), []).append(value)
    expected = [f'{s} {w} {len(v)} {sum(v)} {max(v)}' for (s, w), v in sorted(groups.items())]
    lines = run_example(
        'sensor_stream',
        '--readings',
        str(readings),
        '--per_batch',
        '60',
        '--out',
        str(tmp_path / 'table'),
        '--checkpoint_location',
        str(tmp_path / 'ck'),
        cwd=tmp_path,
        timeout=300,
    )
    assert lines[-len(expected) :] == expected
