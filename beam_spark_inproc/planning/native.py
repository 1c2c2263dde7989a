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


def kind(urn: str, spec: dict) -> str:
    """The class of a runner-native transform and what it reads or writes, as
    its errors name it after the user's label: ``WriteToSpark table='x'``,
    ``ReadFromSpark dataframe``, ``SparkSql query='SELECT ...'``."""
    if urn == WRITE_URN:
        if spec.get('table'):
            return f'WriteToSpark table={spec["table"]!r}'
        return f'WriteToSpark path={spec.get("path")!r}'
    if urn == SQL_URN:
        return f'SparkSql query={_short(spec.get("query") or "")!r}'
    if urn in (READ_URN, READ_STREAM_URN):
        source = spec.get('source')
        if source in ('table', 'query'):
            return f'ReadFromSpark {source}={_short(spec.get(source) or "")!r}'
        stream_format = (spec.get('identity') or {}).get('format')
        if stream_format:
            return f'ReadFromSpark.stream format={stream_format!r}'
        return 'ReadFromSpark dataframe'
    return urn


def named(label: str, kind: str) -> str:
    """How an error names a transform: ``'Write totals' (WriteToSpark table='x')``."""
    return f'{label!r} ({kind})'


def _short(text: str, limit: int = 60) -> str:
    text = ' '.join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + '...'
