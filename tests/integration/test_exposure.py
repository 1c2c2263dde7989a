"""Nothing exposed: no listening socket left by a run (the metrics attempt
channel listens only while a run lasts, see docs/metrics.md); private, removed
temporary files."""

from __future__ import annotations

import os
import stat
import tempfile

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc import PipelineExecutionError


def _listening_sockets() -> set[str]:
    """This process's listening TCP sockets, as 'address:port' (from /proc)."""
    mine = set()
    for fd in os.listdir('/proc/self/fd'):
        try:
            target = os.readlink(f'/proc/self/fd/{fd}')
        except OSError:
            continue
        if target.startswith('socket:['):
            mine.add(target[8:-1])
    found = set()
    for proto in ('tcp', 'tcp6'):
        try:
            with open(f'/proc/net/{proto}') as f:
                lines = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == '0A' and fields[9] in mine:  # 0A: LISTEN
                found.add(f'{proto} {fields[1]}')
    return found


def _pipeline(p, fail=False):
    side = (
        p
        | 'Side' >> beam.Create(list(range(200)))
        | 'Pairs' >> beam.Map(lambda i: (i, 'v' * 100 + str(i)))
    )

    def look(x, d):
        if fail:
            raise ValueError('injected failure with a shipped side input')
        return x, d[x]

    out = (
        p | 'Main' >> beam.Create([3, 5, 7]) | 'Look' >> beam.Map(look, d=beam.pvalue.AsDict(side))
    )
    return out


def _shipping_options():
    # Every side input shipped as a file, however small, to tasks on Spark
    # (none of these small stages in the driver, ``execution.small``).
    return PipelineOptions(['--spark_inline_side_input_mb=0', '--spark_small_data_kb=0'])


def test_runner_opens_no_listening_socket(spark):
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        p | beam.Create([1]) | beam.Map(lambda x: x)  # warm: Spark's own setup
    before = _listening_sockets()
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=_shipping_options()) as p:
        out = _pipeline(p) | beam.GroupBy(lambda kv: kv[0] % 2)
        assert_that(out | beam.Map(lambda kv: (kv[0], len(kv[1]))), equal_to([(1, 3)]))
    assert _listening_sockets() - before == set()


def _ours(folder: str) -> dict[str, os.stat_result]:
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            if 'beam-spark-inproc-' in path and '-code-' not in path:
                found[path] = os.stat(path)
    return found


@pytest.mark.parametrize('fail', [False, True], ids=['succeeds', 'fails'])
def test_temporary_files_private_and_emptied(spark, tmp_path, monkeypatch, fail):
    """Shipped side inputs live in a 0700 folder; when the run ends, succeeded
    or failed, no data is left in them (on classic Spark the emptied names stay
    until the process exits: executors started later fetch every name)."""
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    seen = []
    original = os.truncate

    def spy(path, length):  # the run's files, seen before they are emptied
        seen.append((path, os.stat(path), os.stat(os.path.dirname(path))))
        return original(path, length)

    monkeypatch.setattr(os, 'truncate', spy)

    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=_shipping_options())
    out = _pipeline(p, fail=fail)
    assert_that(out, equal_to([(x, 'v' * 100 + str(x)) for x in (3, 5, 7)]))
    if fail:
        with pytest.raises(PipelineExecutionError, match='injected failure'):
            p.run()
    else:
        p.run()
    assert seen, 'no side input was shipped as a file'
    for path, file_stat, dir_stat in seen:
        assert file_stat.st_size > 0
        assert stat.S_IMODE(dir_stat.st_mode) == 0o700, path
        assert dir_stat.st_uid == os.getuid()
    left = _ours(str(tmp_path))
    assert left and all(s.st_size == 0 for path, s in left.items() if os.path.isfile(path)), left
