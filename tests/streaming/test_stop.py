"""Stopping a stream as its operators do (``result.stop_on_interrupt``):
Ctrl-C (SIGINT) and SIGTERM on the driver end it after its current
micro-batch; the process exits with the signal's own status, without a fatal
error of the interpreter (a loop thread inside Py4J while Python finalizes
crashed it with ``PyGILState_Release``); a rerun on the same checkpoint says
where it resumes and goes on. Each driver is a process of its own."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _start(out: str, checkpoint: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, '-m', 'tests.streaming.stop_pipeline', out, checkpoint],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _commits(checkpoint: str) -> list[str]:
    return glob.glob(os.path.join(checkpoint, '**', 'commits', '*.json'), recursive=True)


def _wait_for(ready, driver: subprocess.Popen) -> None:
    deadline = time.monotonic() + 240
    while not ready():
        assert driver.poll() is None, driver.stdout.read()
        assert time.monotonic() < deadline, 'the stream made no progress'
        time.sleep(0.2)


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM], ids=['sigint', 'sigterm'])
def test_a_signal_stops_the_stream_and_a_rerun_resumes(tmp_path, signum):
    out, checkpoint = str(tmp_path / 'out'), str(tmp_path / 'checkpoint')
    os.makedirs(out)
    driver = _start(out, checkpoint)
    try:
        _wait_for(lambda: _commits(checkpoint), driver)
        driver.send_signal(signum)
        printed, _ = driver.communicate(timeout=180)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == -signum, printed[-3000:]
    assert 'Fatal Python error' not in printed, printed[-3000:]
    assert 'Traceback' not in printed or signum == signal.SIGINT, printed[-3000:]

    ticks = len(os.listdir(out))
    again = _start(out, checkpoint)
    try:
        _wait_for(lambda: len(os.listdir(out)) > ticks + 2, again)
        again.send_signal(signal.SIGTERM)
        printed, _ = again.communicate(timeout=180)
    finally:
        if again.poll() is None:
            again.kill()
    assert again.returncode == -signal.SIGTERM, printed[-3000:]
    assert 'resuming after committed micro-batch' in printed, printed[-3000:]
