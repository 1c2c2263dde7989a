"""ReadFromSpark, WriteToSpark and SparkSql: Spark work inside a Beam pipeline.

Each is a Beam primitive with its own URN (``planning.native``): fusion leaves
it a stage of its own and ``transforms.runtime`` runs it with DataFrames, so
Spark's own readers, writers (and commit protocol) and SQL engine do the work
and data crosses to and from Beam stages as Arrow batches.

Schemas are settled while the pipeline is built, so bad input fails there,
before any Spark job: an unknown table or bad SQL (analysed by the session), a
PCollection without a Beam schema, a type with no counterpart (``types``), a
write whose schema does not match the existing table, windowed SQL input.
Building needs a SparkSession: the ``spark`` argument, else the active one.

They are runner-native on ``InProcessSparkRunner``; on a runner running the
pipeline in this process (DirectRunner, FnApiRunner) they expand to Beam
transforms calling the SparkSession (``local``); on any other runner they fail
when applied, saying so (they never silently do nothing).
"""

from __future__ import annotations

import itertools
import json
from typing import Any
from typing import Optional

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.transforms.core import Windowing
from apache_beam.transforms.window import GlobalWindows

from beam_spark_inproc.planning import native
from beam_spark_inproc.planning.native import READ_STREAM_URN
from beam_spark_inproc.planning.native import READ_URN
from beam_spark_inproc.planning.native import SQL_URN
from beam_spark_inproc.planning.native import WRITE_URN
from beam_spark_inproc.transforms import types
from beam_spark_inproc.transforms.specs import _DATAFRAMES
from beam_spark_inproc.transforms.specs import SparkInteropError
from beam_spark_inproc.transforms.specs import applied_label
from beam_spark_inproc.transforms.specs import encode_schema
from beam_spark_inproc.transforms.specs import path_schema
from beam_spark_inproc.transforms.specs import spark_error
from beam_spark_inproc.transforms.specs import target_schema

WRITE_MODES = ('append', 'overwrite', 'error', 'errorifexists', 'ignore')
_tokens = itertools.count()


def active_session(spark=None):
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    session: Any = SparkSession.getActiveSession()  # classic, else Spark Connect's
    if session is None:
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        session = pyspark_compat.active_connect_session()
    return session


def _native(pipeline, what: str, urn: str) -> bool:
    """True on a runner that runs ``urn`` as a stage of its own (it lists it in
    its ``native_urns``: InProcessSparkRunner); False on a runner
    running DoFns in this process (``local``: through the SparkSession);
    else a SparkInteropError naming the runners these transforms need."""
    from beam_spark_inproc.transforms import local

    runner = pipeline.runner
    if urn in getattr(runner, 'native_urns', ()):
        return True
    if local.in_process(pipeline):
        return False
    raise SparkInteropError(
        f'{what}: this transform ({urn}) runs on '
        'beam_spark_inproc.InProcessSparkRunner, or '
        'through a local SparkSession on a runner that runs the pipeline in '
        'this process (DirectRunner, BundleBasedDirectRunner, FnApiRunner in '
        f"memory); this pipeline's runner is {type(runner).__name__}. Run the "
        'pipeline with InProcessSparkRunner(), or use a Beam IO (e.g. '
        'beam.io.ReadFromParquet, beam.io.WriteToParquet) on other runners.'
    )


class ReadFromSpark(beam.PTransform):
    """A table, a SQL query or a DataFrame as a PCollection of Beam rows.

    ``ReadFromSpark('db.table')``, ``ReadFromSpark(query='SELECT ...')`` or
    ``ReadFromSpark(dataframe=df)``. Spark's readers read it in parallel; each
    partition reaches the first stage as Arrow batches. Elements are
    ``beam.Row``-like NamedTuples (RowCoder), in the global window at the
    minimum timestamp. Bounded.

    A streaming DataFrame (``spark.readStream...``) gives an unbounded
    PCollection: ``ReadFromSpark(dataframe=stream, event_time='ts',
    max_out_of_orderness=30)``, each element at its ``event_time`` column's
    instant, the watermark the latest event time minus
    ``max_out_of_orderness`` seconds; ``trigger``: Spark's trigger of the
    query staging the batches (``'available_now'``: read what is there, then
    finish; an interval such as ``'5 seconds'``; default: as soon as the
    last batch is staged). See ``stream`` and ``spark_stream``.

    The schema is read when the transform is applied (``expand``), so that
    every error starts with the label it was applied under:
    ``'Read orders' (ReadFromSpark dataframe): ...``.
    """

    def __init__(
        self,
        table: Optional[str] = None,
        *,
        query: Optional[str] = None,
        dataframe=None,
        spark=None,
        event_time: Optional[str] = None,
        max_out_of_orderness=None,
        trigger: Optional[str] = None,
        name: Optional[str] = None,
        _identity: Optional[dict] = None,
        _reader: Optional[dict] = None,
        _problem: Optional[str] = None,
    ):
        super().__init__()
        given = [
            n
            for n, v in (('table', table), ('query', query), ('dataframe', dataframe))
            if v is not None
        ]
        self._problem = _problem
        if self._problem is None and _reader is None and len(given) != 1:
            self._problem = (
                'needs exactly one of table=, query= or dataframe= '
                f'(got {", ".join(given) or "none"}).'
            )
        self._source = given[0] if len(given) == 1 else 'dataframe'
        self._kind = (
            native.kind(READ_URN, {'identity': {'format': _reader['format']}})
            if _reader is not None
            else native.kind(READ_URN, {'source': self._source, 'table': table, 'query': query})
            if len(given) == 1
            else 'ReadFromSpark'
        )
        self._label: Optional[str] = None  # the full label, once applied
        self._args = dict(
            table=table,
            query=query,
            dataframe=dataframe,
            spark=spark,
            event_time=event_time,
            max_out_of_orderness=max_out_of_orderness,
            trigger=trigger,
            identity=_identity or ({'name': name} if name else None),
            reader=_reader,
        )

    @property
    def _what(self) -> str:
        return native.named(self._label or self.label, self._kind)

    @classmethod
    def stream(
        cls,
        format: Optional[str] = None,
        *,
        path: Optional[str] = None,
        options: Optional[dict] = None,
        schema=None,
        dataframe=None,
        event_time: Optional[str] = None,
        max_out_of_orderness=None,
        trigger: Optional[str] = None,
        spark=None,
    ) -> 'ReadFromSpark':
        """A streaming source of the session as an unbounded PCollection:
        ``ReadFromSpark.stream(format='kafka', options={'subscribe': 'events',
        'kafka.bootstrap.servers': 'host:9092'}, event_time='timestamp',
        max_out_of_orderness=10)``, or ``format='json', path=folder,
        schema=...``, ``format='rate'``, a Python data source's name; or
        ``dataframe=`` a streaming DataFrame. See the class doc."""
        stream = dict(
            event_time=event_time, max_out_of_orderness=max_out_of_orderness, trigger=trigger
        )
        if (format is None) == (dataframe is None):
            return cls(
                dataframe=dataframe,
                _problem='ReadFromSpark.stream needs exactly one of format= or dataframe=.',
                **stream,
            )
        if dataframe is not None:
            problem = (
                None
                if dataframe.isStreaming
                else 'ReadFromSpark.stream(dataframe=...) was given a batch DataFrame '
                'where a stream is required; make it with spark.readStream, or '
                'read it bounded with ReadFromSpark(dataframe=...).'
            )
            return cls(dataframe=dataframe, _problem=problem, **stream)
        reader = {'format': format, 'path': path, 'options': options, 'schema': schema}
        return cls(spark=spark, _reader=reader, **stream)

    def _resolve(self) -> None:
        """The DataFrame analysed, its schema as a Beam row type, the spec:
        errors name ``self._what``."""
        args = self._args
        dataframe = args['dataframe']
        identity = args['identity']
        if args['reader'] is not None:  # ReadFromSpark.stream(format=...)
            from beam_spark_inproc.transforms import spark_stream

            session = active_session(args['spark'])
            if session is None:
                raise SparkInteropError(
                    f'{self._what} needs a SparkSession: pass spark=session, or create one first.'
                )
            r = args['reader']
            dataframe, identity = spark_stream.reader(
                session, self._what, r['format'], r['path'], r['options'], r['schema']
            )
        table, query = args['table'], args['query']
        session = dataframe.sparkSession if dataframe is not None else active_session(args['spark'])
        if session is None:
            raise SparkInteropError(
                f'{self._what} needs a SparkSession to read the schema: pass '
                'spark=session, or create one first.'
            )
        try:
            if dataframe is None:
                dataframe = session.table(table) if table is not None else session.sql(query)
            spark_schema = dataframe.schema  # analyses: unknown table, bad SQL
        except Exception as e:
            raise spark_error(self._what, e) from None
        try:
            self._arrow, self._row_type = types.spark_row_type(spark_schema)
        except types.SchemaError as e:
            raise SparkInteropError(f'{self._what}: {e}') from None
        self._dataframe = dataframe
        self._token = f'df-{next(_tokens)}'
        _DATAFRAMES[self._token] = dataframe
        self._spec = {
            'source': self._source,
            'table': table,
            'query': query,
            'token': self._token,
            'schema': encode_schema(self._arrow),
        }
        self._stream = None
        streaming = self._source == 'dataframe' and dataframe.isStreaming
        event_time, lateness, trigger = (
            args['event_time'],
            args['max_out_of_orderness'],
            args['trigger'],
        )
        if streaming or event_time is not None or lateness is not None or trigger is not None:
            from beam_spark_inproc.transforms import spark_stream

            self._stream = dict(
                self._spec,
                **spark_stream.stream_spec(
                    self._what,
                    dataframe if streaming else None,
                    event_time,
                    lateness,
                    trigger,
                    identity,
                ),
            )

    def expand(self, pbegin):
        self._label = applied_label(pbegin.pipeline, self.label)
        if self._problem is not None:
            raise SparkInteropError(f'{self._what}: {self._problem}')
        self._resolve()
        if self._stream is not None:
            if (
                getattr(pbegin.pipeline.runner, 'native_urns', ())
                and READ_STREAM_URN in pbegin.pipeline.runner.native_urns
            ):
                return pvalue.PCollection(
                    pbegin.pipeline, element_type=self._row_type, is_bounded=False
                )
            raise SparkInteropError(
                f'{self._what} over a streaming DataFrame runs on '
                'beam_spark_inproc.InProcessSparkRunner (a stream of its '
                f"micro-batch loop); this pipeline's runner is "
                f'{type(pbegin.pipeline.runner).__name__}.'
            )
        if not _native(pbegin.pipeline, self._what, READ_URN):
            from beam_spark_inproc.transforms import local

            self._local = True
            return local.read(
                pbegin, _DATAFRAMES[self._token], self._spec, self._row_type, self._what
            )
        return pvalue.PCollection(pbegin.pipeline, element_type=self._row_type, is_bounded=True)

    def infer_output_type(self, unused_input_type):
        return self._row_type

    def get_windowing(self, unused_inputs):
        return Windowing(GlobalWindows())

    def to_runner_api_parameter(self, context):
        if getattr(self, '_local', False):  # a composite of Beam transforms
            return super().to_runner_api_parameter(context)
        if self._stream is not None:
            return READ_STREAM_URN, json.dumps(self._stream).encode()
        return READ_URN, json.dumps(self._spec).encode()


class WriteToSpark(beam.PTransform):
    """A PCollection of Beam rows written by Spark: to a table, or as files.

    ``WriteToSpark(table='db.t', mode='append')`` or
    ``WriteToSpark(path='/out', format='parquet')``; ``format`` is any Spark
    data source the session has (parquet, orc, json, csv; delta or iceberg when
    installed). ``mode``: ``errorifexists`` (default), ``append``,
    ``overwrite``, ``ignore``. One Spark job writes it with Spark's commit
    protocol: retried tasks are written once, a failed job commits nothing.

    ``window_start``, ``window_end``, ``pane_timing``, ``pane_index``: names of
    columns to add holding each element's window bounds and pane
    (``stream_convert``). On an unbounded PCollection (a stream) each
    micro-batch's rows are appended exactly once, across task retries and
    driver restarts (``execution.streaming.spark_sinks``): ``mode='append'``
    to ``path=`` or to an existing parquet, orc or json catalog table
    (``stream_tables``).
    """

    def __init__(
        self,
        table: Optional[str] = None,
        *,
        path: Optional[str] = None,
        format: Optional[str] = None,
        mode: str = 'errorifexists',
        options: Optional[dict] = None,
        partition_by=(),
        spark=None,
        window_start: Optional[str] = None,
        window_end: Optional[str] = None,
        pane_timing: Optional[str] = None,
        pane_index: Optional[str] = None,
    ):
        super().__init__()
        self._problem: Optional[str] = None  # raised when applied, under its label
        if (table is None) == (path is None):
            self._problem = 'needs exactly one of table= or path=.'
        elif mode not in WRITE_MODES:
            self._problem = f'mode {mode!r} is not one of {", ".join(WRITE_MODES)}.'
        if path is not None and format is None:
            format = 'parquet'
        self._kind = (
            native.kind(WRITE_URN, {'table': table, 'path': path})
            if self._problem is None
            else 'WriteToSpark'
        )
        self._label: Optional[str] = None  # the full label, once applied
        self._session = spark
        self._spec: dict[str, Any] = {
            'table': table,
            'path': path,
            'format': format,
            'mode': mode,
            'options': {k: str(v) for k, v in (options or {}).items()},
            'partition_by': list(partition_by),
            'window_columns': {
                role: name
                for role, name in (
                    ('window_start', window_start),
                    ('window_end', window_end),
                    ('pane_timing', pane_timing),
                    ('pane_index', pane_index),
                )
                if name
            },
        }

    @property
    def _what(self) -> str:
        return native.named(self._label or self.label, self._kind)

    def expand(self, pcoll):
        self._label = applied_label(pcoll.pipeline, self.label)
        if self._problem is not None:
            raise SparkInteropError(f'{self._what}: {self._problem}')
        is_native = _native(pcoll.pipeline, self._what, WRITE_URN)
        try:
            arrow = types.arrow_schema(types.element_schema(pcoll.element_type, 'its input'))
        except types.SchemaError as e:
            raise SparkInteropError(f'{self._what}: {e}') from None
        arrow = _with_window_columns(arrow, self._spec['window_columns'], self._what)
        stream = pcoll.is_bounded is False
        if stream:  # the rules of a streaming write, while building
            from beam_spark_inproc.planning.native_streaming import write_problems

            problems = write_problems(self._spec)
            if problems:
                raise SparkInteropError(
                    f'{self._what} on an unbounded PCollection: ' + ' '.join(problems)
                )
        session = active_session(self._session)
        if stream and self._spec['table']:  # resolved in the catalog now
            if session is None:
                raise SparkInteropError(
                    f'{self._what} on an unbounded PCollection needs a '
                    'SparkSession to find the table in: pass spark=session, '
                    'or create one first.'
                )
            from beam_spark_inproc.transforms import stream_tables

            arrow = stream_tables.check(session, self._spec, arrow, self._what)
        elif session is not None and self._spec['table']:
            arrow = target_schema(session, self._spec, arrow, self._what)
        elif session is not None and self._spec['mode'] == 'append':
            arrow = path_schema(session, self._spec, arrow, self._what)
        self._spec['schema'] = encode_schema(arrow)
        if not is_native:
            from beam_spark_inproc.transforms import local

            if stream or self._spec['window_columns']:
                raise SparkInteropError(
                    f'{self._what}: window/pane columns and unbounded input '
                    'need InProcessSparkRunner; this runner writes through '
                    'the session in one batch.'
                )
            if session is None:
                raise SparkInteropError(
                    f'{self._what} needs a SparkSession to write with: pass '
                    'spark=session, or create one first.'
                )
            self._local = True
            return local.write(pcoll, session, self._spec, self._what)
        return pvalue.PDone(pcoll.pipeline)

    def to_runner_api_parameter(self, context):
        if getattr(self, '_local', False):  # a composite of Beam transforms
            return super().to_runner_api_parameter(context)
        return WRITE_URN, json.dumps(self._spec).encode()


def _with_window_columns(arrow, columns: dict, what: str):
    """The write's schema: the elements' fields, then the window/pane columns."""
    import pyarrow as pa

    from beam_spark_inproc.transforms import stream_convert

    if not columns:
        return arrow
    names = {f.name.lower() for f in arrow}
    taken = [n for n in columns.values() if n.lower() in names]
    if taken or len({n.lower() for n in columns.values()}) != len(columns):
        raise SparkInteropError(
            f'{what}: window/pane column names {sorted(columns.values())} must '
            'differ from each other and from the fields of the PCollection '
            f'({", ".join(f.name for f in arrow)}).'
        )
    return pa.schema(list(arrow) + stream_convert.column_fields(columns))


class SparkSql(beam.PTransform):
    """Spark SQL over PCollections of Beam rows, giving a PCollection of rows.

    Apply to one PCollection (the view ``PCOLLECTION``, as Beam's SqlTransform)
    or to a dict ``{view name: PCollection}``::

        {'orders': orders, 'users': users} | SparkSql(
            'SELECT u.name, SUM(o.amount) AS total FROM orders o '
            'JOIN users u ON o.user_id = u.id GROUP BY u.name')

    Each input becomes a temporary view of the runner's session under its
    name. Inputs must be in the global window: Spark SQL knows nothing of
    Beam's windows (window first with Beam, or put the window in a column).

    On an unbounded PCollection (a stream) the query runs over each
    micro-batch's fired panes of its one windowed input, the window's bounds
    in columns ``window_start`` and ``window_end`` (names of your choice);
    the query selects them, and each result row goes back into the window
    they name (``stream_convert.WindowedToBeamRows``).
    """

    def __init__(
        self,
        query: str,
        spark=None,
        *,
        window_start: str = 'window_start',
        window_end: str = 'window_end',
    ):
        super().__init__()
        self._query = query
        self._session = spark
        self._kind = native.kind(SQL_URN, {'query': query})
        self._label: Optional[str] = None  # the full label, once applied
        self._columns = {'window_start': window_start, 'window_end': window_end}
        self._windowing: Optional[Windowing] = None  # the input's, in a stream

    @property
    def _what(self) -> str:
        return native.named(self._label or self.label, self._kind)

    def expand(self, pcolls):
        if isinstance(pcolls, pvalue.PCollection):
            pcolls = {'PCOLLECTION': pcolls}
        if not isinstance(pcolls, dict) or not pcolls:
            raise SparkInteropError(
                f'{self._what} takes a PCollection or a dict of them by view name.'
            )
        pipeline = next(iter(pcolls.values())).pipeline
        self._label = applied_label(pipeline, self.label)
        is_native = _native(pipeline, self._what, SQL_URN)
        stream = any(pc.is_bounded is False for pc in pcolls.values())
        if stream:
            self._windowing = _stream_sql_windowing(pcolls, self._what)
        seen: dict[int, str] = {}
        views = {}
        for name, pcoll in pcolls.items():
            if id(pcoll) in seen:
                raise SparkInteropError(
                    f'{self._what}: views {seen[id(pcoll)]!r} and {name!r} are the '
                    'same PCollection; give it once and refer to it twice in SQL.'
                )
            seen[id(pcoll)] = name
            windowfn = pcoll.windowing.windowfn
            if not stream and not isinstance(windowfn, GlobalWindows):
                raise SparkInteropError(
                    f'{self._what}: view {name!r} is windowed '
                    f'({type(windowfn).__name__}); Spark SQL runs over the global '
                    'window only. Re-window it into the global window '
                    '(beam.WindowInto(GlobalWindows())), with the window in a '
                    'column if the query needs it.'
                )
            try:
                views[name] = types.arrow_schema(
                    types.element_schema(pcoll.element_type, f'view {name!r}')
                )
            except types.SchemaError as e:
                raise SparkInteropError(f'{self._what}: {e}') from None
            if stream:
                views[name] = _with_window_columns(views[name], self._columns, self._what)
        session = active_session(self._session)
        if session is None:
            raise SparkInteropError(
                f'{self._what} needs a SparkSession to analyse the query: pass '
                'spark=session, or create one first.'
            )
        output, self._row_type = analyse(session, self._query, views, self._what)
        self._spec: dict[str, Any] = {
            'query': self._query,
            'schema': encode_schema(output),
            'views': {n: encode_schema(s) for n, s in views.items()},
        }
        if stream:
            _check_window_output(output, self._columns, self._what)
            self._spec['window_columns'] = self._columns
            assert self._windowing is not None  # set above for a stream
            self._spec['global_window'] = isinstance(self._windowing.windowfn, GlobalWindows)
        if not is_native:
            if stream:
                raise SparkInteropError(
                    f'{self._what} on an unbounded PCollection needs InProcessSparkRunner.'
                )
            from beam_spark_inproc.transforms import local

            self._local = True
            return local.sql(pcolls, session, self._spec, self._row_type, self._what)
        return pvalue.PCollection(pipeline, element_type=self._row_type, is_bounded=not stream)

    def get_windowing(self, unused_inputs):
        return self._windowing or Windowing(GlobalWindows())

    def to_runner_api_parameter(self, context):
        if getattr(self, '_local', False):  # a composite of Beam transforms
            return super().to_runner_api_parameter(context)
        return SQL_URN, json.dumps(self._spec).encode()


def _stream_sql_windowing(pcolls: dict, what: str) -> Windowing:
    """The windowing of SparkSql's one input in a stream (its output's too),
    or why a query over it would mean nothing."""
    from apache_beam.transforms.trigger import DefaultTrigger

    if len(pcolls) != 1:
        raise SparkInteropError(
            f'{what} on unbounded input: one view only (got '
            f'{", ".join(sorted(pcolls))}). In a stream the query runs over '
            "each micro-batch's fired panes, and two inputs' panes of a window "
            'fire in different micro-batches; join them with Beam first '
            '(e.g. CoGroupByKey), then query the result.'
        )
    ((name, pcoll),) = pcolls.items()
    windowing = pcoll.windowing
    if isinstance(windowing.windowfn, GlobalWindows) and isinstance(
        windowing.triggerfn, DefaultTrigger
    ):
        raise SparkInteropError(
            f'{what} on unbounded input: view {name!r} is in the global window '
            'with the default trigger, whose only pane fires at the end of '
            'the stream. Window it (beam.WindowInto(FixedWindows(...))) or '
            'give it a trigger, so the query runs over each fired pane.'
        )
    return windowing


def _check_window_output(output, columns: dict, what: str) -> None:
    """A streaming query selects the window's bounds as timestamps: its rows
    go back into the window they name."""
    import pyarrow as pa

    names = {f.name: f for f in output}
    missing = [
        c for c in columns.values() if c not in names or not pa.types.is_timestamp(names[c].type)
    ]
    if missing:
        raise SparkInteropError(
            f'{what} on unbounded input: the result must have the window '
            f'columns {columns["window_start"]!r} and {columns["window_end"]!r} '
            '(timestamps, as the view gives them), so that each row goes back '
            f'into its window; missing or not timestamps: {missing}. Select '
            'them (and GROUP BY them when aggregating).'
        )


def analyse(session, query: str, views: dict, what: str):
    """(Arrow schema, Beam row type) of ``query``'s output over empty views
    with these schemas (the views are dropped afterwards)."""
    created = []
    try:
        for name, schema in views.items():
            session.createDataFrame([], types.arrow_to_spark(schema)).createOrReplaceTempView(name)
            created.append(name)
        result = session.sql(query).schema
    except Exception as e:
        raise spark_error(what, e) from None
    finally:
        for name in created:
            try:
                session.catalog.dropTempView(name)
            except Exception:
                pass
    try:
        return types.spark_row_type(result)
    except types.SchemaError as e:
        raise SparkInteropError(f'{what}: output {e}') from None
