"""The Spark engine: the primitives of ``execution.engine`` as DataFrame steps.

``map_stage`` is ``mapInArrow``; ``shuffle`` is ``repartition`` (by the key
column and then ``sortWithinPartitions``, or round-robin); ``select`` and
``union`` are ``filter``/``withColumn`` and ``unionByName``; ``collect`` is
``toArrow``. The same code serves classic Spark and Spark Connect.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pickle
import sys
import tempfile
import threading
import weakref

import pyarrow as pa
from apache_beam.runners.common import ENCODED_IMPULSE_VALUE

from beam_spark_inproc.execution import engine as e
from beam_spark_inproc.options import INLINE_SIDE_INPUT_BYTES
from beam_spark_inproc.protocol.buckets import STATE_BUCKETS
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import KEY
from beam_spark_inproc.protocol.rows import SCHEMA
from beam_spark_inproc.protocol.rows import TAG
from beam_spark_inproc.spark.shipping import Shipper
from beam_spark_inproc.worker.shipped import ShippedFile
from beam_spark_inproc.worker.stage_task import StageTask


def functions_for(session):
    """``pyspark.sql.functions`` builds classic or Connect columns from a
    process-wide flag, not from the session: pick the module the session needs."""
    if is_connect(session):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions

    return functions


def is_connect(session) -> bool:
    from beam_spark_inproc.compat import pyspark as pyspark_compat

    return pyspark_compat.is_connect(session)


# The sessions a runner's stage ran on in this process (``mark_ran``): their
# next jobs cost a job's floor, not a session's first job.
_RAN: 'weakref.WeakSet[object]' = weakref.WeakSet()


def mark_ran(session) -> None:
    """Notes that a stage of the runner's ran on ``session``."""
    try:
        _RAN.add(session)
    except TypeError:  # a session that cannot be referred to weakly
        pass


def ran_stages(session) -> bool:
    """Whether a stage of the runner's ran on ``session`` in this process."""
    try:
        return session in _RAN
    except TypeError:
        return False


class _Parts:
    """The schema, column expressions and one-row impulse DataFrame every plan
    is built from, made once per session.

    On classic Spark each column expression costs Py4J round trips (PySpark 4
    also records its call site in the JVM, a few more each): a 10-element
    pipeline made about 900 of them building its plan. Columns and DataFrames
    are immutable, so one of each serves every plan of the session, as long
    as PySpark's modules are the ones they were made with: code that removes
    modules from ``sys.modules`` (``mock.patch.dict('sys.modules', ...)``
    drops every module first imported inside it, as Beam's ``distribopt_test``
    does around a pipeline) makes PySpark import its classic modules again,
    whose ``Column`` is another class; a DataFrame of the new module rejects
    a column of the old one ("should be Column or str, got Column"). ``stale``
    tells, and the parts are made again.
    """

    def __init__(self, session, f):
        from pyspark.sql.pandas.types import from_arrow_schema

        self._session = weakref.ref(session)
        self._f = f
        self.schema = from_arrow_schema(SCHEMA)
        self.tag, self.key, self.data = f.col(TAG), f.col(KEY), f.col(DATA)
        self.is_control = self.tag == CONTROL_TAG
        # A row's shard (Spark SQL's crc32 is zlib's: the shard the worker
        # computes, ``protocol.buckets.bucket_of``; a stage's state buckets
        # are a multiple of the shards, each bucket in one shard).
        self.bucket = (f.crc32(self.key) % STATE_BUCKETS).cast('int')
        self._shard_targets: dict[int, object] = {}
        # A row's input partition and position (``SparkEngine.shuffle``).
        self.ordinal = f.monotonically_increasing_id()
        self.order = f.col(_ORDER)
        self._keep: dict[tuple[int, bool], object] = {}
        self._retag: dict[int, object] = {}
        self._impulse = self._empty = None

    def stale(self) -> bool:
        """PySpark's module of the columns' class no longer holds that class
        (removed from ``sys.modules`` or imported again)."""
        cls = type(self.key)
        module = sys.modules.get(cls.__module__)
        return getattr(module, cls.__name__, None) is not cls

    def shard_target(self, partitions: int):
        """A column that ``repartition(partitions, column)`` hashes so that
        shard b lands in partition b % ``partitions``, as on the debug engine.

        Hashing the shard itself put 27 of the 64 shards in one of two
        partitions and 37 in the other (Spark's Murmur3 of a few small ints):
        a stream's keyed stage ran 57% of its keys in one task. Each shard is
        mapped to an int whose Murmur3 hash (``_murmur3_int``, seed 42, as
        Spark's ``HashPartitioning``) falls in the wanted partition."""
        target = self._shard_targets.get(partitions)
        if target is None:
            f = self._f
            values = [_hashing_to(b % partitions, partitions) for b in range(STATE_BUCKETS)]
            target = self._shard_targets[partitions] = f.element_at(
                f.array(*[f.lit(v) for v in values]), self.bucket + 1
            ).cast('int')
        return target

    def keep(self, tag: int, control: bool):
        """Rows of output ``tag`` (and the control rows, if ``control``)."""
        if (tag, control) not in self._keep:
            keep = self.tag == tag
            self._keep[tag, control] = (keep | self.is_control) if control else keep
        return self._keep[tag, control]

    def retag(self, tag: int):
        """The tag column with every element row's tag set to ``tag``."""
        if tag not in self._retag:
            self._retag[tag] = (
                self._f.when(self.is_control, self.tag).otherwise(self._f.lit(tag)).cast('int')
            )
        return self._retag[tag]

    def impulse(self):
        if self._impulse is None:
            # One partition: createDataFrame spreads its one row over
            # defaultParallelism partitions, each a task (and, before empty
            # partitions ran no bundle, a bundle) of the stage reading it.
            self._impulse = (
                self._spark()
                .createDataFrame([(0, None, ENCODED_IMPULSE_VALUE)], self.schema)
                .coalesce(1)
            )
        return self._impulse

    def empty(self):
        if self._empty is None:
            self._empty = self._spark().createDataFrame([], self.schema)
        return self._empty

    def _spark(self):
        session = self._session()
        assert session is not None  # alive: its engine holds it
        return session


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (the hash of an int column that
    ``HashPartitioning`` takes modulo the partitions)."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k1 = rotl((value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF, 15)
    h1 = seed ^ (k1 * 0x1B873593 & 0xFFFFFFFF)
    h1 = (rotl(h1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def _hashing_to(partition: int, partitions: int) -> int:
    """The smallest int >= 0 Spark's hash partitioning puts in ``partition``."""
    value = 0
    while _murmur3_int(value) % partitions != partition:
        value += 1
    return value


_DRIVER_ROWS_ONE_PARTITION = 100_000
# Tasks whose UDF column an engine keeps (a batch run maps each task once; a
# stream maps its stateless stages' tasks every micro-batch).
_MAX_CACHED_UDFS = 256
_PARTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ORDER = '_beam_order'


class _JvmUdfs:
    """A task's ``mapInArrow`` UDF column (classic-only), as PySpark's
    ``pandas_udf(task, schema, SQL_MAP_ARROW_ITER_UDF)(tag, key, data)`` makes
    it, with what is the same for every UDF of the session made once: the
    Java classes, the workers' environment and includes, the parsed return
    type, the input columns. PySpark makes each again per UDF (~30 Py4J
    round trips: a stream's keyed stage made a new UDF every micro-batch, its
    task carrying the micro-batch's watermarks and state files); here four:
    the Python function, the UDF, its column, and ``mapInArrow``'s own.
    PySpark's profiler confs only warn for an iterator UDF, so none is read.
    ``column`` gives None when PySpark's own path is needed (a command
    over the broadcast threshold, broadcast variables pickled with it).
    """

    def __init__(self, session, parts: _Parts):
        from pyspark.util import PythonEvalType

        from beam_spark_inproc.compat import pyspark as pyspark_compat

        sc = session.sparkContext  # classic-only: mapInArrow UDFs
        jvm = sc._jvm
        self._sc = sc
        self._function = jvm.SimplePythonFunction
        self._udf = getattr(jvm, 'org.apache.spark.sql.execution.python.UserDefinedPythonFunction')
        self._schema = parts.schema
        self._type = session._jsparkSession.parseDataType(parts.schema.json())
        self._eval_type = PythonEvalType.SQL_MAP_ARROW_ITER_UDF
        self._columns = pyspark_compat.to_seq(sc, [parts.tag._jc, parts.key._jc, parts.data._jc])
        self._threshold = jvm.PythonUtils.getBroadcastThreshold(sc._jsc)
        self._env = self._java(dict(sc.environment))
        self._includes_of: list | None = None
        self._includes = None
        self._none = self._java([])
        self._udf_tail = pyspark_compat.udf_extra_arguments(self._none)

    def _java(self, value):
        return _convert(self._sc._gateway, value)

    def column(self, task):
        from pyspark.serializers import CloudPickleSerializer

        sc = self._sc
        pickled = CloudPickleSerializer().dumps((task, self._schema))
        if len(pickled) > self._threshold or any(True for _ in sc._pickled_broadcast_vars):
            return None
        if self._includes_of != sc._python_includes:  # addPyFile since
            self._includes_of = list(sc._python_includes)
            self._includes = self._java(self._includes_of)
        function = self._function(
            bytearray(pickled),
            self._env,
            self._includes,
            sc.pythonExec,
            sc.pythonVer,
            self._none,
            sc._javaAccumulator,
        )
        udf = self._udf(
            type(task).__name__, function, self._type, self._eval_type, True, *self._udf_tail
        )
        return udf.apply(self._columns)


def _convert(gateway, value):
    """A Python dict or list as a Java object, once (Py4J converts one given
    as an argument again for every call)."""
    from py4j.java_collections import ListConverter
    from py4j.java_collections import MapConverter

    client = gateway._gateway_client
    if isinstance(value, dict):
        return MapConverter().convert(value, client)
    return ListConverter().convert(value, client)


def _parts(session, f) -> _Parts:
    parts = _PARTS.get(session)
    if parts is None or parts.stale():
        parts = _PARTS[session] = _Parts(session, f)
    return parts


class SparkEngine:
    """``run_id`` names the files shipped for the run (``spark.shipping``):
    the driver-only code at once, with ``py_files``; side inputs over
    ``inline_side_input_bytes`` when a stage needs them."""

    def __init__(
        self,
        session,
        parallelism: int,
        run_id: str = 'run',
        py_files: tuple[str, ...] = (),
        inline_side_input_bytes: int = INLINE_SIDE_INPUT_BYTES,
    ):
        self._session = session
        self._connect = is_connect(session)
        self._f = functions_for(session)
        self._parts = _parts(session, self._f)
        self._parallelism = parallelism
        self._cached: list = []
        # id(task) -> (task, its mapInArrow UDF column): ``_map_in_arrow``.
        self._udfs: dict[int, tuple] = {}
        # id(task) -> (task, the task with the driver's versions): ``_with_versions``.
        self._stamped: dict[int, tuple] = {}
        self._versions: tuple | None = None
        self._jvm_udfs: _JvmUdfs | None = None  # classic-only
        self._arrow_sources: dict[int, object] = {}  # id -> DataFrame
        self._thread_tags = threading.local()  # ``job``
        self._inline_bytes = inline_side_input_bytes
        self._shipper = Shipper(session, run_id, self._connect)
        try:
            self._shipper.ship_code(py_files)
        except BaseException:
            self._shipper.close()
            raise

    def side_input(self, entries: tuple, folder: str | None = None):
        size = sum(len(k) + len(v) for k, v in entries)
        if size <= self._inline_bytes:
            return entries
        data = pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)
        if folder is None:
            return self._shipper.ship_bytes(data, 'side-input')
        fd, path = tempfile.mkstemp(prefix='side-input-', suffix='.bin', dir=folder)
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
        return ShippedFile(os.path.basename(path), len(data), location=path)

    def impulse(self):
        return self._parts.impulse()

    def rows(self, rows: list, parts: int = 1):
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        if not rows:
            return self._parts.empty()
        parts = max(1, min(parts, len(rows)))
        tags, keys, datas = zip(*rows)
        table = pa.Table.from_arrays(
            [pa.array(tags, pa.int32()), pa.array(keys, pa.binary()), pa.array(datas, pa.binary())],
            schema=SCHEMA,
        )
        if parts > 1:
            # Spark slices a local relation's rows into consecutive
            # partitions, one per core (defaultParallelism, at most one per
            # row): at most ``parts`` of them, with no shuffle.
            return pyspark_compat.create_dataframe(
                self._session, table, self._parts.schema
            ).coalesce(parts)
        data = pyspark_compat.create_dataframe(self._session, table, self._parts.schema)
        # A few driver rows (a stream's events, markers): one partition, one
        # task, rather than one per core (as ``impulse``).
        return data.coalesce(1) if len(rows) <= _DRIVER_ROWS_ONE_PARTITION else data

    def map_stage(self, data, task):
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        task = self._with_versions(task)

        if (
            self._connect
            or not pyspark_compat.ENGINE_MAP_IN_ARROW
            or self._arrow_sources.get(id(data)) is data
        ):
            return data.mapInArrow(task, self._parts.schema)
        return self._map_in_arrow(data, task)

    def _with_versions(self, task):
        """A ``StageTask`` carrying the driver's versions, which its workers
        check (``compat.versions``); the same object for the same task (a
        stream maps its tasks again each micro-batch: their UDFs are kept by
        task)."""
        if not isinstance(task, StageTask) or task.versions:
            return task
        stamped = self._stamped.get(id(task))
        if stamped is None or stamped[0] is not task:
            if self._versions is None:
                from beam_spark_inproc.compat import versions

                self._versions = tuple(versions.local())
            if len(self._stamped) >= _MAX_CACHED_UDFS:
                self._stamped.clear()
            stamped = self._stamped[id(task)] = (
                task,
                dataclasses.replace(task, versions=self._versions),
            )
        return stamped[1]

    def _map_in_arrow(self, data, task):
        """``data.mapInArrow(task, schema)`` (classic-only), with fewer Py4J
        round trips: the UDF reads the row format's columns by name (PySpark
        asks the JVM for the DataFrame's schema as JSON and a column per
        name, every call), and a task object mapped again (a stream's
        stateless stages, the same task every micro-batch) reuses its UDF
        column (pickled once, one JVM function object) instead of making a
        new one each time."""
        from pyspark.sql.classic.dataframe import DataFrame
        from pyspark.sql.pandas.functions import pandas_udf
        from pyspark.util import PythonEvalType

        cached = self._udfs.get(id(task))
        if cached is None or cached[0] is not task:
            parts = self._parts
            if self._jvm_udfs is None:
                self._jvm_udfs = _JvmUdfs(data.sparkSession, parts)
            column = self._jvm_udfs.column(task)
            if column is None:
                # PySpark's overloads of pandas_udf omit its Arrow iterator
                # function type (SQL_MAP_ARROW_ITER_UDF, as mapInArrow's).
                udf = pandas_udf(  # type: ignore[call-overload]
                    task,
                    returnType=parts.schema,
                    functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF,
                )
                column = udf(parts.tag, parts.key, parts.data)._jc
            cached = (task, column)
            if len(self._udfs) >= _MAX_CACHED_UDFS:
                self._udfs.clear()
            self._udfs[id(task)] = cached
        return DataFrame(data._jdf.mapInArrow(cached[1], False, None), data.sparkSession)

    def select(self, data, tag: int, new_tag: int, control: bool):
        selected = data.filter(self._parts.keep(tag, control))
        if new_tag != tag:
            selected = selected.withColumn(TAG, self._parts.retag(new_tag))
        return selected

    def union(self, datas: list):
        if not datas:
            return self._parts.empty()
        return functools.reduce(lambda a, b: a.unionByName(b), datas)

    def shuffle(self, data, how: str):
        parts = self._parts
        if how == e.GROUP:
            return data.repartition(self._parallelism, parts.key).sortWithinPartitions(
                parts.tag, parts.key
            )
        if how == e.KEY_SORTED:
            return data.repartition(self._parallelism, parts.key).sortWithinPartitions(
                parts.key, parts.tag
            )
        if how == e.BUCKETED:
            # Shard b goes to partition b % parallelism (``shard_target``).
            target = parts.shard_target(self._parallelism)
            # A key's rows from several input partitions in the partitions'
            # order, each partition's in its own order: the ordinal is the
            # input partition's index, then the row's (taken before the
            # exchange), whatever order the blocks are fetched in.
            return (
                data.withColumn(_ORDER, parts.ordinal)
                .repartition(self._parallelism, target)
                .sortWithinPartitions(parts.bucket, parts.key, parts.tag, parts.order)
                .drop(_ORDER)
            )
        if how == e.SPREAD:
            # Round-robin: a few rows (Create's elements, SDF restrictions) are
            # spread evenly, which hashing cannot promise. Spark sorts each input
            # partition first (spark.sql.execution.sortBeforeRepartition), so a
            # retried task sends every row where its first attempt did.
            return data.repartition(self._parallelism)
        raise e.unknown_shuffle(how)

    def cache(self, data):
        data = data.cache()
        self._cached.append(data)
        return data

    def uncache(self, data) -> None:
        data.unpersist()
        self._cached = [d for d in self._cached if d is not data]

    def collect(self, data, elements: bool = True, started=None) -> tuple[list[bytes], list[bytes]]:
        """(element data, control data) of a result, on the driver; with
        ``elements=False`` only the control rows leave the executors.
        ``started`` is called once the action's DataFrame is built, just
        before it runs (a stream starts its next micro-batch's prefetch
        there: its Python work no longer slows this job's building)."""
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        parts = self._parts
        if not elements:
            # The control rows' columns as they are, without a ``select``
            # (two Datasets fewer to analyse).
            control = data.filter(parts.is_control)
            if started is not None and not self._connect:
                # ``_control_rows`` uses PySpark's private collect API
                # (reading both of its stream protocols: batches in order,
                # or as they came followed by their order).
                rows = self._control_rows(control, started)
                mark_ran(self._session)
                return [], rows
            if started is not None:
                started()
            table = pyspark_compat.to_arrow(control)
            mark_ran(self._session)
            return [], table.column(DATA).to_pylist()
        selected = data.select(parts.tag, parts.data)
        if started is not None:
            started()
        table = pyspark_compat.to_arrow(selected)
        mark_ran(self._session)
        chunks, control = [], []
        for tag, chunk in zip(table.column(TAG).to_pylist(), table.column(DATA).to_pylist()):
            if tag == CONTROL_TAG:
                control.append(chunk)
            elif chunk:
                chunks.append(chunk)
        return chunks, control

    @staticmethod
    def _control_rows(control, started) -> list[bytes]:
        """``control.toArrow()``'s data column (classic-only), with
        ``started`` called once the job runs: PySpark's ``toArrow`` asks the
        JVM for the schema and two confs and sets the call site first (a
        prefetch started before them made each reply wait for the GIL);
        here the action itself (``collectAsArrowToPython``, the job starting
        when its socket is connected), then the batches as ``toArrow`` reads
        them (``compat.pyspark.arrow_batches_from_socket``)."""
        from pyspark.errors.exceptions.captured import unwrap_spark_exception

        from beam_spark_inproc.compat import pyspark as pyspark_compat

        port, secret, server = control._jdf.collectAsArrowToPython()
        try:
            with pyspark_compat.arrow_batches_from_socket((port, secret)) as stream:
                started()
                batches = list(stream)
        finally:
            with unwrap_spark_exception():
                server.getResult()  # the job's failure, as ``toArrow`` raises it
        if batches and isinstance(batches[-1], list):
            # PySpark 3.5: the batches as they came, then their order
            order = batches.pop()
            batches = [batches[i] for i in order]
        return [value for batch in batches for value in batch.column(DATA).to_pylist()]

    @contextlib.contextmanager
    def job(self, tag: str, description: str):
        """Spark jobs started inside carry the pipeline's tag (for
        ``cancel.cancel_tag``) and the Beam description: as the job
        description on classic Spark, as a second tag over Connect (whose
        server sets descriptions itself); an empty description leaves the
        description alone (a stream's loop holds its tag for the whole
        stream, each micro-batch's ``job`` then sets only the description).
        On classic Spark the tag is the Spark context's job tag
        (``compat.pyspark.add_tag``): a classic session's ``interruptTag``
        finds only the operations of the thread calling it, and a run is
        cancelled from another (Ctrl-C)."""
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        tags = [tag]
        if self._connect and description:
            tags.append(description.replace(',', ';')[:200])
        # Spark's tags are the thread's: those an enclosing ``job`` of this
        # thread added stay (the runner's own, unique per run: no need to
        # ask the JVM for the thread's tags, a few Py4J round trips a job).
        local = self._thread_tags.__dict__
        held = local.setdefault('tags', set())
        added = [t for t in tags if t not in held]
        for t in added:
            pyspark_compat.add_tag(self._session, t)
            held.add(t)
        context, previous = None, None
        # The descriptions enclosing ``job``s of this thread set, innermost
        # last: the one to put back is known without asking the JVM.
        descriptions = local.setdefault('descriptions', [])
        described = pushed = False
        if not self._connect:
            context = self._session.sparkContext  # classic-only: job descriptions
            if descriptions:
                previous = descriptions[-1]
            else:
                previous = context.getLocalProperty('spark.job.description')
            described = bool(description)
            if described:
                context.setJobDescription(description)
            descriptions.append(description if described else previous)
            pushed = True
        try:
            yield
        finally:
            if pushed:
                descriptions.pop()
            if described and context is not None:
                context.setLocalProperty('spark.job.description', previous)
            for t in added:
                held.discard(t)
                pyspark_compat.remove_tag(self._session, t)

    def spread_restrictions(self, data, stage, ways: int):
        """None: the rows are Spark's, not the driver's (``execution.engine``)."""
        return None

    def spark_session(self):
        return self._session

    def arrow_source(self, dataframe):
        # mapInArrow hands a task its Arrow batches (of the DataFrame's own
        # columns: not the row format ``_map_in_arrow`` names).
        self._arrow_sources[id(dataframe)] = dataframe
        return dataframe

    def to_dataframe(self, data, fn, arrow_schema):
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        return data.mapInArrow(fn, pyspark_compat.from_arrow_schema(arrow_schema))

    def release(self) -> None:
        for data in self._cached:
            try:
                data.unpersist()
            except Exception:  # a dead session has nothing left to release
                pass
        self._cached.clear()
        self._udfs.clear()
        self._stamped.clear()
        self._arrow_sources.clear()
        self._shipper.close()
