"""MetricsPusher's timing policy against a controlled clock, and the attempt channel."""

from __future__ import annotations

import time

from apache_beam.metrics import monitoring_infos

from beam_spark_inproc.metrics.attempts import AttemptReceiver
from beam_spark_inproc.metrics.live import LiveMetrics
from beam_spark_inproc.metrics.pusher import PUSHED_KEPT
from beam_spark_inproc.metrics.pusher import MetricsPusher
from beam_spark_inproc.metrics.sinks import HttpJsonSink
from beam_spark_inproc.worker import attempts
from tests.integration.receivers import HttpReceiver


def _report(n: int) -> dict:
    info = monitoring_infos.int64_user_counter('ns', 'c', n, ptransform='t')
    return {'stage': 's', 'monitoring_infos': [info.SerializeToString()]}


def _committed(doc: dict) -> int:
    [metric] = doc['metrics']
    return metric['committed']


def test_at_most_one_push_per_period_on_a_controlled_clock():
    now = [0.0]
    with HttpReceiver() as http:
        pusher = MetricsPusher(
            [HttpJsonSink(http.url)], LiveMetrics(), 'p' * 32, period=5.0, clock=lambda: now[0]
        )
        for t in range(12):  # a job ends every second, committing 1
            now[0] = float(t)
            pusher.after_job([_report(1)])
            assert pusher.flush(30)
        pusher.finish('DONE')
        docs = http.documents
    # Pushes at t=0, 5 and 10 carry the totals then; the final one all 12.
    assert [(d['sequence'], d['state'], _committed(d)) for d in docs] == [
        (1, 'RUNNING', 1),
        (2, 'RUNNING', 6),
        (3, 'RUNNING', 11),
        (4, 'DONE', 12),
    ]


def test_pending_push_goes_out_when_the_period_has_passed():
    """A job that ends within the period is pushed later without another job."""
    with HttpReceiver() as http:
        pusher = MetricsPusher([HttpJsonSink(http.url)], LiveMetrics(), 'p' * 32, period=0.2)
        pusher.after_job([_report(1)])
        pusher.after_job([_report(1)])  # within the period: pending
        deadline = time.monotonic() + 30
        while len(http.documents) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        docs = http.documents
        pusher.finish('DONE')
    assert [(d['sequence'], _committed(d)) for d in docs[:2]] == [(1, 1), (2, 2)]


def test_attempt_channel_counts_into_attempted_only():
    live = LiveMetrics([_report(5)])
    receiver = AttemptReceiver('127.0.0.1', live)
    try:
        info = monitoring_infos.int64_user_counter('ns', 'c', 3, ptransform='t')
        assert attempts.send(receiver.channel, 's', [info.SerializeToString()])
        host, port, token = receiver.channel
        # A frame with another run's token is dropped, unacknowledged.
        assert not attempts.send((host, port, b'x' * 16), 's', [info.SerializeToString()])
    finally:
        receiver.close()
    [counter] = live.results().query()['counters']
    assert (counter.committed, counter.attempted) == (5, 8)
    assert live.failed_attempts == 1


def test_a_long_run_keeps_only_the_last_snapshots():
    """A stream pushes for as long as it runs: the pusher keeps the last
    ``PUSHED_KEPT`` snapshots it handed over, not one per push."""
    sent = []

    class Sink:
        url = 'memory:'

        def push(self, snapshot, timeout):
            sent.append(snapshot.sequence)

    pusher = MetricsPusher([Sink()], LiveMetrics(), 'p' * 32, period=0.0)
    for _ in range(3 * PUSHED_KEPT):
        pusher.after_job([_report(1)])
        assert pusher.flush(30)
    pusher.finish('DONE')
    assert [s.sequence for s in pusher.pushed] == list(
        range(2 * PUSHED_KEPT + 2, 3 * PUSHED_KEPT + 2)
    )
    assert pusher.pushed[-1].state == 'DONE'
    assert sent[-1] == 3 * PUSHED_KEPT + 1  # each push was sent
