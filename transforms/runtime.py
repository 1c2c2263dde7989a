"""How the executor runs runner-native stages: one handler per URN.

``build(executor, index, stage)`` is the executor's only hook: it looks the
stage's URN up in ``HANDLERS`` (an unknown URN raises) and returns the stage's
result in the runner's row format (``protocol.rows``), like any stage's.

* read: the source DataFrame's Arrow batches (``Engine.arrow_source``), lazy,
  one task per partition of Spark's reader; a bare scan of local Parquet files
  is read by pyarrow in the tasks instead (``files``). When one plain stage alone reads
  it (the planner's ``ARROW`` mode), the result is an ``ArrowOutput`` and that
  stage's own task makes the rows (``convert.ArrowRows``); else
  ``map_stage(ToBeamRows)`` makes rows of the runner's format;
* write: the input's rows ``to_dataframe(ToArrow)`` written by Spark's writer, one
  job, at once (the result holds only the control rows of upstream bundles);
* SQL: each input ``to_dataframe(ToArrow)`` as a temporary view (an input that
  is a ReadFromSpark's output as it is, with the view's Spark types: the read's
  own DataFrame, ``_read_frame``), the query's
  DataFrame read as a read's is (an ``ArrowOutput`` for its one plain reader,
  carrying the inputs' control rows, else ``map_stage(ToBeamRows)``): lazy.

Upstream stages' reports (control rows) ride with their data. A write or a
view consumes only the elements, so when this stage is the one carrying an
input's control rows the input is cached and its control rows are passed on
separately (the input is then computed once).

Handlers use the engine contract only (``execution.engine``: ``spark_session``,
``arrow_source``, ``to_dataframe`` and the row primitives), so they run on
Spark and on the debug engine alike; the debug engine does Spark's part on a
local SparkSession and its own in the driver.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any
from typing import Callable

from beam_spark_inproc.execution.engine import ArrowOutput
from beam_spark_inproc.planning import native
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.planning.native import READ_STREAM_URN
from beam_spark_inproc.planning.native import READ_URN
from beam_spark_inproc.planning.native import SQL_URN
from beam_spark_inproc.planning.native import WRITE_URN
from beam_spark_inproc.transforms import files
from beam_spark_inproc.transforms import specs
from beam_spark_inproc.transforms import types
from beam_spark_inproc.transforms.convert import ArrowRows
from beam_spark_inproc.transforms.convert import ToArrow
from beam_spark_inproc.transforms.convert import ToBeamRows
from beam_spark_inproc.transforms.specs import write_dataframe as write


def build(executor, index: int, stage: p.StagePlan) -> Any:
    try:
        handler = HANDLERS[stage.native_urn]
    except KeyError:
        raise ValueError(
            f'Stage {stage.name!r} ({", ".join(stage.labels)}): no handler for '
            f'runner-native URN {stage.native_urn!r}; known: '
            f'{", ".join(sorted(HANDLERS))}.'
        ) from None
    spec = json.loads(stage.native_payload)
    return handler(_Context(executor, index, stage, spec), spec)


class _Context:
    """What a handler needs: the session, the engine's primitives, the stage.

    Uses only the engine contract (``execution.engine``) and the executor's
    methods for native stages (``coder``, ``native_input``, ``job``), so the
    same handlers run on Spark and on the debug engine.
    """

    def __init__(self, executor, index: int, stage: p.StagePlan, spec: dict):
        self.executor, self.index, self.stage = executor, index, stage
        self.engine = executor.engine
        # How errors name the transform: its label, then its class and target.
        self.label = native.named(', '.join(stage.labels), native.kind(stage.native_urn, spec))
        try:
            self.session = self.engine.spark_session()
        except Exception as e:
            raise specs.SparkInteropError(
                f'{self.label} needs a SparkSession for its Spark work, and none could be made: {e}'
            ) from None

    def coder(self, coder_id: str):
        return self.executor.coder(coder_id)

    def outputs(self, data) -> Any:
        """``data`` (tag 0) as every output port of the stage."""
        n = len(self.stage.outputs)
        if n <= 1:
            return data
        return self.engine.union([self.engine.select(data, 0, tag, tag == 0) for tag in range(n)])

    def input(self, tag: int) -> tuple[Any, Any]:
        """(rows of input port ``tag``, its control rows for this stage to
        carry or None)."""
        return self.executor.native_input(self.index, tag)

    def to_beam(self, dataframe, schema) -> Any:
        """A DataFrame -> rows of Beam elements for the stage's output."""
        port = self.stage.outputs[0]
        row_type = types.row_type(schema)
        names = tuple(f.name for f in schema)
        # Local Parquet files of a bare scan: read by pyarrow in the tasks.
        parquet = files.file_units(dataframe, schema, self.executor.parallelism)
        if parquet is not None:
            n = len(parquet.units)  # one row, the task's number, per partition
            dataframe = self.session.range(0, n, 1, n)
        source = self.engine.arrow_source(dataframe)
        if port.layout == p.ARROW_LAYOUT:  # its one reader makes the rows
            return ArrowOutput(source, ArrowRows(row_type, names, parquet))
        return self.engine.map_stage(
            source, ToBeamRows(self.coder(port.coder_id), row_type, names, parquet)
        )

    def to_dataframe(self, data, port: p.InputPort, schema):
        return self.engine.to_dataframe(data, ToArrow(self.coder(port.coder_id), schema), schema)

    def check_schema(self, dataframe, expected, what: str) -> None:
        found = types.spark_to_arrow(dataframe.schema)
        if [(f.name, f.type) for f in found] != [(f.name, f.type) for f in expected]:
            raise specs.SparkInteropError(
                f'{self.label}: the schema of {what} changed since the pipeline '
                f'was built: now {found}, then {expected}. Build the pipeline again.'
            )


def _read(ctx: _Context, spec: dict) -> Any:
    schema = specs.decode_schema(spec['schema'])
    dataframe = specs._DATAFRAMES.get(spec['token'])
    try:
        if spec['source'] == 'dataframe':
            if dataframe is None:
                raise specs.SparkInteropError(
                    f'{ctx.label}: its DataFrame lives in the process that built '
                    'the pipeline; run the pipeline there, or read a table/query.'
                )
            if dataframe.sparkSession is not ctx.session:
                raise specs.SparkInteropError(
                    f'{ctx.label}: the DataFrame belongs to another SparkSession '
                    "than the runner's; give the runner that session "
                    '(InProcessSparkRunner(spark=df.sparkSession)).'
                )
        elif dataframe is None or dataframe.sparkSession is not ctx.session:
            dataframe = (
                ctx.session.table(spec['table'])
                if spec['source'] == 'table'
                else ctx.session.sql(spec['query'])
            )
        ctx.check_schema(dataframe, schema, 'the source')
    except specs.SparkInteropError:
        raise
    except Exception as e:
        raise specs.spark_error(ctx.label, e) from None
    ctx.executor.native_frames[ctx.index] = (dataframe, schema)
    return ctx.outputs(ctx.to_beam(dataframe, schema))


def _read_frame(ctx: _Context, tag: int, view_schema):
    """The source DataFrame of a ReadFromSpark whose output is SQL input
    ``tag`` as it is (no Beam transform between), when its Spark types are
    exactly the view's (else Beam's conversions, e.g. tinyint -> smallint or
    timestamp_ntz -> timestamp, must apply: None). The rows then need not cross
    into Beam and back (Beam encoding, then Arrow: ~2.7 µs per row)."""
    writer = ctx.executor.native_writer(ctx.index, tag)
    if writer is None or writer not in ctx.executor.native_frames:
        return None
    dataframe, _ = ctx.executor.native_frames[writer]
    wanted = types.arrow_to_spark(view_schema)
    if [(f.name, f.dataType) for f in dataframe.schema.fields] != [
        (f.name, f.dataType) for f in wanted.fields
    ]:
        return None
    return dataframe


def _write(ctx: _Context, spec: dict) -> Any:
    schema = specs.decode_schema(spec['schema'])
    if spec['table']:  # the table may have appeared since the pipeline was built
        schema = specs.target_schema(ctx.session, spec, schema, ctx.label)
    data, control = ctx.input(0)
    if spec.get('window_columns'):  # the windows and panes as columns too
        from beam_spark_inproc.transforms.stream_convert import WindowedToArrow

        dataframe = ctx.engine.to_dataframe(
            data,
            WindowedToArrow(
                ctx.coder(ctx.stage.inputs[0].coder_id),
                schema,
                columns=tuple(spec['window_columns'].items()),
            ),
            schema,
        )
    else:
        dataframe = ctx.to_dataframe(data, ctx.stage.inputs[0], schema)
    with ctx.executor.job([ctx.index], f'write {spec["table"] or spec["path"]}'):
        write(ctx.session, spec, dataframe, ctx.label)
    return control if control is not None else ctx.engine.union([])


def _sql(ctx: _Context, spec: dict) -> Any:
    controls = []
    views = spec['views']
    for tag, port in enumerate(ctx.stage.inputs):
        name = ctx.stage.native_inputs[tag]
        if name not in views:
            name = next(iter(views)) if len(views) == 1 else name
        view_schema = specs.decode_schema(views[name])
        frame = _read_frame(ctx, tag, view_schema)
        if frame is not None:  # a read's DataFrame, straight in: no control rows
            frame.createOrReplaceTempView(name)
            continue
        data, control = ctx.input(tag)
        if control is not None:
            controls.append(control)
        ctx.to_dataframe(data, port, view_schema).createOrReplaceTempView(name)
    schema = specs.decode_schema(spec['schema'])
    try:
        result = ctx.session.sql(spec['query'])
        ctx.check_schema(result, schema, 'the query result')
    except specs.SparkInteropError:
        raise
    except Exception as e:
        raise specs.spark_error(ctx.label, e) from None
    out = ctx.to_beam(result, schema)
    if controls:
        control = ctx.engine.union(controls)
        if isinstance(out, ArrowOutput):  # its one reader passes them on
            return dataclasses.replace(out, control=control)
        out = ctx.engine.union([out, control])
    return ctx.outputs(out)


def stream_source(stage: p.StagePlan, engine, context, folder: str) -> Any:
    """A runner-native stage's stream source (``source.StreamSource``) if it
    is a streaming read (``spark_stream``), else None."""
    if stage.native_urn != READ_STREAM_URN:
        return None
    from beam_spark_inproc.transforms.spark_stream import SparkStreamSource

    return SparkStreamSource(stage, engine, context, folder)


def stream_stages(engine, coders, root: str, job):
    """What runs WriteToSpark and SparkSql in a stream (``stream_runtime``)."""
    from beam_spark_inproc.transforms.stream_runtime import StreamStages

    return StreamStages(engine, coders, root, job)


HANDLERS: dict[str, Callable[[_Context, dict], Any]] = {
    READ_URN: _read,
    WRITE_URN: _write,
    SQL_URN: _sql,
}
