"""The objects a Spark Python worker keeps between tasks, frozen out of the
garbage collector's way (``gc.freeze``), an epoch at a time.

PySpark's daemon-forked worker runs ``gc.collect()`` after every task when
workers are reused (``pyspark/daemon.py``). A full collection walks every
object the collector tracks: with Beam, PyArrow and PySpark loaded about
146,000 of them, 65-75 ms of CPU after every task whatever the task did.
Measured on a stateful stream of 100 elements a micro-batch (docs/performance.md):
~75 of the ~85 ms of Python-worker CPU a task spent outside the
bundle.

Frozen objects are left out of every collection (they are still freed by
reference counting; only garbage cycles among them wait). In a worker forked by
PySpark's daemon, and only there (the debug engine and small data run the same
``StageTask`` in the driver, whose collector is left alone):

* at a task's start, right after PySpark's collection (what is alive then is
  reachable: modules, the BundleProcessor cache, this task), everything alive
  is frozen, once per epoch;
* after the epoch's last task the objects are unfrozen, so PySpark's collection
  after that task is a full one: it frees the frozen objects that died in the
  epoch (BundleProcessors of an earlier job or side-input version, dropped from
  the cache), and the next task freezes anew, with the processors built since.
  The first epoch lasts one task (what importing Beam left behind is freed
  after it, and the first task's processors are frozen from the second on),
  then every epoch ``MAX_EPOCH_TASKS``. Epochs growing 1, 2, 4, ... tasks
  up to that would freeze the processors built in a worker's first tasks
  sooner; but a stage's processors are ~600 tracked objects (a collection
  walks them in ~0.3 ms), while each epoch's end costs a full collection
  (~70 ms): eight of them in a worker's first 255 tasks, measured at
  ~0.2-0.4 CPU-s a round of the stateful benchmark in a fresh session's
  first rounds (docs/performance.md).

What is held frozen beyond its life is bounded by what was alive at an epoch's
start, never by the number of tasks.
"""

from __future__ import annotations

import gc
import sys
from typing import Optional

MAX_EPOCH_TASKS = 256


def forked_by_pyspark_daemon() -> bool:
    """Whether this process is a Python worker forked by PySpark's daemon
    (``python -m pyspark.daemon``), which collects garbage after every task."""
    spec = getattr(sys.modules.get('__main__'), '__spec__', None)
    return getattr(spec, 'name', None) == 'pyspark.daemon'


class Epochs:
    """One process's freezing (see the module doc)."""

    def __init__(self, active: Optional[bool] = None, max_tasks: int = MAX_EPOCH_TASKS):
        # None: decided at the first task (whether PySpark's daemon forked us).
        self.active = active
        self.max_tasks = max_tasks  # tasks in every epoch after the first
        self.frozen = False
        self.tasks = 0  # tasks finished in this epoch
        self.length = 1  # tasks in this epoch

    def task_started(self) -> None:
        if self.active is None:
            self.active = forked_by_pyspark_daemon()
        if not self.active:
            return
        if not self.frozen:
            gc.freeze()
            self.frozen = True

    def task_finished(self) -> None:
        if not self.frozen:
            return
        self.tasks += 1
        if self.tasks >= self.length:
            gc.unfreeze()  # PySpark's collection after this task is full
            self.frozen, self.tasks = False, 0
            self.length = self.max_tasks


EPOCHS = Epochs()
