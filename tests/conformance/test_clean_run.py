"""A user's first run: what ``python examples/wordcount.py`` prints, and what
Spark's Python workers log.

Each test runs a fresh Python process (Spark's JVM and its Python workers write
to that process's stderr, which an in-process capture cannot see). The stderr a
user may see is what ``import apache_beam`` prints in any process (Beam's own,
with every runner) plus the JVM's note about the incubator module Spark 4's
launcher always adds; nothing else: no pandas warning from pyspark, no Beam
import warning per Python worker, no Spark start-up lines.
"""

from __future__ import annotations

import collections
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / 'examples' / 'wordcount.py'
JVM_NOTE = 'WARNING: Using incubator modules: jdk.incubator.vector'


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ('SPARK_LOCAL_IP', 'PYSPARK_PYTHON', 'PYSPARK_DRIVER_PYTHON'):
        env.pop(name, None)  # as in a user's shell: the runner sets what it needs
    return env


def _run(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=400
    )


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture(scope='module')
def beam_import_stderr(tmp_path_factory) -> list[str]:
    """What importing Beam prints in any process, whatever the runner."""
    done = _run(['-c', 'import apache_beam'], str(tmp_path_factory.mktemp('i')))
    assert done.returncode == 0, done.stderr
    return _lines(done.stderr)


def test_wordcount_prints_its_result_and_nothing_else(tmp_path, beam_import_stderr):
    done = _run([str(WORDCOUNT)], str(tmp_path))
    assert done.returncode == 0, done.stderr
    text = (ROOT / 'examples' / 'data' / 'sonnets.txt').read_text()
    counts = collections.Counter(re.findall(r"[\w']+", text.lower()))
    top = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10]
    assert _lines(done.stdout) == [f'{word}: {n}' for word, n in top]
    unexpected = [
        line for line in _lines(done.stderr) if line not in beam_import_stderr and line != JVM_NOTE
    ]
    assert unexpected == [], done.stderr


WORKER_LOGGING = """
import logging
import apache_beam as beam
from beam_spark_inproc import InProcessSparkRunner

class Log(beam.DoFn):
    def process(self, x):
        logging.getLogger('user.dofn').info('dofn-info-%s', x)
        logging.getLogger('user.dofn').warning('dofn-warning-%s', x)
        yield x

def run(tag):
    with beam.Pipeline(runner=InProcessSparkRunner()) as p:
        _ = p | beam.Create([tag]) | beam.ParDo(Log())

run('default')
logging.getLogger().setLevel(logging.INFO)  # as Beam's examples do
run('info')
"""


def test_workers_log_at_the_drivers_level(tmp_path):
    """A DoFn's INFO record shows when the driver logs INFO, and only then."""
    done = _run(['-c', WORKER_LOGGING, '--spark_master=local[2]'], str(tmp_path))
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert err.count('dofn-warning-default') == 1, err
    assert 'dofn-info-default' not in err, err
    assert err.count('dofn-warning-info') == 1, err
    assert err.count('dofn-info-info') == 1, err
