"""Ctrl-C on a stream's driver, as a terminal sends it: SIGINT to the whole
process group (the driver, its JVM, Spark's Python workers), inside a
micro-batch whose work takes seconds (``interrupt_pipeline``).

The first Ctrl-C lets that micro-batch finish and commit (PySpark's own
handler would cancel its Spark job), prints one line saying so, and the
driver exits as killed by SIGINT (130 in a shell) after one more line; a
rerun resumes after that micro-batch, saying where at WARNING (the default
level) under the same stream id; there, two Ctrl-C cancel the micro-batch
under way, whose commit never comes (a restart replays it)."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from tests.streaming.interrupt_pipeline import Driver


def _stopped(driver: Driver, presses: int) -> tuple[int, list[str]]:
    """Ctrl-C ``presses`` times inside a micro-batch; (the newest commit
    before, the lines printed from the first press on)."""
    before = driver.inside_a_micro_batch()
    driver.ctrl_c()
    if presses > 1:
        driver.wait_for_line('stopping after micro-batch')
        driver.ctrl_c()
    code = driver.exit()
    printed = driver.after(r': stopping')
    assert code == -signal.SIGINT, '\n'.join(driver.lines)
    for noise in ('Traceback', 'SPARK_JOB_CANCELLED', 'ERROR', 'Py4J', 'Fatal Python error'):
        assert not any(noise in line for line in driver.lines), '\n'.join(driver.lines)
    return before, printed


def _stream_id(checkpoint: str) -> str:
    with open(os.path.join(checkpoint, 'pipeline.json')) as f:
        return json.load(f)['stream']


def _resumed(driver: Driver, checkpoint: str, after: int) -> None:
    """The rerun said where it resumes, at WARNING, under the stream's id."""
    driver.wait_for_line('resumes after')
    [line] = [line for line in driver.lines if 'resumes after' in line]
    stream = _stream_id(checkpoint)
    # Beam's import logs on the root logger, which configures it with
    # Python's default format (LEVEL:logger:message); else the bare message.
    if line.startswith('WARNING:'):
        line = line.split(':', 2)[2]
    assert re.fullmatch(
        rf'Stream {stream} resumes after micro-batch {after}, committed '
        r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ '
        r"\(\d+\.\d s ago\): 'TestStream' at event \d+ of 80; lowest output watermark "
        r"\S+ \('(TestStream|ParDo\(Slow\))'\)",
        line,
    ), line


@pytest.mark.parametrize('engine', ['debug', 'spark'])
def test_ctrl_c_lets_the_micro_batch_under_way_commit(tmp_path, engine):
    marks, checkpoint = str(tmp_path / 'marks'), str(tmp_path / 'checkpoint')
    os.makedirs(marks)
    driver = Driver(marks, checkpoint, engine)
    before, printed = _stopped(driver, presses=1)
    stream = _stream_id(checkpoint)
    running = before + 1
    assert printed == [
        f'Stream {stream}: stopping after micro-batch {running}; Ctrl-C again to cancel it',
        f'KeyboardInterrupt: stream {stream} stopped after micro-batch {running} (Ctrl-C); '
        f'a run on --checkpoint_location={checkpoint} resumes there',
    ], '\n'.join(driver.lines)
    # The micro-batch under way committed: every element that entered the
    # slow DoFn left it, and the newest commit is that micro-batch's.
    assert driver.commits()[-1] == running
    assert driver.marked('started') == driver.marked('done')

    # A rerun resumes there; two Ctrl-C cancel its micro-batch under way
    # (on Spark: the debug engine runs it in the driver, where it ends).
    again = Driver(marks, checkpoint, engine)
    _resumed(again, checkpoint, running)
    if engine == 'debug':
        before, printed = _stopped(again, presses=1)
        assert again.commits()[-1] == before + 1
        assert again.marked('started') == again.marked('done')
        return
    before, printed = _stopped(again, presses=2)
    assert printed == [
        f'Stream {stream}: stopping after micro-batch {before + 1}; Ctrl-C again to cancel it',
        f"Stream {stream}: cancelling micro-batch {before + 1}'s Spark jobs (a restart replays it)",
        f'KeyboardInterrupt: stream {stream} stopped after micro-batch {before} (Ctrl-C); '
        f'a run on --checkpoint_location={checkpoint} resumes there',
    ], '\n'.join(again.lines)
    assert again.commits()[-1] == before
    assert len(again.marked('started') - again.marked('done')) == 1  # cancelled
