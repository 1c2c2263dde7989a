"""The pytest plugin, as a user runs it: on examples/test_my_pipeline.py."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_user_test_file_runs_with_fixtures_and_test_pipeline_options(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'pytest',
            '-q',
            '-p',
            'no:cacheprovider',
            '-o',
            'addopts=',
            '--rootdir',
            str(tmp_path),
            str(ROOT / 'examples' / 'test_my_pipeline.py'),
            '--spark-master',
            'local[1]',
            '--test-pipeline-options=--runner=beam_spark_inproc.InProcessSparkRunner '
            '--spark_master=local[1]',
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert '2 passed' in proc.stdout


def test_explain_prints_the_plan_without_running(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            '-m',
            'beam_spark_inproc',
            'explain',
            str(ROOT / 'examples' / 'wordcount.py'),
            '--output',
            str(tmp_path / 'out'),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert 'Reshuffle' in out and 'GroupAlsoByWindow' in out
    assert 'transforms: Split, Count/Count:PairWithVoid' in out.replace(
        'Read/Read/SDFBoundedSourceReader/ParDo(SDFBoundedSourceDoFn)/Process, ', ''
    )
    assert 'collected once on the driver' in out
    assert not list(tmp_path.glob('out*')), 'explain must not run the pipeline'
