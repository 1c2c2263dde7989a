"""MetricsPusher: pushes a pipeline's metrics to its sinks while it runs.

Policy:
* ``after_job()`` (the batch executor calls it after each Spark job; the
  streaming loop after each micro-batch) pushes at once if the last push is at
  least ``period`` seconds old on ``clock``, else marks a push pending: a
  pending push goes out when the period has passed, from the sender thread, so
  the last job's values do not wait for the next job; at most one push per period;
* ``finish(state)`` pushes the final values (DONE, FAILED, CANCELLED) whatever
  the period, and waits for it a bounded time;
* pushes are sent by one daemon thread, each sink with ``timeout`` seconds:
  the pipeline's thread never waits on a sink (except ``finish``, bounded).
  Only the newest snapshot waits to be sent: a slow sink skips stale ones;
* a failing sink is logged once (a WARNING naming the sink and the error), and
  again at INFO when it recovers; the pipeline never fails for it. Every push
  carries cumulative values, so a missed push is made up by the next one;
* ``pushed`` keeps the last ``PUSHED_KEPT`` snapshots handed to the sender (a
  stream pushes for as long as it runs: its driver must not grow with that).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable
from typing import Iterable

from beam_spark_inproc.metrics import snapshot as snapshots
from beam_spark_inproc.metrics.live import LiveMetrics
from beam_spark_inproc.metrics.sinks import Sink

_LOGGER = logging.getLogger('beam_spark_inproc.metrics')
PUSHED_KEPT = 16


class MetricsPusher:
    def __init__(
        self,
        sinks: list[Sink],
        metrics: LiveMetrics,
        pipeline_id: str,
        job_name: str = '',
        period: float = 5.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if period < 0 or timeout <= 0:
            raise ValueError(f'period must be >= 0 and timeout > 0, got {period} and {timeout}.')
        self.sinks = list(sinks)
        self.metrics = metrics
        self.pipeline_id = pipeline_id
        self.job_name = job_name
        self.period = period
        self.timeout = timeout
        self._clock = clock
        self._last: float | None = None  # clock() of the last push
        self._pending = False
        self._sequence = 0
        self._failing: set[str] = set()
        self._warned: set[str] = set()
        self._cond = threading.Condition()
        self._next: snapshots.Snapshot | None = None
        self._sending = False
        self._closed = False
        self._thread: threading.Thread | None = None
        # The last snapshots handed to the sender, in order.
        self.pushed: collections.deque[snapshots.Snapshot] = collections.deque(maxlen=PUSHED_KEPT)
        self._gauges: tuple = ()

    def set_gauges(self, records) -> None:
        """The runner's own gauges (``snapshot.MetricRecord``; a stream's
        progress), sent with every push from now on in place of the last
        ones; call it before ``after_job`` for them to go with its push."""
        with self._cond:
            self._gauges = tuple(records)

    def after_job(self, reports: Iterable[dict] = ()) -> None:
        """Adds a job's (or micro-batch's) committed reports; pushes if due."""
        self.metrics.add_committed(reports)
        if not self.sinks:
            return
        with self._cond:
            if self._due():
                self._push_locked('RUNNING')
            else:
                self._pending = True
                self._cond.notify_all()

    def finish(self, state: str) -> None:
        """The final push (state DONE, FAILED or CANCELLED); stops the sender."""
        if not self.sinks:
            return
        with self._cond:
            self._pending = False
            self._push_locked(str(state))
            self._closed = True
            self._cond.notify_all()
        # The sender may be inside a slow push (one timeout per sink) before it
        # takes the final one (the same again).
        self.flush(2 * self.timeout * len(self.sinks) + 1)

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until what was handed over is sent; False if ``timeout`` passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._next is not None or self._sending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def _due(self) -> bool:
        return self._last is None or self._clock() - self._last >= self.period

    def _push_locked(self, state: str) -> None:
        self._sequence += 1
        self._last = self._clock()
        self._pending = False
        self._next = snapshots.take(
            self.metrics, self.pipeline_id, self.job_name, state, self._sequence, self._gauges
        )
        self.pushed.append(self._next)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._send_loop, name='beam-metrics-pusher', daemon=True
            )
            self._thread.start()
        self._cond.notify_all()

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while self._next is None:
                    if self._closed:
                        return
                    if self._pending and self._due():
                        self._push_locked('RUNNING')
                        break
                    wait = None
                    if self._pending and self._last is not None:  # not due: pushed before
                        wait = max(0.05, self.period - (self._clock() - self._last))
                    self._cond.wait(wait)
                item = self._next
                assert item is not None  # the wait above ends with one
                self._next, self._sending = None, True
            try:
                self._send(item)
            finally:
                with self._cond:
                    self._sending = False
                    self._cond.notify_all()

    def _send(self, item: snapshots.Snapshot) -> None:
        for sink in self.sinks:
            try:
                sink.push(item, self.timeout)
            except Exception as e:  # never the pipeline's problem
                self._failing.add(sink.url)
                if sink.url not in self._warned:
                    self._warned.add(sink.url)
                    _LOGGER.warning(
                        'Metrics sink %s failed (%s: %s); the pipeline goes on, '
                        'later pushes will retry with the latest values; this '
                        'warning is not repeated.',
                        sink.url,
                        type(e).__name__,
                        e,
                    )
            else:
                if sink.url in self._failing:
                    self._failing.discard(sink.url)
                    _LOGGER.info('Metrics sink %s works again.', sink.url)
