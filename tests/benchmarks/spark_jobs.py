"""The runner's jobs per run of ``run.py``'s pipelines, from its progress log.

    python tests/benchmarks/spark_jobs.py --size 1000000 --pipelines P1 P2 P3g P4 \
        --engines inproc inproc_handover1

Run by hand, never by pytest. One warm ``local[2]`` session (as ``run.py``);
engines interleaved, ``--repeats`` runs each. Per run: wall seconds and each job
the runner logged with its time; a job "done in 0.00 s" ran in the driver
(small data: no Spark job). Used for ``execution.small.MAX_HANDOVERS``'s A/B.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.benchmarks import run as bench_run  # noqa: E402


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--size', type=int, default=1_000_000)
    parser.add_argument('--pipelines', nargs='+', default=['P1', 'P2', 'P3g', 'P4'])
    parser.add_argument('--engines', nargs='+', default=['inproc', 'inproc_handover1'])
    parser.add_argument('--repeats', type=int, default=2)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for noisy in ('apache_beam', 'py4j', 'root'):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    lines = _Lines()
    progress = logging.getLogger('beam_spark_inproc.progress')
    progress.setLevel(logging.INFO)
    progress.addHandler(lines)
    progress.propagate = False

    from beam_spark_inproc.spark import session as spark_session

    spark, _ = spark_session.get_or_create('local[2]', None, {})
    with tempfile.TemporaryDirectory(prefix='beam-spark-jobs-') as workdir:
        harness = bench_run.Harness(spark, 32, workdir, spark_session.parallelism(spark, None))
        for name in args.pipelines:
            bench = bench_run.BENCHMARKS[name]
            for engine in args.engines:
                harness.run(bench, 100_000, engine)  # warm
            for _ in range(args.repeats):
                for engine in args.engines:
                    lines.lines.clear()
                    load = os.getloadavg()[0]
                    t0 = time.time()
                    harness.run(bench, args.size, engine)
                    jobs = [line for line in lines.lines if 'done in' in line]
                    print(
                        f'{name} {engine} {time.time() - t0:.2f} s, load {load:.1f}, '
                        f'{len(jobs)} jobs: '
                        + '; '.join(
                            line.split(', ', 1)[1].split(': ')[0]
                            + ' '
                            + line.split('done in ')[1].split(' (')[0]
                            for line in jobs
                        ),
                        flush=True,
                    )
        harness.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
