"""Per-bundle profiles of the Python workers (``--spark_profile_dir``).

When a directory is given, each bundle's thread (which runs Beam's
``BundleProcessor``, reads the input rows and builds the output batches) runs
under ``cProfile``; per bundle the worker writes ``<stage>-<pid>-<n>.prof``
(``pstats`` format) and ``.json`` with the bundle's wall time and the CPU
seconds of its thread, into that directory on the worker's machine.
``summarize`` adds them up by where the time went.

The profiles count the bundle thread's CPU time (``time.thread_time``), not
wall time: on a loaded machine wall time charges whatever ran when the thread
was descheduled (two workers' identical user functions had profiled 1.4-1.7x
FnApiRunner's by wall time at load 13; by CPU time they are equal). cProfile
slows Python code down, so shares from a profiled run are indicative.
Calls from Python code into Beam's compiled (Cython) modules appear under the
names of their methods, which ``category`` recognizes; calls made inside
compiled code (e.g. coders used by Beam's operations) count as the caller's
own time.
"""

from __future__ import annotations

import cProfile
import itertools
import json
import os
import pstats
import re
import time

_bundles = itertools.count()

# (category, pattern over "file:function") in order: the first match wins.
CATEGORIES = (
    ('encode/decode (Beam coders)', re.compile(r'apache_beam[./]coders')),
    (
        'Arrow rows in/out (runner)',
        re.compile(r'pyarrow|beam_spark_inproc/(protocol/rows|worker/channel)\.py'),
    ),
    ('runner (grouping, state, queue)', re.compile(r'beam_spark_inproc')),
    (
        'Beam windowing and trigger driver',
        re.compile(r'apache_beam/transforms/(trigger|window)\.py'),
    ),
    ('Beam bundle work (operations, DoFn invocation)', re.compile(r'apache_beam')),
    ('PySpark worker', re.compile(r'pyspark')),
    ('threading and queues', re.compile(r'threading\.py|queue\.py')),
)
USER = 'user code and builtins it calls'


class Profile(cProfile.Profile):
    """cProfile's profiler whose stats add up the code objects that share a
    label (file, first line, name). ``pstats`` keys its rows by label and
    keeps one code object's row per label, the last: each unpickled copy of
    a function is a code object of its own (Beam's ``Map`` wrapper, a lambda,
    once per stage and per transform using it), so all but one copy's calls
    went missing (a profile of FnApiRunner's word count showed Beam's ``Map``
    wrapper with 1 call of 500,000)."""

    def snapshot_stats(self) -> None:
        entries = self.getstats()
        stats: dict = {}  # typeshed has the times as int; they are floats
        self.stats = stats
        callers_of: dict[int, dict] = {}  # id(code) -> the callers' dict of its label's row
        for entry in entries:
            func = cProfile.label(entry.code)
            row: tuple = (
                entry.callcount - entry.reccallcount,
                entry.callcount,
                entry.inlinetime,
                entry.totaltime,
            )
            before = stats.get(func)
            callers = {} if before is None else before[4]
            if before is not None:
                row = tuple(a + b for a, b in zip(before[:4], row))
            stats[func] = (*row, callers)
            callers_of[id(entry.code)] = callers
        for entry in entries:
            func = cProfile.label(entry.code)
            for sub in entry.calls or ():
                callers = callers_of.get(id(sub.code))
                if callers is None:
                    continue
                row = (
                    sub.callcount,
                    sub.callcount - sub.reccallcount,
                    sub.inlinetime,
                    sub.totaltime,
                )
                before = callers.get(func)
                callers[func] = row if before is None else tuple(a + b for a, b in zip(before, row))


class BundleProfile:
    """Profiles the calling thread from construction to ``finish``."""

    def __init__(self, directory: str, stage: str):
        self.directory = directory
        self.stage = re.sub(r'[^A-Za-z0-9_.-]+', '_', stage)[-80:] or 'stage'
        self.profile = Profile(time.thread_time)
        self.wall = time.perf_counter()
        self.cpu = time.thread_time()
        self.profile.enable()

    def finish(self) -> None:
        self.profile.disable()
        cpu = time.thread_time() - self.cpu
        wall = time.perf_counter() - self.wall
        os.makedirs(self.directory, exist_ok=True)
        base = os.path.join(self.directory, '%s-%d-%d' % (self.stage, os.getpid(), next(_bundles)))
        self.profile.dump_stats(base + '.prof')
        with open(base + '.json', 'w') as f:
            json.dump(
                {
                    'stage': self.stage,
                    'pid': os.getpid(),
                    'wall_seconds': wall,
                    'thread_cpu_seconds': cpu,
                },
                f,
            )


def category(filename: str, function: str) -> str:
    where = '%s:%s' % (filename, function)
    for name, pattern in CATEGORIES:
        if pattern.search(where):
            return name
    return USER


def summarize(directory: str) -> dict:
    """Totals over a profile directory: bundles, wall and thread CPU seconds,
    and the profiled seconds per category (``tottime``, own time)."""
    stats, bundles, wall, cpu = None, 0, 0.0, 0.0
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith('.json'):
            with open(path) as f:
                record = json.load(f)
            bundles += 1
            wall += record['wall_seconds']
            cpu += record['thread_cpu_seconds']
        elif name.endswith('.prof'):
            if stats is None:
                stats = pstats.Stats(path)
            else:
                stats.add(path)
    by_category: dict[str, float] = {}
    if stats is not None:
        # pstats.Stats sets ``stats`` in its constructor; typeshed omits it.
        for (filename, _, function), row in stats.stats.items():  # type: ignore[attr-defined]
            own = row[2]  # tottime
            key = category(filename, function)
            by_category[key] = by_category.get(key, 0.0) + own
    return {
        'bundles': bundles,
        'wall_seconds': wall,
        'thread_cpu_seconds': cpu,
        'seconds_by_category': by_category,
    }


# ``BEAM_SPARK_INPROC_TASK_TIMES=DIR`` (in the workers' environment; a local
# session's workers inherit the driver's): every task appends one JSON line to
# ``DIR/tasks-<pid>.jsonl`` with where its time went, without cProfile's
# slow-down (``tests/benchmarks/attribution.py`` reads them).
TASK_TIMES_ENV = 'BEAM_SPARK_INPROC_TASK_TIMES'
_last_task_end: dict = {}
# The garbage collector's work in this process (task timing only): per
# generation the collections and their CPU seconds, counted by a callback
# installed with the first ``TaskTimes``.
_gc_totals: dict = {}


def _gc_callback(phase: str, info: dict) -> None:
    if phase == 'start':
        _gc_totals['_start'] = time.process_time()
        return
    generation = info.get('generation', 0)
    _gc_totals[f'gc{generation}'] = _gc_totals.get(f'gc{generation}', 0) + 1
    _gc_totals[f'gc{generation}_cpu'] = (
        _gc_totals.get(f'gc{generation}_cpu', 0.0)
        + time.process_time()
        - _gc_totals.get('_start', time.process_time())
    )


def _gc_snapshot() -> dict:
    """The collections so far and their CPU, per generation (``_gc_totals``
    without its running start)."""
    import gc

    if _gc_callback not in gc.callbacks:
        gc.callbacks.append(_gc_callback)
    return {k: v for k, v in _gc_totals.items() if not k.startswith('_')}


def _gc_since(now: dict, then: dict) -> dict:
    return {k: v - then.get(k, 0) for k, v in now.items()}


def _gc_state() -> tuple:
    """The frozen objects' epoch (tasks done, length) or None, and the
    collector's counts. Not ``gc.get_freeze_count()``: it walks the frozen
    objects' list (~156,000 in a worker, ~10 ms of cache misses), which had
    made the marks cost ~25 ms of CPU a task."""
    import gc

    from beam_spark_inproc.worker import gc_epochs

    epochs = gc_epochs.EPOCHS
    return ((epochs.tasks, epochs.length) if epochs.frozen else None, gc.get_count())


class TaskTimes:
    """One task's marks: wall clock and the CPU of the process and threads."""

    def __init__(self, directory: str, stage: str):
        self.directory = directory
        self.record: dict = {'stage': stage, 'pid': os.getpid()}
        now, cpu = time.time(), time.process_time()
        self.start_wall, self.start_cpu = now, cpu
        self.main_cpu = time.thread_time()
        previous = _last_task_end.get('cpu')
        self.gc_start = _gc_snapshot()
        # Collections since the previous task's end (PySpark's own, after it).
        self.record['gc_before'] = _gc_since(self.gc_start, _last_task_end.get('gc', {}))
        (self.record['gc_frozen_at_start'], self.record['gc_counts_at_start']) = _gc_state()
        self.record['rss_kb_at_start'] = _rss_kb()
        self.record.update(
            start=now,
            # CPU this process spent since its previous task ended: PySpark's
            # reading and unpickling of this task (and anything idle threads did).
            cpu_since_previous_task=None if previous is None else cpu - previous,
            wall_since_previous_task=None if previous is None else now - _last_task_end['wall'],
        )

    def mark(self, name: str) -> None:
        self.record[name] = time.time() - self.start_wall
        self.record[name + '_cpu'] = time.process_time() - self.start_cpu

    def add(self, name: str, value) -> None:
        self.record[name] = self.record.get(name, 0) + value

    def finish(self) -> None:
        end_wall, end_cpu = time.time(), time.process_time()
        self.record.update(
            wall=end_wall - self.start_wall,
            process_cpu=end_cpu - self.start_cpu,
            main_thread_cpu=time.thread_time() - self.main_cpu,
        )
        gc_end = _gc_snapshot()
        self.record['gc_during'] = _gc_since(gc_end, self.gc_start)
        _last_task_end.update(cpu=end_cpu, wall=end_wall, gc=gc_end)
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, 'tasks-%d.jsonl' % os.getpid())
        with open(path, 'a') as f:
            f.write(json.dumps(self.record) + '\n')


def _rss_kb() -> int:
    try:
        with open('/proc/self/statm') as f:
            return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') // 1024
    except OSError:
        return 0


def task_times(stage: str):
    """A ``TaskTimes`` when ``BEAM_SPARK_INPROC_TASK_TIMES`` is set, else None."""
    directory = os.environ.get(TASK_TIMES_ENV)
    return TaskTimes(directory, stage) if directory else None
