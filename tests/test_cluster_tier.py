"""Runs the cluster tier (``tests/cluster``) on separate executor JVMs.

A process holds one SparkContext, and this run's is ``local[2]``: the tier runs
in a pytest process of its own on ``local-cluster[2,1,1024]`` (two executors,
one core and 1 GB each, each with its own Python workers).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MASTER = 'local-cluster[2,1,1024]'


@pytest.mark.timeout(1800)
def test_cluster_tier():
    env = dict(os.environ, BEAM_SPARK_TEST_MASTER=MASTER)
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'pytest',
            'tests/cluster',
            '-q',
            '-rfEs',
            '-p',
            'no:cacheprovider',
            '-n',
            '0',  # one local-cluster at a time
            '-W',
            'ignore::FutureWarning',
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1700,
    )
    summary = proc.stdout[-6000:]
    print(summary)
    assert proc.returncode == 0, f'{summary}\n{proc.stderr[-4000:]}'
    skipped = [line for line in summary.splitlines() if line.startswith('SKIPPED')]
    assert ' passed' in summary and not skipped, summary
