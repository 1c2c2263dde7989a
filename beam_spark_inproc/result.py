"""The PipelineResult a run returns, with the metrics its bundles reported."""
from __future__ import annotations

import threading

from apache_beam.metrics.metric import MetricResults
from apache_beam.runners.runner import PipelineResult
from apache_beam.runners.runner import PipelineState

from beam_spark_inproc.metrics.live import LiveMetrics


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

    def __init__(self, state: str, reports: list[dict] | None = None,
                 error: BaseException | None = None, live=None):
        super().__init__(state)
        self._error = error
        self._live = live if live is not None else LiveMetrics(reports or [])
        self._thread: threading.Thread | None = None
        self._cancel = None
        # Set by cancel(); the run stops at the end of its current Spark job.
        self.cancel_requested = threading.Event()

    def running(self, thread: threading.Thread, cancel) -> None:
        """The run goes on in ``thread``; ``cancel()`` interrupts it."""
        self._thread, self._cancel = thread, cancel

    def finished(self, state: str, error: BaseException | None = None) -> None:
        self._state, self._error = state, error

    def wait_until_finish(self, duration=None) -> str:
        """``duration``: milliseconds to wait at most (Beam's unit)."""
        if self._thread is not None:
            self._thread.join(None if duration is None else duration / 1000)
            if self._thread.is_alive():
                return self._state
        if self._error is not None and self._state == PipelineState.FAILED:
            raise self._error
        return self._state

    def cancel(self) -> str:
        """Stops the run at the end of its current Spark job, interrupting
        that job where Spark allows (``SparkSession.interruptTag``: over Connect;
        classic PySpark keeps operation tags per thread, so there the job runs
        to its end); waits for the run to stop and returns its final state."""
        self.cancel_requested.set()
        while self._thread is not None and self._thread.is_alive():
            if self._cancel is not None:
                self._cancel()
            self._thread.join(0.5)
        return self._state

    def metrics(self) -> MetricResults:
        """User metrics (counters, distributions, gauges, string sets, bounded tries)."""
        return self._live.results(user_metrics_only=True)

    def monitoring_metrics(self) -> MetricResults:
        """All metrics, including the SDK's own (element counts, timings)."""
        return self._live.results(user_metrics_only=False)

    def monitoring_infos(self):
        for infos in self._live.committed_by_stage().values():
            yield from infos
