"""PySpark's API where the supported releases (3.5.0 up to 4.4) differ.

The runner drives Spark through DataFrames and ``mapInArrow``, with a few of
PySpark's private helpers on classic sessions, and its Spark PTransforms
convert schemas with PySpark's Arrow type mapping. This module is the one
place that knows how these differ between releases; the rest of the package
imports the names below and never reads PySpark's version itself
(``tests/unit/test_architecture.py``).

Supported: ``SUPPORTED``, PySpark 3.5.0 up to, not including, 4.4, and 3.5
only on Python 3.11 and older. The floor and the ceiling are checked when this
module is imported: a PySpark outside them raises ``UnsupportedPySparkVersion``
with one line naming the version found and the range supported. The Spark side
imports it where it first touches PySpark (a session made or used, a DataFrame
converted), not at the runner's import: importing PySpark costs about half a
second, which a small pipeline run in the driver alone never pays. A driver's
PySpark must be its cluster's Spark: the range is wide because clusters are.

What differs, the first release with the newer behaviour, and the name here
that decides it:

* ``add_tag``, ``remove_tag``, ``interrupt_tag`` (4.0): a classic session
  has operation tags (``SparkSession.addTag``, ``interruptTag``) from 4.0;
  PySpark 3.5 has the methods on every session but a classic one raises
  (they are Connect's). On classic sessions of every release the functions
  use the Spark context's job tags (``addJobTag``, ``cancelJobsWithTag``,
  from 3.5.0), which also cancel from another thread.
* ``CLASSIC_SESSION_ARTIFACTS``, ``add_artifact`` (4.0): a classic session
  has ``addArtifacts(pyfile=, file=)``; on 3.5 it raises, and it is the
  Spark context's ``addPyFile``/``addFile``, which 4.x's calls in turn.
* ``ARROW_TABLES``, ``to_arrow``, ``create_dataframe`` (4.0): a classic
  DataFrame has ``toArrow()`` and ``createDataFrame`` takes a
  ``pyarrow.Table``. On 3.5 ``to_arrow`` collects Arrow batches with the
  DataFrame's ``_collect_as_arrow`` (what 4.x's ``toArrow`` calls) and
  ``create_dataframe`` hands the table's batches to the JVM as 3.5's own
  pandas path does after converting (the Spark context's
  ``_serialize_to_jvm``, ``PythonSQLUtils.toDataFrame``): no pandas in
  between, so timestamps, decimals and nested types stay exactly the table's.
* ``to_arrow_schema``, ``to_arrow_type`` (4.0, 4.2): PySpark's Spark-to-Arrow
  type mapping, timestamps in UTC; it takes ``timezone='UTC'`` from 4.2,
  ``timestamp_utc=True`` in 4.0 and 4.1, and no option on 3.5 (always UTC).
* ``from_arrow_schema`` (4.1, 4.2): Arrow to Spark, timestamps with zone
  as ``timestamp`` (``prefer_timestamp_ntz``'s default is True from 4.2) and
  nested nullability kept (``ARROW_NESTED_NULLABILITY``: PySpark keeps a
  list element's and a map value's from 4.1; before, compat does).
* ``LOAD_FROM_SOCKET_IS_CONTEXT``, ``arrow_batches_from_socket`` (4.2):
  ``pyspark.util._load_from_socket`` is a context manager from 4.2; before
  it returns the stream (on 3.5 it is in ``pyspark``'s RDD module).
* ``ENGINE_MAP_IN_ARROW``, ``udf_extra_arguments``, ``to_seq`` (4.0, 4.3):
  the engine's own ``mapInArrow`` UDF (``spark.engine._JvmUdfs``) builds the
  JVM function as PySpark's ``pandas_udf`` does; from 4.0 (the
  ``pyspark.sql.classic`` modules, ``Dataset.mapInArrow(column, barrier,
  profile)``); 4.3's ``UserDefinedPythonFunction`` takes two arguments more
  (transpiled columns, input categories). On 3.5 PySpark's ``mapInArrow``
  is used as it is.
* ``error_condition`` (4.0): a PySpark error's condition is
  ``getCondition()``; 3.5 has ``getErrorClass()`` only.
* ``PYTHON_DATA_SOURCES``, ``python_data_sources_error`` (4.0): Python data
  sources (``pyspark.sql.datasource``, ``spark.dataSource.register``). On 3.5
  a read of a format Spark does not find names the transform and the
  release they need, before any Spark job. ``PYTHON_STREAM_READ_LIMITS``
  (4.2): a Python streaming reader may limit what a Spark batch reads
  (``ReadMaxRows``, ``pyspark.sql.streaming.datasource``); the runner needs
  none, its tests' and examples' sources use it.
* ``CONNECT_SUPPORTED``, ``CONNECT_SERVER_BUNDLED``, ``connect_client_error``
  (4.0): the runner runs over Spark Connect from PySpark 4.0 (3.5's Connect
  client has no ``toArrow``); PySpark's wheels carry the Connect server
  (``sc://local``, ``--spark_remote local``) from 4.0. The Connect client is
  PySpark's ``connect`` extra (grpcio and friends), installed with
  ``beam-spark-inproc[connect]``: ``connect_client_error`` says what is
  missing, in one line.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.util
import os
import re
import sys
from typing import Any
from typing import Iterator
from typing import Optional

import pyarrow as pa
import pyspark
from pyspark.sql import DataFrame as _DataFrame

from beam_spark_inproc.errors import UnsupportedPySparkVersion

# The supported releases: from the first, up to (not including) the second.
SUPPORTED = ((3, 5), (4, 4))
SUPPORTED_RANGE = '>=3.5.0,<4.4'


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a PySpark version string (``4.3.0``,
    ``3.5.0``, ``4.1.0.dev1``); a missing patch counts as 0."""
    match = re.match(r'(\d+)\.(\d+)(?:\.(\d+))?', text)
    if match is None:
        raise UnsupportedPySparkVersion(
            f'beam-spark-inproc cannot read the PySpark version {text!r}; '
            f'it supports pyspark{SUPPORTED_RANGE}.'
        )
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


# PySpark 3.5 imports distutils (its Arrow type conversion), which Python 3.12
# removed: 3.5 runs on Python 3.11 and older, as its own classifiers say.
PYSPARK_3_PYTHON_CEILING = (3, 12)


def check_version(
    text: str, python: tuple[int, int] = (sys.version_info.major, sys.version_info.minor)
) -> tuple[int, int, int]:
    """The parsed version, or ``UnsupportedPySparkVersion`` (one line: found,
    supported, what to install) when it is outside ``SUPPORTED`` or cannot
    run on ``python``."""
    version = parse_version(text)
    if not SUPPORTED[0] <= version[:2] < SUPPORTED[1]:
        raise UnsupportedPySparkVersion(
            f'beam-spark-inproc supports pyspark{SUPPORTED_RANGE}, found '
            f"pyspark {text}: pip install 'pyspark{SUPPORTED_RANGE}' (the cluster's "
            'Spark version).'
        )
    if version[0] < 4 and python >= PYSPARK_3_PYTHON_CEILING:
        raise UnsupportedPySparkVersion(
            f'pyspark {text} runs on Python 3.11 and older (it imports distutils, '
            f'which Python 3.12 removed), and this is Python {python[0]}.{python[1]}: '
            "use Python 3.10 or 3.11 for a Spark 3.5 cluster, or pip install 'pyspark>=4.0,<4.4'."
        )
    return version


VERSION_STRING: str = pyspark.__version__
VERSION = check_version(VERSION_STRING)


def _since(major: int, minor: int) -> bool:
    return VERSION[:2] >= (major, minor)


def is_connect(session) -> bool:
    """Whether ``session`` is a Spark Connect session. A Connect session exists
    only once its module is imported, so this never imports it (see
    ``_CONNECT_CLIENT_MODULES`` for what that import can do)."""
    module = sys.modules.get('pyspark.sql.connect.session')
    return module is not None and isinstance(session, module.SparkSession)


def active_connect_session() -> Any:
    """The thread's active Spark Connect session, or None (without importing
    the client, as ``is_connect``)."""
    module = sys.modules.get('pyspark.sql.connect.session')
    return None if module is None else module.SparkSession.getActiveSession()


# --- tags and artifacts on classic sessions (4.0) ----------------------------------

CLASSIC_SESSION_ARTIFACTS: bool = _since(4, 0)


def add_tag(session, tag: str) -> None:
    """Tags the Spark jobs this thread starts on ``session`` from now on:
    over Connect the session's operation tag (``addTag``); on a classic
    session the Spark context's job tag (``addJobTag``, from 3.5.0), which
    ``interrupt_tag`` cancels from any thread (a 4.x classic session's own
    tags are found only by ``interruptTag`` calls of the thread that set
    them, and 3.5's classic session has none: its ``addTag`` raises)."""
    if is_connect(session):
        session.addTag(tag)
    else:
        session.sparkContext.addJobTag(tag)  # classic-only: job tags


def remove_tag(session, tag: str) -> None:
    """Undoes ``add_tag`` for this thread."""
    if is_connect(session):
        session.removeTag(tag)
    else:
        session.sparkContext.removeJobTag(tag)  # classic-only: job tags


def interrupt_tag(session, tag: str) -> None:
    """Cancels the session's running jobs that ``add_tag`` tagged ``tag``,
    from any thread (``interruptTag`` over Connect, the Spark context's
    ``cancelJobsWithTag`` on a classic session)."""
    if is_connect(session):
        session.interruptTag(tag)
    else:
        session.sparkContext.cancelJobsWithTag(tag)  # classic-only: job tags


def add_artifact(session, path: str, pyfile: bool = False, file: bool = False) -> None:
    """``session.addArtifacts(path, pyfile=, file=)``: a zip or .py on the
    workers' ``sys.path`` (``pyfile``) or a file ``SparkFiles`` finds
    (``file``). On a 3.5 classic session, the Spark context's ``addPyFile``
    or ``addFile``."""
    if pyfile == file:
        raise ValueError('add_artifact: give exactly one of pyfile=True or file=True')
    if CLASSIC_SESSION_ARTIFACTS or is_connect(session):
        session.addArtifacts(path, pyfile=pyfile, file=file)
        return
    context = session.sparkContext  # classic-only: PySpark 3.5
    if pyfile:
        context.addPyFile(path)
    else:
        context.addFile(path)


# --- Arrow tables in and out of Spark (4.0) -----------------------------------

ARROW_TABLES: bool = hasattr(_DataFrame, 'toArrow')

# to_arrow_schema / to_arrow_type with timestamps in UTC: the keyword each release takes.
if _since(4, 2):
    _UTC: dict[str, Any] = {'timezone': 'UTC'}
elif _since(4, 0):
    _UTC = {'timestamp_utc': True}
else:
    _UTC = {}  # 3.5: always UTC


def to_arrow_schema(spark_schema) -> pa.Schema:
    """PySpark's ``to_arrow_schema`` of a StructType, timestamps with zone
    UTC (those without a zone, ``timestamp_ntz``, without)."""
    from pyspark.sql.pandas.types import to_arrow_schema as convert

    return convert(spark_schema, **_UTC)


def to_arrow_type(spark_type) -> pa.DataType:
    """PySpark's ``to_arrow_type`` of a DataType, timestamps as in ``to_arrow_schema``."""
    from pyspark.sql.pandas.types import to_arrow_type as convert

    return convert(spark_type, **_UTC)


# from_arrow_schema keeps a list's element and a map's value nullability from 4.1.
ARROW_NESTED_NULLABILITY: bool = _since(4, 1)


def from_arrow_schema(arrow_schema: pa.Schema):
    """PySpark's ``from_arrow_schema``, timestamps with zone as Spark's
    ``timestamp`` (not ``timestamp_ntz``, 4.2's default) and, on every
    release, nested fields as nullable as the Arrow ones (before 4.1 PySpark
    makes every array element and map value nullable)."""
    from pyspark.sql.pandas.types import from_arrow_schema as convert

    spark = convert(arrow_schema, prefer_timestamp_ntz=False)
    if ARROW_NESTED_NULLABILITY:
        return spark
    from pyspark.sql import types

    def nested(arrow: pa.DataType, spark_type):
        if isinstance(spark_type, types.ArrayType) and (
            pa.types.is_list(arrow) or pa.types.is_large_list(arrow)
        ):
            return types.ArrayType(
                nested(arrow.value_type, spark_type.elementType), arrow.value_field.nullable
            )
        if isinstance(spark_type, types.MapType) and pa.types.is_map(arrow):
            return types.MapType(
                nested(arrow.key_type, spark_type.keyType),
                nested(arrow.item_type, spark_type.valueType),
                arrow.item_field.nullable,
            )
        if isinstance(spark_type, types.StructType) and pa.types.is_struct(arrow):
            return types.StructType(
                [
                    types.StructField(
                        f.name, nested(arrow.field(i).type, f.dataType), f.nullable, f.metadata
                    )
                    for i, f in enumerate(spark_type.fields)
                ]
            )
        return spark_type

    return nested(pa.struct(list(arrow_schema)), spark)


def to_arrow(dataframe) -> pa.Table:
    """``dataframe.toArrow()``: the DataFrame's rows, collected to the driver,
    with the Arrow schema ``to_arrow_schema`` gives its Spark schema."""
    if ARROW_TABLES or is_connect(dataframe.sparkSession):
        return dataframe.toArrow()
    schema = to_arrow_schema(dataframe.schema)
    batches = dataframe._collect_as_arrow()
    if not batches:
        return schema.empty_table()
    # Spark sends timestamps zoned as the session's time zone: the same
    # instants, cast to the schema's zone.
    return pa.Table.from_batches(batches).cast(schema)


def create_dataframe(session, table: pa.Table, schema=None):
    """``session.createDataFrame(table, schema)`` of a ``pyarrow.Table``
    (``schema``: a StructType, or None for the table's own). PySpark cuts the
    table into batches of ``spark.sql.execution.arrow.maxRecordsPerBatch``
    rows, each a partition."""
    if ARROW_TABLES or is_connect(session):
        if schema is None:
            return session.createDataFrame(table)
        return session.createDataFrame(table, schema)
    return _create_dataframe_3_5(session, table, schema)


def _create_dataframe_3_5(session, table: pa.Table, schema):
    """PySpark 3.5, classic: the table's batches to the JVM the way 3.5's
    ``createDataFrame(pandas_df)`` sends the batches it makes from pandas."""
    from pyspark.sql.dataframe import DataFrame
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    if schema is None:
        schema = from_arrow_schema(table.schema)
    if schema.fields:
        table = table.cast(to_arrow_schema(schema))
    size = int(session.conf.get('spark.sql.execution.arrow.maxRecordsPerBatch', '10000'))
    batches = table.to_batches(max_chunksize=size if size > 0 else None)
    jvm = session._jvm
    jiter = session._sc._serialize_to_jvm(
        batches,
        ArrowStreamSerializer(),
        lambda path: jvm.PythonSQLUtils.readArrowStreamFromFile(path),
        lambda: jvm.ArrowIteratorServer(),
    )
    jdf = jvm.PythonSQLUtils.toDataFrame(jiter, schema.json(), session._jsparkSession)
    data = DataFrame(jdf, session)
    data._schema = schema
    return data


# --- collecting Arrow batches from a socket (4.2) ------------------------------

LOAD_FROM_SOCKET_IS_CONTEXT: bool = _since(4, 2)


def _socket_loader() -> Any:
    """PySpark's ``_load_from_socket`` (in ``pyspark.util`` from 4.0)."""
    if _since(4, 0):
        return importlib.import_module('pyspark.util')._load_from_socket
    return importlib.import_module('pyspark.rdd')._load_from_socket  # classic-only: PySpark 3.5


@contextlib.contextmanager
def arrow_batches_from_socket(sock_info) -> Iterator[Iterator[Any]]:
    """The stream ``collectAsArrowToPython``'s socket serves, as
    ``ArrowCollectSerializer`` reads it: record batches, and on PySpark
    before 4.0 (which sends them as they come) their order last, a list."""
    from pyspark.sql.pandas.serializers import ArrowCollectSerializer

    load = _socket_loader()
    if LOAD_FROM_SOCKET_IS_CONTEXT:
        with load(sock_info, ArrowCollectSerializer()) as stream:
            yield stream
    else:
        yield load(sock_info, ArrowCollectSerializer())


# --- the engine's own mapInArrow UDF (4.0, 4.3) --------------------------------

ENGINE_MAP_IN_ARROW: bool = _since(4, 0)
# UserDefinedPythonFunction's arguments after (name, function, type, eval type,
# deterministic): from 4.3 the transpiled columns and the input categories.
_UDF_TAKES_CATEGORIES: bool = _since(4, 3)


def udf_extra_arguments(empty_list) -> tuple:
    """What the JVM's ``UserDefinedPythonFunction`` takes after its five
    arguments of 4.0-4.2, for a UDF with none of them (``empty_list``: an
    empty Java list)."""
    return (empty_list, empty_list) if _UDF_TAKES_CATEGORIES else ()


def to_seq(context, java_columns: list):
    """PySpark's ``_to_seq`` of Java columns (``pyspark.sql.classic.column``,
    4.0+: the only releases ``ENGINE_MAP_IN_ARROW`` is on)."""
    from pyspark.sql.classic.column import _to_seq

    return _to_seq(context, java_columns)


# --- errors (4.0) ---------------------------------------------------------------


def error_condition(error: BaseException) -> Optional[str]:
    """A PySpark error's condition (``JAVA_GATEWAY_EXITED``, ...), None for
    any other exception: ``getCondition()`` from 4.0, ``getErrorClass()`` on 3.5."""
    for name in ('getCondition', 'getErrorClass'):
        method = getattr(error, name, None)
        if callable(method):
            return method()
    return None


# --- Python data sources (4.0) ----------------------------------------------------

PYTHON_DATA_SOURCES: bool = importlib.util.find_spec('pyspark.sql.datasource') is not None
# A Python streaming reader's admission control (``getDefaultReadLimit``,
# ``latestOffset(start, limit)``, ``pyspark.sql.streaming.datasource.ReadMaxRows``): 4.2.
PYTHON_STREAM_READ_LIMITS: bool = (
    PYTHON_DATA_SOURCES and importlib.util.find_spec('pyspark.sql.streaming.datasource') is not None
)


def python_data_sources_error(what: str, format: str) -> Optional[str]:
    """On a PySpark without Python data sources, the line to refuse a read of
    ``format`` by transform ``what`` with, once Spark found no such source
    (it may be a Python one); None where they exist."""
    if PYTHON_DATA_SOURCES:
        return None
    return (
        f'{what}: Spark has no data source {format!r}; if it is a Python data '
        f'source (pyspark.sql.datasource), those need PySpark 4.0 or later, and '
        f'this is PySpark {VERSION_STRING}.'
    )


# --- Spark Connect (4.0) ----------------------------------------------------------

CONNECT_SUPPORTED: bool = _since(4, 0)


def _connect_server_bundled() -> bool:
    jars = os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), 'jars')
    return bool(glob.glob(os.path.join(jars, 'spark-connect_*.jar')))


CONNECT_SERVER_BUNDLED: bool = _connect_server_bundled()


# What every 4.x Connect client imports (module, the package that provides it).
# PySpark checks them when `pyspark.sql.connect` is imported, but where the main
# module has neither a spec nor a file (`python -c`, an xdist worker, an embedded
# interpreter) it takes that for its own doctest run and calls `sys.exit(0)`
# instead of raising, so they are looked for before that import.
_CONNECT_CLIENT_MODULES = (
    ('pandas', 'pandas'),
    ('pyarrow', 'pyarrow'),
    ('grpc', 'grpcio'),
    ('grpc_status', 'grpcio-status'),
    ('google.rpc', 'googleapis-common-protos'),
)


def _module_missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ImportError:  # a parent package is missing
        return True


@functools.lru_cache(maxsize=None)
def _connect_client_import_error() -> Optional[str]:
    missing = [package for module, package in _CONNECT_CLIENT_MODULES if _module_missing(module)]
    if missing:
        return f'not installed: {", ".join(missing)}'
    try:
        import pyspark.sql.connect.session  # noqa: F401 - checks the rest of the client's needs
    except ImportError as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    except SystemExit:  # PySpark's doctest guard, for a need the list above lacks
        return "PySpark's check of the client's packages failed"
    return None


def connect_client_error(remote: str) -> Optional[str]:
    """Why the runner cannot reach Spark Connect at ``remote`` (the
    ``--spark_remote`` URL) with this PySpark, in one line; None when it can."""
    if not CONNECT_SUPPORTED:
        return (
            f'--spark_remote {remote!r}: beam-spark-inproc runs over Spark Connect '
            f'from PySpark 4.0, and this is PySpark {VERSION_STRING}; use a classic '
            'session (--spark_master) or PySpark 4.x.'
        )
    if remote.startswith('local') and not CONNECT_SERVER_BUNDLED:
        return (
            f'--spark_remote {remote!r}: this PySpark ({VERSION_STRING}) carries no '
            'Spark Connect server to start locally; give an sc:// URL.'
        )
    problem = _connect_client_import_error()
    if problem is not None:
        return (
            f"--spark_remote {remote!r} needs Spark Connect's client: pip install "
            f"'beam-spark-inproc[connect]' (PySpark's connect extra); {problem}"
        )
    return None
