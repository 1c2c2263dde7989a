"""ReadFromSpark, WriteToSpark and SparkSql on runners other than this one.

On ``InProcessSparkRunner`` these transforms are runner-native stages
(``runtime``). On a runner that runs the pipeline in this process (Beam's
``DirectRunner``, ``BundleBasedDirectRunner``, ``FnApiRunner`` in memory or in
threads) they expand to ordinary Beam transforms whose DoFns call the
SparkSession the transform was built with:

* read: ``Impulse | ParDo(_Read)``: the DataFrame's Arrow batches are collected
  (``toArrow``) and made into Beam rows in bulk (``convert.ArrowRows``);
* write: ``WindowInto(GlobalWindows) | ToList | ParDo(_Write)``: one Arrow
  table of every element, one ``createDataFrame`` and one Spark write (Spark's
  commit protocol, once: these runners do not retry bundles);
* SQL: each view ``ToList`` as a singleton side input of ``Impulse |
  ParDo(_Sql)``, which registers them as temporary views and reads the query's
  result as the read does.

Everything passes through this process's memory: fine for tests and small
data, which is what these runners are for; big data belongs on
``InProcessSparkRunner``. Any other runner (a remote service, a runner that
starts worker processes) cannot reach the session: the transforms fail when
applied, naming the runners they work on.

The DataFrames and sessions stay in this process, in ``_LIVE`` by token; the
DoFns carry only the token (a SparkSession does not pickle).
"""

from __future__ import annotations

import itertools
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindows

from beam_spark_inproc.transforms import convert
from beam_spark_inproc.transforms import specs
from beam_spark_inproc.transforms import types

# token -> the DataFrame (read) or SparkSession (write, SQL) it stands for.
_LIVE: dict[str, Any] = {}
_tokens = itertools.count()


def keep(value) -> str:
    token = f'local-{next(_tokens)}'
    _LIVE[token] = value
    return token


def live(token: str, what: str):
    try:
        return _LIVE[token]
    except KeyError:
        raise RuntimeError(
            f'{what}: its SparkSession lives in the process that built the '
            'pipeline, and this DoFn runs in another one. Run the pipeline '
            'with an in-process runner (DirectRunner, FnApiRunner) or on '
            'InProcessSparkRunner.'
        ) from None


def in_process(pipeline) -> bool:
    """Whether the pipeline's runner runs its DoFns in this process."""
    from apache_beam.options.pipeline_options import DirectOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.runners.direct.direct_runner import DirectRunner
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    if not isinstance(pipeline.runner, (DirectRunner, BundleBasedDirectRunner, FnApiRunner)):
        return False
    mode = pipeline._options.view_as(DirectOptions).direct_running_mode
    return mode in (None, 'in_memory', 'multi_threading')


def rows_of(dataframe, arrow_schema: pa.Schema):
    """The DataFrame's rows as Beam rows of the schema's row type."""
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    to_rows = convert.ArrowRows(types.row_type(arrow_schema), tuple(f.name for f in arrow_schema))
    for batch in pyspark_compat.to_arrow(dataframe).to_batches():
        yield from to_rows.rows(batch)


def dataframe_of(session, elements: list, arrow_schema: pa.Schema):
    """A DataFrame of Beam rows, through one Arrow table."""
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    table = pa.Table.from_batches(
        [convert.arrow_batch(elements, arrow_schema)], schema=arrow_schema
    )
    return pyspark_compat.create_dataframe(session, table)


class _Read(beam.DoFn):
    def __init__(self, token: str, schema: str, what: str):
        self._token, self._schema, self._what = token, schema, what

    def process(self, unused_impulse):
        yield from rows_of(live(self._token, self._what), specs.decode_schema(self._schema))


class _Write(beam.DoFn):
    def __init__(self, token: str, spec: dict, what: str):
        self._token, self._spec, self._what = token, spec, what

    def process(self, elements):
        from beam_spark_inproc.transforms import runtime

        session = live(self._token, self._what)
        schema = specs.decode_schema(self._spec['schema'])
        if self._spec['table']:  # the table may have appeared since building
            schema = specs.target_schema(session, self._spec, schema, self._what)
        runtime.write(session, self._spec, dataframe_of(session, elements, schema), self._what)


class _Sql(beam.DoFn):
    def __init__(self, token: str, spec: dict, what: str):
        self._token, self._spec, self._what = token, spec, what

    # The views arrive as keyword side inputs, which DoFn.process's
    # ``(element, *args, **kwargs)`` does not spell out.
    def process(self, unused_impulse, **views):  # type: ignore[override]
        session = live(self._token, self._what)
        for name, elements in views.items():
            dataframe_of(
                session, elements, specs.decode_schema(self._spec['views'][name])
            ).createOrReplaceTempView(name)
        yield from rows_of(
            session.sql(self._spec['query']), specs.decode_schema(self._spec['schema'])
        )


def read(pbegin, dataframe, spec: dict, row_type, what: str):
    return (
        pbegin
        | 'Impulse' >> beam.Impulse()
        | 'Read with Spark'
        >> beam.ParDo(_Read(keep(dataframe), spec['schema'], what)).with_output_types(row_type)
    )


def write(pcoll, session, spec: dict, what: str):
    return (
        pcoll
        | 'Global window' >> beam.WindowInto(GlobalWindows())
        | 'All elements' >> beam.combiners.ToList()
        | 'Write with Spark' >> beam.ParDo(_Write(keep(session), spec, what))
    )


def sql(pcolls: dict, session, spec: dict, row_type, what: str):
    pipeline = next(iter(pcolls.values())).pipeline
    views = {
        name: beam.pvalue.AsSingleton(pcoll | f'View {name}' >> beam.combiners.ToList())
        for name, pcoll in pcolls.items()
    }
    return (
        pipeline
        | 'Impulse' >> beam.Impulse()
        | 'Query with Spark'
        >> beam.ParDo(_Sql(keep(session), spec, what), **views).with_output_types(row_type)
    )
