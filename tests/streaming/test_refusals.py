"""A stream's checkpoint refuses a run (an incompatible update, a rerun of a
drained stream) from its files alone: before any JVM starts, and leaving every
file and folder of the checkpoint as it was (same bytes, same modification
times, same inodes: nothing rewritten or recreated). The refused checkpoint
stays usable: the pipeline it belongs to resumes on it (the update), and
``status`` still reads it (the drain).

The checkpoints are made on the debug engine; each refused run is a driver
process of its own configured for Spark (``refusal_pipeline``), which reports
whether a JVM was started."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from contextlib import redirect_stdout

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.__main__ import main as cli
from beam_spark_inproc.execution.streaming import drain
from tests.streaming import refusal_pipeline
from tests.streaming.interrupt_pipeline import ROOT


def _run_debug(checkpoint: str, variant: str) -> str:
    options = PipelineOptions(['--streaming', f'--checkpoint_location={checkpoint}'])
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True), options=options)
    refusal_pipeline.build(p, checkpoint, variant)
    return p.run().wait_until_finish()


def _snapshot(folder: str) -> dict:
    """Every file and folder under ``folder``: its bytes' digest, size,
    modification time and inode."""
    found = {}
    for d, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(d, name)
            stat = os.stat(path)
            digest = None
            if os.path.isfile(path):
                with open(path, 'rb') as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            found[os.path.relpath(path, folder)] = (
                digest,
                stat.st_size,
                stat.st_mtime_ns,
                stat.st_ino,
            )
    return found


def _refused(checkpoint: str, variant: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, '-m', 'tests.streaming.refusal_pipeline', checkpoint, variant],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith(('REFUSED', 'JVM'))]


def test_an_incompatible_update_is_refused_before_spark_and_changes_nothing(tmp_path):
    checkpoint = str(tmp_path / 'ck')
    assert _run_debug(checkpoint, 'plain') == 'DONE'
    before = _snapshot(checkpoint)
    printed = _refused(checkpoint, 'renamed')
    assert printed == [
        f'REFUSED IncompatibleUpdateError: --checkpoint_location {checkpoint!r} holds the '
        'state of a pipeline this one cannot take over:',
        'JVM False',
    ]
    assert _snapshot(checkpoint) == before
    # Still the pipeline's own: it resumes there.
    assert _run_debug(checkpoint, 'plain') == 'DONE'


def test_a_drained_checkpoint_is_refused_before_spark_and_changes_nothing(tmp_path):
    checkpoint = str(tmp_path / 'ck')
    assert _run_debug(checkpoint, 'drains') == 'DONE'
    assert drain.newest_record(checkpoint)['drain']['drained']
    before = _snapshot(checkpoint)
    printed = _refused(checkpoint, 'drains')
    assert printed == [
        f'REFUSED StreamDrainedError: --checkpoint_location {checkpoint!r} holds a stream '
        'that was drained (requested by python -m beam_spark_inproc drain after micro-batch '
        f'{drain.newest_record(checkpoint)["drain"]["after_micro_batch"]}, ended at '
        f'micro-batch {drain.newest_record(checkpoint)["micro_batch"]}): its sources were '
        'stopped and every window fired, so it does not resume. Run the pipeline on a new '
        'checkpoint location to start a new stream.',
        'JVM False',
    ]
    assert _snapshot(checkpoint) == before
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli(['status', checkpoint]) == 0
    assert 'drained: every window and timer fired' in out.getvalue()


@pytest.mark.parametrize('variant', ['renamed', 'drains'])
def test_a_refusal_in_process_leaves_the_checkpoint_as_it_was(tmp_path, variant):
    """The same refusals on the debug engine, in this process: the error
    class, and not one file touched."""
    checkpoint = str(tmp_path / 'ck')
    assert _run_debug(checkpoint, 'plain' if variant == 'renamed' else 'drains') == 'DONE'
    before = _snapshot(checkpoint)
    with pytest.raises(ValueError, match='--checkpoint_location'):
        _run_debug(checkpoint, variant)
    assert _snapshot(checkpoint) == before
