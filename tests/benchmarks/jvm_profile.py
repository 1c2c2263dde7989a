"""Where the driver JVM's CPU goes per micro-batch of a warm stream.

Runs a benchmark pipeline of ``streaming.py`` on Spark ``--rounds`` times in
one process (the same session and JVM, after a small warm-up run), and per
run prints the JVM's CPU by thread group (``/proc/<jvm>/task/*/stat``: the
executor's task threads, the C1/C2 compilers, GC, the DAG scheduler, the
Py4J threads serving the driver, ...), the classes the JVM loaded, the
JIT compilations and their time (``jcmd PerfCounter.print``), and Spark's
whole-stage code generation (``CodegenMetrics``: generated classes compiled
by Janino, a cache miss each, and their compile time). With ``--jfr N``
run N also records a JFR profile and prints its hottest frames per thread
group (``jfr print --events jdk.ExecutionSample``).

    PYSPARK_PYTHON=$(which python) python -m tests.benchmarks.jvm_profile \\
        [--pipeline stateful] [--events 20] [--per-event 20000] [--keys 1000] \\
        [--rounds 6] [--jfr 4] [--variants a,b (streaming_ab's)]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile
import time

from tests.benchmarks import streaming
from tests.benchmarks import streaming_ab

_TICK = os.sysconf('SC_CLK_TCK')
_GROUPS = [
    ('executor tasks', r'^Executor task'),
    ('C1/C2 compiler', r'CompilerThre|C1 Compi|C2 Compi'),
    ('GC', r'^GC |^G1 |VM Periodic|^VM Thread'),
    ('dag-scheduler', r'^dag-scheduler'),
    ('listener bus', r'^spark-listener|listener'),
    ('shuffle/netty', r'^shuffle|netty|^rpc|^dispatcher|^block-manager'),
    ('py4j', r'^Thread-\d+'),
    ('arrow/python io', r'stdout writer|stdin writer|Worker Monitor|^python'),
]


def _jvm_pid() -> int:
    """The java child of this process (the session's JVM)."""
    out = subprocess.run(
        ['pgrep', '-P', str(os.getpid()), 'java'], capture_output=True, text=True
    ).stdout.split()
    return int(out[0])


def _threads(pid: int) -> dict[int, tuple[str, int]]:
    found = {}
    for tid in os.listdir(f'/proc/{pid}/task'):
        try:
            with open(f'/proc/{pid}/task/{tid}/stat') as f:
                stat = f.read()
            with open(f'/proc/{pid}/task/{tid}/comm') as f:
                comm = f.read().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(')') + 2 :].split()
        found[int(tid)] = (comm, int(fields[11]) + int(fields[12]))
    return found


class _Poller:
    """The JVM's threads' CPU polled every 20 ms while a run goes: a thread
    that starts and ends within the run (the Py4J thread serving a Python
    thread of the stream: the loop's, the prefetch's) counts too."""

    def __init__(self, pid: int) -> None:
        import threading

        self.pid = pid
        self.before = _threads(pid)
        self.seen = dict(self.before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            self.seen.update(_threads(self.pid))

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        self.seen.update(_threads(self.pid))
        groups: collections.Counter = collections.Counter()
        self.names: collections.Counter = collections.Counter()
        for tid, (comm, ticks) in self.seen.items():
            self.names[re.sub(r'\d+', 'N', comm)] += ticks - self.before.get(tid, (comm, 0))[1]
            old = self.before.get(tid)
            new = old is None
            groups[_group(comm) + (' (new)' if new and 'py4j' in _group(comm) else '')] += ticks - (
                0 if new else old[1]
            )
        return groups


def _group(name: str) -> str:
    for group, pattern in _GROUPS:
        if re.search(pattern, name):
            return group
    return 'other'


def _process_cpu(pid: int) -> int:
    with open(f'/proc/{pid}/stat') as f:
        stat = f.read()
    fields = stat[stat.rindex(')') + 2 :].split()
    return int(fields[11]) + int(fields[12])


def _counters(pid: int) -> dict[str, int]:
    out = subprocess.run(
        ['jcmd', str(pid), 'PerfCounter.print'], capture_output=True, text=True
    ).stdout
    wanted = ('java.cls.loadedClasses', 'java.cls.unloadedClasses', 'sun.ci.totalCompiles')
    found = {}
    for line in out.splitlines():
        key, _, value = line.partition('=')
        if key in wanted:
            found[key] = int(value.strip().strip('"') or 0)
    return found


def _codegen(session) -> tuple[int, float, int]:
    """(generated classes compiled, their compile ms, source code count):
    Spark's ``CodegenMetrics`` histograms (classic-only)."""
    jvm = session.sparkContext._jvm
    metrics = getattr(jvm, 'org.apache.spark.metrics.source.CodegenMetrics')
    compile_ms = metrics.METRIC_COMPILATION_TIME().getSnapshot()
    count = metrics.METRIC_COMPILATION_TIME().getCount()
    return (
        count,
        compile_ms.getMean() * count,
        metrics.METRIC_GENERATED_CLASS_BYTECODE_SIZE().getCount(),
    )


def _jfc() -> str:
    """JFR's ``profile`` settings with Java samples every 2 ms."""
    import glob

    base = glob.glob('/usr/lib/jvm/*/lib/jfr/profile.jfc')[0]
    with open(base) as f:
        text = f.read()
    text = re.sub(
        r'(<event name="jdk.ExecutionSample">.*?<setting name="period"[^>]*>)'
        r'[^<]*',
        r'\g<1>2 ms',
        text,
        flags=re.S,
    )
    path = os.path.join(tempfile.mkdtemp(prefix='jfc-'), 'fast.jfc')
    with open(path, 'w') as f:
        f.write(text)
    return path


def _jfr_top(path: str, top: int) -> str:
    out = subprocess.run(
        ['jfr', 'print', '--events', 'jdk.ExecutionSample', '--stack-depth', '80', path],
        capture_output=True,
        text=True,
    ).stdout
    by_group: collections.Counter = collections.Counter()
    frames: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for event in out.split('jdk.ExecutionSample')[1:]:
        thread = re.search(r'sampledThread = "([^"]*)"', event)
        stack = re.findall(r'^\s+([\w$.<>/]+)\(', event, re.M)
        if not thread or not stack:
            continue
        group = _group(thread.group(1))
        by_group[group] += 1
        # the first frame outside java.*/jdk.*/sun.*/scala.* (who called);
        # on a Py4J thread, the method the driver called (the deepest
        # frame above py4j's)
        mine = next(
            (s for s in stack if not s.startswith(('java.', 'jdk.', 'sun.', 'scala.'))), stack[0]
        )
        if group.startswith('py4j'):
            below = [s for s in stack if not s.startswith(('java.', 'jdk.', 'sun.', 'py4j.'))]
            mine = below[-1] if below else stack[-1]
            frames[group + ' by call'][mine] += 1
        frames[group][f'{stack[0]}  <- {mine}'] += 1
    lines = [f'    JFR samples: {sum(by_group.values())}']
    for group, n in by_group.most_common():
        lines.append(f'    {group}: {n}')
        for frame, m in frames[group].most_common(top):
            lines.append(f'        {m:4d} {frame}')
        for frame, m in frames[group + ' by call'].most_common(top):
            lines.append(f'        {m:4d} called: {frame}')
    return '\n'.join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--pipeline', default='stateful')
    parser.add_argument('--events', type=int, default=20)
    parser.add_argument('--per-event', type=int, default=20_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--rounds', type=int, default=6)
    parser.add_argument(
        '--jfr', type=int, default=0, help='the run (1-based) to record with JFR, 0: none'
    )
    parser.add_argument('--top', type=int, default=12)
    parser.add_argument(
        '--variants', default='default', help="streaming_ab's variants, alternating per round"
    )
    parser.add_argument(
        '--conf',
        default='',
        help='"key=value;..." of runtime SQL settings set for '
        'the variants named with a "+conf" suffix '
        '("default+conf")',
    )
    args = parser.parse_args()
    confs = dict(kv.split('=', 1) for kv in args.conf.split(';') if kv)
    streaming._instrument()
    warm = argparse.Namespace(events=2, per_event=2_000, keys=2)
    variants = [v for v in args.variants.split(',') if v]
    streaming.run_one(
        args.pipeline, 'spark', warm, flags=streaming_ab.variant_flags(variants[0].split('+')[0])
    )
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    pid = _jvm_pid()
    print(
        f'load average {os.getloadavg()}; JVM pid {pid}; {args.pipeline}, '
        f'{args.events} x {args.per_event}, {args.keys} keys',
        flush=True,
    )
    run = 0
    for _ in range(args.rounds):
        for variant in variants:
            run += 1
            extra = streaming_ab.variant_flags(variant.split('+')[0])
            for key, value in confs.items():
                if variant.endswith('+conf'):
                    session.conf.set(key, value)
                else:
                    session.conf.unset(key)
            poller, before_cpu = _Poller(pid), _process_cpu(pid)
            before_counters, before_gen = _counters(pid), _codegen(session)
            jfr = None
            if run == args.jfr:
                jfr = os.path.join(tempfile.mkdtemp(prefix='jfr-'), 'run.jfr')
                subprocess.run(
                    ['jcmd', str(pid), 'JFR.start', 'name=mb', f'settings={_jfc()}'],
                    capture_output=True,
                )
            start = time.time()
            f = streaming.run_one(args.pipeline, 'spark', args, flags=extra)
            wall = time.time() - start
            if jfr:
                subprocess.run(
                    ['jcmd', str(pid), 'JFR.stop', 'name=mb', f'filename={jfr}'],
                    capture_output=True,
                )
            groups, after_cpu = poller.stop(), _process_cpu(pid)
            after_counters, after_gen = _counters(pid), _codegen(session)
            batches = f.get('micro-batches') or 1
            total = (after_cpu - before_cpu) / _TICK
            d = {k: after_counters.get(k, 0) - before_counters.get(k, 0) for k in after_counters}
            ms = 1000 / _TICK / batches
            print(
                f'run {run} [{variant}]: {wall:.2f} s, {f["throughput"]:,.0f}/s, '
                f'{batches} micro-batches; JVM {total:.2f} CPU-s '
                f'({total * 1000 / batches:.0f} ms a micro-batch): '
                + ', '.join(f'{g} {t * ms:.1f}' for g, t in groups.most_common() if t)
                + f' ms a micro-batch; classes loaded '
                f'{d.get("java.cls.loadedClasses", 0) / batches:.1f} '
                f'(unloaded {d.get("java.cls.unloadedClasses", 0)}), JIT '
                f'compiles {d.get("sun.ci.totalCompiles", 0) / batches:.0f} '
                f'a micro-batch; Janino compiles {after_gen[0] - before_gen[0]} '
                f'in the run; '
                f'[load {os.getloadavg()[0]:.1f}]',
                flush=True,
            )
            print(
                '    threads: '
                + ', '.join(f'{n} {t * ms:.1f}' for n, t in poller.names.most_common(14) if t),
                flush=True,
            )
            if jfr:
                print(_jfr_top(jfr, args.top), flush=True)


if __name__ == '__main__':
    main()
