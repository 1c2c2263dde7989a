"""ReadFromSpark over a streaming DataFrame, restarted: a driver
SIGKILLed in the middle of a micro-batch (``spark_source_restart``), after
Spark's staging query committed batches the loop had not, and run again on
the same checkpoint location, reads each row exactly once: the committed
count of rows read is the number of rows, and the windowed sums written with
Beam's ``fileio.WriteToFiles`` equal the same sums over the rows read as a
batch on Beam's FnApiRunner.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.streaming import spark_source_pipelines as cases
from tests.streaming import spark_source_restart as driver

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _driver(*args: str):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, '-m', 'tests.streaming.spark_source_restart', *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_driver_killed_mid_stream_reads_each_row_once(spark, tmp_path):
    landing, out, checkpoint = (str(tmp_path / n) for n in ('landing', 'out', 'ck'))
    marker = str(tmp_path / 'killed')
    cases.land(landing)
    expected = cases.bounded(spark, landing)

    killed = _driver(landing, out, checkpoint, '--kill', marker)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert os.path.exists(marker)
    # It died with Spark's checkpoint ahead of the loop's commit record:
    # Spark had committed every batch, the loop's position was before the
    # batch holding KILL_ID.
    assert driver.spark_committed(checkpoint)[-1] == cases.FILES - 1
    commits = os.path.join(checkpoint, 'commits')
    newest = max(int(n[:-5]) for n in os.listdir(commits) if n.endswith('.json'))
    with open(os.path.join(commits, f'{newest}.json')) as f:
        (position,) = json.load(f)['sources'].values()
    assert position['next_batch'] <= driver.KILL_ID // cases.PER_FILE

    again = _driver(landing, out, checkpoint, '--kill', marker)
    assert again.returncode == 0, again.stderr[-3000:]
    counters = json.loads(again.stdout.strip().splitlines()[-1])
    assert counters == {'rows': cases.FILES * cases.PER_FILE}
    assert driver.outputs(out) == expected
