"""Metrics while the pipeline runs: committed and attempted, pushed to sinks.

Data flow::

  bundle (worker) ──control row──▶ job's reports ──after_job──▶ LiveMetrics ◀── result.metrics()
      │  (committed: Spark keeps successful attempts' rows only)       ▲   │
      └─attempt that does not commit─▶ attempt channel, TCP ───────────┘   └─▶ MetricsPusher ─▶sinks
                                        (attempted = committed + these)     (http JSON, Graphite,
                                                                             Pushgateway)

* ``live.LiveMetrics``: thread-safe store; ``results()`` is Beam MetricResults
  with committed and attempted told apart, answering at any time.
* ``consolidate``: one MonitoringInfo per metric and stage, whatever the
  bundle count (gauges, string sets and bounded tries merged as their cells do).
* ``attempts.AttemptReceiver`` / ``worker.attempts``: the channel that
  survives a failed task attempt (``spark.session.callback_host`` picks the
  address; classic and Connect alike).
* ``pusher.MetricsPusher``: when to push (after each job, at most once per
  period, and a final push), never blocking or failing the pipeline.
* ``sinks``: one class per ``--metrics_sink`` URL scheme; ``snapshot``: what
  is pushed.

For a driver loop other than the batch executor (the streaming loop), per run::

    from beam_spark_inproc import metrics
    run_metrics = metrics.start(options, pipeline_id, attempt_host=None)
    # run_metrics.channel -> StageTask(attempt_channel=...) of every stage
    # after each micro-batch, with the reports (decoded control rows) it returned:
    run_metrics.pusher.after_job(reports)
    # (a stream's progress as gauges, sent with every push from then on:
    # run_metrics.pusher.set_gauges(records) before after_job)
    # result.metrics() may read run_metrics.live.results() at any time
    run_metrics.finish('DONE')   # or 'FAILED' / 'CANCELLED': final push, channel closed

``after_job`` returns at once (the send happens on the pusher's thread);
``finish`` waits at most twice the push timeout per sink.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING
from typing import Optional

from beam_spark_inproc.metrics.live import LiveMetrics
from beam_spark_inproc.metrics.pusher import MetricsPusher

if TYPE_CHECKING:
    from beam_spark_inproc.metrics.attempts import AttemptReceiver

__all__ = ['LiveMetrics', 'MetricsPusher', 'RunMetrics', 'start']


@dataclasses.dataclass
class RunMetrics:
    """One run's metrics: the store, the pusher and the attempt channel."""

    live: LiveMetrics
    pusher: MetricsPusher
    receiver: Optional[AttemptReceiver] = None

    @property
    def channel(self) -> tuple:
        return self.receiver.channel if self.receiver is not None else ()

    def finish(self, state: str) -> None:
        try:
            self.pusher.finish(state)
        finally:
            self.close()

    def close(self) -> None:
        if self.receiver is not None:
            self.receiver.close()
            self.receiver = None


def sinks_from(options) -> list:
    """The sinks of ``--metrics_sink``; bad URLs or push settings raise (the
    runner calls this before any Spark job)."""
    from beam_spark_inproc.metrics.sinks import sink_for
    from beam_spark_inproc.options import SparkRunnerOptions

    opts = options.view_as(SparkRunnerOptions)
    if opts.metrics_push_period < 0:
        raise ValueError(
            '--metrics_push_period must be >= 0 (0: push after '
            f'every job), got {opts.metrics_push_period}.'
        )
    if opts.metrics_push_timeout <= 0:
        raise ValueError(f'--metrics_push_timeout must be > 0, got {opts.metrics_push_timeout}.')
    return [sink_for(url) for url in opts.metrics_sink or ()]


def start(options, pipeline_id: str, attempt_host: str | None = None, clock=None) -> RunMetrics:
    """Store and pusher for a run from its options; with ``attempt_host``, an
    attempt channel listening there."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    from beam_spark_inproc.options import SparkRunnerOptions

    opts = options.view_as(SparkRunnerOptions)
    live = LiveMetrics()
    kwargs = {'clock': clock} if clock is not None else {}
    pusher = MetricsPusher(
        sinks_from(options),
        live,
        pipeline_id,
        job_name=options.view_as(GoogleCloudOptions).job_name or '',
        period=opts.metrics_push_period,
        timeout=opts.metrics_push_timeout,
        **kwargs,
    )
    receiver = None
    if attempt_host:
        from beam_spark_inproc.metrics.attempts import AttemptReceiver

        try:
            receiver = AttemptReceiver(attempt_host, live)
        except OSError as e:
            logging.getLogger('beam_spark_inproc.metrics').warning(
                'Cannot listen on %s for the metrics of failed task attempts '
                '(%s): attempted metrics will equal committed ones.',
                attempt_host,
                e,
            )
    return RunMetrics(live, pusher, receiver)
