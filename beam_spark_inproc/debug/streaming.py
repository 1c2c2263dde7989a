"""The streaming loop's extra primitives on the debug engine (in memory, plus
Parquet files through pyarrow for state between micro-batches)."""
from __future__ import annotations

import glob
import os

import pyarrow as pa
import pyarrow.parquet as pq

from beam_spark_inproc.debug.engine import _batch
from beam_spark_inproc.debug.engine import _rows
from beam_spark_inproc.worker.rows import STATE_TAG
from beam_spark_inproc.worker.streaming import bucket_of

STATE_SCHEMA = pa.schema([('key', pa.binary()), ('data', pa.binary()),
                          ('bucket', pa.int32())])


class LocalStreamOps:
    def __init__(self, engine):
        self.engine = engine

    def rows(self, rows: list) -> list:
        return [_batch(rows)]

    def persist(self, data):
        return data

    def unpersist(self, datas: list) -> None:
        pass

    def collect(self, data) -> tuple[list, dict]:
        """(control and summary rows, {output tag: state buckets of its keyed
        rows, -1 for rows without a key}) of a result."""
        rows, touched = [], {}
        for part in data:
            for tag, key, payload in _rows(part):
                if tag >= 0:
                    touched.setdefault(tag, set()).add(
                        -1 if key is None else bucket_of(key))
                elif tag != STATE_TAG:
                    rows.append((tag, key, payload))
        return rows, touched

    def write_state(self, data, path: str) -> None:
        rows = [(k, d) for part in data for t, k, d in _rows(part)
                if t == STATE_TAG]
        os.makedirs(path, exist_ok=True)
        keys = [k for k, _ in rows]
        pq.write_table(pa.Table.from_arrays(
            [pa.array(keys, pa.binary()), pa.array([d for _, d in rows], pa.binary()),
             pa.array([bucket_of(k) for k in keys], pa.int32())],
            schema=STATE_SCHEMA), os.path.join(path, 'part-0.parquet'))

    def read_state(self, paths: dict) -> list:
        """The state rows of ``{folder: buckets to read from it}``."""
        rows = []
        for path, buckets in sorted(paths.items()):
            for name in sorted(glob.glob(os.path.join(path, '*.parquet'))):
                table = pq.read_table(name)
                for key, data, bucket in zip(*(table.column(c).to_pylist()
                                               for c in ('key', 'data', 'bucket'))):
                    if bucket in buckets:
                        rows.append((STATE_TAG, key, data))
        return [_batch(rows)]
