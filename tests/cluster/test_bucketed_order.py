"""A ``BUCKETED`` shuffle keeps each key's rows in the order of their input
partitions and positions on separate executors (``local-cluster``), where a
reduce task reads its own executor's map output before the other's: a
stream's driver rows spread over partitions reach a stateful DoFn in their
event's order (``SparkEngine.shuffle``; on ``local[N]`` every block
is local and read in map order, so only this tier can tell)."""

from __future__ import annotations

from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.spark.engine import SparkEngine
from tests.integration.test_engine_contract import partitions


def test_bucketed_shuffle_keeps_each_keys_rows_in_input_order(spark):
    engine = SparkEngine(spark, 2, 'bucketed-order')
    try:
        rows = [(0, b'k%d' % (i % 7), b'%d' % i) for i in range(2000)]
        for _ in range(3):  # the map tasks may share an executor once
            parts = partitions(engine, engine.shuffle(engine.rows(rows, 2), e.BUCKETED))
            got = {}
            for part in parts:
                for _, key, data in part:
                    got.setdefault(key, []).append(int(data))
            assert got == {k: [int(d) for _, kk, d in rows if kk == k] for k in got}
            assert sorted(got) == sorted({k for _, k, _ in rows})
    finally:
        engine.release()
