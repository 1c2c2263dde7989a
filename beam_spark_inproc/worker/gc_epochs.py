"""The objects a Spark Python worker keeps between tasks, frozen out of the
garbage collector's way (``gc.freeze``), an epoch at a time.

PySpark's daemon-forked worker runs ``gc.collect()`` after every task when
workers are reused (``pyspark/daemon.py``). A full collection walks every
object the collector tracks: with Beam, PyArrow and PySpark loaded about
146,000 of them, 65-75 ms of CPU after every task whatever the task did.
On a stateful stream of 100 elements a micro-batch that was ~75 of the ~85 ms
of Python-worker CPU a task spent outside the bundle (docs/performance.md).

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
  then every epoch ``MAX_EPOCH_TASKS``. Epochs growing 1, 2, 4, ... tasks up
  to that would freeze processors built in a worker's first tasks sooner; but a
  stage's processors are ~600 tracked objects (a collection walks them in
  ~0.3 ms), while each epoch's end costs a full collection (~70 ms): eight of
  them in a worker's first 255 tasks, ~0.2-0.4 CPU-s a run of the stateful
  benchmark in a fresh Spark session's first runs. ``StageTask.gc_epoch_doubling``
  (``doubling()`` in the driver, ``BEAM_SPARK_INPROC_GC_EPOCH_DOUBLING=1``)
  gives the growing epochs.

What is held frozen beyond its life is bounded by what was alive at an epoch's
start, never by the number of tasks.

``StageTask.gc_freeze`` (``enabled()`` in the driver when the task is made;
``BEAM_SPARK_INPROC_GC_FREEZE=0`` turns it off) carries the switch to the
workers; a task with it off unfreezes what an earlier task froze.
"""
from __future__ import annotations

import gc
import os
import sys
from typing import Optional

ENV = 'BEAM_SPARK_INPROC_GC_FREEZE'
DOUBLING_ENV = 'BEAM_SPARK_INPROC_GC_EPOCH_DOUBLING'
MAX_EPOCH_TASKS = 256


def enabled() -> bool:
    """The driver's switch, read when a ``StageTask`` is made."""
    return os.environ.get(ENV, '1') != '0'


def doubling() -> bool:
    """The driver's choice of epoch lengths, read when a ``StageTask`` is
    made: True, 1, 2, 4, ... tasks; False, 1 then
    ``MAX_EPOCH_TASKS``."""
    return os.environ.get(DOUBLING_ENV, '0') == '1'


def forked_by_pyspark_daemon() -> bool:
    """Whether this process is a Python worker forked by PySpark's daemon
    (``python -m pyspark.daemon``), which collects garbage after every task."""
    spec = getattr(sys.modules.get('__main__'), '__spec__', None)
    return getattr(spec, 'name', None) == 'pyspark.daemon'


class Epochs:
    """One process's freezing (see the module doc)."""

    def __init__(self, active: Optional[bool] = None):
        # None: decided at the first task (whether PySpark's daemon forked us).
        self.active = active
        self.frozen = False
        self.tasks = 0  # tasks finished in this epoch
        self.length = 1  # tasks in this epoch
        self.doubling = False  # the schedule of the last task started

    def task_started(self, freeze: bool, doubling: bool = False) -> None:
        self.doubling = doubling
        if self.active is None:
            self.active = forked_by_pyspark_daemon()
        if not self.active:
            return
        if not freeze:
            if self.frozen:  # a task with the switch off: as if never frozen
                gc.unfreeze()
                self.frozen, self.tasks, self.length = False, 0, 1
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
            self.length = (min(2 * self.length, MAX_EPOCH_TASKS)
                           if self.doubling else MAX_EPOCH_TASKS)


EPOCHS = Epochs()
