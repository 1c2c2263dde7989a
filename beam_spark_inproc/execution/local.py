"""Data the driver holds: partitions of Arrow batches, and the primitives on them.

Two engines keep rows in the driver: the debug engine runs whole pipelines
here (``debug.engine.LocalEngine``: dask's ``get_sync`` to the Spark engine's
``get_async``), and the small-data engine keeps tiny data here and hands the
rest to Spark (``execution.small.SmallDataEngine``). Both hold data as a list of
partitions, each a list of RecordBatches in the row format of ``protocol.rows``,
and move it with the same code: ``LocalPartitions`` has every primitive of the
engine contract (``execution.engine``) that moves rows (impulse, driver rows,
select, union, the shuffles, restrictions spread over cores, collect). Running
a stage is each engine's own: the debug engine runs the task with the DoFns
rebound to the driver's modules (so breakpoints work), the small-data engine
runs the task Spark would ship, within its limits.

Shuffles are the contract's, over ``parallelism`` partitions: ``GROUP`` and
``KEY_SORTED`` by a stable hash of the key bytes (crc32, never Python's ``hash``,
which differs between processes), ``SPREAD`` round-robin in order,
``BUCKETED`` by the key's state bucket (``protocol.buckets.bucket_of``).
"""

from __future__ import annotations

import contextlib
import zlib

import pyarrow as pa
from apache_beam.runners.common import ENCODED_IMPULSE_VALUE

from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.execution import initial_split
from beam_spark_inproc.protocol.buckets import bucket_of
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import KEY
from beam_spark_inproc.protocol.rows import SCHEMA
from beam_spark_inproc.protocol.rows import TAG

Partitions = list  # list[list[pa.RecordBatch]]


def partition_rows(partition: list) -> list[tuple]:
    rows: list[tuple] = []
    for batch in partition:
        rows.extend(
            zip(
                batch.column(TAG).to_pylist(),
                batch.column(KEY).to_pylist(),
                batch.column(DATA).to_pylist(),
            )
        )
    return rows


def rows_batch(rows: list[tuple]) -> list:
    if not rows:
        return []
    tags, keys, datas = zip(*rows)
    return [
        pa.RecordBatch.from_arrays(
            [pa.array(tags, pa.int32()), pa.array(keys, pa.binary()), pa.array(datas, pa.binary())],
            schema=SCHEMA,
        )
    ]


class LocalPartitions:
    """The row-moving primitives of the engine contract on partitions the
    driver holds, over ``parallelism`` partitions."""

    def __init__(self, parallelism: int = 2):
        self._parallelism = parallelism

    def impulse(self) -> Partitions:
        return [rows_batch([(0, None, ENCODED_IMPULSE_VALUE)])]

    def rows(self, rows: list, parts: int = 1) -> Partitions:
        rows = list(rows)
        parts = max(1, min(parts, len(rows)))
        cuts = [len(rows) * i // parts for i in range(parts + 1)]
        return [rows_batch(rows[a:b]) for a, b in zip(cuts, cuts[1:])]

    def select(self, data: Partitions, tag: int, new_tag: int, control: bool) -> Partitions:
        return [
            rows_batch(
                [
                    (new_tag if t == tag else t, k, d)
                    for t, k, d in partition_rows(partition)
                    if t == tag or (control and t == CONTROL_TAG)
                ]
            )
            for partition in data
        ]

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
            return [
                rows_batch(
                    [row for _, row in sorted(p, key=lambda r: (r[0], r[1][1] or b'', r[1][0]))]
                )
                for p in parts
            ]
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
            stage, [row for partition in data for row in partition_rows(partition)], ways
        )
        if spread is None:
            return None
        parts, balanced = spread
        return [rows_batch(part) for part in parts], balanced

    def cache(self, data: Partitions) -> Partitions:
        return data  # already materialized

    def uncache(self, data: Partitions) -> None:
        pass

    def collect(
        self, data: Partitions, elements: bool = True, started=None
    ) -> tuple[list[bytes], list[bytes]]:
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
