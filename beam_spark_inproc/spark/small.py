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
* ``map_stage`` of ``Local`` input within ``max_rows``/``max_bytes`` runs the
  stage's task here, after the same pickling round trip Spark gives it (a DoFn
  that does not pickle fails as on Spark), in the same worker code
  (``StageTask``, Beam's ``BundleProcessor``; unlike debug mode the functions
  are not rebound to the driver's modules). When its output grows past the
  limits the run is dropped (its bundles are retried on Spark, as a failed task
  attempt would be) and the stage runs on Spark: one Spark partition per
  ``Local`` partition, shuffled input shuffled again by Spark;
* ``collect`` of ``Local`` data runs no Spark job; the first Spark job enters
  the runner's runtime SQL settings on the session (``session.runtime_settings``)
  and gets the job's description, so a run that stays in the driver makes no
  call to Spark at all.

What stays in the driver runs on one core: a stage with tiny input but heavy
work per element (a slow call per element) runs serially here. Off with
``--spark_small_data_kb=0``. Tasks carrying a side input shipped as a file
(``--spark_inline_side_input_mb``) always run on Spark.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional

import pyarrow as pa

from beam_spark_inproc.debug.engine import LocalEngine
from beam_spark_inproc.worker.rows import SCHEMA
from beam_spark_inproc.worker.shipped import ShippedFile

# Default limits: up to this many rows (an element each, except GroupByKey
# rows, packed per key) and bytes a stage's input and output may hold to run in
# the driver (``--spark_small_data_kb``).
MAX_ROWS = 5000
MAX_BYTES = 64 << 10


@dataclasses.dataclass
class Local:
    """Rows held by the driver: partitions of Arrow batches (``worker.rows``).
    ``shuffled``: the shuffle that made them (Spark redoes it on hand-over)."""
    partitions: list
    shuffled: Optional[str] = None

    @property
    def rows(self) -> int:
        return sum(b.num_rows for part in self.partitions for b in part)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for part in self.partitions for b in part)


class _TooBig(Exception):
    pass


class SmallDataEngine:
    """The engine contract over ``Local`` data and a ``SparkEngine``."""

    def __init__(self, session, make_spark_engine, max_rows: int = MAX_ROWS,
                 max_bytes: int = MAX_BYTES, settings=contextlib.nullcontext):
        # The SparkEngine (it ships the driver's code) is made on first use.
        self._make_spark_engine = make_spark_engine
        self._spark_engine = None
        # Entered before the first Spark job, left by ``release``: a run that
        # stays in the driver changes nothing on the session.
        self._settings = settings
        self._exit = contextlib.ExitStack()
        self._jobs: list[tuple[str, str]] = []
        self._session = session
        self._local = LocalEngine(1)
        self._max_rows = max_rows
        self._max_bytes = max_bytes
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
        """Spark's DataFrame of ``data`` (a DataFrame as it is)."""
        if not isinstance(data, Local):
            return data
        parts = [part for part in data.partitions if part]
        if not parts:
            return self._spark.union([])
        frames = [self._session.createDataFrame(
            pa.Table.from_batches(part, schema=SCHEMA), self._spark._parts.schema
        ).coalesce(1) for part in parts]
        frame = self._spark.union(frames)
        if data.shuffled is not None:
            frame = self._spark.shuffle(frame, data.shuffled)
        return frame

    # -- the engine contract -------------------------------------------------------
    def impulse(self):
        return Local(self._local.impulse())

    def union(self, datas: list):
        if all(isinstance(d, Local) and d.shuffled is None for d in datas):
            return Local(self._local.union([d.partitions for d in datas]))
        return self._spark.union([self.to_spark(d) for d in datas])

    def select(self, data, tag: int, new_tag: int, control: bool):
        if isinstance(data, Local):
            return Local(self._local.select(data.partitions, tag, new_tag, control))
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
        if (isinstance(data, Local) and self._fits(data.rows, data.nbytes)
                and not _ships_files(task)):
            try:
                result = self._run_here(data, task)
            except _TooBig:
                pass
            else:
                self.stages_in_driver += 1
                return result
        self.stages_on_spark += 1
        return self._spark.map_stage(self.to_spark(data), task)

    def collect(self, data, elements: bool = True):
        if isinstance(data, Local):
            return self._local.collect(data.partitions, elements)
        if self._settings is not None:
            self._exit.enter_context(self._settings())
            self._settings = None
        # Only a job that reaches Spark carries a description there.
        with contextlib.ExitStack() as jobs:
            for tag, description in self._jobs:
                jobs.enter_context(self._spark.job(tag, description))
            return self._spark.collect(data, elements)

    def side_input(self, entries: tuple):
        if sum(len(k) + len(v) for k, v in entries) <= self._max_bytes:
            return entries  # inline, as SparkEngine keeps anything this small
        return self._spark.side_input(entries)

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
        bytes Spark would ship; ``_TooBig`` once the output passes the limits."""
        from pyspark.serializers import CloudPickleSerializer
        serializer = CloudPickleSerializer()
        shipped = serializer.dumps(task)
        rows = nbytes = 0
        partitions = []
        for partition in data.partitions:
            out = []
            outputs = serializer.loads(shipped)(iter(partition))
            try:
                for batch in outputs:
                    rows += batch.num_rows
                    nbytes += batch.nbytes
                    if not self._fits(rows, nbytes):
                        raise _TooBig()
                    out.append(batch)
            finally:
                close = getattr(outputs, 'close', None)
                if close is not None:
                    close()  # a dropped run: its bundle stops here
            partitions.append(out)
        return Local(partitions)


def _ships_files(task) -> bool:
    return any(isinstance(part, ShippedFile)
               for part in getattr(task, 'side_input_state', ()))

