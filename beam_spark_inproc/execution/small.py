"""Small data in the driver: tiny stages run here, the rest on Spark.

A Spark job costs about 0.3-0.6 s however little it moves (scheduling each
stage and task, a Python worker unpickling the task, Arrow in and out of the
JVM): a 10-element pipeline (Create, Map, GroupByKey, Map, Count) spent 1.2 of
its 1.7 s in two such jobs, and a pipeline test suite pays that per test.
``SmallDataEngine`` is an engine of its own (``execution.engine``'s contract)
that keeps data the driver holds (``Local``: partitions of Arrow batches,
moved by ``execution.local`` as the debug engine's are) as long as it is tiny,
running stages on it here; anything else it hands over to Spark through a
``HandOver`` (``spark.hand_over.SparkHandOver``: the ``SparkEngine``, rows the
driver holds as a DataFrame, a task's pickling round trip), so this module
knows no backend:

* ``impulse()`` is ``Local``; ``select``, ``union``, ``cache`` and the shuffles
  of ``Local`` data stay ``Local`` (a shuffle into one partition: small input,
  one bundle, no empty tasks), other data goes to ``SparkEngine``;
* ``map_stage`` of ``Local`` input within ``max_rows``/``max_bytes`` (not a
  splittable DoFn's stage: a read has little input and much work) runs the
  stage's task here, after the same pickling round trip Spark gives it (a DoFn
  that does not pickle fails as on Spark), in the same worker code
  (``StageTask``, Beam's ``BundleProcessor``; unlike debug mode the functions
  are not rebound to the driver's modules). The limits are checked
  cooperatively (``_Limits``): the driver feeds the bundle its input in pieces
  of 1, 2, 4, ... rows and, before each piece, looks at the elements the
  bundle's operations have moved (Beam's element counters) and at its pace;
  the consumer of its output checks its size at each output batch. The data
  hands a stage over: its output grows past the limits, or its bundle has
  moved more than ``max_elements`` elements between its operations (100,000:
  a few seeds a FlatMap expands into millions are handed over after the first
  seed). So does its cost, never the clock alone (``spark_sooner``): once the
  driver has spent on the stage what Spark costs now (``HandOver.cost``: a
  session still to start, a session's first job, a warm session's job, each
  scaled by the machine's load) and its pace over the input fed so far says
  Spark would finish the whole stage sooner than the driver its rest. A tiny
  stage on a loaded machine thus stays here however slowly it runs (the
  same load slows Spark's jobs), and one of many slow elements goes to Spark
  after a fraction of a second. Past a limit the bundle ends where it is, by
  an exception raised from its own input or output call (never one injected
  into a running thread), the run is dropped and the stage runs on Spark, its
  input spread over the run's parallelism (``to_spark``: input of a key
  shuffle shuffled again by Spark); so do all later stages reading its
  output; later stages whose input the driver holds still run here until
  ``MAX_HANDOVERS`` stages were handed over, then the rest of the run is
  Spark's. An element already being processed is
  never interrupted: one element that works long without output (a single seed
  expanded and combined inside its stage) runs to its end here first. A dropped
  run is to the stage what a failed Spark task attempt is: its outputs, state
  and committed metrics are discarded and the work is redone, so a DoFn's
  external side effects (a call to a service, a file written by hand) may
  happen once in the driver and again on Spark, as they may on a task retry;
* a stage whose outputs are read only as side inputs (``StageTask.collected``),
  which come to the driver whole in any case, is limited by its cost only,
  Spark's counting the collect (``COLLECTED_SECONDS``): whatever its output's
  size or element count, a Spark job and the collect would cost more than the
  work in the driver;
* ``collect`` of ``Local`` data runs no Spark job; the first Spark job enters
  the runner's runtime SQL settings on the session (``session.runtime_settings``)
  and gets the job's description, so a run that stays in the driver makes no
  call to Spark at all.

* **while Spark starts** (``spark_start``: the session the runner makes,
  ``session.LazySession``, not yet ready): a stage begun then is not handed
  over by the limits; passing them (its cost counting the session's start)
  starts the session in the background and the stage goes on here, its
  output held up to ``COLD_MAX_BYTES``, so that a new process's first run
  works while the JVM starts instead of waiting for it. A splittable stage
  may run here then, its restrictions cut into ``COLD_PIECES`` equal pieces
  (``execution.initial_split``) fed one at a time. Once the session is
  ready, a stage whose input rows are independent elements or restrictions
  (``_element_wise``) is fed no more where Spark would finish the rest
  sooner (``spark_sooner``, the new session's first job counted): its bundle
  ends as usual, its output so far is kept and the input not fed runs on
  Spark, as further bundles of the same stage; a stage reading rows grouped
  or sorted by key (which cannot be cut between two inputs) ends here.

What stays in the driver runs on one core; a stage handed over by its pace
has cost the driver at least what Spark costs now (more where its pace said
so only later, plus the element under way), one handed over by its data
usually less. Off with ``--spark_small_data_kb=0``. Tasks carrying a side
input shipped as a file (``--spark_inline_side_input_mb``) always run on
Spark.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from typing import Any
from typing import Iterator
from typing import Optional
from typing import Protocol

import pyarrow as pa

from beam_spark_inproc.execution.local import LocalPartitions
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.worker import stage_task
from beam_spark_inproc.worker.shipped import ShippedFile

# Default limits: up to this many rows (an element each, except GroupByKey
# rows, packed per key) and bytes a stage's input and output may hold to run in
# the driver (``--spark_small_data_kb``).
MAX_ROWS = 5000
MAX_BYTES = 64 << 10
# ... and the elements a stage's bundle may move between its operations (the
# sum of Beam's element counters of every operation's outputs): beyond it the
# data is not small, however long the work takes (P1 at 4M: its 32 seeds'
# stage had moved ~400k of them after 0.3 s).
MAX_ELEMENTS = 100_000
# A stage handed over to Spark leaves later stages whose input the driver
# still holds (a Create, an Impulse: often the tiny tail of a pipeline, e.g. a
# write's last step reading a side input) running here, until this many stages
# have been handed over: then the rest of the run is Spark's (each hand-over
# cost driver time: about what a Spark job costs, ~0.1 s when handed over by
# its element count). With 1, the rest of the run was Spark's from the first
# hand-over: P1 and P3g then ran their 1-element last stage as a Spark job of
# its own (0.15-0.3 s); P4 hands over two stages (its side input's and its main
# input's seeds) before that last stage.
MAX_HANDOVERS = 3
# A stage whose output is only read as side inputs (``StageTask.collected``:
# collected to the driver whole anyway) runs here whatever its output's size
# and element count, and Spark's cost for it counts this many seconds more
# than a job's: on Spark it would also cost the collect of its output (P4's
# side input, 100,000 entries made from 10 seeds: handed over by its element
# count after 0.15 s in the driver, it then took a Spark job of ~0.5 s and the
# collect). 0: such a stage has the limits of any other (an A/B switch:
# ``tests/benchmarks/run.py``'s ``inproc_sidespark`` engine).
COLLECTED_SECONDS = 0.3
# The largest piece of input rows fed to a bundle in the driver between two
# checks of its limits.
_PIECE_ROWS = 256
# While Spark starts (``Cold``): the bytes a stage's output (and a shuffle's
# input) may hold in the driver, and the pieces a splittable stage's
# restrictions are cut into, fed one at a time, so that what is left when the
# session is ready goes to Spark in equal shares.
COLD_MAX_BYTES = 256 << 20
COLD_PIECES = 256


@dataclasses.dataclass
class Local:
    """Rows held by the driver: partitions of Arrow batches (``protocol.rows``).
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


class HandOver(Protocol):
    """What the small-data engine asks of the backend that runs the rest
    (``spark.hand_over.SparkHandOver``)."""

    @property
    def engine(self) -> Any:
        """The backend's engine (made on first use)."""

    def data(self, local: Local) -> Any:
        """The backend's data of rows the driver holds (``to_spark``)."""

    def dumps(self, task: Any) -> bytes:
        """A task as the backend would ship it to its workers."""

    def loads(self, shipped: bytes) -> Any:
        """A task from ``dumps``'s bytes, as a worker would unpickle it."""

    def release(self) -> None:
        """Releases the backend's engine if it was made."""

    @property
    def parallelism(self) -> int:
        """The cores a stage handed over runs on at once."""

    def cost(self) -> float:
        """The seconds a stage handed over now would pay before its own work
        (a session's start, its first job, a job), on this machine as loaded
        now."""


class _TooBig(BaseException):
    """Raised where a run in the driver passes its limits (a BaseException, so
    no ``except Exception`` of a DoFn or of Beam swallows it)."""


class SmallDataEngine:
    """The engine contract over ``Local`` data and a ``SparkEngine``."""

    def __init__(
        self,
        hand_over: HandOver,
        max_rows: int = MAX_ROWS,
        max_bytes: int = MAX_BYTES,
        settings=contextlib.nullcontext,
        max_elements: Optional[int] = None,
        spark_start=None,
    ):
        # Spark's side (``spark.hand_over``): its engine is made on first use.
        self._hand_over = hand_over
        # Entered before the first Spark job, left by ``release``: a run that
        # stays in the driver changes nothing on the session.
        self._settings = settings
        self._exit = contextlib.ExitStack()
        self._jobs: list[tuple[str, str]] = []
        self._local = LocalPartitions(1)
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        # None: the module's limit as it is when the engine is made.
        self._max_elements = MAX_ELEMENTS if max_elements is None else max_elements
        self._handovers = 0  # runs here that passed the limits
        # The session still to be made (``session.LazySession``: ``ready``,
        # ``start``), or None: the session is there.
        self._spark_start = spark_start
        self.stages_in_driver = 0
        self.stages_on_spark = 0
        self.stages_split = 0  # begun here, the rest of their input on Spark

    @property
    def _spark(self):
        return self._hand_over.engine

    # -- hand-over -------------------------------------------------------------
    def _fits(self, rows: int, nbytes: int) -> bool:
        return rows <= self._max_rows and nbytes <= self._max_bytes

    def _cold(self) -> bool:
        """Whether Spark is not there yet (its session to be made or starting)."""
        return self._spark_start is not None and not self._spark_start.ready

    def to_spark(self, data):
        """The backend's data of ``data`` (``HandOver.data``; its own data
        as it is)."""
        if not isinstance(data, Local):
            return data
        return self._hand_over.data(data)

    # -- the engine contract -------------------------------------------------------
    def impulse(self):
        return Local(self._local.impulse())

    def union(self, datas: list):
        if all(isinstance(d, Local) and d.shuffled is None for d in datas):
            return Local(self._local.union([d.partitions for d in datas]))
        return self._spark.union([self.to_spark(d) for d in datas])

    def select(self, data, tag: int, new_tag: int, control: bool):
        if isinstance(data, Local):  # rows stay where a shuffle put them
            return Local(self._local.select(data.partitions, tag, new_tag, control), data.shuffled)
        return self._spark.select(data, tag, new_tag, control)

    def shuffle(self, data, how: str):
        if isinstance(data, Local) and (
            self._fits(data.rows, data.nbytes) or (self._cold() and data.nbytes <= COLD_MAX_BYTES)
        ):
            return Local(self._local.shuffle(data.partitions, how), how)
        return self._spark.shuffle(self.to_spark(data), how)

    def cache(self, data):
        if isinstance(data, Local):
            return data
        return self._spark.cache(data)

    def map_stage(self, data, task):
        cold = self._cold()
        if cold:
            here = (
                isinstance(data, Local)
                and data.nbytes <= COLD_MAX_BYTES
                and _may_run_here(task, cold=True)
            )
        else:
            here = (
                self._handovers < MAX_HANDOVERS
                and isinstance(data, Local)
                and self._fits(data.rows, data.nbytes)
                and _may_run_here(task)
            )
        if here:
            if cold and _splittable(task):
                data = self._pieces(data, task.stage)
            try:
                result, rest = self._run_here(data, task, cold)
            except _TooBig:
                self._handovers += 1
            else:
                self.stages_in_driver += 1
                if rest is None:
                    return result
                # Begun here while Spark started: the input not yet fed runs
                # there, as further bundles of the same stage.
                self._handovers += 1
                self.stages_split += 1
                return self._spark.union(
                    [self.to_spark(result), self._spark.map_stage(self.to_spark(rest), task)]
                )
        self.stages_on_spark += 1
        return self._spark.map_stage(self.to_spark(data), task)

    def _pieces(self, data: Local, stage) -> Local:
        """A splittable stage's restrictions cut into ``COLD_PIECES`` of equal
        size, in one partition (one bundle, fed a piece at a time)."""
        spread = self._local.spread_restrictions(
            [[b for part in data.partitions for b in part]], stage, COLD_PIECES
        )
        partitions = data.partitions if spread is None else spread[0]
        return Local([[b for part in partitions for b in part]])

    def spread_restrictions(self, data, stage, ways: int):
        """Rows the driver holds cut into one part per core
        (``execution.initial_split``): (data, balanced), or None."""
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
            self._hand_over.release()
        finally:
            self._exit.close()

    # -- running a stage here ----------------------------------------------------
    def _run_here(self, data: Local, task, cold: bool = False) -> tuple[Local, Optional[Local]]:
        """Each partition through the task Spark would run, unpickled from the
        bytes Spark would ship: (its output, None); ``_TooBig`` once the output
        passes the limits or the limits pass between two inputs (a
        ``collected`` task's: its cost only, whatever its output). Begun
        ``cold`` (Spark not there yet), the run goes on past the limits
        (starting the session in the background) while Spark starts, its
        output held up to ``COLD_MAX_BYTES``; a stage whose input
        rows are independent elements (``_element_wise``) then stops being fed
        once the session is ready and returns (its output so far, the input
        rows not fed)."""
        shipped = self._hand_over.dumps(task)
        collected = getattr(task, 'collected', False) and COLLECTED_SECONDS > 0
        hand_over = self._hand_over
        limits = _Limits(
            (lambda: hand_over.cost() + COLLECTED_SECONDS) if collected else hand_over.cost,
            hand_over.parallelism,
            1 << 62 if collected else self._max_elements,
            (lambda rows, nbytes: True) if collected else self._fits,
            spark_start=self._spark_start if cold else None,
            splits=cold and _element_wise(task),
            piece_rows=1 if _splittable(task) else _PIECE_ROWS,
            rows=sum(b.num_rows for part in data.partitions for b in part),
        )
        stage_task.started.callback = limits.started
        _BEAM_LOGGER.addFilter(_not_a_bundle_failure)
        rows = nbytes = 0
        partitions, rest = [], []
        try:
            for partition in data.partitions:
                if limits.remainder is not None:  # split: the rest is Spark's
                    rest.extend(partition)
                    continue
                out = []
                outputs = self._hand_over.loads(shipped)(limits.feed(partition))
                try:
                    for batch in outputs:
                        rows += batch.num_rows
                        nbytes += batch.nbytes
                        limits.check_output(rows, nbytes)
                        out.append(batch)
                finally:
                    close = getattr(outputs, 'close', None)
                    if close is not None:
                        close()  # a dropped run: its bundle stops here
                partitions.append(out)
                if limits.remainder is not None:
                    rest.extend(limits.remainder)
        except _TooBig:
            raise _TooBig() from None
        finally:
            stage_task.started.callback = None
            _BEAM_LOGGER.removeFilter(_not_a_bundle_failure)
        if limits.remainder is None or not any(b.num_rows for b in rest):
            return Local(partitions), None
        return Local(partitions), Local([rest])


def spark_sooner(
    spent: float, fed: int, rows: int, cost: float, parallelism: int, redo: bool = True
) -> bool:
    """Whether Spark would finish a stage sooner than the driver, at the
    driver's pace so far: ``spent`` seconds over ``fed`` of its ``rows``
    input rows; Spark first pays ``cost`` (``HandOver.cost``), then runs the
    rest of the input on ``parallelism`` cores at the driver's pace per row,
    and with ``redo`` the rows already fed again (a dropped run: its output
    is thrown away). Never before the driver has spent ``cost`` itself: the
    pace of a stage's first elements is no measure of its rest, and a stage
    that ends within what Spark costs never waits longer than Spark would
    have taken to start on it. Nothing fed yet, or all of it fed (the
    elements under way are never interrupted): no."""
    if spent <= cost or fed <= 0 or fed >= rows:
        return False
    rest = spent * (rows - fed) / fed
    return rest > cost + ((spent if redo else 0.0) + rest) / max(1, parallelism)


class _Limits:
    """A run in the driver's limits, checked cooperatively: by the bundle's
    own helper thread between its inputs (``feed``), and by the consumer at
    each output batch (``check_output``). Nothing interrupts a running
    element: a stage is handed over between two inputs (or when its output
    passes the limits), and an element already started ends first, in the
    driver.

    Two kinds of limits. The data's: the elements the bundle's operations
    moved (``max_elements``) and its output's rows and bytes (``fits``).
    Time's: ``spark_sooner``, the driver's pace so far against ``cost()``
    (what Spark costs now) and Spark's ``parallelism``.

    With ``spark_start`` (the run began before Spark was there), passing the
    limits starts the session in the background and the run goes on; once
    the session is ready a ``splits`` run stops being fed where Spark would
    finish its rest sooner (``remainder``: the input not fed, for Spark) and
    any other run ends here, its output bounded by ``COLD_MAX_BYTES``."""

    def __init__(
        self,
        cost,
        parallelism: int,
        max_elements: int,
        fits,
        *,
        spark_start=None,
        splits: bool = False,
        piece_rows: int = _PIECE_ROWS,
        rows: int = 0,
    ):
        self._cost = cost
        self._parallelism = parallelism
        # When the first bundle started (the run's time and pace count from
        # there): building its BundleProcessor (in a new process: importing
        # Beam's worker modules, unpickling the DoFns and their setup) is no
        # measure of the data's size.
        self._began: Optional[float] = None
        self._max_elements = max_elements
        self._fits = fits
        self._spark_start = spark_start
        self._splits = splits
        self._piece_rows = piece_rows
        self._stop = False  # the output is too big: feed no more
        self._processor = None
        self._before = 0
        self.remainder: Optional[list] = None  # set when a split run stops
        # The run's pace: rows fed since its first bundle started, of all.
        self._fed = 0
        self._rows = rows

    def started(self, processor) -> None:
        """A bundle's BundleProcessor, before its helper thread starts
        (``stage_task.started``): its elements are counted from here."""
        self._processor = processor
        self._before = _elements(processor)
        if self._began is None:
            self._began = time.monotonic()

    def slow(self) -> bool:
        """Whether Spark would finish the stage sooner (``spark_sooner``)."""
        if self._began is None:
            return False
        return spark_sooner(
            time.monotonic() - self._began,
            self._fed,
            self._rows,
            self._cost(),
            self._parallelism,
            redo=not self._splits,
        )

    def _too_many(self) -> bool:
        return (
            self._processor is not None
            and _elements(self._processor) - self._before > self._max_elements
        )

    def passed(self) -> bool:
        """Whether to feed no more (checked before each piece of input)."""
        if self._stop:
            return True
        if self._spark_start is None:
            return self._too_many() or self.slow()
        if not self._spark_start.ready:
            if self._too_many() or self.slow():
                self._spark_start.start()  # the work outgrew the driver
            return False
        # Ready since the run began: its rest goes where it ends sooner.
        return self._splits and self.slow()

    def check_output(self, rows: int, nbytes: int) -> None:
        """At each output batch: ``_TooBig`` past the limits (a split run:
        feed no more, its output so far is kept)."""
        if self._spark_start is not None:
            if nbytes <= COLD_MAX_BYTES:
                return
            self._spark_start.start()
        elif self._fits(rows, nbytes) and not self.slow():
            return
        if not self._splits:
            raise _TooBig()
        self._stop = True

    def feed(self, partition: list) -> Iterator[pa.RecordBatch]:
        """The partition's batches in pieces of 1, 2, 4, ... rows (at most
        ``piece_rows``), the limits checked before each: a few seeds that
        expand are caught after the first, and rows fed in bulk cost a check
        per few hundred. Runs in the bundle's helper thread, where
        ``_TooBig`` ends the bundle as any exception from its input would; a
        split run's input ends there instead (its bundle finishes as usual)."""
        size = 1
        for index, batch in enumerate(partition):
            start = 0
            while start < batch.num_rows:
                if self.passed():
                    if self._splits:
                        self.remainder = [batch.slice(start)] + list(partition[index + 1 :])
                        return
                    raise _TooBig()
                piece = batch.slice(start, size)
                start += piece.num_rows
                yield piece
                self._fed += piece.num_rows
                size = min(size * 2, self._piece_rows)


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


# Beam's DoFnRunner logs every exception leaving a DoFn, then raises it: the
# bundle fails and the runner raises the user's error with its traceback once.
# In a Spark worker that log stays in the failed attempt (its report is never
# committed); a bundle run here must not print it either.
_BEAM_LOGGER = logging.getLogger('apache_beam.runners.common')


def _not_a_bundle_failure(record: logging.LogRecord) -> bool:
    # The thread that logs it, which runs its logger's filters: records carry
    # no thread name when ``logging.logThreads`` is off.
    thread = threading.current_thread().name
    return not (record.exc_info and thread.startswith('beam-bundle-'))


def _may_run_here(task, cold: bool = False) -> bool:
    """Not a splittable DoFn's stage (a read: little input, much work) unless
    Spark is still starting (``cold``: its restrictions are then fed in
    pieces), nor a task carrying a side input shipped as a file."""
    stage = getattr(task, 'stage', None)
    if stage is not None and always_on_spark(stage) and not cold:
        return False
    return not any(isinstance(part, ShippedFile) for part in getattr(task, 'side_input_state', ()))


def _splittable(task) -> bool:
    stage = getattr(task, 'stage', None)
    return stage is not None and always_on_spark(stage)


def _element_wise(task) -> bool:
    """Whether the stage's input rows are independent elements (or
    restrictions), any subset of which is a bundle: not rows grouped or
    sorted by key."""
    stage = getattr(task, 'stage', None)
    return stage is not None and stage.input_mode in (p.PLAIN, p.SPLITTABLE)


def always_on_spark(stage: p.StagePlan) -> bool:
    """A stage this engine never runs in the driver: a splittable DoFn's (a
    read: little input, much work; its one element could not be stopped
    between inputs)."""
    return stage.input_mode == p.SPLITTABLE or bool(stage.split_input)
