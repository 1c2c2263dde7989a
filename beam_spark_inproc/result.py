"""The PipelineResult a run returns, with the metrics its bundles reported."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable

from apache_beam.metrics.metric import MetricResults
from apache_beam.runners.runner import PipelineResult
from apache_beam.runners.runner import PipelineState

from beam_spark_inproc import interrupts
from beam_spark_inproc.metrics.live import LiveMetrics

# After a second Ctrl-C, how long the run's thread may still take to stop.
STOP_GRACE_SECONDS = 10.0


class SparkPipelineResult(PipelineResult):
    """Runs are synchronous (the result is final when ``run()`` returns) unless
    ``--no_wait_until_finish``: then the pipeline runs on a thread of its own
    (``running``), ``wait_until_finish`` waits for it and ``cancel`` stops it.

    Metrics are live (``metrics.LiveMetrics``): committed values come only from
    bundles whose Spark task attempt succeeded, so they are exact; attempted
    values add the attempts that did not commit, where workers could report
    them (docs/metrics.md). While running they answer with what the Spark jobs
    that ended so far committed.
    """

    def __init__(
        self,
        state: str,
        reports: list[dict] | None = None,
        error: BaseException | None = None,
        live=None,
    ):
        super().__init__(state)
        self._error = error
        self._live = live if live is not None else LiveMetrics(reports or [])
        self._thread: threading.Thread | None = None
        self._cancel: Callable[[], None] | None = None
        # Set by cancel(); the run stops at the end of its current Spark job.
        self.cancel_requested = threading.Event()
        # Set when the run has ended (``finished``; ``_wait``).
        self.ended_event = threading.Event()
        # Ctrl-C while the runner owned SIGINT (``interrupts``): set at the
        # first (the run stops), and at the second (``stop_waiting``: a
        # batch run's cancelled tasks are not waited for).
        self.interrupted = threading.Event()
        self.stop_waiting = threading.Event()
        # How the run names itself in what Ctrl-C prints, and how long its
        # cancelled tasks are waited for (set by the runner).
        self.label = 'Pipeline'
        self.tasks_end_seconds: float | None = None

    def running(self, thread: threading.Thread, cancel) -> None:
        """The run goes on in ``thread``; ``cancel()`` interrupts it;
        ``finished`` tells the run has ended (``ended_event``)."""
        self._thread, self._cancel = thread, cancel

    def finished(self, state: str, error: BaseException | None = None) -> None:
        self._state, self._error = state, error
        self.ended_event.set()

    @property
    def ended(self) -> bool:
        return self._thread is None or self.ended_event.is_set()

    def _wait(self, timeout: float | None, until: threading.Event | None = None) -> bool:
        """Waits up to ``timeout`` seconds for the run's thread to end; True
        once it has (False at once when ``until`` is set). It waits on an
        event, never in ``Thread.join`` while the thread may be running: a
        KeyboardInterrupt raised inside ``join`` (Ctrl-C) marks a live
        thread as stopped in CPython 3.11, and the interpreter would then
        exit under it. A thread that ended without ``finished`` counts as
        ended."""
        if self._thread is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ended_event.is_set():
            if not self._thread.is_alive():
                return True
            if until is not None and until.is_set():
                return False
            wait = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
            if wait <= 0:
                return False
            self.ended_event.wait(wait)
        self._thread.join(STOP_GRACE_SECONDS)  # its last steps (metrics)
        return True

    def wait_until_finish(self, duration=None) -> str:
        """``duration``: milliseconds to wait at most (Beam's unit).

        Ctrl-C while waiting (on the main thread) is the runner's
        (``interrupts``): the first stops the run (a stream after its
        micro-batch under way, a batch run by cancelling its Spark jobs),
        the second cancels harder (a stream's running Spark jobs; a batch
        run's wait for its cancelled tasks); once the run has stopped,
        a KeyboardInterrupt (``interrupts.interrupted``) says where. The
        interpreter never exits under a run thread still inside Spark: if
        the run has not stopped ``STOP_GRACE_SECONDS`` after the second
        Ctrl-C, the process exits at once (status 130)."""
        if self._thread is None:  # a synchronous run: over when returned
            if self._error is not None and self._state == PipelineState.FAILED:
                raise self._error
            return self._state
        with interrupts.owned(self._on_interrupt, self._on_second_interrupt) as owner:
            try:
                ended = self._wait(
                    None if duration is None else duration / 1000, until=self.interrupted
                )
            except KeyboardInterrupt:  # raised by a handler not the runner's
                self.stop_on_interrupt()
                raise
            if self.interrupted.is_set():
                self._stop_after_interrupt(owner)
        if self.interrupted.is_set():
            raise interrupts.interrupted(self._interrupted_text())
        if not ended:
            return self._state
        if self._error is not None and self._state == PipelineState.FAILED:
            raise self._error
        return self._state

    # -- Ctrl-C (``interrupts``) --------------------------------------------
    def _on_interrupt(self) -> None:
        """The first Ctrl-C (from the signal handler: returns at once): a
        batch run's Spark jobs are cancelled."""
        self.interrupted.set()
        self.cancel_requested.set()
        if self._cancel is not None:
            within = (
                f' up to {self.tasks_end_seconds:.0f} s'
                if self.tasks_end_seconds is not None
                else ''
            )
            interrupts.say(
                f'{self.label}: Ctrl-C: cancelling its Spark jobs, then waiting{within} for '
                'their tasks to end; Ctrl-C again to skip the wait'
            )
            interrupts.in_thread(self._cancel, 'beam-cancel')
        else:
            interrupts.say(
                f'{self.label}: Ctrl-C: stopping at the end of its current step; '
                'Ctrl-C again to stop waiting'
            )

    def _on_second_interrupt(self) -> None:
        self.stop_waiting.set()
        interrupts.say(f'{self.label}: not waiting for its cancelled tasks to end')

    def _stop_after_interrupt(self, owner: interrupts.Owned) -> None:
        """Waits for the interrupted run to stop: without end after the
        first Ctrl-C, at most ``STOP_GRACE_SECONDS`` after the second, then
        the process exits at once (a thread still inside Spark must not see
        the interpreter finalize under it)."""
        while not owner.second_pressed.is_set():
            if self._wait(0.25):
                return
        if self._wait(STOP_GRACE_SECONDS):
            return
        interrupts.say(
            f'{self.label}: still running {STOP_GRACE_SECONDS:.0f} s after the second Ctrl-C; '
            'exiting now'
        )
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(130)

    def _interrupted_text(self) -> str:
        """What the KeyboardInterrupt of an interrupted run says."""
        return f'{self.label.lower()} cancelled by Ctrl-C ({self._state})'

    def cancel(self) -> str:
        """Stops the run at the end of its current Spark job, interrupting
        that job (its tag, ``spark.cancel.cancel_tag``); waits for the run
        to stop and returns its final state."""
        self.cancel_requested.set()
        while not self._wait(0.5):
            if self._cancel is not None:
                self._cancel()
        return self._state

    def stop_on_interrupt(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stops the run after an interrupt of the waiting thread: it ends at
        the end of its current step (a stream: its micro-batch, whose commit
        record is then whole). A second Ctrl-C meanwhile cancels the running
        Spark jobs and waits at most ``grace`` seconds more (a stream's
        abandoned micro-batch is replayed by a restart)."""
        self.cancel_requested.set()
        try:
            while not self._wait(0.5):
                pass
        except KeyboardInterrupt:
            if self._cancel is not None:
                self._cancel()
            self._wait(grace)

    def metrics(self) -> MetricResults:
        """User metrics (counters, distributions, gauges, string sets, bounded tries)."""
        return self._live.results(user_metrics_only=True)

    def monitoring_metrics(self) -> MetricResults:
        """All metrics, including the SDK's own (element counts, timings)."""
        return self._live.results(user_metrics_only=False)

    def monitoring_infos(self):
        for infos in self._live.committed_by_stage().values():
            yield from infos
