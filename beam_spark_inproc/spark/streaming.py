"""The streaming loop's extra primitives on Spark (DataFrame APIs only, so the
loop runs over Spark Connect too): driver rows in, per-micro-batch caching,
control and summary rows out, state buckets as Parquet written by Spark."""
from __future__ import annotations

import pyarrow as pa

from beam_spark_inproc.worker.rows import DATA
from beam_spark_inproc.worker.rows import KEY
from beam_spark_inproc.worker.rows import SCHEMA
from beam_spark_inproc.worker.rows import STATE_TAG
from beam_spark_inproc.worker.rows import TAG
from beam_spark_inproc.worker.streaming import STATE_BUCKETS

BUCKET = 'bucket'


class SparkStreamOps:
    def __init__(self, engine):
        self.engine = engine
        self._session = engine._session
        self._f = engine._f
        self._parts = engine._parts

    def _bucket(self):
        f = self._f
        return (f.crc32(self._parts.key) % STATE_BUCKETS).cast('int')

    def rows(self, rows: list):
        tags, keys, datas = zip(*rows)
        table = pa.Table.from_arrays(
            [pa.array(tags, pa.int32()), pa.array(keys, pa.binary()),
             pa.array(datas, pa.binary())], schema=SCHEMA)
        return self._session.createDataFrame(table, self._parts.schema)

    def persist(self, data):
        return data.cache()

    def unpersist(self, datas: list) -> None:
        for data in datas:
            data.unpersist()

    def collect(self, data) -> tuple[list, dict]:
        """(control and summary rows, {output tag: state buckets of its keyed
        rows, -1 for rows without a key}) of a result, in one job."""
        f, parts = self._f, self._parts
        control = data.filter((parts.tag < 0) & (parts.tag != STATE_TAG)).select(
            parts.tag, parts.key, parts.data,
            f.lit(None).cast('int').alias(BUCKET))
        outputs = data.filter(parts.tag >= 0).select(
            parts.tag, f.lit(None).cast('binary').alias(KEY),
            f.lit(None).cast('binary').alias(DATA),
            f.when(parts.key.isNull(), f.lit(-1)).otherwise(
                self._bucket()).alias(BUCKET))
        table = control.unionByName(outputs).toArrow()
        rows, touched = [], {}
        for tag, key, payload, bucket in zip(
                *(table.column(c).to_pylist() for c in (TAG, KEY, DATA, BUCKET))):
            if tag < 0:
                rows.append((tag, key, payload))
            else:
                touched.setdefault(tag, set()).add(bucket)
        return rows, touched

    def write_state(self, data, path: str) -> None:
        parts = self._parts
        data.filter(parts.tag == STATE_TAG).select(
            parts.key, parts.data, self._bucket().alias(BUCKET)).coalesce(1).write.mode(
            'errorifexists').parquet(path)

    def read_state(self, paths: dict):
        """The state rows of ``{folder: buckets to read from it}``."""
        f, parts = self._f, self._parts
        reads = [self._session.read.schema(
            'key binary, data binary, bucket int').parquet(path).filter(
            f.col(BUCKET).isin(sorted(buckets))).select(
            f.lit(STATE_TAG).cast('int').alias(TAG), parts.key, parts.data)
            for path, buckets in sorted(paths.items())]
        return self.engine.union(reads)
