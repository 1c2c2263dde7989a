"""The Python workers' CPU round by round: what moves between identical runs.

Runs one benchmark pipeline of ``streaming.py`` on Spark ``--rounds`` times in
one process (each after a small warm-up run, as ``streaming_ab`` does) with
the workers' own task marks on (``BEAM_SPARK_INPROC_TASK_TIMES``,
``worker.profiling.TaskTimes``, set before Spark starts so the workers
inherit it), and prints per round:

* the Python workers' CPU from ``/proc`` (``run.Sampler``), and per worker
  process: its pid, CPU in the round, RSS at the end, tasks run;
* from the tasks' marks: CPU inside tasks (the bundle thread's and the main
  thread's), CPU between tasks (PySpark reading the next task, its
  ``gc.collect()`` after the last one), the garbage collections by
  generation during tasks and between them with their CPU, the epochs of
  frozen objects begun; per stage (source, keyed) the tasks' CPU.

    PYSPARK_PYTHON=$(which python) python -m tests.benchmarks.worker_rounds \\
        [--pipeline stateful] [--rounds 6] [--events 20] [--per-event 20000] \\
        [--keys 1000] [--variants default]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import tempfile
import time


def _records(folder: str, since: float, until: float) -> list:
    out = []
    for path in glob.glob(os.path.join(folder, 'tasks-*.jsonl')):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if since <= r['start'] < until:
                    out.append(r)
    return sorted(out, key=lambda r: r['start'])


def _sum_gc(records: list, field: str) -> dict:
    total: dict = {}
    for r in records:
        for k, v in r.get(field, {}).items():
            total[k] = total.get(k, 0) + v
    return total


def _gc_text(gc: dict) -> str:
    parts = []
    for g in (0, 1, 2):
        n = gc.get(f'gc{g}', 0)
        if n:
            parts.append(f'g{g} {n}x {gc.get(f"gc{g}_cpu", 0) * 1000:.0f} ms')
    return ', '.join(parts) or 'none'


def calibration() -> float:
    """CPU seconds of a fixed piece of pure-Python work in this process: the
    machine's speed at the moment (a shared VM's moves by tens of percent)."""
    start = time.process_time()
    d: dict = {}
    for i in range(400_000):
        d[i % 1000] = d.get(i % 1000, 0) + i
    return time.process_time() - start


class Canary:
    """A thread timing a fixed piece of pure-Python work (~1 ms) every
    ``interval`` seconds by its own CPU time (``thread_time``: waiting for the
    GIL or a core does not count): how fast this machine runs Python code
    during the round, against the same work on a quiet machine."""

    def __init__(self, interval: float = 0.2):
        import threading

        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def work() -> float:
        start = time.thread_time()
        d: dict = {}
        for i in range(10_000):
            d[i % 100] = d.get(i % 100, 0) + i
        return time.thread_time() - start

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(self.work())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1000 if self.samples else 0.0


def _steal() -> float:
    """Seconds of CPU the hypervisor gave to others (all CPUs), so far."""
    with open('/proc/stat') as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf('SC_CLK_TCK')


def _spread(records: list, stage: str) -> str:
    """The stage's tasks' bundle-thread CPU (median, 90th percentile, max, in
    ms) and how it moves with the CPU of the young collections during each
    task (fixed work: a slower task whose collections are slower too ran on
    a slower CPU, not more work)."""
    tasks = [
        r
        for r in records
        if r['stage'].endswith(stage) and r.get('bundle_thread_cpu') and r['gc_during'].get('gc0')
    ]
    if len(tasks) < 4:
        return ''
    cpu = [r['bundle_thread_cpu'] * 1000 for r in tasks]
    per_gc = [r['gc_during']['gc0_cpu'] / r['gc_during']['gc0'] * 1000 for r in tasks]
    try:
        corr = f'{statistics.correlation(cpu, per_gc):.2f}'
    except statistics.StatisticsError:
        corr = '-'
    return (
        f'; bundle thread ms a task: median {statistics.median(cpu):.0f}, '
        f'p90 {statistics.quantiles(cpu, n=10)[-1]:.0f}, max {max(cpu):.0f}; '
        f"correlation with a young collection's CPU {corr}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--pipeline', default='stateful')
    parser.add_argument('--rounds', type=int, default=6)
    parser.add_argument('--events', type=int, default=20)
    parser.add_argument('--per-event', type=int, default=20_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument(
        '--variants', default='default', help="streaming_ab's variants, alternating"
    )
    parser.add_argument(
        '--no-warm', action='store_true', help='no warm-up run before each measured run'
    )
    parser.add_argument(
        '--no-marks', action='store_true', help="without the tasks' marks (they cost CPU)"
    )
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix='worker-rounds-')
    from beam_spark_inproc.worker import profiling

    if not args.no_marks:
        os.environ[profiling.TASK_TIMES_ENV] = folder
    from tests.benchmarks import streaming
    from tests.benchmarks import streaming_ab
    from tests.benchmarks.run import Sampler
    from tests.benchmarks.run import _descendants
    from tests.benchmarks.run import _proc_table

    streaming._instrument()
    warm = argparse.Namespace(events=2, per_event=2_000, keys=2)
    variants = [v for v in args.variants.split(',') if v]
    print(
        f'load average {os.getloadavg()}; {args.pipeline}, {args.events} x '
        f'{args.per_event}, {args.keys} keys; task marks in {folder}',
        flush=True,
    )
    for v in variants:
        streaming.run_one(args.pipeline, 'spark', warm, flags=streaming_ab.variant_flags(v))
    summary: dict = {}
    for n in range(args.rounds):
        for variant in variants:
            extra = streaming_ab.variant_flags(variant)
            if not args.no_warm:
                streaming.run_one(args.pipeline, 'spark', warm, flags=extra)
            calibrated = statistics.median(calibration() for _ in range(3))
            steal = _steal()
            since = time.time()
            with Sampler(interval=0.5) as sampler, Canary() as canary:
                f = streaming.run_one(args.pipeline, 'spark', args, flags=extra)
            until = time.time()
            steal = _steal() - steal
            cpu = sampler.cpu_seconds()
            table = _proc_table()
            me = os.getpid()
            workers = {}
            for pid in _descendants(table, me):
                if table[pid][1].startswith('python') and pid in sampler._kind:
                    workers[pid] = (
                        sampler._last_cpu[pid] - sampler._first_cpu[pid],
                        table[pid][3] / 2**20,
                    )
            records = _records(folder, since, until)
            inside = sum(r['process_cpu'] for r in records)
            between = sum(r.get('cpu_since_previous_task') or 0 for r in records)
            bundle = sum(r.get('bundle_thread_cpu', 0) for r in records)
            main_thread = sum(r['main_thread_cpu'] for r in records)
            by_stage: dict = {}
            for r in records:
                s = by_stage.setdefault(r['stage'][-30:], [0, 0.0, 0])
                s[0] += 1
                s[1] += r['process_cpu']
                s[2] += r.get('input_rows', 0)
            tasks_by_pid: dict = {}
            for r in records:
                tasks_by_pid[r['pid']] = tasks_by_pid.get(r['pid'], 0) + 1
            # Tasks that began an epoch of frozen objects (``gc_epochs``):
            # the task before ended one, and PySpark's collection after it
            # walked every object.
            begun = sorted(
                r['gc_frozen_at_start'][1]
                for r in records
                if r.get('gc_frozen_at_start') and r['gc_frozen_at_start'][0] == 0
            )
            print(
                f'round {n} {variant}: {f["throughput"]:,.0f}/s, {f["seconds"]:.2f} s; '
                f'Python workers {cpu.get("python", 0):.2f} CPU-s (JVM '
                f'{cpu.get("jvm", 0):.2f}, driver {cpu.get("driver", 0):.2f}); '
                f'{len(records)} tasks: inside {inside:.2f} (bundle threads '
                f'{bundle:.2f}, main threads {main_thread:.2f}), between '
                f'{between:.2f}; gc during tasks: {_gc_text(_sum_gc(records, "gc_during"))}; '
                f'between: {_gc_text(_sum_gc(records, "gc_before"))}; epochs begun '
                f'{len(begun)} (of {begun} tasks); '
                f'calibration {calibrated * 1000:.0f} ms, '
                f'canary {canary.median_ms():.2f} ms, steal {steal:.2f} s; fresh '
                f'workers {len(sampler.fresh_spark_workers)}  '
                f'[load {os.getloadavg()[0]:.1f}]',
                flush=True,
            )
            for stage, (count, stage_cpu, rows) in sorted(by_stage.items()):
                print(
                    f'    stage ...{stage}: {count} tasks, {stage_cpu:.2f} CPU-s, '
                    f'{rows} rows in{_spread(records, stage)}',
                    flush=True,
                )
            for pid, (pcpu, rss) in sorted(workers.items()):
                print(
                    f'    pid {pid}: {pcpu:.2f} CPU-s, RSS {rss:.0f} MB, '
                    f'{tasks_by_pid.get(pid, 0)} tasks',
                    flush=True,
                )
            summary.setdefault(variant, []).append(
                (f['throughput'], cpu.get('python', 0), inside, between, canary.median_ms())
            )
    print('medians: elements/s, Python workers CPU-s, inside tasks, between tasks, canary ms')
    for variant, rows in summary.items():
        print(f'{variant}: ' + ', '.join(f'{statistics.median(c):,.2f}' for c in zip(*rows)))


if __name__ == '__main__':
    main()
