"""Committed metrics are exact when Spark retries a failed task; attempted
metrics include the failed attempt (sent by the worker over the attempt
channel), and the final push carries both."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent


def test_committed_metrics_exact_after_task_retry():
    proc = subprocess.run(
        [sys.executable, str(HERE / 'retry_pipeline.py')],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # The first attempt fails (its counts reach the attempted metrics below),
    # the retry succeeds; a session the runner creates does not print
    # Spark's copies of a Python task's failure (``spark/log4j2.properties``).
    assert 'first attempt fails after counting' not in proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out['state'] == 'DONE'
    assert out['committed'] == 1000
    # The failed attempt counted its partition's elements up to 999, then failed.
    assert out['attempted'] > out['committed']
    assert out['dist_attempted_count'] == out['attempted']
    assert out['dist_count'] == 1000 and out['dist_sum'] == sum(range(1000))
    print('attempted', out['attempted'], 'committed', out['committed'])
    print('pushed JSON:', json.dumps(out['pushed']))
    print('graphite lines:', *out['graphite'], sep='\n')
    pushed = {(m['name'], m['kind']): m for m in out['pushed']['metrics']}
    assert out['pushed']['state'] == 'DONE'
    assert pushed['seen', 'counter']['committed'] == out['committed']
    assert pushed['seen', 'counter']['attempted'] == out['attempted']
    lines = dict(line.split(' ')[:2] for line in out['graphite'])
    assert (
        int(lines['beam.retry.counter.ParDo_FailFirstAttempt_.retry.seen.attempted'])
        == out['attempted']
    )
