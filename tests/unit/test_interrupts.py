"""Ctrl-C while the runner waits (``beam_spark_inproc.interrupts``), without
Spark: SIGINT raised in this process's main thread goes to the run's
callbacks and never raises; the handler that was there before is back
afterwards, also when another one (PySpark's, as a Spark context starts)
replaced the runner's meanwhile; the KeyboardInterrupt of a stopped run is
one line when uncaught and Python exits as killed by SIGINT; a waiting
result stops its run at the first Ctrl-C and says where."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest
from apache_beam.runners.runner import PipelineState

from beam_spark_inproc import interrupts
from beam_spark_inproc.result import SparkPipelineResult


@pytest.fixture
def own_handler():
    """A program's own SIGINT handler, put back after the test."""
    seen = []

    def handler(signum, frame):
        seen.append(signum)

    before = signal.signal(signal.SIGINT, handler)
    try:
        yield handler, seen
    finally:
        signal.signal(signal.SIGINT, before)


def test_ctrl_c_goes_to_the_run_and_the_programs_handler_comes_back(own_handler):
    handler, seen = own_handler
    calls = []
    with interrupts.owned(lambda: calls.append(1), lambda: calls.append(2)) as owner:
        assert signal.getsignal(signal.SIGINT) is not handler
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)  # a third: ignored
    assert calls == [1, 2] and owner.presses == 3 and seen == []
    assert signal.getsignal(signal.SIGINT) is handler
    signal.raise_signal(signal.SIGINT)
    assert seen == [signal.SIGINT]


def test_a_handler_installed_meanwhile_is_the_one_restored(own_handler):
    """As PySpark's when a Spark context starts on the main thread during a
    run: ``reclaim`` takes SIGINT back, and that handler comes back after."""
    handler, _ = own_handler
    pyspark_seen = []

    def pyspark_like(signum, frame):
        pyspark_seen.append(signum)

    calls = []
    with interrupts.owned(lambda: calls.append(1), lambda: None):
        signal.signal(signal.SIGINT, pyspark_like)
        interrupts.reclaim()
        signal.raise_signal(signal.SIGINT)
    assert calls == [1] and pyspark_seen == []
    assert signal.getsignal(signal.SIGINT) is pyspark_like


def test_an_uncaught_interrupted_is_one_line_and_exits_by_sigint():
    done = subprocess.run(
        [
            sys.executable,
            '-c',
            'from beam_spark_inproc import interrupts\n'
            "raise interrupts.interrupted('stream 1a2b3c4d stopped after micro-batch 7')",
        ],
        capture_output=True,
        text=True,
    )
    assert done.stderr == 'KeyboardInterrupt: stream 1a2b3c4d stopped after micro-batch 7\n'
    assert done.returncode == -signal.SIGINT


def test_an_other_uncaught_error_keeps_its_traceback():
    done = subprocess.run(
        [
            sys.executable,
            '-c',
            'from beam_spark_inproc import interrupts\n'
            "interrupts.interrupted('x')\n"
            "raise ValueError('bad')",
        ],
        capture_output=True,
        text=True,
    )
    assert done.stderr.startswith('Traceback') and done.stderr.endswith('ValueError: bad\n')


def test_wait_until_finish_stops_its_run_at_the_first_ctrl_c(own_handler, capsys):
    """A run in a thread of its own (``--no_wait_until_finish``): the first
    Ctrl-C says it cancels and calls the run's cancel; the run then ends and
    ``wait_until_finish`` raises KeyboardInterrupt; the program's handler is
    back."""
    handler, _ = own_handler
    result = SparkPipelineResult(PipelineState.RUNNING)
    result.label, result.tasks_end_seconds = 'Pipeline 1a2b3c4d', 15.0
    cancelled = threading.Event()

    def run():
        cancelled.wait(60)
        result.finished(PipelineState.CANCELLED)

    thread = threading.Thread(target=run)
    result.running(thread, cancelled.set)
    thread.start()
    threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,)).start()
    with pytest.raises(KeyboardInterrupt) as e:
        result.wait_until_finish()
    assert interrupts.is_interrupted(e.value)
    assert str(e.value) == 'pipeline 1a2b3c4d cancelled by Ctrl-C (CANCELLED)'
    assert cancelled.is_set() and result.state == PipelineState.CANCELLED
    assert capsys.readouterr().err == (
        'Pipeline 1a2b3c4d: Ctrl-C: cancelling its Spark jobs, then waiting up to 15 s for '
        'their tasks to end; Ctrl-C again to skip the wait\n'
    )
    assert signal.getsignal(signal.SIGINT) is handler
