"""Small data in the driver: tiny stages run here, the rest on Spark.

A Spark job costs about 0.3-0.6 s however little it moves (scheduling each
stage and task, a Python worker unpickling the task, Arrow in and out of the
JVM): a 10-element pipeline (Create, Map, GroupByKey, Map, Count) spent 1.2 of
its 1.7 s in two such jobs, and a pipeline test suite pays that per test.
``SmallDataEngine`` wraps ``SparkEngine`` and keeps data the driver holds
(``Local``: partitions of Arrow batches, as the debug engine's) as long as it
is tiny, running stages on it here; anything else is Spark's:

* ``impulse()`` is ``Local``; ``select``, ``union``, ``cache`` and the shuffles
  of ``Local`` data stay ``Local`` (a shuffle into one partition: small input,
  one bundle, no empty tasks), other data goes to ``SparkEngine``;
* ``map_stage`` of ``Local`` input within ``max_rows``/``max_bytes`` (not a
  splittable DoFn's stage: a read has little input and much work) runs the
  stage's task here, after the same pickling round trip Spark gives it (a DoFn
  that does not pickle fails as on Spark), in the same worker code
  (``StageTask``, Beam's ``BundleProcessor``; unlike debug mode the functions
  are not rebound to the driver's modules). When its output grows past the
  limits, or it runs longer than ``max_seconds`` (0.3 s), or its bundle has
  moved more than ``max_elements`` elements between its operations (100,000:
  a few seeds a FlatMap expands into millions are handed over after some
  milliseconds rather than after 0.3 s of work that is thrown away; a watchdog
  polls the operations' element counters and raises in the bundle's thread),
  the run is dropped (its bundles are retried on
  Spark, as a failed task attempt's would be) and the stage runs on Spark, its
  input spread over the run's parallelism (``to_spark``: input of a key
  shuffle shuffled again by Spark); so do all later stages reading its output;
  later stages whose input the driver holds still run here until
  ``MAX_HANDOVERS`` stages were handed over, then the rest of the run is
  Spark's;
* a stage whose outputs are read only as side inputs (``StageTask.collected``),
  which come to the driver whole in any case, is limited by time only
  (``COLLECTED_SECONDS``, 0.6 s): whatever its output's size or element count,
  a Spark job and the collect would cost more than the work in the driver;
* ``collect`` of ``Local`` data runs no Spark job; the first Spark job enters
  the runner's runtime SQL settings on the session (``session.runtime_settings``)
  and gets the job's description, so a run that stays in the driver makes no
  call to Spark at all.

What stays in the driver runs on one core, for at most ``max_seconds`` a
stage: the price of a stage handed over late is that much driver time. Off with
``--spark_small_data_kb=0``. Tasks carrying a side input shipped as a file
(``--spark_inline_side_input_mb``) always run on Spark.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import queue
import threading
import time
from typing import Optional

import pyarrow as pa

from beam_spark_inproc.debug.engine import LocalEngine
from beam_spark_inproc.debug.engine import rows_batch
from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.worker import stage_task
from beam_spark_inproc.worker.rows import SCHEMA
from beam_spark_inproc.worker.shipped import ShippedFile

# Default limits: up to this many rows (an element each, except GroupByKey
# rows, packed per key) and bytes a stage's input and output may hold to run in
# the driver (``--spark_small_data_kb``).
MAX_ROWS = 5000
MAX_BYTES = 64 << 10
# ... and the seconds a stage may run in the driver: tiny input can still mean
# heavy work (ten seeds a FlatMap turns into millions of elements, combined
# before they leave the stage).
MAX_SECONDS = 0.3
# ... and the elements a stage's bundle may move between its operations (the
# sum of Beam's element counters of every operation's outputs): beyond it the
# data is not small, however long the work takes (P1 at 4M: its 32 seeds'
# stage had moved ~400k of them when the 0.3 s ran out).
MAX_ELEMENTS = 100_000
# A stage handed over to Spark leaves later stages whose input the driver
# still holds (a Create, an Impulse: often the tiny tail of a pipeline, e.g. a
# write's last step reading a side input) running here, until this many stages
# have been handed over: then the rest of the run is Spark's (each hand-over
# cost up to ``MAX_SECONDS`` of driver time, ~0.1 s when handed over by its
# element count). With 1, the rest of the run was Spark's from the first
# hand-over: P1 and P3g then ran their 1-element last stage as a Spark job of
# its own (0.15-0.3 s); P4 hands over two stages (its side input's and its main
# input's seeds) before that last stage.
MAX_HANDOVERS = 3
# A stage whose output is only read as side inputs (``StageTask.collected``:
# collected to the driver whole anyway) runs here whatever its output's size
# and element count, for at most this many seconds: on Spark it would cost a
# job (~0.3-0.5 s on this machine) and the collect, for half the work per core
# (P4's side input, 100,000 entries made from 10 seeds: handed over by its
# element count after 0.15 s in the driver, it then took a Spark job of ~0.5 s
# and the collect). 0: such a stage has the limits of any other (an A/B
# switch: ``tests/benchmarks/run.py``'s ``inproc_sidespark`` engine).
COLLECTED_SECONDS = 0.6
# How often the watchdog looks at the clock and the counters.
_POLL_SECONDS = 0.01
# After stopping a bundle, how long to wait for its thread before unblocking.
_UNBLOCK_SECONDS = 2.0


@dataclasses.dataclass
class Local:
    """Rows held by the driver: partitions of Arrow batches (``worker.rows``).
    ``shuffled``: the shuffle that made them (Spark redoes it on hand-over);
    ``kept``: Spark gets these partitions as they are (a splittable stage's
    restrictions cut into one part per core, ``spread_restrictions``)."""
    partitions: list
    shuffled: Optional[str] = None
    kept: bool = False

    @property
    def rows(self) -> int:
        return sum(b.num_rows for part in self.partitions for b in part)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for part in self.partitions for b in part)


class _TooBig(BaseException):
    """Raised where a run in the driver passes its limits (a BaseException, so
    no ``except Exception`` of a DoFn or of Beam swallows it)."""


class SmallDataEngine:
    """The engine contract over ``Local`` data and a ``SparkEngine``."""

    def __init__(self, session, make_spark_engine, parallelism: int = 1,
                 max_rows: int = MAX_ROWS, max_bytes: int = MAX_BYTES,
                 settings=contextlib.nullcontext,
                 max_seconds: Optional[float] = None,
                 max_elements: Optional[int] = None):
        # The SparkEngine (it ships the driver's code) is made on first use.
        self._make_spark_engine = make_spark_engine
        self._spark_engine = None
        # Entered before the first Spark job, left by ``release``: a run that
        # stays in the driver changes nothing on the session.
        self._settings = settings
        self._exit = contextlib.ExitStack()
        self._jobs: list[tuple[str, str]] = []
        self._session = session
        self._parallelism = parallelism
        self._schema = None
        self._local = LocalEngine(1)
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        # None: the module's limits as they are when the engine is made.
        self._max_seconds = MAX_SECONDS if max_seconds is None else max_seconds
        self._max_elements = MAX_ELEMENTS if max_elements is None else max_elements
        self._handovers = 0  # runs here that passed the limits
        self.stages_in_driver = 0
        self.stages_on_spark = 0

    @property
    def _spark(self):
        if self._spark_engine is None:
            self._spark_engine = self._make_spark_engine()
        return self._spark_engine

    # -- hand-over -------------------------------------------------------------
    def _fits(self, rows: int, nbytes: int) -> bool:
        return rows <= self._max_rows and nbytes <= self._max_bytes

    def to_spark(self, data):
        """Spark's DataFrame of ``data`` (a DataFrame as it is).

        Rows a key shuffle made (GROUP, KEYED, BUCKETED) are shuffled again by
        Spark, which puts each key where its later steps expect it. Any other
        rows (a stage's output, a round-robin shuffle's) are spread over the
        run's ``parallelism`` as they are: contiguous slices, one partition
        each, so a stage handed over runs on every core (a few seeds a FlatMap
        expands: in one partition the whole stage was one task)."""
        if not isinstance(data, Local):
            return data
        batches = [b for part in data.partitions for b in part if b.num_rows]
        if not batches:
            return self._spark.union([])
        if data.kept:
            return self._kept_to_spark(data)
        table = pa.Table.from_batches(batches, schema=SCHEMA)
        if data.shuffled not in (None, e.SPREAD):
            frame = self._session.createDataFrame(
                table, self._spark_schema()).coalesce(1)
            return self._spark.shuffle(frame, data.shuffled)
        # Equal slices of rows, at most one per core: Spark cuts a DataFrame
        # made from driver rows into slices of equal row count (see
        # ``_kept_to_spark``); ``coalesce`` caps them at ``ways``.
        table = table.combine_chunks()
        ways = max(1, min(self._parallelism, table.num_rows))
        step = -(-table.num_rows // ways)
        table = pa.Table.from_batches(
            [batch for start in range(0, table.num_rows, step)
             for batch in table.slice(start, step).to_batches()], schema=SCHEMA)
        return self._session.createDataFrame(
            table, self._spark_schema()).coalesce(ways)

    def _kept_to_spark(self, data: Local):
        """A splittable stage's parts (``spread_restrictions``), one partition
        each. Spark slices a DataFrame made from driver rows by row count
        (``createDataFrame`` of Arrow data: its local relation is cut into
        equal slices, not a partition per batch), so every part is padded to
        the same count with rows of no element (tag 0, empty data: the stage's
        input operation decodes nothing from them); the parts then fall one per
        slice where the session's default parallelism is the run's (a local
        master). Elsewhere the cut still holds, only its balance may not."""
        parts = [part for part in data.partitions if any(b.num_rows for b in part)]
        counts = [sum(b.num_rows for b in part) for part in parts]
        batches = []
        for part, count in zip(parts, counts):
            batches.extend(b for b in part if b.num_rows)
            if count < max(counts):
                batches.extend(rows_batch([(0, None, b'')] * (max(counts) - count)))
        return self._session.createDataFrame(
            pa.Table.from_batches(batches, schema=SCHEMA),
            self._spark_schema()).coalesce(len(parts))

    def _spark_schema(self):
        if self._schema is None:
            from pyspark.sql.pandas.types import from_arrow_schema
            self._schema = from_arrow_schema(SCHEMA)
        return self._schema

    # -- the engine contract -------------------------------------------------------
    def impulse(self):
        return Local(self._local.impulse())

    def union(self, datas: list):
        if all(isinstance(d, Local) and d.shuffled is None for d in datas):
            return Local(self._local.union([d.partitions for d in datas]))
        return self._spark.union([self.to_spark(d) for d in datas])

    def select(self, data, tag: int, new_tag: int, control: bool):
        if isinstance(data, Local):  # rows stay where a shuffle put them
            return Local(self._local.select(data.partitions, tag, new_tag, control),
                         data.shuffled)
        return self._spark.select(data, tag, new_tag, control)

    def shuffle(self, data, how: str):
        if isinstance(data, Local) and self._fits(data.rows, data.nbytes):
            return Local(self._local.shuffle(data.partitions, how), how)
        return self._spark.shuffle(self.to_spark(data), how)

    def cache(self, data):
        if isinstance(data, Local):
            return data
        return self._spark.cache(data)

    def map_stage(self, data, task):
        if (self._handovers < MAX_HANDOVERS and isinstance(data, Local)
                and self._fits(data.rows, data.nbytes) and _may_run_here(task)):
            try:
                result = self._run_here(data, task)
            except _TooBig:
                self._handovers += 1
            else:
                self.stages_in_driver += 1
                return result
        self.stages_on_spark += 1
        return self._spark.map_stage(self.to_spark(data), task)

    def spread_restrictions(self, data, stage, ways: int):
        """Rows the driver holds cut into one part per core
        (``worker.initial_split``): (data, balanced), or None."""
        if not isinstance(data, Local):
            return None
        spread = self._local.spread_restrictions(data.partitions, stage, ways)
        if spread is None:
            return None
        partitions, balanced = spread
        return Local(partitions, kept=True), balanced

    def collect(self, data, elements: bool = True, started=None):
        if isinstance(data, Local):
            return self._local.collect(data.partitions, elements, started)
        if self._settings is not None:
            self._exit.enter_context(self._settings())
            self._settings = None
        # Only a job that reaches Spark carries a description there.
        with contextlib.ExitStack() as jobs:
            for tag, description in self._jobs:
                jobs.enter_context(self._spark.job(tag, description))
            return self._spark.collect(data, elements, started)

    def side_input(self, entries: tuple, folder: str | None = None):
        if sum(len(k) + len(v) for k, v in entries) <= self._max_bytes:
            return entries  # inline, as SparkEngine keeps anything this small
        return self._spark.side_input(entries, folder)

    @contextlib.contextmanager
    def job(self, tag: str, description: str):
        self._jobs.append((tag, description))
        try:
            yield
        finally:
            self._jobs.pop()

    def release(self) -> None:
        try:
            if self._spark_engine is not None:
                self._spark_engine.release()
        finally:
            self._exit.close()

    # -- running a stage here ----------------------------------------------------
    def _run_here(self, data: Local, task) -> Local:
        """Each partition through the task Spark would run, unpickled from the
        bytes Spark would ship; ``_TooBig`` once the output passes the limits
        or the run takes longer than ``max_seconds`` (a ``collected`` task's:
        after ``COLLECTED_SECONDS``, whatever its output)."""
        from pyspark.serializers import CloudPickleSerializer
        serializer = CloudPickleSerializer()
        shipped = serializer.dumps(task)
        collected = getattr(task, 'collected', False) and COLLECTED_SECONDS > 0
        if collected:
            watchdog = _Watchdog(COLLECTED_SECONDS, 1 << 62)
        else:
            watchdog = _Watchdog(self._max_seconds, self._max_elements)
        stage_task.watch.callback = watchdog.watch
        _BEAM_LOGGER.addFilter(_not_too_big)
        rows = nbytes = 0
        partitions = []
        try:
            for partition in data.partitions:
                out = []
                outputs = serializer.loads(shipped)(iter(partition))
                try:
                    for batch in outputs:
                        rows += batch.num_rows
                        nbytes += batch.nbytes
                        if not collected and not self._fits(rows, nbytes):
                            raise _TooBig()
                        out.append(batch)
                finally:
                    close = getattr(outputs, 'close', None)
                    if close is not None:
                        close()  # a dropped run: its bundle stops here
                partitions.append(out)
        except BaseException as error:
            if watchdog.expired or isinstance(error, _TooBig):
                raise _TooBig() from None
            raise
        finally:
            stage_task.watch.callback = None
            watchdog.stop()
            _BEAM_LOGGER.removeFilter(_not_too_big)
        return Local(partitions)


class _Watchdog:
    """Stops a bundle running in the driver past its time or its elements:
    raises ``_TooBig`` in its helper thread (at its next Python instruction);
    should that thread end without a word, unblocks the consumer through the
    output queue."""

    def __init__(self, seconds: float, max_elements: int = MAX_ELEMENTS):
        self._lock = threading.Lock()
        # (helper thread, output queue, BundleProcessor, its element count then)
        self._running: list = []
        self._done = False
        self.expired = False
        self.abandoned = False
        self._deadline = time.monotonic() + seconds
        self._max_elements = max_elements
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._poll, name='beam-small-data-watchdog', daemon=True)
        self._thread.start()

    def watch(self, thread, out, processor=None) -> '_Watched':
        """Watches ``thread`` (not started yet) until it calls ``leave`` on
        what is returned."""
        entry = (thread, out, processor, _elements(processor))
        with self._lock:
            self._running[:] = [entry]
        return _Watched(self, entry)

    def _leave(self, entry) -> None:
        with self._lock:
            if self._running and self._running[0] is entry:
                self._running.clear()

    def _poll(self) -> None:
        while not self._stopped.wait(_POLL_SECONDS):
            with self._lock:
                if not self._signallable():
                    continue
                _, _, processor, before = self._running[0]
                if (time.monotonic() < self._deadline and
                        _elements(processor) - before <= self._max_elements):
                    continue
            if self._expire():
                return

    def _signallable(self) -> bool:
        """Under the lock: a helper thread has started and not left, so its
        ident is its own (an ended thread's ident goes to the next thread
        started; but see below for a thread being started)."""
        return (not self._done and bool(self._running) and
                self._running[0][0].is_alive())

    # CPython (3.11) gives a thread being started the ident of the thread
    # starting it until the new thread runs, and ``PyThreadState_SetAsyncExc``
    # signals the first thread state with that ident: a signal sent while the
    # helper starts a thread (Beam's state sampler's, at each bundle's start)
    # can end that new thread before it says it has started, and the helper
    # then waits for it for ever. Such a helper is given up (``abandoned``)
    # once it has not ended ``_UNBLOCK_SECONDS`` after the signal: its
    # consumer stops waiting for it (``stage_task``), the stage goes to Spark.

    def _expire(self) -> bool:
        with self._lock:
            if not self._signallable():
                return False
            self.expired = True
            thread, out = self._running[0][:2]
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread.ident), ctypes.py_object(_TooBig))
        thread.join(_UNBLOCK_SECONDS)
        with self._lock:
            self.abandoned = thread.is_alive()
            if self.abandoned:
                _LOGGER.info('A bundle in the driver did not stop when its '
                             'stage went to Spark (thread %s): left behind.',
                             thread.name)
            if not self._done:
                try:
                    out.put_nowait(_TooBig())
                except queue.Full:
                    pass
        return True

    def stop(self) -> None:
        with self._lock:
            self._done = True
        self._stopped.set()


class _Watched:
    """A helper thread under a ``_Watchdog``: ``leave`` is the thread's last
    call; ``abandoned`` tells its consumer not to wait for it any more."""

    def __init__(self, watchdog: _Watchdog, entry: tuple):
        self._watchdog = watchdog
        self._entry = entry

    def leave(self) -> None:
        self._watchdog._leave(self._entry)

    @property
    def abandoned(self) -> bool:
        return self._watchdog.abandoned


def _elements(processor) -> int:
    """The elements a BundleProcessor's operations have output so far (Beam's
    element counters, as its progress reports read them)."""
    if processor is None:
        return 0
    total = 0
    for op in list(processor.ops.values()):
        for receiver in getattr(op, 'receivers', ()):
            total += receiver.opcounter.element_counter.value()
    return total


# Beam's DoFnRunner logs every exception leaving a DoFn, ``_TooBig`` too: a
# run dropped for Spark is not an error to show.
_LOGGER = logging.getLogger(__name__)
_BEAM_LOGGER = logging.getLogger('apache_beam.runners.common')


def _not_too_big(record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], _TooBig))


def _may_run_here(task) -> bool:
    """Not a splittable DoFn's stage (a read: little input, much work), nor a
    task carrying a side input shipped as a file."""
    stage = getattr(task, 'stage', None)
    if stage is not None and (stage.input_mode == p.SPLITTABLE
                              or stage.split_input):
        return False
    return not any(isinstance(part, ShippedFile)
                   for part in getattr(task, 'side_input_state', ()))

