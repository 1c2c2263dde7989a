"""The result of a streaming run: the loop runs in a driver thread.

``run()`` returns at once; ``wait_until_finish(duration)`` waits up to
``duration`` milliseconds (Beam's unit) and returns the state (RUNNING when the
time is up); ``cancel()`` stops the loop after the current micro-batch
(CANCELLED), interrupting its running Spark jobs; a failure ends the run
FAILED and ``wait_until_finish`` raises it. Ctrl-C in ``wait_until_finish``
and SIGTERM stop the stream the same way before the process goes on to exit
(``SparkPipelineResult.stop_on_interrupt``): the interpreter never finalizes
under a loop thread still inside a Py4J call, and the last commit record is
whole, so a rerun on the same checkpoint resumes after it.
``drain()`` ends it DONE once everything read so far has fired
(``execution.streaming.drain``).
Metrics are the run's ``metrics.RunMetrics``: each micro-batch's reports go to
its pusher (``after_job``), so ``metrics()`` answers while the pipeline runs and
``--metrics_sink`` gets them; the final push carries the final state.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import TYPE_CHECKING
from typing import Callable

from apache_beam.runners.runner import PipelineState

from beam_spark_inproc.protocol import report
from beam_spark_inproc.result import SparkPipelineResult

if TYPE_CHECKING:
    from beam_spark_inproc.execution.streaming.loop import StreamingExecutor

_LOGGER = logging.getLogger(__name__)


class StreamingPipelineResult(SparkPipelineResult):
    def __init__(self, run_metrics):
        super().__init__(PipelineState.RUNNING, live=run_metrics.live)
        self._run_metrics = run_metrics
        self.cancelled = self.cancel_requested
        # Workers' warnings, one per (category, message), re-issued when the
        # stream ends (``report.rewarn``): a stream keeps no micro-batch's
        # reports after taking them, or its driver would grow with its age.
        self._warnings: dict[tuple, tuple] = {}
        self.executor: StreamingExecutor | None = None  # the loop's (set by ``run``)

    def start(
        self,
        body: Callable[[], None],
        translate: Callable[[BaseException], BaseException],
        cancel: Callable[[], None] | None = None,
    ) -> None:
        """Runs ``body`` (the loop) in a driver thread; ``cancel`` interrupts
        the stream's running Spark jobs (by the run's tag)."""

        def main():
            try:
                body()
            except BaseException as e:  # reaches the caller via wait_until_finish
                if self.cancelled.is_set():  # a job cancelled by a stop
                    self.finished(PipelineState.CANCELLED)
                else:
                    self.finished(PipelineState.FAILED, translate(e))
            else:
                self.finished(
                    PipelineState.CANCELLED if self.cancelled.is_set() else PipelineState.DONE
                )
            finally:
                self._run_metrics.finish(self._state)

        thread = threading.Thread(target=main, name='beam-stream', daemon=True)
        self.running(thread, cancel)
        thread.start()
        self._stop_on_sigterm()

    def _stop_on_sigterm(self) -> None:
        """SIGTERM (a service manager's stop, ``kill``) stops the stream as
        Ctrl-C does, then ends the process with SIGTERM's own status; a second
        SIGTERM ends it at once (the checkpoint is as the last commit left
        it). Only where the stream was started from the main thread and the
        program has no SIGTERM handler of its own."""
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        ):
            return

        def on_sigterm(signum, frame):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if not self.ended:
                _LOGGER.warning('SIGTERM: stopping the stream after its current micro-batch')
                self.stop_on_interrupt()
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)

    def drain(self, duration=None) -> str:
        """Drains the stream (``execution.streaming.drain``): from its next
        micro-batch boundary it reads nothing more, splittable DoFns truncate
        their restrictions, every pending window and timer fires. Waits for
        the run to end (``duration``: at most that many milliseconds, as
        ``wait_until_finish``) and returns its state: DONE, or DRAINING while
        it is still draining; raises the run's error as
        ``wait_until_finish`` does if the drain fails. A run that already
        ended is left as it is: its final state is returned."""
        if self.ended:
            return self._state
        assert self.executor is not None  # set before the result is returned
        self.executor.drain.request('result.drain()')
        self.wait_until_finish(duration)
        return self.state

    @property
    def state(self) -> str:
        """RUNNING, DRAINING once a drain has begun, then the final state."""
        if (
            self._state == PipelineState.RUNNING
            and self.executor is not None
            and self.executor.drain.active
        ):
            return PipelineState.DRAINING
        return self._state

    def progress(self) -> dict | None:
        """The last committed micro-batch's progress (None before the
        first): per stage its watermarks, their lag, elements, state; the
        micro-batch's duration and backlog (``progress``). As Spark's
        ``StreamingQuery.lastProgress``."""
        return self.executor.progress.latest() if self.executor is not None else None

    def recent_progress(self) -> list[dict]:
        """The progress of the recent micro-batches, oldest first (as
        ``recentProgress``; up to ``progress.RECENT``)."""
        return self.executor.progress.recent() if self.executor is not None else []

    @property
    def reports(self) -> list[dict]:
        """What the stream keeps of its reports: one report holding each
        distinct warning of its workers, once."""
        return [{'warnings': list(self._warnings.values())}]

    def add_reports(self, reports: list[dict]) -> None:
        """A committed micro-batch's reports (its workers' log records are
        logged on the driver now, their metrics go to the run's metrics,
        their warnings are kept for ``reports``)."""
        for r in reports:
            for warning in r.get('warnings', ()):
                self._warnings.setdefault(warning[:2], warning)
        report.relog(reports)
        self._run_metrics.pusher.after_job(reports)
