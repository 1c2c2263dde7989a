"""LocalEngine: the executor's engine on in-memory Arrow batches, in the driver.

Data is a list of partitions, each a list of RecordBatches in the row format of
``worker.rows``; stages run one partition after another through the very
``StageTask`` Spark would run (dask's ``get_sync`` to the Spark engine's
``get_async``). Meant for debugging and small data: everything stays in memory.
"""
from __future__ import annotations

import contextlib
import zlib

import pyarrow as pa
from apache_beam.runners.common import ENCODED_IMPULSE_VALUE

from beam_spark_inproc.debug.rebind import driver_globals
from beam_spark_inproc.worker import report
from beam_spark_inproc.worker.rows import CONTROL_TAG
from beam_spark_inproc.worker.rows import DATA
from beam_spark_inproc.worker.rows import KEY
from beam_spark_inproc.worker.rows import RESIDUAL_TAG
from beam_spark_inproc.worker.rows import SCHEMA
from beam_spark_inproc.worker.rows import TAG

Partitions = list  # list[list[pa.RecordBatch]]


def _rows(partition: list) -> list[tuple]:
    rows = []
    for batch in partition:
        rows.extend(zip(batch.column(TAG).to_pylist(), batch.column(KEY).to_pylist(),
                        batch.column(DATA).to_pylist()))
    return rows


def _batch(rows: list[tuple]) -> list:
    if not rows:
        return []
    tags, keys, datas = zip(*rows)
    return [pa.RecordBatch.from_arrays(
        [pa.array(tags, pa.int32()), pa.array(keys, pa.binary()),
         pa.array(datas, pa.binary())], schema=SCHEMA)]


class LocalEngine:
    def __init__(self, parallelism: int = 2):
        self._parallelism = parallelism

    def impulse(self) -> Partitions:
        return [_batch([(0, None, ENCODED_IMPULSE_VALUE)])]

    def empty(self) -> Partitions:
        return [[]]

    def map_stage(self, data: Partitions, task) -> Partitions:
        with driver_globals():
            try:
                return [list(task(iter(partition))) for partition in data]
            except BaseException as error:
                report.drop_traceback_note(error)  # its own traceback shows
                raise

    def _map_rows(self, data: Partitions, fn) -> Partitions:
        return [_batch(fn(_rows(partition))) for partition in data]

    def select(self, data: Partitions, tag: int, new_tag: int,
               control: bool) -> Partitions:
        def pick(rows):
            return [(new_tag if t == tag else t, k, d) for t, k, d in rows
                    if t == tag or (control and t == CONTROL_TAG)]
        return self._map_rows(data, pick)

    def union(self, datas: list) -> Partitions:
        return [partition for data in datas for partition in data]

    def _shuffle(self, data: Partitions, sort_key) -> Partitions:
        parts = [[] for _ in range(self._parallelism)]
        for partition in data:
            for row in _rows(partition):
                key = row[1] or b''
                parts[zlib.crc32(key) % self._parallelism].append(row)
        return [_batch(sorted(rows, key=sort_key)) for rows in parts]

    def group(self, data: Partitions) -> Partitions:
        return self._shuffle(data, lambda r: (r[0], r[1] or b''))

    def by_key(self, data: Partitions) -> Partitions:
        return self._shuffle(data, lambda r: (r[1] or b'', r[0]))

    def reshuffle(self, data: Partitions) -> Partitions:
        parts = [[] for _ in range(self._parallelism)]
        i = 0
        for partition in data:
            for t, k, d in _rows(partition):
                parts[i % self._parallelism].append(
                    (t if t == CONTROL_TAG else 0, k, d))
                i += 1
        return [_batch(rows) for rows in parts]

    def residuals(self, data: Partitions) -> Partitions:
        return self._map_rows(
            data, lambda rows: [r for r in rows if r[0] == RESIDUAL_TAG])

    def spread(self, data: Partitions) -> Partitions:
        parts = [[] for _ in range(self._parallelism)]
        rows = [r for partition in data for r in _rows(partition)]
        for i, row in enumerate(rows):
            parts[i % self._parallelism].append(row)
        return [_batch(p) for p in parts]

    def is_empty(self, data: Partitions) -> bool:
        return not any(batch.num_rows for partition in data for batch in partition)

    def cache(self, data: Partitions) -> Partitions:
        return data  # already materialized

    def collect(self, data: Partitions) -> tuple[list[bytes], list[bytes]]:
        chunks, control = [], []
        for partition in data:
            for tag, _, chunk in _rows(partition):
                if tag == CONTROL_TAG:
                    control.append(chunk)
                elif chunk and tag >= 0:
                    chunks.append(chunk)
        return chunks, control

    def run(self, datas: list, description: str) -> list[bytes]:
        return [d for data in datas for partition in data
                for t, _, d in _rows(partition) if t == CONTROL_TAG]

    def side_input(self, entries: tuple) -> tuple:
        return entries

    def job(self, tag: str, description: str):
        return contextlib.nullcontext()

    def release(self) -> None:
        pass
