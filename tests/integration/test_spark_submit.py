"""``spark-submit pipeline.py --runner=beam_spark_inproc.InProcessSparkRunner``
(docs/deploying.md): the word count example submitted with the venv's own
``spark-submit``, as a cluster job is, runs in the submitted application.

Spark's event log shows where it ran: the application's master is the one
given to spark-submit (the runner alone would have made ``local[*]``) and the
runner's Spark jobs, named after their Beam stages, ran in it. The counts are
checked against the word count computed here from the generated text.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / 'examples' / 'wordcount.py'
MASTER = 'local[2]'
# 13 words once lower-cased ('the' and 'The' are one), of unequal counts.
VOCABULARY = [
    "Don't",
    'the',
    'The',
    'spark',
    'beam',
    'pipeline',
    'o',
    "it's",
    'x1',
    'river',
    'a',
    'stage',
    'key',
    'window',
]
# Environment that would make the submitted program a client of some Connect
# server, or change the runner's defaults.
_FOREIGN_ENV = (
    'SPARK_REMOTE',
    'SPARK_CONNECT_MODE_ENABLED',
    'SPARK_API_MODE',
    'PYSPARK_SUBMIT_ARGS',
)


def _text(lines: int) -> list[str]:
    return [
        ' '.join(VOCABULARY[(i * 7 + j * 3) % len(VOCABULARY)] for j in range(i % 9 + 1)) + '.'
        for i in range(lines)
    ]


def _events(folder: pathlib.Path) -> list[dict]:
    """The application's Spark events: JSON lines (uncompressed, as asked), in
    one file or, rolling (Spark 4's default), in ``events_*`` files of a folder
    (besides Hadoop's hidden ``.crc`` files and an empty status file)."""
    events = []
    for path in sorted(p for p in folder.rglob('*') if p.is_file()):
        if path.name.startswith('.'):
            continue
        with open(path) as f:
            events += [json.loads(line) for line in f if line.startswith('{')]
    return events


@pytest.mark.timeout(900)
def test_spark_submit_runs_the_pipeline_in_the_submitted_application(tmp_path):
    import pyspark

    from beam_spark_inproc.options import SMALL_DATA_ENV

    lines = _text(3000)
    (tmp_path / 'input.txt').write_text('\n'.join(lines) + '\n')
    expected = collections.Counter(
        word for line in lines for word in re.findall(r"[\w']+", line.lower())
    )
    top = sorted(expected.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:10]
    events_dir = tmp_path / 'events'
    events_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV + (SMALL_DATA_ENV,)}
    # Spark's Python, driver and workers: this interpreter (on a cluster, the
    # executors' own: spark.pyspark.python).
    env['PYSPARK_PYTHON'] = env['PYSPARK_DRIVER_PYTHON'] = sys.executable
    spark_home = os.path.dirname(pyspark.__file__)
    env['SPARK_HOME'] = spark_home
    command = [
        os.path.join(spark_home, 'bin', 'spark-submit'),
        '--master',
        MASTER,
        '--conf',
        'spark.eventLog.enabled=true',
        '--conf',
        f'spark.eventLog.dir={events_dir.as_uri()}',
        '--conf',
        'spark.eventLog.compress=false',
        str(WORDCOUNT),
        '--input',
        str(tmp_path / 'input.txt'),
        '--output',
        str(tmp_path / 'counts'),
        '--runner=beam_spark_inproc.InProcessSparkRunner',
        # Every stage on Spark: the input would fit in the driver.
        '--spark_small_data_kb=0',
    ]
    proc = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=840
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    written = [line for path in sorted(glob.glob(str(tmp_path / 'counts*'))) for line in open(path)]
    assert sorted(written) == sorted(f'{word}: {n}\n' for word, n in expected.items())
    # stdout: Beam's import warning, then the example's top 10.
    printed = [line for line in proc.stdout.splitlines() if re.fullmatch(r"[\w']+: \d+", line)]
    assert printed == [f'{word}: {n}' for word, n in top]

    events = _events(events_dir)
    # One environment at the start, another each time files are added.
    masters = {
        e['Spark Properties']['spark.master']
        for e in events
        if e['Event'] == 'SparkListenerEnvironmentUpdate'
    }
    assert masters == {MASTER}
    descriptions = [
        e.get('Properties', {}).get('spark.job.description', '')
        for e in events
        if e['Event'] == 'SparkListenerJobStart'
    ]
    assert any(d.startswith('Beam pipeline') for d in descriptions), descriptions
