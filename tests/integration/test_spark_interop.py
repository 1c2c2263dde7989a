"""ReadFromSpark, WriteToSpark and SparkSql on classic Spark.

The cases themselves (``spark_interop_pipelines``) also run over Spark Connect
(``test_spark_connect.py``). Here too: the errors for bad input, raised while
the pipeline is built, before any Spark job. The same cases on the debug
engine, on FnApiRunner and BundleBasedDirectRunner (through the session), and
runners out of this process refusing these transforms.
"""

from __future__ import annotations

from typing import Iterator

import apache_beam as beam
import pytest
from apache_beam.transforms import window
from apache_beam.typehints.row_type import RowTypeConstraint

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.transforms import ReadFromSpark
from beam_spark_inproc.transforms import SparkInteropError
from beam_spark_inproc.transforms import SparkSql
from beam_spark_inproc.transforms import WriteToSpark

from . import spark_interop_pipelines as cases

_KV = RowTypeConstraint.from_fields([('id', int), ('word', str)])


@pytest.mark.parametrize('name', sorted(cases.CASES))
def test_case_on_classic_spark(spark, tmp_path, name):
    cases.CASES[name](spark, InProcessSparkRunner(spark=spark), str(tmp_path))


@pytest.fixture
def pipeline(spark):
    return beam.Pipeline(runner=InProcessSparkRunner(spark=spark))


def _rows(p, n=3, label='Rows'):
    return (
        p
        | f'{label} create' >> beam.Create(range(n))
        | f'{label} row' >> beam.Map(lambda i: beam.Row(id=i, word='w')).with_output_types(_KV)
    )


def test_unknown_table(spark, pipeline):
    with pytest.raises(
        SparkInteropError,
        match=r"^'Read orders' \(ReadFromSpark table='no_such_table_x'\): "
        r'.*(TABLE_OR_VIEW_NOT_FOUND|not found)',
    ):
        pipeline | 'Read orders' >> ReadFromSpark('no_such_table_x', spark=spark)


def test_bad_sql(spark, pipeline):
    with pytest.raises(
        SparkInteropError, match=r"^'Read' \(ReadFromSpark query='SELEC 1'\): .*PARSE"
    ):
        pipeline | 'Read' >> ReadFromSpark(query='SELEC 1', spark=spark)
    with pytest.raises(
        SparkInteropError,
        match=r"^'Totals' \(SparkSql query='SELECT nope FROM PCOLLECTION'\): .*nope",
    ):
        _rows(pipeline) | 'Totals' >> SparkSql('SELECT nope FROM PCOLLECTION', spark=spark)


def test_read_needs_exactly_one_source(spark, pipeline):
    with pytest.raises(
        SparkInteropError,
        match=r"^'Read' \(ReadFromSpark\): needs exactly one of table=, query= or dataframe=",
    ):
        pipeline | 'Read' >> ReadFromSpark('t', query='SELECT 1', spark=spark)


def test_write_needs_a_target_and_a_mode(pipeline):
    with pytest.raises(
        SparkInteropError, match=r"^'Write totals' \(WriteToSpark\): needs exactly one of table="
    ):
        _rows(pipeline) | 'Write totals' >> WriteToSpark(table='t', path='/tmp/t')
    with pytest.raises(
        SparkInteropError,
        match=r"^'Write' \(WriteToSpark\): mode 'upsert' is not one of append, ",
    ):
        _rows(pipeline, label='More') | 'Write' >> WriteToSpark(table='t', mode='upsert')


def test_two_dataframe_reads_are_told_apart_by_label(spark, pipeline):
    """Two reads over ``dataframe=`` differ only in the label they were
    applied under: their errors name it."""
    span = "SELECT 1 AS id, INTERVAL '1' DAY AS span"
    messages = []
    for label in ('Read orders', 'Read users'):
        with pytest.raises(SparkInteropError) as info:
            pipeline | label >> ReadFromSpark(dataframe=spark.sql(span))
        messages.append(str(info.value))
    assert messages[0].startswith("'Read orders' (ReadFromSpark dataframe): field 'span'")
    assert messages[1].startswith("'Read users' (ReadFromSpark dataframe): field 'span'")


def test_errors_while_running_name_the_label(spark):
    """Found when the pipeline runs, not while it was built: each stage's
    error names its transform as the user labelled it."""
    table = cases._name('appeared')
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark, debug=True))
    _ = _rows(p) | 'Write totals' >> WriteToSpark(table=table, spark=spark)
    spark.createDataFrame([(1, 'a')], 'id long, word string').write.saveAsTable(table)
    try:
        with pytest.raises(SparkInteropError) as info:
            p.run().wait_until_finish()
        assert str(info.value).startswith(
            f"'Write totals' (WriteToSpark table={table!r}): table {table!r} already "
            "exists and mode is 'errorifexists'"
        ), str(info.value)
    finally:
        cases._drop(spark, table)
    # createDataFrame makes its session the active one: the shared one again after.
    other = spark.newSession().createDataFrame([(1, 'a')], 'id long, word string')
    try:
        p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark, debug=True))
        _ = p | 'Read orders' >> ReadFromSpark(dataframe=other) | beam.Map(print)
        with pytest.raises(SparkInteropError) as info:
            p.run().wait_until_finish()
    finally:
        spark.createDataFrame([], 'id long')
    assert str(info.value).startswith(
        "'Read orders' (ReadFromSpark dataframe): the DataFrame belongs to another "
        "SparkSession than the runner's"
    ), str(info.value)


def test_a_script_run_with_the_runner_flag_reads_a_dataframe_of_the_runners_session(spark):
    """docs/spark-interop.md's example: ``InProcessSparkRunner().session(options)``
    is the session the pipeline's own runner (made by Beam from
    ``--runner=``) runs on, so a DataFrame of it reads."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that
    from apache_beam.testing.util import equal_to

    options = PipelineOptions(
        [
            '--runner=beam_spark_inproc.InProcessSparkRunner',
            '--spark_master=local[2]',
            '--inproc_debug',
        ]
    )
    session = InProcessSparkRunner().session(options)
    assert session is spark  # the active session, as a script's first call makes it
    orders = session.createDataFrame([(1, 'a'), (2, 'b')], 'id long, item string')
    with beam.Pipeline(options=options) as p:
        assert isinstance(p.runner, InProcessSparkRunner)
        rows = p | 'Read orders' >> ReadFromSpark(dataframe=orders) | beam.Map(tuple)
        assert_that(rows, equal_to([(1, 'a'), (2, 'b')]))


def test_a_nested_label_is_named_in_full(spark, pipeline):
    class Outer(beam.PTransform):
        def expand(self, pbegin):
            return pbegin | 'Read' >> ReadFromSpark('no_such_table_x', spark=spark)

    with pytest.raises(SparkInteropError, match=r"^'Outer/Read' \(ReadFromSpark table="):
        pipeline | 'Outer' >> Outer()


def test_pcollection_without_schema(spark, pipeline):
    ints = pipeline | beam.Create([1, 2, 3])
    with pytest.raises(
        SparkInteropError,
        match=r"^'WriteToSpark' \(WriteToSpark table='t'\): its input has element type "
        r'int, which has no Beam schema',
    ):
        ints | WriteToSpark(table='t', spark=spark)
    with pytest.raises(
        SparkInteropError, match=r"^'SparkSql' \(SparkSql query='SELECT 1'\): view 'PCOLLECTION'"
    ):
        ints | SparkSql('SELECT 1', spark=spark)


def test_untyped_row_field_is_named(spark, pipeline):
    rows = pipeline | beam.Create([{'a': 1}]) | beam.Map(lambda d: beam.Row(id=d['a'], x=1))
    with pytest.raises(SparkInteropError, match=r"field 'id'.*could not infer"):
        rows | WriteToSpark(table='t', spark=spark)


def test_schema_mismatch_on_append(spark, pipeline):
    table = cases._name('mismatch')
    spark.createDataFrame([(1, 2.0)], 'id long, other double').write.saveAsTable(table)
    try:
        with pytest.raises(SparkInteropError) as info:
            _rows(pipeline) | WriteToSpark(table=table, mode='append', spark=spark)
        message = str(info.value)
        assert "field 'word' is not a column of the table" in message
        assert "column 'other' of the table is not a field" in message
        with pytest.raises(SparkInteropError, match='already exists and mode is'):
            _rows(pipeline, label='More') | 'Again' >> WriteToSpark(table=table, spark=spark)
        assert [tuple(r) for r in spark.table(table).collect()] == [(1, 2.0)]
    finally:
        cases._drop(spark, table)


_BATCH_VIEW_WRITES = {
    'temporary': 'Spark would write a permanent table of that name, hidden behind the view',
    'global temporary': "Spark's writer cannot write into the global temporary database",
    'permanent': 'Spark refuses to append to a view, and overwrite would replace it with a table',
}


@pytest.mark.parametrize('view', sorted(_BATCH_VIEW_WRITES))
@pytest.mark.parametrize('mode', ['append', 'overwrite', 'ignore', 'errorifexists'])
def test_a_batch_write_into_a_view_is_refused(spark, pipeline, view, mode):
    """Spark's saveAsTable into a temporary view makes a table hidden behind
    it, fails on a global one for want of the database, and replaces a
    permanent view on overwrite: every mode is refused while building."""
    rows = spark.createDataFrame([(7, 'v')], 'id long, word string')
    short = {'temporary': 'tmp', 'global temporary': 'gtmp', 'permanent': 'perm'}[view]
    name = f'{short}_view_totals'
    if view == 'temporary':
        rows.createOrReplaceTempView(name)
    elif view == 'global temporary':
        rows.createOrReplaceGlobalTempView(name)
        name = f'global_temp.{name}'
    else:
        spark.sql(f"CREATE OR REPLACE VIEW {name} AS SELECT 7L AS id, 'v' AS word")
    try:
        with pytest.raises(SparkInteropError) as info:
            _rows(pipeline) | 'Write totals' >> WriteToSpark(table=name, mode=mode, spark=spark)
        assert str(info.value) == (
            f"'Write totals' (WriteToSpark table={name!r}): {name!r} is a view ({view}); "
            f'WriteToSpark writes to a table ({_BATCH_VIEW_WRITES[view]}). Write to another '
            'table name, or to the table the view reads.'
        )
        assert spark.catalog.getTable(name).tableType in ('TEMPORARY', 'VIEW')
        assert [tuple(r) for r in spark.table(name).collect()] == [(7, 'v')]
    finally:
        spark.sql(f'DROP VIEW IF EXISTS {name}')


def test_type_mismatch_on_append_names_both_types(spark, pipeline):
    table = cases._name('typemismatch')
    spark.createDataFrame([(1, 'a')], 'id int, word string').write.saveAsTable(table)
    try:
        with pytest.raises(
            SparkInteropError, match=r"field 'id': Beam gives bigint, the table has int"
        ):
            _rows(pipeline) | WriteToSpark(table=table, mode='append', spark=spark)
    finally:
        cases._drop(spark, table)


def test_unsupported_spark_type_names_field(spark, pipeline):
    with pytest.raises(
        SparkInteropError,
        match=r"field 'span': Spark type interval day "
        r'\(Arrow duration\[us\]\) has no Beam schema type',
    ):
        pipeline | ReadFromSpark(query="SELECT 1 AS id, INTERVAL '1' DAY AS span", spark=spark)


def test_windowed_sql_input_is_rejected(spark, pipeline):
    windowed = _rows(pipeline) | beam.WindowInto(window.FixedWindows(10))
    with pytest.raises(
        SparkInteropError,
        match=r"view 'PCOLLECTION' is windowed "
        r'\(FixedWindows\); Spark SQL runs over the global window',
    ):
        windowed | SparkSql('SELECT * FROM PCOLLECTION', spark=spark)


@pytest.mark.parametrize('name', sorted(cases.CASES))
def test_case_on_debug_engine(spark, tmp_path, name):
    """The same cases on the debug engine: Spark's part on the session, the
    Beam stages in the driver."""
    cases.CASES[name](spark, InProcessSparkRunner(spark=spark, debug=True), str(tmp_path))


@pytest.mark.parametrize('name', sorted(cases.CASES))
def test_case_on_fnapi_runner(spark, tmp_path, name):
    """The same cases on Beam's FnApiRunner: the transforms expand to Beam
    transforms calling the session (``transforms.local``)."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    cases.CASES[name](spark, FnApiRunner(), str(tmp_path))


@pytest.mark.parametrize('name', ['read_query_and_dataframe', 'sql_join_keeps_metrics'])
def test_case_on_direct_runner(spark, tmp_path, name):
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

    cases.CASES[name](spark, BundleBasedDirectRunner(), str(tmp_path))


def test_other_runners_expand_to_beam_transforms(spark):
    """Off InProcessSparkRunner no runner-native URN reaches the proto."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_spark_inproc.planning.native import NATIVE_URNS

    p = beam.Pipeline(runner=FnApiRunner())
    p | ReadFromSpark(query='SELECT 1 AS id', spark=spark)
    _rows(p) | WriteToSpark(path='/tmp/never-run', spark=spark)
    _rows(p, label='More') | 'Sql' >> SparkSql('SELECT * FROM PCOLLECTION', spark=spark)
    urns = {t.spec.urn for t in p.to_runner_api().components.transforms.values()}
    assert not urns & NATIVE_URNS, urns & NATIVE_URNS


@pytest.mark.parametrize('runner', ['PortableRunner', 'FnApiRunner multi_processing'])
def test_out_of_process_runners_fail_at_construction(spark, runner):
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.runners.portability.portable_runner import PortableRunner

    if runner == 'PortableRunner':
        p = beam.Pipeline(runner=PortableRunner())
    else:
        p = beam.Pipeline(
            runner=FnApiRunner(), options=PipelineOptions(direct_running_mode='multi_processing')
        )
    name = runner.split()[0]
    with pytest.raises(
        SparkInteropError,
        match=rf'runs on beam_spark_inproc.'
        rf'InProcessSparkRunner, or through a local SparkSession.*'
        rf'runner is \w*{name}',
    ):
        p | ReadFromSpark(query='SELECT 1 AS id', spark=spark)
    with pytest.raises(SparkInteropError, match=rf'runner is \w*{name}'):
        _rows(p) | WriteToSpark(path='/tmp/x', spark=spark)
    with pytest.raises(SparkInteropError, match=rf'runner is \w*{name}'):
        _rows(p, label='More') | 'Sql' >> SparkSql('SELECT 1', spark=spark)


def test_a_read_with_one_plain_reader_feeds_it_arrow(spark):
    """The planner's ARROW mode: the one plain reader of a ReadFromSpark (or of
    a SparkSql) takes its Arrow batches; a read with two readers keeps its own
    stage's rows."""
    from beam_spark_inproc.planning import plan as plan_
    from beam_spark_inproc.planning.planner import plan_pipeline

    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark))
    alone = p | 'Alone' >> ReadFromSpark(query='SELECT 1 AS id', spark=spark)
    alone | 'Use' >> beam.Map(lambda r: r.id)
    shared = p | 'Shared' >> ReadFromSpark(query='SELECT 2 AS id', spark=spark)
    shared | 'One' >> beam.Map(lambda r: r.id)
    shared | 'Two' >> beam.Map(lambda r: r.id)
    queried = shared | 'Sql' >> SparkSql('SELECT id + 1 AS id FROM PCOLLECTION', spark=spark)
    queried | 'UseSql' >> beam.Map(lambda r: r.id)
    stages = plan_pipeline(p.to_runner_api()).stages
    by_label = {label: s for s in stages for label in s.labels}
    assert by_label['Alone'].outputs[0].layout == plan_.ARROW_LAYOUT
    assert by_label['Use'].input_mode == plan_.ARROW
    # A query's output too, with no ToBeamRows step before its one reader.
    assert by_label['Sql'].outputs[0].layout == plan_.ARROW_LAYOUT
    assert by_label['UseSql'].input_mode == plan_.ARROW
    assert by_label['Shared'].outputs[0].layout == plan_.CHUNKS
    assert {by_label['One'].input_mode, by_label['Two'].input_mode} == {plan_.PLAIN}
    from beam_spark_inproc.planning.describe import describe

    text = describe(plan_pipeline(p.to_runner_api()))
    assert 'Spark (beam-spark-inproc:spark-read:v1)' in text
    assert "the source's Arrow batches, rows made in this stage" in text


def test_batched_consumers_get_the_arrow_batches_whole(spark, monkeypatch):
    """The first stage after a ReadFromSpark hands a batched DoFn (also one
    that takes elements too) and Beam's DataFrame API each Arrow batch as one batch (6,000 rows:
    Beam's own
    rebatching of elements stops at 4,096), and makes no row objects for
    them (debug engine: the worker code runs here, where ``data_rows`` is
    patched to fail)."""
    import pyarrow as pa
    from apache_beam.dataframe.convert import to_dataframe
    from apache_beam.dataframe.convert import to_pcollection
    from apache_beam.metrics import MetricsFilter
    from apache_beam.testing.util import assert_that
    from apache_beam.testing.util import equal_to

    from beam_spark_inproc.transforms.convert import ArrowRows

    def no_rows(*args, **kwargs):
        raise AssertionError('a row object was made for a batched consumer')

    monkeypatch.setattr(ArrowRows, 'data_rows', no_rows)
    n = 6000
    source = spark.range(0, n, 1, 1).selectExpr(
        'id', "concat('k', cast(id % 3 as string)) AS key"
    )  # one partition
    sizes = beam.metrics.Metrics.distribution('interop', 'batch_rows')

    class Sizes(beam.DoFn):
        @beam.DoFn.yields_elements
        def process_batch(self, batch):
            sizes.update(batch.num_rows)
            yield batch.num_rows

    class Either(Sizes):  # takes elements or batches: gets batches here
        def process(self, element):
            yield 1

    Sizes.process_batch.__annotations__ = {'batch': pa.Table, 'return': Iterator[int]}
    Either.process.__annotations__ = {'return': Iterator[int]}
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark, debug=True))
    total = (
        p
        | 'Arrow' >> ReadFromSpark(dataframe=source)
        | beam.ParDo(Sizes())
        | beam.CombineGlobally(sum)
    )
    assert_that(total, equal_to([n]))
    either = (
        p
        | 'Either' >> ReadFromSpark(dataframe=source)
        | 'Either sizes' >> beam.ParDo(Either())
        | 'Either total' >> beam.CombineGlobally(sum)
    )
    assert_that(either, equal_to([n]), label='either')
    frame = to_dataframe(p | 'Frame' >> ReadFromSpark(dataframe=source))
    counts = to_pcollection(frame.groupby('key').size().to_frame('n'), include_indexes=True)
    assert_that(
        counts | beam.Map(lambda r: (r.key, int(r.n))),
        equal_to([(f'k{i}', n // 3) for i in range(3)]),
        label='frame',
    )
    result = p.run()
    result.wait_until_finish()
    dists = result.metrics().query(MetricsFilter().with_name('batch_rows'))['distributions']
    assert [(d.committed.count, d.committed.max) for d in dists] == [(1, n)] * 2, dists


@pytest.mark.parametrize('reader', ['spark', 'files'])
def test_batched_consumers_get_large_batches_under_the_cap(spark, tmp_path, monkeypatch, reader):
    """A batched DoFn after a ReadFromSpark sees large batches: Spark's
    10,000-row Arrow batches of a task joined, or a Parquet file's row group
    whole (the pyarrow path), up to ``batches.MAX_ROWS``; over the cap, Spark's
    batches are not joined and a row group is split evenly. Beam's DataFrame
    API over the same read gives the counts computed here (debug engine: the
    worker code runs here, where the cap is patched)."""
    import pyarrow as pa
    from apache_beam.dataframe.convert import to_dataframe
    from apache_beam.dataframe.convert import to_pcollection
    from apache_beam.testing.util import assert_that
    from apache_beam.testing.util import equal_to

    from beam_spark_inproc.transforms import batches
    from beam_spark_inproc.transforms import files
    from beam_spark_inproc.transforms import types

    n = 25_000
    source = spark.range(0, n, 1, 1).selectExpr(
        'id', "concat('k', cast(id % 3 as string)) AS key"
    )  # one partition
    if reader == 'files':  # one file, one row group
        source.write.parquet(str(tmp_path / 'one'))
        source = spark.read.parquet(str(tmp_path / 'one'))
        assert files.file_units(source, types.spark_row_type(source.schema)[0], 2)

    class Sizes(beam.DoFn):
        @beam.DoFn.yields_elements
        def process_batch(self, batch):
            yield batch.num_rows, sum(batch.column('id').to_pylist())

    Sizes.process_batch.__annotations__ = {'batch': pa.Table, 'return': Iterator[tuple[int, int]]}

    def run(expected_sizes):
        p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark, debug=True))
        sizes = p | 'Arrow' >> ReadFromSpark(dataframe=source) | beam.ParDo(Sizes())
        assert_that(sizes | beam.Map(lambda s: s[0]), equal_to(expected_sizes))
        assert_that(
            sizes | beam.Map(lambda s: s[1]) | beam.CombineGlobally(sum),
            equal_to([n * (n - 1) // 2]),
            label='ids',
        )
        frame = to_dataframe(p | 'Frame' >> ReadFromSpark(dataframe=source))
        counts = to_pcollection(frame.groupby('key').size().to_frame('n'), include_indexes=True)
        assert_that(
            counts | beam.Map(lambda r: (r.key, int(r.n))),
            equal_to([(f'k{i}', len(range(i, n, 3))) for i in range(3)]),
            label='frame',
        )
        p.run().wait_until_finish()

    if reader == 'spark':
        # Spark's batches 10,000 + 10,000 + 5,000; the debug engine deals them
        # to its two tasks in turn: batches 1 and 3 in one task, joined.
        run([15_000, 10_000])
        monkeypatch.setattr(batches, 'MAX_ROWS', 12_000)
        run([10_000, 5_000, 10_000])
    else:
        run([n])
        monkeypatch.setattr(batches, 'MAX_ROWS', 12_000)
        run([8_334, 8_334, 8_332])


def test_sql_over_a_read_uses_the_reads_dataframe(spark, monkeypatch):
    """A SparkSql whose input is a ReadFromSpark's output as it is gets the
    read's own DataFrame as its view: no row crosses into Beam and back
    (debug engine: ``ToArrow``, the view's conversion, is patched to fail).
    A read whose Spark types Beam changes (tinyint -> smallint) still goes
    through Beam, so the view has the types the pipeline was built with."""
    from apache_beam.testing.util import assert_that
    from apache_beam.testing.util import equal_to

    from beam_spark_inproc.transforms import convert

    source = spark.range(0, 50, 1, 2).selectExpr('id', "concat('k', cast(id % 3 as string)) AS key")
    expected = [(f'k{i}', len(range(i, 50, 3))) for i in range(3)]
    query = 'SELECT key, count(*) AS n FROM PCOLLECTION GROUP BY key'
    original = convert.ToArrow.__call__

    def no_arrow(self, batches):
        raise AssertionError('the read crossed into Beam and back')

    monkeypatch.setattr(convert.ToArrow, '__call__', no_arrow)
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark, debug=True)) as p:
        counts = (
            p | ReadFromSpark(dataframe=source) | SparkSql(query) | beam.Map(lambda r: (r.key, r.n))
        )
        assert_that(counts, equal_to(expected))
    crossed = []

    def counted(self, batches):
        crossed.append(1)
        return original(self, batches)

    monkeypatch.setattr(convert.ToArrow, '__call__', counted)
    tiny = source.selectExpr('cast(id AS tinyint) AS id', 'key')
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark, debug=True)) as p:
        typed = (
            p
            | ReadFromSpark(dataframe=tiny)
            | SparkSql('SELECT typeof(id) AS t, count(*) AS n FROM PCOLLECTION GROUP BY typeof(id)')
            | beam.Map(lambda r: (r.t, r.n))
        )
        assert_that(typed, equal_to([('smallint', 50)]))
    assert crossed
