"""Where the Python workers' CPU goes, task by task, against FnApiRunner.

    python tests/benchmarks/attribution.py --pipeline P1 --size 4000000
    python tests/benchmarks/attribution.py --pipeline P3g --size 4000000 --top 25

Run by hand, never by pytest. One warm ``local[2]`` session (as ``run.py``);
the pipelines are ``run.py``'s. Per run it prints ``uptime``'s load and:

1. The tasks of an unprofiled run of this runner, from the workers' own marks
   (``BEAM_SPARK_INPROC_TASK_TIMES``, ``worker.profiling.TaskTimes``): per task
   its start in the run, wall, time to its first input batch, to a ready
   BundleProcessor (built or cached), to the first element handed to Beam, to the
   end of the bundle; the CPU of the process, of the bundle's thread and of the
   main thread (PySpark's Arrow stream and our output hand-over) during the task,
   and the CPU the process spent since its previous task (PySpark reading and
   unpickling the task). The Python workers' CPU from ``/proc`` less the tasks'
   CPU is spent outside any task (worker start, imports, PySpark between tasks).
2. FnApiRunner's CPU on the same pipeline (``/proc``, same run).
3. ``--pyspark-tasks N``: PySpark's own cost per ``mapInArrow`` task (an
   identity function over N partitions): the Python workers' CPU per task.
4. ``--top``: a cProfile of this runner's bundle threads (``--spark_profile_dir``)
   and of FnApiRunner's whole run, function by function (own time, same sort),
   with the difference: what one does that the other does not.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from beam_spark_inproc.worker import profiling  # noqa: E402
from tests.benchmarks import run as bench_run  # noqa: E402


def _uptime() -> str:
    return subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()


def _tasks(folder: str) -> list:
    records = []
    for path in glob.glob(os.path.join(folder, 'tasks-*.jsonl')):
        with open(path) as f:
            records += [json.loads(line) for line in f if line.strip()]
    return sorted(records, key=lambda r: r['start'])


def _fmt(value, spec='.2f') -> str:
    return '-' if value is None else format(value, spec)


def task_table(records: list, t0: float) -> list[str]:
    lines = [
        '| stage | pid | start s | wall s | first batch | processor ready | '
        'first element | bundle done | process CPU | bundle thread CPU | '
        'main thread CPU | CPU before task | rows in | batches in | batches out |',
        '|---|---:|' + '---:|' * 13,
    ]
    for r in records:
        if r['pid'] == os.getpid():
            r = dict(r, stage='(driver) ' + r['stage'][-31:])
        lines.append(
            '| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |'
            % (
                r['stage'][-40:],
                r['pid'],
                _fmt(r['start'] - t0),
                _fmt(r['wall']),
                _fmt(r.get('first_batch'), '.3f'),
                _fmt(r.get('processor_ready'), '.3f'),
                _fmt(r.get('first_element'), '.3f'),
                _fmt(r.get('bundle_done')),
                _fmt(r['process_cpu']),
                _fmt(r.get('bundle_thread_cpu')),
                _fmt(r['main_thread_cpu']),
                _fmt(r.get('cpu_since_previous_task'), '.3f'),
                r.get('input_rows', 0),
                r.get('input_batches', 0),
                r.get('output_batches', 0),
            )
        )
    return lines


def _own_times(stats: pstats.Stats) -> dict:
    out: dict = {}
    for (filename, _, function), row in stats.stats.items():
        short = '%s:%s' % (filename.split('site-packages/')[-1], function)
        out[short] = out.get(short, 0.0) + row[2]
    return out


def compare_profiles(harness, bench, n: int, top: int) -> list[str]:
    with tempfile.TemporaryDirectory(prefix='beam-spark-attr-prof-') as folder:
        harness.run(bench, n, 'inproc', [f'--spark_profile_dir={folder}'])
        stats = None
        for path in glob.glob(os.path.join(folder, '*.prof')):
            stats = pstats.Stats(path) if stats is None else stats.add(path) or stats
        ours = _own_times(stats)
    # CPU time of this thread, as the workers' bundle profiles count it: wall
    # time would charge the load's descheduling to whatever was running.
    profiler = profiling.Profile(time.thread_time)
    profiler.enable()
    harness.run_beam(bench, n, 'direct')
    profiler.disable()
    theirs = _own_times(pstats.Stats(profiler))
    keys = sorted(set(ours) | set(theirs), key=lambda k: -max(ours.get(k, 0), theirs.get(k, 0)))[
        :top
    ]
    lines = [
        'cProfile own CPU time (tottime, thread CPU clock), '
        "this runner's bundle threads (all tasks) "
        f"vs FnApiRunner's whole run: total {sum(ours.values()):.2f} s vs "
        f'{sum(theirs.values()):.2f} s',
        '',
        '| function | this runner s | FnApiRunner s | difference |',
        '|---|---:|---:|---:|',
    ]
    for k in keys:
        a, b = ours.get(k, 0.0), theirs.get(k, 0.0)
        lines.append(f'| `{k}` | {a:.2f} | {b:.2f} | {a - b:+.2f} |')
    diff = sorted(set(ours) | set(theirs), key=lambda k: -abs(ours.get(k, 0) - theirs.get(k, 0)))[
        :top
    ]
    lines += [
        '',
        'Largest differences:',
        '',
        '| function | this runner s | FnApiRunner s | difference |',
        '|---|---:|---:|---:|',
    ]
    for k in diff:
        a, b = ours.get(k, 0.0), theirs.get(k, 0.0)
        lines.append(f'| `{k}` | {a:.2f} | {b:.2f} | {a - b:+.2f} |')
    return lines


def pyspark_task_cost(spark, tasks: int) -> str:
    """The Python workers' CPU per task of an identity ``mapInArrow``."""

    def identity(batches):
        yield from batches

    frame = spark.range(0, tasks * 25, 1, tasks)
    frame.mapInArrow(identity, frame.schema).count()  # workers up
    table = bench_run._proc_table()
    workers = [
        pid
        for pid in bench_run._descendants(table, os.getpid())
        if table[pid][1].startswith('python')
    ]
    before = {pid: table[pid][2] for pid in workers}
    start = time.perf_counter()
    frame.mapInArrow(identity, frame.schema).count()
    wall = time.perf_counter() - start
    table = bench_run._proc_table()
    cpu = sum(
        table[pid][2] - before.get(pid, 0.0)
        for pid in bench_run._descendants(table, os.getpid())
        if pid in table and table[pid][1].startswith('python')
    )
    return (
        f'identity mapInArrow, {tasks} tasks: Python workers {cpu:.2f} CPU-s, '
        f'{cpu / tasks * 1000:.1f} ms a task; wall {wall:.2f} s; `uptime`: {_uptime()}'
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--pipeline', default='P1', choices=list(bench_run.BENCHMARKS))
    parser.add_argument('--size', type=int, default=4_000_000)
    parser.add_argument('--chunks', type=int, default=32)
    parser.add_argument('--master', default='local[2]')
    parser.add_argument(
        '--repeats', type=int, default=1, help='unprofiled runs of each engine, interleaved'
    )
    parser.add_argument(
        '--top', type=int, default=0, help='also compare cProfiles: this many functions (0: no)'
    )
    parser.add_argument(
        '--pyspark-tasks',
        type=int,
        default=0,
        help="also measure PySpark's CPU per mapInArrow task over this many tasks (0: no)",
    )
    parser.add_argument(
        '--engines',
        nargs='+',
        default=['inproc', 'direct'],
        help="run.py's engines to run, interleaved (default "
        "inproc direct); the task table for each of this runner's",
    )
    parser.add_argument(
        '--extra', action='append', default=[], help='pipeline option for this runner (repeatable)'
    )
    args = parser.parse_args(argv)

    times_dir = tempfile.mkdtemp(prefix='beam-spark-task-times-')
    # Set before the session starts: local workers inherit the driver's environment.
    os.environ[profiling.TASK_TIMES_ENV] = times_dir
    import logging

    logging.basicConfig(level=logging.WARNING)
    for noisy in ('apache_beam', 'py4j', 'root'):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    from beam_spark_inproc.spark import session as spark_session

    spark, _ = spark_session.get_or_create(args.master, None, {})
    bench = bench_run.BENCHMARKS[args.pipeline]
    expected = tuple(bench.reference(args.size))
    with tempfile.TemporaryDirectory(prefix='beam-spark-attr-') as workdir:
        harness = bench_run.Harness(
            spark, args.chunks, workdir, spark_session.parallelism(spark, None)
        )
        engines = list(args.engines)
        for engine in engines:
            harness.run(bench, 100_000, engine)  # warm
        for r in range(args.repeats):
            shift = r % len(engines)
            for engine in engines[shift:] + engines[:shift]:
                for path in glob.glob(os.path.join(times_dir, '*.jsonl')):
                    os.remove(path)
                load = _uptime()
                t0 = time.time()
                seconds, result, sampler = harness.run(
                    bench, args.size, engine, args.extra if engine.startswith('inproc') else ()
                )
                assert result == expected, (engine, result, expected)
                cpu = sampler.cpu_seconds()
                print(
                    f'\n## {args.pipeline} at {args.size:,}, {engine}: {seconds:.2f} s; '
                    'CPU s '
                    + ', '.join(f'{k} {v:.2f}' for k, v in sorted(cpu.items()))
                    + f'\n`uptime` before: {load}; after: {_uptime()}\n',
                    flush=True,
                )
                if not engine.startswith('inproc'):
                    continue
                # The driver's own tasks (small data in the driver, ``(driver)``)
                # are listed; their CPU is the driver's, not the workers'.
                records = _tasks(times_dir)
                print('\n'.join(task_table(records, t0)))
                records = [r for r in records if r['pid'] != os.getpid()]
                in_tasks = sum(r['process_cpu'] for r in records)
                before = sum(r.get('cpu_since_previous_task') or 0 for r in records)
                bundle = sum(r.get('bundle_thread_cpu') or 0 for r in records)
                main_cpu = sum(r['main_thread_cpu'] for r in records)
                python = cpu.get('python', 0.0)
                print(
                    f'\nPython workers {python:.2f} CPU-s: in tasks {in_tasks:.2f} '
                    f'(bundle threads {bundle:.2f}, main threads {main_cpu:.2f}, '
                    f'other threads {in_tasks - bundle - main_cpu:.2f}); between '
                    f'tasks of a worker {before:.2f}; elsewhere (worker start, '
                    f'imports, first task) {python - in_tasks - before:.2f}',
                    flush=True,
                )
        if args.pyspark_tasks:
            print('\n' + pyspark_task_cost(spark, args.pyspark_tasks), flush=True)
        if args.top:
            print('\n' + '\n'.join(compare_profiles(harness, bench, args.size, args.top)))
            print(f'\n`uptime`: {_uptime()}')
        harness.close()
    shutil.rmtree(times_dir, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
