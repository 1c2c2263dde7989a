"""ReadFromText read by ``io.text_lines`` (Python's line iteration) on the
debug engine and on Spark gives FnApiRunner's lines: ``\\r\\n``, lone ``\\r``,
empty lines, no final newline, multi-byte UTF-8, several files, cut by the
initial split (small data on) or read whole from Spark's rows (small data
off); sources other than Beam's default text source keep
Beam's reader."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.io import text_lines
from tests.integration.test_semantics import run_on

SMALL = {'spark_small_data_kb': 64}
OFF = {'spark_small_data_kb': 0}


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('text_lines')
    rng = random.Random(3)
    pieces = [
        b'ab',
        b'c d',
        b'\n',
        b'\r\n',
        b'\r',
        b'\n\n',
        'é'.encode(),
        '日本語'.encode(),
        '€'.encode(),
        b'x' * 40,
    ]
    (folder / 'a.txt').write_bytes(b''.join(rng.choice(pieces) for _ in range(4000)) + b'\n')
    (folder / 'b.txt').write_bytes(  # no final newline
        b''.join(rng.choice(pieces) for _ in range(3000)) + b'end'
    )
    (folder / 'c.txt').write_bytes(b'')
    return folder


@pytest.fixture
def reads(monkeypatch):
    """How many ranges ``read_lines`` read in this process (the debug engine)."""
    calls = []
    read_lines = text_lines.read_lines

    def spy(*args):
        calls.append(args[1])
        return read_lines(*args)

    monkeypatch.setattr(text_lines, 'read_lines', spy)
    return calls


@pytest.fixture(autouse=True)
def no_clock(monkeypatch):
    """Stages leave the driver by their data only (see test_initial_split.py)."""
    from tests.integration.test_small_data import pin_spark_cost

    pin_spark_cost(monkeypatch, 3600.0)


def _count(pattern, **kwargs):
    return lambda p: (
        p
        | beam.io.ReadFromText(str(pattern), **kwargs)
        | beam.combiners.Count.PerElement()
        | beam.MapTuple(lambda line, n: f'{line!r} {n}')
    )


def _expected(build, tmp_path):
    return sorted(run_on(FnApiRunner(), build, tmp_path / 'fnapi'))


@pytest.mark.parametrize('small', [True, False], ids=['small', 'spark_rows'])
@pytest.mark.parametrize('backend', ['debug', 'spark'])
def test_fnapi_runners_lines(backend, small, files, reads, tmp_path, request):
    runner = (
        InProcessSparkRunner(debug=True)
        if backend == 'debug'
        else InProcessSparkRunner(spark=request.getfixturevalue('spark'))
    )
    build = _count(files / '*.txt')
    got = run_on(runner, build, tmp_path / 'runner', SMALL if small else OFF)
    assert sorted(got) == _expected(build, tmp_path)
    assert len(got) > 100
    if backend == 'debug':  # a.txt and b.txt, cut in two each (small) or not
        assert len(reads) >= 2


def test_other_sources_keep_beams_reader(files, reads, tmp_path):
    build = _count(files / 'a.txt', skip_header_lines=2)
    got = run_on(InProcessSparkRunner(debug=True), build, tmp_path / 'runner')
    assert sorted(got) == _expected(build, tmp_path)
    assert reads == []
