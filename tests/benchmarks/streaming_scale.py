"""A long stream with many keys of state on ``local-cluster`` (issue #14, item 5).

A stateful DoFn keeps a running count per key (``--keys`` keys, 1M by
default) in fixed windows of ``--window`` seconds of event time; each
micro-batch adds ``--rate`` elements spread over all keys, with event times
advancing ``--step`` seconds per micro-batch and the watermark following, so
windows close and their state expires as the stream goes. Every
``--every`` seconds it prints the driver's RSS, the JVMs' (driver and executors) and Python
workers' RSS (``/proc``, summed over the processes under this driver), and the
checkpoint folder's size, until ``--minutes`` have passed; then it cancels the
stream. Not part of the test run.

The source is a TestStream (events generated up front), so the element count
is bounded by memory: ``--minutes`` x micro-batches per minute x ``--rate``.

    python tests/benchmarks/streaming_scale.py --minutes 3 --keys 1000000
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import userstate
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.store import CheckpointStore


class CountPerKey(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec('count', beam.coders.VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
        n = (count.read() or 0) + 1
        count.write(n)
        if kv[1] % 1000 == 0:
            yield kv[0], n


def _rss_kb(pid: int) -> int:
    try:
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                if line.startswith('VmRSS:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _is_jvm(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/comm') as f:
            return f.read().strip() == 'java'
    except OSError:
        return False


def _descendants(pid: int) -> list[int]:
    children = {}
    for name in os.listdir('/proc'):
        if name.isdigit():
            try:
                with open(f'/proc/{name}/stat') as f:
                    ppid = int(f.read().rsplit(')', 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(name))
            except OSError:
                pass
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--keys', type=int, default=1_000_000)
    parser.add_argument('--rate', type=int, default=20_000,
                        help='elements per micro-batch')
    parser.add_argument('--steps', type=int, default=60,
                        help='micro-batches generated (the stream ends after)')
    parser.add_argument('--step', type=int, default=10,
                        help='event-time seconds per micro-batch')
    parser.add_argument('--window', type=int, default=600)
    parser.add_argument('--minutes', type=float, default=3)
    parser.add_argument('--every', type=float, default=15)
    parser.add_argument('--master', default='local-cluster[2,1,2048]')
    args = parser.parse_args()
    location = tempfile.mkdtemp(prefix='bench-scale-')
    stream = TestStream()
    n = 0
    for step in range(args.steps):
        elements = []
        for _ in range(args.rate):
            elements.append(window.TimestampedValue(
                (f'key{n % args.keys}', n), step * args.step))
            n += 1
        stream = stream.add_elements(elements).advance_watermark_to(
            (step + 1) * args.step)
    stream = stream.advance_watermark_to_infinity()
    from beam_spark_inproc.spark import session
    spark, _ = session.get_or_create(args.master, None, {})
    options = PipelineOptions([f'--checkpoint_location={location}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options)
    _ = (p | stream | beam.WindowInto(window.FixedWindows(args.window))
         | beam.ParDo(CountPerKey()))
    start = time.time()
    result = p.run()
    print(f'keys={args.keys} rate={args.rate}/micro-batch master={args.master} '
          f'checkpoint={location}')
    print(f'{"t (s)":>7} {"micro-batch":>11} {"driver MB":>10} '
          f'{"JVMs MB":>8} {"Python workers MB (n)":>22} '
          f'{"largest worker MB":>17} {"checkpoint MB":>14} {"load":>5}')
    me = os.getpid()
    while time.time() - start < args.minutes * 60:
        state = result.wait_until_finish(duration=int(args.every * 1000))
        executor = getattr(result, 'executor', None)
        pids = _descendants(me)
        jvms = [_rss_kb(pid) for pid in pids if _is_jvm(pid)]
        workers = [_rss_kb(pid) for pid in pids if not _is_jvm(pid)]
        size = CheckpointStore.size(type('S', (), {'root': location})())
        workers_mb = f'{sum(workers) / 1024:.0f} ({len(workers)})'
        print(f'{time.time() - start:7.0f} '
              f'{executor.micro_batch if executor else -1:>11} '
              f'{_rss_kb(me) / 1024:10.0f} {sum(jvms) / 1024:8.0f} '
              f'{workers_mb:>22} {max(workers, default=0) / 1024:17.0f} '
              f'{size / 2**20:14.1f} {os.getloadavg()[0]:5.1f}', flush=True)
        if state != 'RUNNING':
            break
    result.cancel()
    result.wait_until_finish()
    print('state', result.state)


if __name__ == '__main__':
    main()
