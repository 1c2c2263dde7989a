"""Spark interop cases, run on classic Spark and over Spark Connect.

Each case is ``case(spark, runner, workdir)``: it makes its input with Spark,
runs a pipeline with ReadFromSpark / WriteToSpark / SparkSql on ``runner`` and
raises if a result differs from the one computed here by hand (``assert_that``
inside the pipeline, then checks of what Spark wrote). ``test_spark_interop.py``
runs them on the classic session; the Connect client (``spark_connect_pipelines.py``)
runs them too, and ``test_spark_connect.py`` checks its status (``run_all``).

Only DataFrame APIs that exist over Connect (``createDataFrame``, ``table``,
``read``, ``sql``) are used. Tables get unique names and are dropped afterwards.
Callables inside pipelines are lambdas (shipped by value to Spark's workers).
"""

from __future__ import annotations

import datetime
import decimal
import os
import traceback
import uuid

import apache_beam as beam
from apache_beam.metrics import MetricsFilter
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
from apache_beam.typehints.row_type import RowTypeConstraint
from apache_beam.utils.timestamp import Timestamp

CASES = {}


def _case(fn):
    CASES[fn.__name__] = fn
    return fn


def _name(prefix: str) -> str:
    return f'interop_{prefix}_{uuid.uuid4().hex[:8]}'


def _drop(spark, *tables):
    for t in tables:
        spark.sql(f'DROP TABLE IF EXISTS {t}')


def _events(n=2000, keys=7):
    return [(i, f'k{i % keys}', float(i) / 4) for i in range(n)]


@_case
def read_table_count_per_key(spark, runner, workdir):
    from beam_spark_inproc.transforms import ReadFromSpark

    table = _name('events')
    events = _events()
    spark.createDataFrame(events, 'id long, key string, amount double').repartition(
        3
    ).write.saveAsTable(table)
    expected = {}
    for _, key, amount in events:
        n, total = expected.get(key, (0, 0.0))
        expected[key] = (n + 1, total + amount)
    try:
        with beam.Pipeline(runner=runner) as p:
            counts = (
                p
                | ReadFromSpark(table, spark=spark)
                | beam.Map(lambda r: (r.key, (1, r.amount)))
                | beam.CombinePerKey(lambda vs: tuple(map(sum, zip(*vs))))
            )
            assert_that(counts, equal_to(sorted(expected.items())))
    finally:
        _drop(spark, table)


@_case
def read_query_and_dataframe(spark, runner, workdir):
    from beam_spark_inproc.transforms import ReadFromSpark

    df = spark.createDataFrame([(i, f'n{i}') for i in range(50)], 'id int, name string')
    view = _name('view')
    df.createOrReplaceTempView(view)
    with beam.Pipeline(runner=runner) as p:
        from_query = p | 'Query' >> ReadFromSpark(
            query=f'SELECT id * 2 AS twice FROM {view} WHERE id < 10', spark=spark
        )
        from_df = p | 'Frame' >> ReadFromSpark(dataframe=df.filter('id >= 45'))
        assert_that(
            from_query | beam.Map(lambda r: r.twice),
            equal_to([2 * i for i in range(10)]),
            label='query',
        )
        assert_that(
            from_df | beam.Map(lambda r: (r.id, r.name)),
            equal_to([(i, f'n{i}') for i in range(45, 50)]),
            label='frame',
        )
    spark.catalog.dropTempView(view)


# --- the type matrix: one column per row of docs/spark-interop.md ------------

UTC = datetime.timezone.utc
TS = [
    datetime.datetime(2024, 2, 29, 12, 30, 15, 123456, tzinfo=UTC),
    datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]


def _micros(dt):
    return (dt - datetime.datetime(1970, 1, 1, tzinfo=UTC)) // datetime.timedelta(microseconds=1)


# name -> (Spark DDL type, two values as Spark takes them, the Beam values)
TYPE_MATRIX = {
    'tinyint': ('tinyint', [-128, 127], [-128, 127]),
    'smallint': ('smallint', [-32768, 32767], [-32768, 32767]),
    'int': ('int', [-(2**31), 2**31 - 1], [-(2**31), 2**31 - 1]),
    'bigint': ('bigint', [-(2**63), 2**63 - 1], [-(2**63), 2**63 - 1]),
    'float': ('float', [1.5, -0.25], [1.5, -0.25]),
    'double': ('double', [1e300, -2.5], [1e300, -2.5]),
    'boolean': ('boolean', [True, False], [True, False]),
    'string': ('string', ['héllo', ''], ['héllo', '']),
    'binary': ('binary', [b'\x00\xff', b''], [b'\x00\xff', b'']),
    'decimal': (
        'decimal(12,3)',
        [decimal.Decimal('123456789.123'), decimal.Decimal('-0.001')],
        [decimal.Decimal('123456789.123'), decimal.Decimal('-0.001')],
    ),
    'timestamp': ('timestamp', TS, [Timestamp(micros=_micros(t)) for t in TS]),
    'date': (
        'date',
        [datetime.date(2024, 2, 29), datetime.date(1900, 1, 1)],
        [datetime.date(2024, 2, 29), datetime.date(1900, 1, 1)],
    ),
    'struct': ('struct<a:int,b:string>', [(1, 'x'), (2, None)], [(1, 'x'), (2, None)]),
    'array': ('array<bigint>', [[1, None, 3], []], [[1, None, 3], []]),
    'map': ('map<string,double>', [{'a': 1.0}, {}], [{'a': 1.0}, {}]),
    'nested': (
        'array<struct<t:timestamp>>',
        [[(TS[0],)], None],
        [[(Timestamp(micros=_micros(TS[0])),)], None],
    ),
}


def _plain(value):
    """Beam values as comparable plain data (rows -> tuples)."""
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@_case
def type_matrix(spark, runner, workdir):
    """Every type of the matrix read, checked in Beam, written back, re-read:
    with a null row for the nullable fields."""
    from beam_spark_inproc.transforms import ReadFromSpark
    from beam_spark_inproc.transforms import WriteToSpark

    names = sorted(TYPE_MATRIX)
    ddl = ', '.join(f'c_{n} {TYPE_MATRIX[n][0]}' for n in names)
    rows = [tuple(TYPE_MATRIX[n][1][i] for n in names) for i in range(2)]
    rows.append(tuple(None for _ in names))
    source = spark.createDataFrame(rows, ddl)
    expected = [tuple(TYPE_MATRIX[n][2][i] for n in names) for i in range(2)]
    expected.append(tuple(None for _ in names))
    out = _name('types')
    try:
        with beam.Pipeline(runner=runner) as p:
            read = p | ReadFromSpark(dataframe=source)
            assert_that(
                read
                | beam.Map(
                    lambda r, names=names: tuple(_plain(getattr(r, f'c_{n}')) for n in names)
                ),
                equal_to([_plain(e) for e in expected]),
            )
            read | WriteToSpark(table=out, spark=spark)
            # A read with one plain reader: that stage makes the rows itself
            # (the ARROW input mode) rather than a ToBeamRows step.
            alone = p | 'Alone' >> ReadFromSpark(dataframe=source)
            assert_that(
                alone
                | 'Plain'
                >> beam.Map(
                    lambda r, names=names: tuple(_plain(getattr(r, f'c_{n}')) for n in names)
                ),
                equal_to([_plain(e) for e in expected]),
                label='alone',
            )
        written = spark.table(out)
        # tinyint reads as Beam int16 (Beam Python's BYTE is unsigned), so it
        # comes back as smallint; every other type comes back as it was.
        # Beam decimals carry no precision: a new table gets decimal(38,18).
        want_schema = (
            source.schema.simpleString()
            .replace('c_tinyint:tinyint', 'c_tinyint:smallint')
            .replace('decimal(12,3)', 'decimal(38,18)')
        )
        assert written.schema.simpleString() == want_schema, (
            written.schema.simpleString(),
            want_schema,
        )

        def by_int(rows):  # Decimal('1.5') == Decimal('1.500')
            return sorted((tuple(r) for r in rows), key=lambda r: repr(r[names.index('int')]))

        got, want = by_int(written.collect()), by_int(source.collect())
        assert got == want, (got, want)
    finally:
        _drop(spark, out)


# --- batched consumers ----------------------------------------------------------


def _batch_rows(n=3000, keys=7):
    """(id, key, amount, flag) rows with a null in each nullable column."""
    return [
        (
            i,
            None if i % 1000 == 999 else f'k{i % keys}',
            None if i % 500 == 1 else i / 8,
            None if i % 3 == 2 else i % 2 == 0,
        )
        for i in range(n)
    ]


@_case
def read_into_batched_dofns(spark, runner, workdir):
    """A ReadFromSpark read by Beam's batched DoFns (a pyarrow one counting per
    key, a pandas one giving each row's values back) and by Beam's DataFrame
    API (``to_dataframe(...).groupby('key').size()``): the same values as the
    element path computed here, and batches of more than one row (the batch
    sizes reach the metrics). Each read has one reader, so on
    InProcessSparkRunner its stage takes the Arrow batches itself."""
    import typing

    import pandas as pd
    import pyarrow as pa
    from apache_beam.dataframe.convert import to_dataframe
    from apache_beam.dataframe.convert import to_pcollection

    from beam_spark_inproc.transforms import ReadFromSpark

    data = _batch_rows()
    source = spark.createDataFrame(data, 'id long, key string, amount double, flag boolean')
    counts = {}
    for _, key, _, _ in data:
        counts[key] = counts.get(key, 0) + 1
    sizes = beam.metrics.Metrics.distribution('interop', 'batch_rows')

    class CountPerKey(beam.DoFn):
        @beam.DoFn.yields_elements
        def process_batch(self, batch):
            sizes.update(batch.num_rows)
            per_key = batch.group_by('key').aggregate([('id', 'count')])
            yield from zip(per_key['key'].to_pylist(), per_key['id_count'].to_pylist())

    class Values(beam.DoFn):
        @beam.DoFn.yields_elements
        def process_batch(self, batch):
            sizes.update(len(batch))
            for row in batch.itertuples(index=False):
                yield tuple(None if pd.isna(v) else v for v in row)

    # Beam reads the batch types from the annotations (real types: this module
    # has string annotations).
    CountPerKey.process_batch.__annotations__ = {
        'batch': pa.Table,
        'return': typing.Iterator[typing.Tuple[typing.Optional[str], int]],
    }
    Values.process_batch.__annotations__ = {'batch': pd.DataFrame, 'return': typing.Iterator[tuple]}

    p = beam.Pipeline(runner=runner)
    per_key = (
        p
        | 'Arrow' >> ReadFromSpark(dataframe=source)
        | 'Count per key' >> beam.ParDo(CountPerKey())
        | 'Sum' >> beam.CombinePerKey(sum)
    )
    assert_that(per_key, equal_to(sorted(counts.items(), key=repr)), label='arrow')
    values = p | 'Pandas' >> ReadFromSpark(dataframe=source) | 'Values' >> beam.ParDo(Values())
    assert_that(values, equal_to(data), label='pandas')
    frame = to_dataframe(p | 'Frame' >> ReadFromSpark(dataframe=source))
    grouped = to_pcollection(frame.groupby('key').size().to_frame('n'), include_indexes=True)
    assert_that(
        grouped | beam.Map(lambda r: (r.key, int(r.n))),
        equal_to([(k, n) for k, n in counts.items() if k is not None]),
        label='dataframe',
    )
    result = p.run()
    result.wait_until_finish()
    # (FnApiRunner names the reading step for these DoFns' metrics.)
    dists = [
        d.committed
        for d in result.metrics().query(MetricsFilter().with_name('batch_rows'))['distributions']
    ]
    assert sum(d.sum for d in dists) == 2 * len(data), dists
    assert all(d.max > 1 for d in dists), dists
    assert sum(d.count for d in dists) < 20, dists


# --- writes --------------------------------------------------------------------

_KV = RowTypeConstraint.from_fields([('id', int), ('word', str)])


def _kv_rows(p, n, label='Rows'):
    return (
        p
        | f'{label} create' >> beam.Create(range(n))
        | f'{label} row'
        >> beam.Map(lambda i: beam.Row(id=i, word=f'w{i % 5}')).with_output_types(_KV)
    )


@_case
def write_table_modes(spark, runner, workdir):
    from beam_spark_inproc.transforms import WriteToSpark

    table = _name('modes')
    try:
        for mode, n in (('errorifexists', 30), ('append', 20), ('overwrite', 7)):
            with beam.Pipeline(runner=runner) as p:
                _kv_rows(p, n) | WriteToSpark(table=table, mode=mode, spark=spark)
            ids = sorted(r.id for r in spark.table(table).collect())
            if mode == 'errorifexists':
                assert ids == list(range(30)), ids
            elif mode == 'append':
                assert ids == sorted(list(range(30)) + list(range(20))), ids
            else:
                assert ids == list(range(7)), ids
    finally:
        _drop(spark, table)


@_case
def write_files_formats(spark, runner, workdir):
    from beam_spark_inproc.transforms import WriteToSpark

    formats = ('parquet', 'orc', 'json', 'csv')
    with beam.Pipeline(runner=runner) as p:
        rows = _kv_rows(p, 40)
        for fmt in formats:
            rows | f'Write {fmt}' >> WriteToSpark(
                path=os.path.join(workdir, fmt),
                format=fmt,
                options={'header': 'true'} if fmt == 'csv' else None,
            )
    for fmt in formats:
        reader = spark.read.format(fmt)
        if fmt == 'csv':
            reader = reader.option('header', 'true').schema('id long, word string')
        got = sorted((int(r.id), r.word) for r in reader.load(os.path.join(workdir, fmt)).collect())
        assert got == [(i, f'w{i % 5}') for i in range(40)], (fmt, got[:5])


@_case
def write_failure_leaves_nothing(spark, runner, workdir):
    """A transform failing upstream of a write: the error names it, no table
    is created, and the session still works."""
    from beam_spark_inproc.transforms import WriteToSpark

    table = _name('failed')

    def explode(i):
        if i == 77:
            raise ValueError('element 77 is bad')
        return beam.Row(id=i, word='x')

    try:
        try:
            with beam.Pipeline(runner=runner) as p:
                (
                    p
                    | beam.Create(range(100))
                    | 'Explode' >> beam.Map(explode).with_output_types(_KV)
                    | WriteToSpark(table=table, spark=spark)
                )
        except Exception as e:
            assert 'Explode' in str(e) and 'element 77 is bad' in str(e), str(e)[:2000]
        else:
            raise AssertionError('the pipeline did not fail')
        assert not spark.catalog.tableExists(table), 'a failed write left a table'
        assert spark.range(3).count() == 3
    finally:
        _drop(spark, table)


# --- SQL -----------------------------------------------------------------------

_ORDER = RowTypeConstraint.from_fields([('user_id', int), ('amount', float)])
_USER = RowTypeConstraint.from_fields([('id', int), ('name', str)])


@_case
def sql_join_keeps_metrics(spark, runner, workdir):
    """Two PCollections joined and aggregated by Spark SQL; a counter in a DoFn
    upstream of the SQL reaches the pipeline's metrics once per element."""
    from beam_spark_inproc.transforms import SparkSql

    orders = [(i % 4, float(i)) for i in range(60)]
    users = [(0, 'ann'), (1, 'bob'), (2, 'cy')]  # user 3 has no name: dropped
    counter = beam.metrics.Metrics.counter('interop', 'orders')

    def count(o):
        counter.inc()
        return beam.Row(user_id=o[0], amount=o[1])

    p = beam.Pipeline(runner=runner)
    o = p | 'Orders' >> beam.Create(orders) | 'Count' >> beam.Map(count).with_output_types(_ORDER)
    u = (
        p
        | 'Users' >> beam.Create(users)
        | 'User' >> beam.Map(lambda x: beam.Row(id=x[0], name=x[1])).with_output_types(_USER)
    )
    totals = {'orders': o, 'users': u} | SparkSql(
        'SELECT u.name AS name, SUM(o.amount) AS total, COUNT(*) AS n '
        'FROM orders o JOIN users u ON o.user_id = u.id GROUP BY u.name',
        spark=spark,
    )
    expected = []
    for uid, name in users:
        amounts = [a for k, a in orders if k == uid]
        expected.append((name, sum(amounts), len(amounts)))
    assert_that(totals | beam.Map(lambda r: (r.name, r.total, r.n)), equal_to(expected))
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name('orders'))['counters']
    assert [c.committed for c in counters] == [len(orders)], counters


def run_all(spark, workdir, names=None) -> dict:
    """Runs the cases on ``spark`` with InProcessSparkRunner: {name: status}."""
    import time

    from beam_spark_inproc import InProcessSparkRunner

    status = {}
    for name in names or sorted(CASES):
        began = time.monotonic()
        entry = status[name] = {'ok': False}
        case_dir = os.path.join(workdir, 'interop-' + name)
        os.makedirs(case_dir, exist_ok=True)
        try:
            CASES[name](spark, InProcessSparkRunner(spark=spark), case_dir)
            entry['ok'] = True
        except Exception as e:
            entry['error'] = f'{type(e).__name__}: {e}'[-6000:]
            entry['traceback'] = traceback.format_exc()[-6000:]
        entry['seconds'] = round(time.monotonic() - began, 2)
    return status
