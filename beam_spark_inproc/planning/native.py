"""URNs of runner-native transforms: Spark work the runner does itself.

``beam_spark_inproc.transforms`` (ReadFromSpark, WriteToSpark, SparkSql) gives
each of its PTransforms one of these URNs. They are runner URNs for Beam's
fusion (``phases.RUNNER_URNS``): each becomes a stage of its own, bordered by
data ports like a GroupByKey, and the planner describes it as a
``plan.NATIVE_STAGE`` carrying the transform's URN and payload. The executor
hands such a stage to the handler registered for its URN
(``beam_spark_inproc.transforms.runtime``), which reads or writes DataFrames
at the stage's boundary in the row format of ``protocol.rows``.

Pure constants: imported by the planner, the capability check and the
transforms alike.
"""

from __future__ import annotations

READ_URN = 'beam-spark-inproc:spark-read:v1'
WRITE_URN = 'beam-spark-inproc:spark-write:v1'
SQL_URN = 'beam-spark-inproc:spark-sql:v1'
# ReadFromSpark over a streaming DataFrame: a source of the micro-batch loop
# (``beam_spark_inproc.transforms.spark_stream``), never a batch stage.
READ_STREAM_URN = 'beam-spark-inproc:spark-read-stream:v1'

NATIVE_URNS = frozenset([READ_URN, WRITE_URN, SQL_URN, READ_STREAM_URN])
