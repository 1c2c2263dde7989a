"""Spark's side of small data: what the driver hands over, and how.

The small-data engine (``execution.small.SmallDataEngine``) runs tiny stages
in the driver and hands the rest to a backend through its ``HandOver``;
``SparkHandOver`` is Spark's: the ``SparkEngine`` (made on first use: it
ships the driver's code, and the SparkSession is asked for only when data
goes to Spark, ``session.LazySession.get``: a run that stays in the driver
starts no JVM), rows the driver holds as a DataFrame spread over the run's
parallelism (``data``), and the pickling round trip a task makes to Spark's
Python workers (PySpark's ``CloudPickleSerializer``), which a stage run in
the driver makes too: a DoFn that does not pickle fails as on Spark.

What a stage handed over now costs before its own work (``cost``, which the
small-data engine weighs against the driver's pace, ``small.spark_sooner``)
depends on the session's state: still to be made (``START_SECONDS``: a local
JVM and its context, the first job with its Python workers importing Beam),
made but no stage of the runner's run on it yet (``FIRST_JOB_SECONDS``: the
JVM's first queries of each kind, Python workers' first tasks), or warm
(``JOB_SECONDS``). The figures are this machine's when quiet
(docs/performance.md, "Cold start"); a loaded machine (``load_factor``: the
load average per core, at least 1) slows Spark's jobs as much as the driver,
so they scale with it: at load 12 on 2 cores a warm job took ~2 s here and a
new session's first one ~48 s.
"""

from __future__ import annotations

import os
from typing import Any
from typing import Callable
from typing import Optional

import pyarrow as pa

from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution.local import rows_batch
from beam_spark_inproc.execution.small import Local
from beam_spark_inproc.protocol.rows import SCHEMA
from beam_spark_inproc.spark.engine import ran_stages

# Seconds a stage handed over pays before its own work, on a quiet machine:
# no session yet (its start and first job: 4-8 s with the class archive,
# 11-20 s without), a session that ran no stage of the runner's (its first
# job: ~1 s of the JVM's and ~2 s of Python workers importing Beam), a warm
# session (a job's floor: 0.2-0.6 s).
START_SECONDS = 10.0
FIRST_JOB_SECONDS = 2.0
JOB_SECONDS = 0.3


def load_factor() -> float:
    """How much slower than on a quiet machine a job runs now: the load
    average of the last minute per core, at least 1 (1 where the system
    gives none)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1.0, load / max(1, cores))


class SparkHandOver:
    """``execution.small.HandOver`` on Spark: ``get_session`` gives the
    SparkSession, ``make_engine`` the ``SparkEngine``; ``start``: the
    ``session.LazySession`` ``get_session`` waits for, None where the
    session is there."""

    def __init__(
        self,
        get_session: Callable[[], Any],
        make_engine: Callable[[], Any],
        parallelism: int = 1,
        start: Optional[Any] = None,
    ):
        self._get_session = get_session
        self._start = start
        self._make_engine = make_engine
        self._engine: Any = None  # a SparkEngine, made on first use
        self._parallelism = parallelism
        self._schema: Any = None  # Spark's StructType of the rows, made once
        self._serializer: Any = None  # PySpark's CloudPickleSerializer, made once

    @property
    def engine(self):
        if self._engine is None:
            self._engine = self._make_engine()
        return self._engine

    def release(self) -> None:
        if self._engine is not None:
            self._engine.release()

    @property
    def parallelism(self) -> int:
        return self._parallelism

    def cost(self) -> float:
        """Seconds a stage handed over now pays before its own work (see the
        module's docstring)."""
        if self._start is not None and not self._start.created:
            seconds = START_SECONDS
        elif self._start is not None and not self._start.ready:
            seconds = FIRST_JOB_SECONDS  # warming up
        elif ran_stages(self._get_session()):
            seconds = JOB_SECONDS
        else:
            seconds = FIRST_JOB_SECONDS
        return seconds * load_factor()

    def dumps(self, task: Any) -> bytes:
        return self._pickler().dumps(task)

    def loads(self, shipped: bytes) -> Any:
        return self._pickler().loads(shipped)

    def _pickler(self):
        if self._serializer is None:
            from pyspark.serializers import CloudPickleSerializer

            self._serializer = CloudPickleSerializer()
        return self._serializer

    def data(self, data: Local):
        """Spark's DataFrame of rows the driver holds.

        Rows a key shuffle made (GROUP, KEY_SORTED, BUCKETED) are shuffled again by
        Spark, which puts each key where its later steps expect it. Any other
        rows (a stage's output, a round-robin shuffle's) are spread over the
        run's ``parallelism`` as they are: contiguous slices, one partition
        each, so a stage handed over runs on every core (a few seeds a FlatMap
        expands: in one partition the whole stage was one task)."""
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        batches = [b for part in data.partitions for b in part if b.num_rows]
        if not batches:
            return self.engine.union([])
        if data.kept:
            return self._kept(data)
        table = pa.Table.from_batches(batches, schema=SCHEMA)
        if data.shuffled not in (None, e.SPREAD):
            frame = pyspark_compat.create_dataframe(
                self._get_session(), table, self._spark_schema()
            ).coalesce(1)
            return self.engine.shuffle(frame, data.shuffled)
        # Equal slices of rows, at most one per core: Spark cuts a DataFrame
        # made from driver rows into slices of equal row count (see
        # ``_kept``); ``coalesce`` caps them at ``ways``.
        table = table.combine_chunks()
        ways = max(1, min(self._parallelism, table.num_rows))
        step = -(-table.num_rows // ways)
        table = pa.Table.from_batches(
            [
                batch
                for start in range(0, table.num_rows, step)
                for batch in table.slice(start, step).to_batches()
            ],
            schema=SCHEMA,
        )
        return pyspark_compat.create_dataframe(
            self._get_session(), table, self._spark_schema()
        ).coalesce(ways)

    def _kept(self, data: Local):
        """A splittable stage's parts (``spread_restrictions``), one partition
        each. Spark slices a DataFrame made from driver rows by row count
        (``createDataFrame`` of Arrow data: its local relation is cut into
        equal slices, not a partition per batch), so every part is padded to
        the same count with rows of no element (tag 0, empty data: the stage's
        input operation decodes nothing from them); the parts then fall one per
        slice where the session's default parallelism is the run's (a local
        master). Elsewhere the cut still holds, only its balance may not."""
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        parts = [part for part in data.partitions if any(b.num_rows for b in part)]
        counts = [sum(b.num_rows for b in part) for part in parts]
        batches: list[pa.RecordBatch] = []
        for part, count in zip(parts, counts):
            batches.extend(b for b in part if b.num_rows)
            if count < max(counts):
                batches.extend(rows_batch([(0, None, b'')] * (max(counts) - count)))
        return pyspark_compat.create_dataframe(
            self._get_session(), pa.Table.from_batches(batches, schema=SCHEMA), self._spark_schema()
        ).coalesce(len(parts))

    def _spark_schema(self):
        if self._schema is None:
            from pyspark.sql.pandas.types import from_arrow_schema

            self._schema = from_arrow_schema(SCHEMA)
        return self._schema
