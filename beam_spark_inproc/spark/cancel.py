"""Stopping a run's Spark jobs: cancelling them by their tag, and waiting
for their tasks to end on the executors (Ctrl-C, ``result.cancel()``)."""

from __future__ import annotations

import threading
import time
from typing import Optional

# How long an interrupted run waits for its cancelled tasks to end
# (``wait_for_tasks_to_end``): PySpark kills a task's Python worker 2 s after
# the kill by default (``spark.python.task.killTimeout``).
TASKS_END_SECONDS = 15.0


def cancel_tag(session, tag: str) -> None:
    """Cancels the session's Spark jobs carrying ``tag`` (``SparkEngine.job``),
    from any thread: over Connect its operations (``interruptTag``), on
    classic Spark the Spark context's jobs with that job tag (a classic
    session's ``interruptTag`` looks at the calling thread's operations
    only)."""
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    pyspark_compat.interrupt_tag(session, tag)


def wait_for_tasks_to_end(
    session, timeout: float = TASKS_END_SECONDS, stop: Optional[threading.Event] = None
) -> bool:
    """Waits up to ``timeout`` seconds (or until ``stop`` is set: a second
    Ctrl-C) until no task runs on the session's executors; True once none
    does.

    After Ctrl-C has cancelled a run's jobs their tasks still end on the
    executors: a task in a Python worker ends when the worker is killed, up
    to ``spark.python.task.killTimeout`` later. A process exiting before
    then stops its local JVM under them, whose task-completion errors then
    reach the user's terminal after the interrupt. On Spark Connect the
    tasks end on the server, whatever the client does."""
    from beam_spark_inproc.spark.engine import is_connect

    if is_connect(session):
        return True
    deadline = time.monotonic() + timeout
    while running_tasks(session):
        if time.monotonic() > deadline or (stop is not None and stop.is_set()):
            return False
        time.sleep(0.1)
    return True


def running_tasks(session) -> int:
    """How many tasks run on a classic session's executors now, by the task
    scheduler's count (``runningTasksByExecutors``): a task counts from its
    launch until its executor reports its end, after the task's own cleanup.
    Not by the status tracker's (``getExecutorInfos``, which PySpark 3.5
    does not have either): Spark's status store writes an executor's count
    at most every ``spark.ui.liveUpdate.period``, so a task launched just
    after another change to its executor shows as none running (a resumed
    stream's first micro-batch on ``local[1]``, PySpark 3.5); that count
    where the scheduler's cannot be read."""
    from py4j.protocol import Py4JError

    jcontext = session.sparkContext._jsc.sc()  # classic-only: tasks ending after a cancel
    try:
        counts = jcontext.taskScheduler().runningTasksByExecutors().valuesIterator()
    except Py4JError:  # not a TaskSchedulerImpl
        return sum(e.numRunningTasks() for e in jcontext.statusTracker().getExecutorInfos())
    running = 0
    while counts.hasNext():
        running += counts.next()
    return running
