"""LocalEngine: the primitives of ``execution.engine`` on in-memory Arrow batches.

Data is a list of partitions, each a list of RecordBatches in the row format of
``protocol.rows``; stages run one partition after another through the very
``StageTask`` Spark would run (dask's ``get_sync`` to the Spark engine's
``get_async``). Meant for debugging and small data: everything stays in memory.

Runner-native Spark stages (ReadFromSpark, WriteToSpark, SparkSql) get a local
SparkSession for Spark's part (``session``: called when first needed, so a
pipeline without them starts no Spark): a source's Arrow batches are collected
to the driver (``toArrow``), and data written or queried becomes a DataFrame
with ``createDataFrame`` of an Arrow table.
"""
from __future__ import annotations

import contextlib
import zlib

import pyarrow as pa
from apache_beam.runners.common import ENCODED_IMPULSE_VALUE

from beam_spark_inproc.debug.rebind import driver_globals
from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution import initial_split
from beam_spark_inproc.protocol import report
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import KEY
from beam_spark_inproc.protocol.rows import SCHEMA
from beam_spark_inproc.protocol.rows import TAG
from beam_spark_inproc.protocol.buckets import bucket_of

Partitions = list  # list[list[pa.RecordBatch]]


def partition_rows(partition: list) -> list[tuple]:
    rows = []
    for batch in partition:
        rows.extend(zip(batch.column(TAG).to_pylist(), batch.column(KEY).to_pylist(),
                        batch.column(DATA).to_pylist()))
    return rows


def rows_batch(rows: list[tuple]) -> list:
    if not rows:
        return []
    tags, keys, datas = zip(*rows)
    return [pa.RecordBatch.from_arrays(
        [pa.array(tags, pa.int32()), pa.array(keys, pa.binary()),
         pa.array(datas, pa.binary())], schema=SCHEMA)]


class LocalEngine:
    def __init__(self, parallelism: int = 2, session=None):
        self._parallelism = parallelism
        self._session_factory = session  # () -> SparkSession, or None

    def spark_session(self):
        if self._session_factory is None:
            raise RuntimeError(
                'This debug engine has no SparkSession for Spark work: run on '
                'InProcessSparkRunner(debug=True), which makes a local one.')
        return self._session_factory()

    def arrow_source(self, dataframe) -> Partitions:
        """The DataFrame's Arrow batches, collected, spread over partitions."""
        batches = [b for b in dataframe.toArrow().to_batches() if b.num_rows]
        parts: list[list] = [[] for _ in range(self._parallelism)]
        for i, batch in enumerate(batches):
            parts[i % self._parallelism].append(batch)
        return parts

    def to_dataframe(self, data: Partitions, fn, arrow_schema):
        batches = [batch for partition in self.map_stage(data, fn)
                   for batch in partition]
        table = pa.Table.from_batches(batches, schema=arrow_schema)
        return self.spark_session().createDataFrame(table)

    def impulse(self) -> Partitions:
        return [rows_batch([(0, None, ENCODED_IMPULSE_VALUE)])]

    def rows(self, rows: list, parts: int = 1) -> Partitions:
        rows = list(rows)
        parts = max(1, min(parts, len(rows)))
        cuts = [len(rows) * i // parts for i in range(parts + 1)]
        return [rows_batch(rows[a:b]) for a, b in zip(cuts, cuts[1:])]

    def map_stage(self, data: Partitions, task) -> Partitions:
        with driver_globals():
            try:
                return [list(task(iter(partition))) for partition in data]
            except BaseException as error:
                report.drop_failure_note(error)  # its own traceback shows
                raise

    def select(self, data: Partitions, tag: int, new_tag: int,
               control: bool) -> Partitions:
        return [rows_batch([(new_tag if t == tag else t, k, d)
                            for t, k, d in partition_rows(partition)
                            if t == tag or (control and t == CONTROL_TAG)])
                for partition in data]

    def union(self, datas: list) -> Partitions:
        if not datas:
            return [[]]
        return [partition for data in datas for partition in data]

    def shuffle(self, data: Partitions, how: str) -> Partitions:
        if how not in e.SHUFFLES:
            raise e.unknown_shuffle(how)
        parts: list[list[tuple]] = [[] for _ in range(self._parallelism)]
        rows = (row for partition in data for row in partition_rows(partition))
        if how == e.SPREAD:  # round-robin, order kept
            for i, row in enumerate(rows):
                parts[i % self._parallelism].append(row)
            return [rows_batch(p) for p in parts]
        if how == e.BUCKETED:
            for row in rows:  # whole state buckets per partition
                bucket = -1 if row[1] is None else bucket_of(row[1])
                parts[max(bucket, 0) % self._parallelism].append((bucket, row))
            return [rows_batch([row for _, row in sorted(
                p, key=lambda r: (r[0], r[1][1] or b'', r[1][0]))]) for p in parts]
        for row in rows:  # a stable hash of the key bytes, never Python's hash
            parts[zlib.crc32(row[1] or b'') % self._parallelism].append(row)
        if how == e.GROUP:
            order = lambda r: (r[0], r[1] or b'')  # noqa: E731
        else:
            order = lambda r: (r[1] or b'', r[0])  # noqa: E731
        return [rows_batch(sorted(p, key=order)) for p in parts]

    def spread_restrictions(self, data: Partitions, stage, ways: int):
        """A splittable stage's input cut into one part per core
        (``execution.initial_split``): (data, balanced), or None."""
        spread = initial_split.spread(
            stage, [row for partition in data for row in partition_rows(partition)],
            ways)
        if spread is None:
            return None
        parts, balanced = spread
        return [rows_batch(part) for part in parts], balanced

    def cache(self, data: Partitions) -> Partitions:
        return data  # already materialized

    def uncache(self, data: Partitions) -> None:
        pass

    def collect(self, data: Partitions, elements: bool = True,
                started=None) -> tuple[list[bytes], list[bytes]]:
        if started is not None:  # already computed: nothing to wait for
            started()
        chunks, control = [], []
        for partition in data:
            for tag, _, chunk in partition_rows(partition):
                if tag == CONTROL_TAG:
                    control.append(chunk)
                elif chunk and elements:
                    chunks.append(chunk)
        return chunks, control

    def side_input(self, entries: tuple, folder: str | None = None) -> tuple:
        return entries

    def job(self, tag: str, description: str):
        return contextlib.nullcontext()

    def release(self) -> None:
        pass
