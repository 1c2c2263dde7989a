"""Stopping a stream with SIGTERM, as a service manager or ``kill PID`` does:
the driver ends it after its current micro-batch and exits with SIGTERM's own
status, without a fatal error of the interpreter (a loop thread inside Py4J
while Python finalizes crashed it with ``PyGILState_Release``); a rerun on
the same checkpoint says where it resumes and goes on. Each driver is a
process of its own; Ctrl-C (SIGINT to the process group) is
``test_interrupt``'s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.streaming.interrupt_pipeline import ROOT
from tests.streaming.interrupt_pipeline import Driver


def test_sigterm_lets_the_micro_batch_under_way_commit(tmp_path):
    """On Spark, inside a micro-batch whose Spark job takes seconds."""
    marks, checkpoint = str(tmp_path / 'marks'), str(tmp_path / 'checkpoint')
    os.makedirs(marks)
    driver = Driver(marks, checkpoint, 'spark')
    before = driver.inside_a_micro_batch()
    driver.process.send_signal(signal.SIGTERM)  # the driver alone, as `kill PID`
    assert driver.exit() == -signal.SIGTERM, '\n'.join(driver.lines)
    printed = driver.after(': SIGTERM')
    assert printed == [
        f'Stream {printed[0].split()[1][:-1]}: SIGTERM: stopping after micro-batch {before + 1}'
    ], '\n'.join(driver.lines)
    for noise in ('Traceback', 'Fatal Python error', 'ERROR'):
        assert not any(noise in line for line in driver.lines), '\n'.join(driver.lines)
    assert driver.commits()[-1] == before + 1
    assert driver.marked('started') == driver.marked('done')


def _start(out: str, checkpoint: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, '-m', 'tests.streaming.stop_pipeline', out, checkpoint],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(ready, driver: subprocess.Popen) -> None:
    deadline = time.monotonic() + 240
    while not ready():
        assert driver.poll() is None, driver.stdout.read()
        assert time.monotonic() < deadline, 'the stream made no progress'
        time.sleep(0.1)


def test_sigterm_stops_an_endless_stream_and_a_rerun_resumes(tmp_path):
    """PeriodicImpulse (a splittable DoFn waiting for its resume delay
    between micro-batches), on the debug engine."""
    out, checkpoint = str(tmp_path / 'out'), str(tmp_path / 'checkpoint')
    os.makedirs(out)
    commits = os.path.join(checkpoint, 'commits')
    driver = _start(out, checkpoint)
    try:
        _wait_for(lambda: os.path.isdir(commits) and os.listdir(commits), driver)
        driver.send_signal(signal.SIGTERM)
        printed, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == -signal.SIGTERM, printed
    assert 'Traceback' not in printed and 'Fatal Python error' not in printed, printed

    ticks = len(os.listdir(out))
    again = _start(out, checkpoint)
    try:
        _wait_for(lambda: len(os.listdir(out)) > ticks + 2, again)
        again.send_signal(signal.SIGTERM)
        printed, _ = again.communicate(timeout=120)
    finally:
        if again.poll() is None:
            again.kill()
    assert again.returncode == -signal.SIGTERM, printed
    assert 'resumes after micro-batch' in printed, printed
