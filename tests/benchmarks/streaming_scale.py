"""A long stream with many keys of state on ``local-cluster``.

A stateful DoFn keeps a running count per key (``--keys`` keys, 1M by
default) in fixed windows of ``--window`` seconds of event time; each
micro-batch adds ``--rate`` elements spread over all keys, with event times
advancing ``--step`` seconds per micro-batch and the watermark following, so
windows close and their state expires as the stream goes. Every
``--every`` seconds it prints the driver's RSS, the JVMs' RSS (Spark's driver
JVM and the executors', summed), the Python workers' proportional set size
(PSS: the pyspark daemons and the workers they fork share pages, which RSS
would count once per process) and their number, the largest worker's, the
checkpoint folder's size and the load average, until ``--minutes`` have passed; then it cancels the
stream. Not part of the test run.

The source (``--source sdf``, the default) is an endless splittable DoFn
(``KeyedElements``): ``--rate`` elements per call, one call per micro-batch,
nothing generated ahead. ``--source test_stream`` generates ``--steps`` such
micro-batches up front in a TestStream (bounded by memory and by the pipeline
proto that carries them: a 5-minute run's driver held 1.33 GB of them).

    python tests/benchmarks/streaming_scale.py --minutes 3 --keys 1000000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.io.restriction_trackers import OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import userstate
from apache_beam.transforms import window
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.core import WatermarkEstimatorProvider
from apache_beam.utils.timestamp import Duration
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.store import CheckpointStore


class CountPerKey(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec('count', beam.coders.VarIntCoder())

    def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
        n = (count.read() or 0) + 1
        count.write(n)
        if kv[1] % 1000 == 0:
            yield kv[0], n


class KeyedElements(beam.DoFn, RestrictionProvider, WatermarkEstimatorProvider):
    """An endless source: call ``i`` (one per micro-batch) emits elements
    ``i * rate .. (i + 1) * rate - 1`` as ``('key<n % keys>', n)`` at event
    time ``i * step``, moves its watermark to ``(i + 1) * step`` and resumes
    after what is left of ``period`` seconds. The restriction is the element
    number range, so nothing is generated before it is needed."""

    def __init__(self, keys: int, rate: int, step: int, period: float):
        self.keys, self.rate, self.step, self.period = keys, rate, step, period

    def initial_restriction(self, element) -> OffsetRange:
        return OffsetRange(0, 2**62)

    def create_tracker(self, restriction) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction) -> int:
        return restriction.size()

    def initial_estimator_state(self, element, restriction):
        return None

    def create_watermark_estimator(self, state) -> ManualWatermarkEstimator:
        return ManualWatermarkEstimator(state)

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element,
        tracker=beam.DoFn.RestrictionParam(),
        estimator=beam.DoFn.WatermarkEstimatorParam(),
    ):
        started = time.monotonic()
        first = tracker.current_restriction().start
        call = first // self.rate
        for n in range(first, (call + 1) * self.rate):
            if not tracker.try_claim(n):
                return
            yield window.TimestampedValue((f'key{n % self.keys}', n), call * self.step)
        estimator.set_watermark(Timestamp((call + 1) * self.step))
        tracker.defer_remainder(Duration.of(max(0.0, self.period - (time.monotonic() - started))))


def _test_stream(args) -> TestStream:
    """The same elements generated up front (bounded by memory and by the
    pipeline proto that carries them): ``--steps`` micro-batches."""
    stream = TestStream()
    n = 0
    for step in range(args.steps):
        elements = []
        for _ in range(args.rate):
            elements.append(window.TimestampedValue((f'key{n % args.keys}', n), step * args.step))
            n += 1
        stream = stream.add_elements(elements).advance_watermark_to((step + 1) * args.step)
    return stream.advance_watermark_to_infinity()


def _proc_kb(pid: int, file: str, field: str) -> int:
    """A ``field: N kB`` line of ``/proc/PID/FILE`` (0 once the process is gone)."""
    try:
        with open(f'/proc/{pid}/{file}') as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_kb(pid: int) -> int:
    return _proc_kb(pid, 'status', 'VmRSS:')


def _pss_kb(pid: int) -> int:
    """Proportional set size: pages shared by forked Python workers (the
    pyspark daemon's) counted once overall, not once per process."""
    return _proc_kb(pid, 'smaps_rollup', 'Pss:')


def _is_jvm(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/comm') as f:
            return f.read().strip() == 'java'
    except OSError:
        return False


def _jvm_role(pid: int) -> str:
    """'driver' (pyspark's gateway JVM) or 'executor N' (local-cluster's)."""
    try:
        with open(f'/proc/{pid}/cmdline') as f:
            argv = f.read().split('\0')
    except OSError:
        return '?'
    if any('CoarseGrainedExecutorBackend' in a for a in argv):
        return 'executor ' + argv[argv.index('--executor-id') + 1]
    if any('Worker' in a and 'deploy' in a for a in argv):
        return 'worker'
    if any('Master' in a and 'deploy' in a for a in argv):
        return 'master'
    return 'driver'


def jstat_gc(pid: int) -> dict | None:
    """A JVM's ``jstat -gc`` figures (KB, counts), or None (jstat missing,
    the JVM gone)."""
    import subprocess

    try:
        out = subprocess.run(
            ['jstat', '-gc', str(pid)], capture_output=True, text=True, timeout=20
        ).stdout.split('\n')
        return dict(zip(out[0].split(), map(float, out[1].split())))
    except Exception:
        return None


def heap_used_kb(stats: dict) -> float:
    """Heap used (survivors, eden, old) of ``jstat_gc``'s figures, KB."""
    return sum(stats.get(k, 0) for k in ('S0U', 'S1U', 'EU', 'OU'))


def _heap_mb(pid: int, live: bool) -> str:
    """``jstat -gc``: heap used/committed and metaspace used, MB (what the
    JVM holds on its heap vs what its RSS shows); with ``live``, after a full
    GC (``jcmd PID GC.run``): the live set."""
    import subprocess

    if live:
        try:
            subprocess.run(['jcmd', str(pid), 'GC.run'], capture_output=True, timeout=60)
        except Exception:
            pass
    stats = jstat_gc(pid)
    if stats is None:
        return 'heap ?'
    used = heap_used_kb(stats)
    committed = sum(stats.get(k, 0) for k in ('S0C', 'S1C', 'EC', 'OC'))
    return (
        f'heap {used / 1024:.0f}/{committed / 1024:.0f} '
        f'meta {stats.get("MU", 0) / 1024:.0f} '
        f'fullGC {stats.get("FGC", 0):.0f}'
    )


def _shuffle_files(pids: list[int], spark) -> int:
    """Shuffle data files on disk: under the executors' folders
    (SPARK_EXECUTOR_DIRS, local-cluster) or under ``spark.local.dir`` when
    set (local mode: pass a private one with --conf to count only this
    run's)."""
    folders = []
    for pid in pids:
        try:
            with open(f'/proc/{pid}/environ') as f:
                env = dict(v.split('=', 1) for v in f.read().split('\0') if '=' in v)
            folders += env.get('SPARK_EXECUTOR_DIRS', '').split(os.pathsep)
        except OSError:
            pass
    try:  # the driver's own (local mode), where --conf spark.local.dir is
        folders += spark.conf.get('spark.local.dir', '').split(',')
    except Exception:
        pass
    count = 0
    for folder in filter(None, folders):
        for _, _, names in os.walk(folder):
            count += sum(n.startswith('shuffle_') and n.endswith('.data') for n in names)
    return count


def _status_store(spark) -> str:
    """What Spark's status store holds (classic-only): jobs, stages and SQL
    executions retained."""
    try:
        context = spark.sparkContext
        jobs = len(context.statusTracker().getJobIdsForGroup(None))
        store = spark._jsparkSession.sharedState().statusStore()
        return f'jobs {jobs} sql {store.executionsCount()}'
    except Exception as error:
        return f'store ? ({type(error).__name__})'


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
    parser.add_argument('--rate', type=int, default=20_000, help='elements per micro-batch')
    parser.add_argument('--source', choices=['sdf', 'test_stream'], default='sdf')
    parser.add_argument(
        '--period', type=float, default=0.0, help='sdf: seconds per micro-batch at least (pacing)'
    )
    parser.add_argument(
        '--steps',
        type=int,
        default=60,
        help='test_stream: micro-batches generated (the stream ends after)',
    )
    parser.add_argument('--step', type=int, default=10, help='event-time seconds per micro-batch')
    parser.add_argument('--window', type=int, default=600)
    parser.add_argument('--minutes', type=float, default=3)
    parser.add_argument('--every', type=float, default=15)
    parser.add_argument('--master', default='local-cluster[2,1,2048]')
    parser.add_argument(
        '--jvms',
        action='store_true',
        help='also print each JVM (driver, executors): RSS, '
        'heap used/committed (jstat) and what the status '
        'store retains',
    )
    parser.add_argument(
        '--live', action='store_true', help='with --jvms: heap after a full GC (jcmd GC.run)'
    )
    parser.add_argument(
        '--conf', action='append', default=[], help='KEY=VALUE Spark settings for the session'
    )
    args = parser.parse_args()
    location = tempfile.mkdtemp(prefix='bench-scale-')
    if args.source == 'sdf':
        source = beam.Impulse() | beam.ParDo(
            KeyedElements(args.keys, args.rate, args.step, args.period)
        )
    else:
        source = _test_stream(args)
    from beam_spark_inproc.spark import session

    spark, _ = session.get_or_create(args.master, None, dict(c.split('=', 1) for c in args.conf))
    options = PipelineOptions([f'--checkpoint_location={location}'])
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options)
    _ = p | source | beam.WindowInto(window.FixedWindows(args.window)) | beam.ParDo(CountPerKey())
    start = time.time()
    result = p.run()
    print(
        f'keys={args.keys} rate={args.rate}/micro-batch master={args.master} checkpoint={location}'
    )
    print(
        f'{"t (s)":>7} {"micro-batch":>11} {"driver MB":>10} '
        f'{"JVMs MB":>8} {"Python workers PSS MB (n)":>26} '
        f'{"largest worker MB":>17} {"checkpoint MB":>14} {"load":>5}'
    )
    me = os.getpid()
    while time.time() - start < args.minutes * 60:
        state = result.wait_until_finish(duration=int(args.every * 1000))
        executor = getattr(result, 'executor', None)
        pids = _descendants(me)
        jvms = [_rss_kb(pid) for pid in pids if _is_jvm(pid)]
        workers = [_pss_kb(pid) for pid in pids if not _is_jvm(pid)]
        size = CheckpointStore.size(type('S', (), {'root': location})())
        workers_mb = f'{sum(workers) / 1024:.0f} ({len(workers)})'
        print(
            f'{time.time() - start:7.0f} '
            f'{executor.micro_batch if executor else -1:>11} '
            f'{_rss_kb(me) / 1024:10.0f} {sum(jvms) / 1024:8.0f} '
            f'{workers_mb:>26} {max(workers, default=0) / 1024:17.0f} '
            f'{size / 2**20:14.1f} {os.getloadavg()[0]:5.1f}',
            flush=True,
        )
        if args.jvms:
            for pid in pids:
                if _is_jvm(pid):
                    print(
                        f'        {_jvm_role(pid):>10} pid {pid}: RSS '
                        f'{_rss_kb(pid) / 1024:.0f} MB '
                        f'{_heap_mb(pid, args.live)}',
                        flush=True,
                    )
            print(
                f'        {_status_store(spark)} shuffle files {_shuffle_files(pids, spark)}',
                flush=True,
            )
        if state != 'RUNNING':
            break
    result.cancel()
    result.wait_until_finish()
    print('state', result.state)
    spark.stop()


if __name__ == '__main__':
    main()
