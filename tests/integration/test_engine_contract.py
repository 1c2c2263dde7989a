"""The engine contract (``execution.engine``): every backend passes the same tests.

fugue's shared ``ExecutionEngineTests``: one class of tests over the primitives,
run on every engine the runner may use: the in-driver engine
(``debug.engine.LocalEngine``), the Spark engine (the session-scoped ``spark``
fixture), the small-data engine (``execution.small.SmallDataEngine``: tiny data
in the driver, the rest on Spark) and the streaming loop's prefetching wrapper
(``execution.streaming.prebuild.Prebuilder`` over the in-driver engine). Rows
are compared as the contract promises them: partitions' contents where it says
where rows go, multisets where it does not. What an engine leaves out of the
contract is named with the reason (``LEFT_OUT``), and its test skipped there.
"""

from __future__ import annotations

import collections
import itertools

import pyarrow as pa
import pytest
from apache_beam.runners.common import ENCODED_IMPULSE_VALUE

from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import SCHEMA

PARALLELISM = 3
# (tag, key, data): two ports' elements, keyed, and a report.
ROWS = [
    (1, b'b', b'b1'),
    (0, b'a', b'a0'),
    (0, b'b', b'b0'),
    (1, b'a', b'a1'),
    (0, b'c', b'c0'),
    (CONTROL_TAG, None, b'report'),
    (0, b'a', b'a2'),
]


# The runner gives the small-data engine batch pipelines without runner-native
# stages only (``runner.py``): what only a stream or a native stage asks for is
# not its.
_BATCH_ONLY = (
    "a stream's primitive: the runner runs streams on the Spark "
    'engine, never on the small-data engine'
)
_NO_NATIVE = (
    'Spark interop: a pipeline with runner-native stages runs on the '
    'Spark engine, never on the small-data engine'
)
LEFT_OUT = {
    'small': {
        'test_rows_from_the_driver_and_uncache': _BATCH_ONLY,
        'test_rows_in_parts_are_consecutive_partitions': _BATCH_ONLY,
        'test_shuffle_bucketed_puts_each_state_bucket_in_one_partition_sorted': _BATCH_ONLY,
        'test_shuffle_bucketed_shares_the_shards_out_evenly': _BATCH_ONLY,
        'test_shuffle_spread_keeps_every_row': (
            'the small-data engine shuffles tiny data into one partition (one '
            "bundle, no empty tasks); spread over cores is Spark's, after the "
            'hand-over'
        ),
        'test_spark_session_is_a_working_session': _NO_NATIVE,
        'test_arrow_source_hands_a_task_the_dataframes_own_columns': _NO_NATIVE,
        'test_to_dataframe_is_the_functions_batches_of_each_partition': _NO_NATIVE,
    },
}


@pytest.fixture(params=['debug', 'spark', 'small', 'prebuilt'])
def engine(request):
    reason = LEFT_OUT.get(request.param, {}).get(request.function.__name__)
    if reason:
        pytest.skip(reason)
    if request.param in ('debug', 'prebuilt'):
        from beam_spark_inproc.debug.engine import LocalEngine

        # Spark's part of native stages (spark_session) on the test session.
        made = LocalEngine(PARALLELISM, session=lambda: request.getfixturevalue('spark'))
        if request.param == 'prebuilt':
            from beam_spark_inproc.execution.streaming.prebuild import Prebuilder

            made = Prebuilder(made, lambda task: True)
    elif request.param == 'small':
        from beam_spark_inproc.execution.small import SmallDataEngine
        from beam_spark_inproc.spark.engine import SparkEngine
        from beam_spark_inproc.spark.hand_over import SparkHandOver

        spark = request.getfixturevalue('spark')
        made = SmallDataEngine(
            SparkHandOver(
                lambda: spark, lambda: SparkEngine(spark, PARALLELISM, 'contract'), PARALLELISM
            )
        )
    else:
        from beam_spark_inproc.spark.engine import SparkEngine

        made = SparkEngine(request.getfixturevalue('spark'), PARALLELISM, 'contract')
    yield made
    made.release()


class Emit:
    """A task: replaces the rows of a non-empty partition by ``rows``."""

    def __init__(self, rows):
        self.rows = rows

    def __call__(self, batches):
        if not sum(batch.num_rows for batch in batches):
            return
        self.emitted()
        tags, keys, datas = zip(*self.rows)
        yield pa.RecordBatch.from_arrays(
            [pa.array(tags, pa.int32()), pa.array(keys, pa.binary()), pa.array(datas, pa.binary())],
            schema=SCHEMA,
        )

    def emitted(self):
        pass


class PartitionRows:
    """A task: emits its partition's rows as data, tagged 0, plus a marker row
    (data b'|') ending the partition, so a collect shows partition contents."""

    def __call__(self, batches):
        rows = []
        for batch in batches:
            rows.extend(zip(*(batch.column(i).to_pylist() for i in range(3))))
        out = [(0, None, b'%d:%s:%s' % (t, k or b'', d)) for t, k, d in rows]
        out.append((0, None, b'|'))
        tags, keys, datas = zip(*out)
        yield pa.RecordBatch.from_arrays(
            [pa.array(tags, pa.int32()), pa.array(keys, pa.binary()), pa.array(datas, pa.binary())],
            schema=SCHEMA,
        )


def source(engine):
    """ROWS as the engine's data: the impulse, mapped by a task."""
    return engine.map_stage(engine.impulse(), Emit(ROWS))


def partitions(engine, data) -> list[list[tuple]]:
    """The rows of each non-empty partition of ``data``, in order."""
    chunks, _ = engine.collect(engine.map_stage(data, PartitionRows()))
    parts, current = [], []
    for chunk in chunks:  # one partition's chunks arrive together, in order
        if chunk == b'|':
            if current:
                parts.append(current)
            current = []
        else:
            tag, key, data = chunk.split(b':', 2)
            current.append((int(tag), key or None, data))
    return parts


def test_impulse_is_one_row_of_the_impulse_element(engine):
    chunks, control = engine.collect(engine.impulse())
    assert (chunks, control) == ([ENCODED_IMPULSE_VALUE], [])


def test_collect_splits_elements_and_control_rows(engine):
    chunks, control = engine.collect(source(engine))
    assert sorted(chunks) == sorted(d for t, _, d in ROWS if t != CONTROL_TAG)
    assert control == [b'report']
    assert engine.collect(source(engine), elements=False) == ([], [b'report'])


def test_select_keeps_one_tag_retagged_and_control_rows_on_request(engine):
    data = source(engine)
    rows = [r for p in partitions(engine, engine.select(data, 1, 5, True)) for r in p]
    assert sorted(rows, key=repr) == sorted(
        [(5, b'b', b'b1'), (5, b'a', b'a1'), (CONTROL_TAG, None, b'report')], key=repr
    )
    chunks, control = engine.collect(engine.select(data, 0, 0, False))
    assert sorted(chunks) == [b'a0', b'a2', b'b0', b'c0'] and control == []


def test_union_holds_every_row_and_union_of_nothing_is_empty(engine):
    chunks, control = engine.collect(engine.union([source(engine), source(engine)]))
    assert collections.Counter(chunks) == collections.Counter(
        2 * [d for t, _, d in ROWS if t != CONTROL_TAG]
    )
    assert control == [b'report', b'report']
    assert engine.collect(engine.union([])) == ([], [])


@pytest.mark.parametrize(
    'how, order',
    [
        (e.GROUP, lambda r: (r[0], r[1] or b'')),
        (e.KEY_SORTED, lambda r: (r[1] or b'', r[0])),
    ],
)
def test_shuffle_by_key_puts_each_key_in_one_partition_sorted(engine, how, order):
    parts = partitions(engine, engine.shuffle(source(engine), how))
    rows = [r for p in parts for r in p]
    assert collections.Counter(rows) == collections.Counter(ROWS)
    keys_seen = collections.Counter()
    for part in parts:
        assert [order(r) for r in part] == sorted(order(r) for r in part)
        keys_seen.update({r[1] for r in part if r[1] is not None})
    assert all(n == 1 for n in keys_seen.values()), keys_seen


def test_shuffle_bucketed_puts_each_state_bucket_in_one_partition_sorted(engine):
    from beam_spark_inproc.protocol.buckets import bucket_of

    keys = [b'k%d' % i for i in range(40)]
    rows = [(i % 2, k, b'%d' % i) for i, k in enumerate(keys)] + [(CONTROL_TAG, None, b'report')]
    parts = partitions(engine, engine.shuffle(engine.rows(rows), e.BUCKETED))
    assert collections.Counter(r for p in parts for r in p) == collections.Counter(rows)
    seen = collections.Counter()
    for part in parts:
        order = [(-1, b'', t) if k is None else (bucket_of(k), k, t) for t, k, _ in part]
        assert order == sorted(order)  # rows without a key first
        seen.update({bucket_of(k) for _, k, _ in part if k is not None})
    assert all(n == 1 for n in seen.values()), seen
    assert len(seen) > 10


def test_shuffle_bucketed_shares_the_shards_out_evenly(engine):
    """Shard b goes to partition b % parallelism (up to the partitions'
    order): every partition gets the same number of shards. Spark's hash of
    the shard number had put 27 of the 64 in one of two partitions."""
    from beam_spark_inproc.protocol.buckets import STATE_BUCKETS
    from beam_spark_inproc.protocol.buckets import bucket_of

    keys, shards = [], set()
    for i in itertools.count():
        key = b'k%d' % i
        if bucket_of(key) not in shards:
            shards.add(bucket_of(key))
            keys.append(key)
        if len(shards) == STATE_BUCKETS:
            break
    parts = partitions(engine, engine.shuffle(engine.rows([(0, k, b'') for k in keys]), e.BUCKETED))
    residues = [{bucket_of(k) % PARALLELISM for _, k, _ in part} for part in parts]
    assert sorted(r for rs in residues for r in rs) == list(range(PARALLELISM))
    assert all(len(rs) == 1 for rs in residues), residues


def test_rows_from_the_driver_and_uncache(engine):
    rows = [(0, b'a', b'x'), (CONTROL_TAG, None, b'report'), (2, None, b'y')]
    data = engine.cache(engine.rows(rows))
    assert engine.collect(data) == ([b'x', b'y'], [b'report'])
    engine.uncache(data)
    assert engine.collect(engine.rows([])) == ([], [])


def test_rows_in_parts_are_consecutive_partitions(engine):
    """``rows(rows, parts)``: the driver's rows cut into up to that many
    partitions of consecutive rows, in order (a stream's large micro-batch,
    one task per core; Spark gives at most one per core of its own); never
    more partitions than rows; one without ``parts``."""
    rows = [(0, None, b'%d' % i) for i in range(7)]
    parts = [p for p in partitions(engine, engine.rows(rows, PARALLELISM)) if p]
    assert 2 <= len(parts) <= PARALLELISM
    assert [r for p in parts for r in p] == rows
    assert len([p for p in partitions(engine, engine.rows(rows[:2], 3)) if p]) == 2
    assert len([p for p in partitions(engine, engine.rows(rows, 2)) if p]) == 2
    assert len([p for p in partitions(engine, engine.rows(rows)) if p]) == 1


def test_shuffle_spread_keeps_every_row(engine):
    parts = partitions(engine, engine.shuffle(source(engine), e.SPREAD))
    assert collections.Counter(r for p in parts for r in p) == collections.Counter(ROWS)
    assert len(parts) > 1  # spread, not left in the one partition it came from


def test_unknown_shuffle_raises(engine):
    with pytest.raises(ValueError, match='Unknown shuffle'):
        engine.shuffle(source(engine), 'sideways')


def test_cache_computes_a_result_once(engine, tmp_path):
    class Counting(Emit):
        def emitted(self):
            with open(tmp_path / 'runs', 'a') as f:
                f.write('x')

    data = engine.cache(engine.map_stage(engine.impulse(), Counting(ROWS)))
    assert engine.collect(data) == engine.collect(data)
    assert (tmp_path / 'runs').read_text() == 'x'


def test_side_input_entries_come_back_as_given_or_as_a_file(engine):
    entries = ((b'k', b'v' * 10),)
    carried = engine.side_input(entries)
    assert carried == entries or hasattr(carried, 'read')


def test_job_is_a_context(engine):
    with engine.job('beam-pipeline-test', 'Beam pipeline test, job 1'):
        assert engine.collect(engine.impulse())[0] == [ENCODED_IMPULSE_VALUE]


class Fail:
    def __call__(self, batches):
        for _ in batches:
            raise ValueError('the task failed on purpose')
        yield from ()


def test_collect_calls_started_once_and_a_failed_job_raises(engine):
    """A stream starts its next micro-batch's prefetch in ``started``: once
    per collect, before the rows come back; a task's failure still reaches
    the driver (Spark: the leaves' control rows without ``toArrow``)."""
    calls = []
    assert engine.collect(
        source(engine), elements=False, started=lambda: calls.append('control')
    ) == ([], [b'report'])
    chunks, control = engine.collect(source(engine), started=lambda: calls.append('all'))
    assert (len(chunks), control) == (len(ROWS) - 1, [b'report'])
    assert calls == ['control', 'all']
    with pytest.raises(Exception, match='the task failed on purpose'):
        engine.collect(
            engine.map_stage(engine.impulse(), Fail()), elements=False, started=lambda: None
        )


def test_control_rows_come_by_pysparks_collect_stream(spark, monkeypatch):
    """The leaves' control rows come by PySpark's private collect stream where
    this release keeps it (``compat.pyspark.arrow_batches_from_socket``:
    ``pyspark.util`` from 4.0, ``pyspark.rdd`` on 3.5), not by ``toArrow``;
    ``started`` is called once, when the stream is open."""
    import contextlib

    from beam_spark_inproc.compat import pyspark as pyspark_compat
    from beam_spark_inproc.spark import engine as spark_engine

    opened = pyspark_compat.arrow_batches_from_socket
    calls = []

    @contextlib.contextmanager
    def counted(sock_info):
        with opened(sock_info) as stream:
            calls.append('stream')
            yield stream

    def no_to_arrow(dataframe):
        raise AssertionError('the control rows came by toArrow')

    monkeypatch.setattr(pyspark_compat, 'arrow_batches_from_socket', counted)
    monkeypatch.setattr(pyspark_compat, 'to_arrow', no_to_arrow)
    engine = spark_engine.SparkEngine(spark, PARALLELISM, 'contract')
    try:
        assert engine.collect(
            source(engine), elements=False, started=lambda: calls.append('started')
        ) == ([], [b'report'])
    finally:
        engine.release()
    assert calls == ['stream', 'started']


def test_control_rows_read_an_older_pyspark_collect_stream(spark, monkeypatch):
    """An older PySpark's collect serializer (3.5's) yields the batches as
    they came and then their order (4.3's yields them in order): the control
    rows are the same either way. The stream here is the older protocol on
    every release, the batches in reverse."""
    import pyspark.sql.pandas.serializers as serializers

    from beam_spark_inproc.spark import engine as spark_engine

    current = serializers.ArrowCollectSerializer

    class OlderProtocol(current):
        def load_stream(self, stream):
            batches = list(super().load_stream(stream))
            if batches and isinstance(batches[-1], list):  # already the older protocol
                order = batches.pop()
                batches = [batches[i] for i in order]
            yield from reversed(batches)
            yield list(reversed(range(len(batches))))

    engine = spark_engine.SparkEngine(spark, PARALLELISM, 'contract')
    data = engine.union([source(engine), source(engine)])
    try:
        expected = engine.collect(data, elements=False, started=lambda: None)
        monkeypatch.setattr(serializers, 'ArrowCollectSerializer', OlderProtocol)
        assert (
            engine.collect(data, elements=False, started=lambda: None)
            == expected
            == ([], [b'report', b'report'])
        )
    finally:
        engine.release()


def test_nested_jobs_keep_the_tag_and_put_the_description_back(spark):
    """A stream's loop holds its tag for the whole stream (``job(tag, '')``)
    and describes each micro-batch's job inside: the description put back
    is the one before, known without asking the JVM (classic Spark). The tag
    is the Spark context's job tag (``compat.pyspark.add_tag``)."""
    from beam_spark_inproc.spark.engine import SparkEngine

    engine = SparkEngine(spark, PARALLELISM, 'contract')
    context = spark.sparkContext
    context.setJobDescription("a user's own")
    try:
        with engine.job('beam-pipeline-nested', ''):
            assert context.getLocalProperty('spark.job.description') == "a user's own"
            for n in range(2):
                with engine.job('beam-pipeline-nested', f'micro-batch {n}'):
                    assert context.getLocalProperty('spark.job.description') == f'micro-batch {n}'
                    assert 'beam-pipeline-nested' in context.getJobTags()
                assert context.getLocalProperty('spark.job.description') == "a user's own"
                assert 'beam-pipeline-nested' in context.getJobTags()
        assert 'beam-pipeline-nested' not in context.getJobTags()
        assert context.getLocalProperty('spark.job.description') == "a user's own"
    finally:
        context.setLocalProperty('spark.job.description', None)
        engine.release()


# --- Spark interop primitives (runner-native stages) -------------------------

_PEOPLE = [(1, 'ann'), (2, 'bob'), (3, 'cy'), (4, 'di'), (5, 'ed')]


class Describe:
    """A task over a DataFrame's own batches: one data row per source row."""

    def __call__(self, batches):
        for batch in batches:
            if batch.num_rows:
                data = [
                    b'%d=%s' % (i, w.encode())
                    for i, w in zip(
                        batch.column('id').to_pylist(), batch.column('name').to_pylist()
                    )
                ]
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array([0] * len(data), pa.int32()),
                        pa.array([None] * len(data), pa.binary()),
                        pa.array(data, pa.binary()),
                    ],
                    schema=SCHEMA,
                )


class Decode:
    """A ``to_dataframe`` function: element rows -> (tag, text) batches."""

    schema = pa.schema([pa.field('tag', pa.int32()), pa.field('text', pa.string())])

    def __call__(self, batches):
        for batch in batches:
            rows = [
                (t, d.decode())
                for t, d in zip(batch.column('tag').to_pylist(), batch.column('data').to_pylist())
                if t != CONTROL_TAG
            ]
            if rows:
                tags, texts = zip(*rows)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(tags, pa.int32()), pa.array(texts)], schema=self.schema
                )


def test_spark_session_is_a_working_session(engine):
    assert engine.spark_session().range(4).count() == 4


def test_arrow_source_hands_a_task_the_dataframes_own_columns(engine):
    session = engine.spark_session()
    dataframe = session.createDataFrame(_PEOPLE, 'id long, name string').repartition(2)
    chunks, control = engine.collect(engine.map_stage(engine.arrow_source(dataframe), Describe()))
    assert sorted(chunks) == sorted(b'%d=%s' % (i, n.encode()) for i, n in _PEOPLE)
    assert control == []


def test_to_dataframe_is_the_functions_batches_of_each_partition(engine):
    dataframe = engine.to_dataframe(source(engine), Decode(), Decode.schema)
    assert sorted((r.tag, r.text) for r in dataframe.collect()) == sorted(
        (t, d.decode()) for t, _, d in ROWS if t != CONTROL_TAG
    )


def test_map_stage_takes_the_engines_udf_where_compat_has_it(spark, monkeypatch):
    """SparkEngine maps a task through its own UDF (``_map_in_arrow``, on
    PySpark's private API: fewer Py4J calls) where
    ``compat.pyspark.ENGINE_MAP_IN_ARROW`` (4.0 on), through PySpark's own
    ``mapInArrow`` elsewhere (3.5); the rows are the same either way."""
    from beam_spark_inproc.compat import pyspark as pyspark_compat
    from beam_spark_inproc.spark import engine as spark_engine

    made = spark_engine.SparkEngine(spark, PARALLELISM, 'contract')
    private = spark_engine.SparkEngine._map_in_arrow
    calls = []

    def counted(self, data, task):
        calls.append(1)
        return private(self, data, task)

    try:
        monkeypatch.setattr(spark_engine.SparkEngine, '_map_in_arrow', counted)
        by_engine = [1] if pyspark_compat.ENGINE_MAP_IN_ARROW else []
        got = sorted(made.collect(source(made))[0])
        assert calls == by_engine
        monkeypatch.setattr(pyspark_compat, 'ENGINE_MAP_IN_ARROW', False)
        assert sorted(made.collect(source(made))[0]) == got  # by PySpark's mapInArrow
        assert calls == by_engine
        assert got == sorted(d for t, _, d in ROWS if t != CONTROL_TAG and d)
    finally:
        made.release()


def test_a_new_tasks_udf_in_few_py4j_calls_gives_pysparks_rows(spark, monkeypatch):
    """A new task's UDF made once-per-session's JVM objects (``_JvmUdfs``:
    a stream's keyed stage has a new task every micro-batch) maps rows as
    PySpark's ``pandas_udf`` does, in a few Py4J calls instead of ~30; a
    command over the broadcast threshold takes PySpark's path."""
    from py4j import clientserver

    from beam_spark_inproc.compat import pyspark as pyspark_compat
    from beam_spark_inproc.spark import engine as spark_engine

    if not pyspark_compat.ENGINE_MAP_IN_ARROW:
        pytest.skip(
            f"PySpark {pyspark_compat.VERSION_STRING}: the engine's own UDF is 4.0's "
            "(compat.pyspark.ENGINE_MAP_IN_ARROW); PySpark's mapInArrow maps every task"
        )

    made = spark_engine.SparkEngine(spark, PARALLELISM, 'contract')
    calls = []
    send = clientserver.JavaClient.send_command

    def counted(client, command, *args, **kwargs):
        if not command.startswith('m\nd\n'):  # not Py4J's garbage collection
            calls.append(command)
        return send(client, command, *args, **kwargs)

    column = spark_engine._JvmUdfs.column

    def run(few: bool):
        # Not few: every command as one over the broadcast threshold, for
        # which ``_JvmUdfs`` gives None and PySpark's ``pandas_udf`` is used.
        monkeypatch.setattr(
            spark_engine._JvmUdfs, 'column', column if few else lambda self, task: None
        )
        made.map_stage(made.impulse(), Emit(ROWS))  # session's objects made
        data = made.impulse()
        monkeypatch.setattr(clientserver.JavaClient, 'send_command', counted)
        calls.clear()
        result = made.map_stage(data, Emit(ROWS))  # a new task: a new UDF
        count = len(calls)
        monkeypatch.setattr(clientserver.JavaClient, 'send_command', send)
        return count, partitions(made, result)

    try:
        pyspark_calls, pyspark_rows = run(False)
        few_calls, few_rows = run(True)
        assert few_rows == pyspark_rows
        assert sorted(r for part in few_rows for r in part) == sorted((t, k, d) for t, k, d in ROWS)
        assert few_calls <= 5 < 20 <= pyspark_calls, (few_calls, pyspark_calls)
        jvm_udfs = made._jvm_udfs
        monkeypatch.setattr(jvm_udfs, '_threshold', 0)  # every command "large"
        assert jvm_udfs.column(Emit(ROWS)) is None
        assert partitions(made, made.map_stage(made.impulse(), Emit(ROWS))) == few_rows
    finally:
        made.release()
