"""LocalEngine: the primitives of ``execution.engine`` on in-memory Arrow batches.

Data is a list of partitions, each a list of RecordBatches in the row format of
``protocol.rows`` (``execution.local``, shared with the small-data engine); stages
run one partition after another through the very ``StageTask`` Spark would run
(dask's ``get_sync`` to the Spark engine's ``get_async``), with the DoFns
rebound to the driver's modules (``rebind``), so a breakpoint in one stops
here. Meant for debugging and small data: everything stays in memory.

Runner-native Spark stages (ReadFromSpark, WriteToSpark, SparkSql) get a local
SparkSession for Spark's part (``session``: called when first needed, so a
pipeline without them starts no Spark): a source's Arrow batches are collected
to the driver (``toArrow``), and data written or queried becomes a DataFrame
with ``createDataFrame`` of an Arrow table.
"""

from __future__ import annotations

import pyarrow as pa

from beam_spark_inproc.debug.rebind import driver_globals
from beam_spark_inproc.execution.local import LocalPartitions
from beam_spark_inproc.execution.local import Partitions
from beam_spark_inproc.protocol import report


class LocalEngine(LocalPartitions):
    def __init__(self, parallelism: int = 2, session=None):
        super().__init__(parallelism)
        self._session_factory = session  # () -> SparkSession, or None

    def spark_session(self):
        if self._session_factory is None:
            raise RuntimeError(
                'This debug engine has no SparkSession for Spark work: run on '
                'InProcessSparkRunner(debug=True), which makes a local one.'
            )
        return self._session_factory()

    def arrow_source(self, dataframe) -> Partitions:
        """The DataFrame's Arrow batches, collected, spread over partitions."""
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        batches = [b for b in pyspark_compat.to_arrow(dataframe).to_batches() if b.num_rows]
        parts: list[list] = [[] for _ in range(self._parallelism)]
        for i, batch in enumerate(batches):
            parts[i % self._parallelism].append(batch)
        return parts

    def to_dataframe(self, data: Partitions, fn, arrow_schema):
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        batches = [batch for partition in self.map_stage(data, fn) for batch in partition]
        table = pa.Table.from_batches(batches, schema=arrow_schema)
        return pyspark_compat.create_dataframe(self.spark_session(), table)

    def map_stage(self, data: Partitions, task) -> Partitions:
        with driver_globals():
            try:
                return [list(task(iter(partition))) for partition in data]
            except BaseException as error:
                report.drop_failure_note(error)  # its own traceback shows
                raise
