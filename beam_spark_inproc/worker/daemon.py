"""PySpark's worker daemon, with Beam and the worker's modules imported before
it forks its workers (``spark.python.daemon.module`` of the local sessions the
runner creates: ``spark.session.get_or_create``).

Spark starts one daemon per executor and the daemon forks a Python worker per
concurrent task; each fresh worker imported Beam, PyArrow and this package on
its first task, ~1.6 CPU-s. A session needs more workers than its cores (a
task whose plan chains two stages' ``mapInArrow`` holds two at once) and Spark
ends a worker idle for a minute, so a process pays that import many times.
Forked from a daemon that has the modules already, a worker starts with them
at no cost (and shares their memory with its siblings until written).

PySpark imports the worker module after the fork because a module may start
threads at import, which a fork does not copy. What is imported here starts
none that matter: NumPy's BLAS pool has one thread under Spark's
``OMP_NUM_THREADS`` (the task's cores, 1 by default), and Arrow's jemalloc
thread and thread pools are rebuilt in a forked child by their own fork
handlers. What a fork does copy is module state: NumPy's global random
generator would start every worker at the same seed, so a forked worker
reseeds it as a freshly imported NumPy would (``_reseed``).

A failed import here is not an error: the worker imports what it needs itself,
as it does under PySpark's own daemon, and reports any failure there.
"""
from __future__ import annotations

import os
import sys

# What ``spark.python.daemon.module`` names.
MODULE = 'beam_spark_inproc.worker.daemon'


def _reseed() -> None:
    numpy = sys.modules.get('numpy')
    if numpy is not None:
        numpy.random.seed()


def preload() -> None:
    try:
        import pyspark.worker  # noqa: F401
        import beam_spark_inproc.worker.stage_task  # noqa: F401
    except Exception:  # pylint: disable=broad-except
        return
    os.register_at_fork(after_in_child=_reseed)


if __name__ == '__main__':
    preload()
    from pyspark import daemon
    daemon.manager()
