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
"""

from __future__ import annotations

from typing import Any
from typing import Callable

import pyarrow as pa

from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution.local import rows_batch
from beam_spark_inproc.execution.small import Local
from beam_spark_inproc.protocol.rows import SCHEMA


class SparkHandOver:
    """``execution.small.HandOver`` on Spark: ``get_session`` gives the
    SparkSession, ``make_engine`` the ``SparkEngine``."""

    def __init__(
        self, get_session: Callable[[], Any], make_engine: Callable[[], Any], parallelism: int = 1
    ):
        self._get_session = get_session
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
        batches = [b for part in data.partitions for b in part if b.num_rows]
        if not batches:
            return self.engine.union([])
        if data.kept:
            return self._kept(data)
        table = pa.Table.from_batches(batches, schema=SCHEMA)
        if data.shuffled not in (None, e.SPREAD):
            frame = self._get_session().createDataFrame(table, self._spark_schema()).coalesce(1)
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
        return self._get_session().createDataFrame(table, self._spark_schema()).coalesce(ways)

    def _kept(self, data: Local):
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
        batches: list[pa.RecordBatch] = []
        for part, count in zip(parts, counts):
            batches.extend(b for b in part if b.num_rows)
            if count < max(counts):
                batches.extend(rows_batch([(0, None, b'')] * (max(counts) - count)))
        return (
            self._get_session()
            .createDataFrame(pa.Table.from_batches(batches, schema=SCHEMA), self._spark_schema())
            .coalesce(len(parts))
        )

    def _spark_schema(self):
        if self._schema is None:
            from pyspark.sql.pandas.types import from_arrow_schema

            self._schema = from_arrow_schema(SCHEMA)
        return self._schema
