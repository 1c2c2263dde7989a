"""The result of a streaming run: the loop runs in a driver thread.

``run()`` returns at once; ``wait_until_finish(duration)`` waits up to
``duration`` milliseconds (Beam's unit) and returns the state (RUNNING when the
time is up); ``cancel()`` stops the loop after the current micro-batch
(CANCELLED); a failure ends the run FAILED and ``wait_until_finish`` raises it.
Metrics are the run's ``metrics.RunMetrics``: each micro-batch's reports go to
its pusher (``after_job``), so ``metrics()`` answers while the pipeline runs and
``--metrics_sink`` gets them; the final push carries the final state.
"""
from __future__ import annotations

import threading
from typing import Callable

from apache_beam.runners.runner import PipelineState

from beam_spark_inproc.result import SparkPipelineResult
from beam_spark_inproc.protocol import report


class StreamingPipelineResult(SparkPipelineResult):
    def __init__(self, run_metrics):
        super().__init__(PipelineState.RUNNING, live=run_metrics.live)
        self._run_metrics = run_metrics
        self.cancelled = self.cancel_requested
        self.reports: list[dict] = []

    def start(self, body: Callable[[], None],
              translate: Callable[[BaseException], BaseException]) -> None:
        def main():
            try:
                body()
            except BaseException as e:  # reaches the caller via wait_until_finish
                self.finished(PipelineState.FAILED, translate(e))
            else:
                self.finished(PipelineState.CANCELLED if self.cancelled.is_set()
                              else PipelineState.DONE)
            finally:
                self._run_metrics.finish(self._state)
        thread = threading.Thread(target=main, name='beam-stream', daemon=True)
        self.running(thread, None)
        thread.start()

    def add_reports(self, reports: list[dict]) -> None:
        """A committed micro-batch's reports (its workers' log records are
        logged on the driver now)."""
        self.reports.extend(reports)
        report.relog(reports)
        self._run_metrics.pusher.after_job(reports)
