"""compat.pyspark: each flag and function is right for the installed PySpark,
and a PySpark outside the supported range is refused in one line.

Each flag is checked against the release that introduced the difference
(read from PySpark's own sources of 3.5.0, 3.5.x, 4.0, 4.1, 4.2 and 4.3,
``FIRST_RELEASE``) and, where it can be without a JVM, by using PySpark's API
the flag is about: a wrong flag fails here on the PySpark it is wrong for.
Arrow tables in and out of a live session: tests/integration/test_compat_pyspark.py.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from beam_spark_inproc.compat import pyspark as pyspark_compat
from beam_spark_inproc.errors import SparkConnectUnavailable
from beam_spark_inproc.errors import UnsupportedPySparkVersion

# The first PySpark release with each newer behaviour, from PySpark's sources.
FIRST_RELEASE = {
    'CLASSIC_SESSION_ARTIFACTS': (4, 0),
    'ARROW_TABLES': (4, 0),
    'LOAD_FROM_SOCKET_IS_CONTEXT': (4, 2),
    'ENGINE_MAP_IN_ARROW': (4, 0),
    'ARROW_NESTED_NULLABILITY': (4, 1),
    '_UDF_TAKES_CATEGORIES': (4, 3),
    'PYTHON_DATA_SOURCES': (4, 0),
    'PYTHON_STREAM_READ_LIMITS': (4, 2),
    'CONNECT_SUPPORTED': (4, 0),
    'CONNECT_SERVER_BUNDLED': (4, 0),
}


@pytest.mark.parametrize('flag', sorted(FIRST_RELEASE))
def test_flag_matches_the_release_that_changed_it(flag):
    assert getattr(pyspark_compat, flag) == (pyspark_compat.VERSION[:2] >= FIRST_RELEASE[flag]), (
        flag,
        pyspark_compat.VERSION_STRING,
    )


def test_version_is_the_installed_pysparks():
    import pyspark

    assert pyspark_compat.VERSION_STRING == pyspark.__version__
    assert pyspark_compat.VERSION == pyspark_compat.parse_version(pyspark.__version__)


# --- the floor and the ceiling -------------------------------------------------


@pytest.mark.parametrize(
    'text, parsed',
    [
        ('3.5.0', (3, 5, 0)),
        ('3.5.9', (3, 5, 9)),
        ('4.0.1', (4, 0, 1)),
        ('4.3.0', (4, 3, 0)),
        ('4.2.0.dev1', (4, 2, 0)),
        ('4.1', (4, 1, 0)),
    ],
)
def test_supported_versions_pass(text, parsed):
    # On Python 3.11: PySpark 3.5 runs on 3.11 and older (the test below).
    assert pyspark_compat.check_version(text, (3, 11)) == parsed


@pytest.mark.parametrize('text', ['3.4.1', '3.3.0', '2.4.8', '4.4.0', '4.4.0.dev0', '5.0.0'])
def test_unsupported_versions_fail_in_one_line(text):
    with pytest.raises(UnsupportedPySparkVersion) as raised:
        pyspark_compat.check_version(text)
    message = str(raised.value)
    assert '\n' not in message
    assert f'found pyspark {text}' in message
    assert pyspark_compat.SUPPORTED_RANGE in message


@pytest.mark.parametrize(
    'text, python, supported',
    [
        ('3.5.0', (3, 11), True),
        ('3.5.9', (3, 10), True),
        ('3.5.9', (3, 12), False),
        ('3.5.9', (3, 13), False),
        ('4.0.1', (3, 12), True),
        ('4.3.0', (3, 13), True),
    ],
)
def test_pyspark_3_5_is_refused_on_python_3_12_and_later(text, python, supported):
    if supported:
        assert pyspark_compat.check_version(text, python) == pyspark_compat.parse_version(text)
        return
    with pytest.raises(UnsupportedPySparkVersion) as raised:
        pyspark_compat.check_version(text, python)
    message = str(raised.value)
    assert '\n' not in message
    assert f'pyspark {text} runs on Python 3.11 and older' in message
    assert f'this is Python {python[0]}.{python[1]}' in message


def test_unreadable_version_fails_in_one_line():
    with pytest.raises(UnsupportedPySparkVersion, match='cannot read the PySpark version'):
        pyspark_compat.parse_version('unknown')


def test_importing_with_an_unsupported_pyspark_fails_in_one_line():
    """The check runs when the module is imported: a PySpark reporting 3.4.1."""
    code = (
        'import pyspark\n'
        "pyspark.__version__ = '3.4.1'\n"
        'try:\n'
        '    import beam_spark_inproc.compat.pyspark\n'
        'except ImportError as e:\n'
        '    print(type(e).__name__, e)\n'
    )
    out = subprocess.run(
        [sys.executable, '-c', code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.strip()
    assert out.startswith('UnsupportedPySparkVersion '), out
    assert 'found pyspark 3.4.1' in out and '\n' not in out


# --- the flags, by PySpark's own API ---------------------------------------------


def _bare_classic_session() -> SparkSession:
    """A classic SparkSession object with no JVM behind it: its methods that
    are only Connect's raise at once, the others fail reaching the JVM."""
    return object.__new__(SparkSession)


def _connect_only(call) -> bool:
    try:
        call()
    except RuntimeError as e:  # PySpark 3.5: "... is only supported with Spark Connect"
        if 'only supported with Spark Connect' in str(e):
            return True
        return False
    except Exception:
        return False
    return False


def test_classic_session_tags_exist_from_4_0():
    """Why ``add_tag`` uses job tags on 3.5's classic sessions: their
    ``addTag`` raises (a 4.x one reaches for its JVM session)."""
    session = _bare_classic_session()
    assert _connect_only(lambda: session.addTag('t')) == (pyspark_compat.VERSION[:2] < (4, 0))


def test_classic_session_artifacts_flag_is_what_a_classic_session_does(tmp_path):
    path = tmp_path / 'a.py'
    path.write_text('')
    session = _bare_classic_session()
    assert _connect_only(lambda: session.addArtifacts(str(path), pyfile=True)) == (
        not pyspark_compat.CLASSIC_SESSION_ARTIFACTS
    )


def test_arrow_tables_flag_is_whether_createdataframe_takes_a_table():
    source = inspect.getsource(SparkSession.createDataFrame)
    assert ('pa.Table' in source) == pyspark_compat.ARROW_TABLES


def test_load_from_socket_flag_is_whether_it_is_a_context_manager():
    if pyspark_compat.VERSION[:2] >= (4, 0):
        from pyspark.util import _load_from_socket
    else:
        from pyspark.rdd import _load_from_socket  # classic-only: PySpark 3.5
    # contextlib.contextmanager wraps a generator function.
    wrapped = getattr(_load_from_socket, '__wrapped__', None)
    is_context = wrapped is not None and inspect.isgeneratorfunction(wrapped)
    assert is_context == pyspark_compat.LOAD_FROM_SOCKET_IS_CONTEXT


def test_udf_arguments_are_those_pysparks_own_udf_passes():
    """``UserDefinedPythonFunction`` as PySpark's own ``_create_judf`` builds
    it: the extra arguments the engine passes, counted in PySpark's call."""
    if not pyspark_compat.ENGINE_MAP_IN_ARROW:
        pytest.skip(
            f"PySpark {pyspark_compat.VERSION_STRING}: the engine uses PySpark's own "
            'mapInArrow (ENGINE_MAP_IN_ARROW is off)'
        )
    from pyspark.sql.udf import UserDefinedFunction

    source = inspect.getsource(UserDefinedFunction._create_judf)
    call = source[source.index('UserDefinedPythonFunction') :]
    call = call[call.index('(', call.index(')') + 1) + 1 :]
    depth, arguments, current = 0, [], ''
    for char in call:
        if char == ')' and depth == 0:
            break
        if char in '([':
            depth += 1
        elif char in ')]':
            depth -= 1
        if char == ',' and depth == 0:
            arguments.append(current.strip())
            current = ''
        else:
            current += char
    if current.strip():
        arguments.append(current.strip())
    extra = pyspark_compat.udf_extra_arguments(object())
    assert len(arguments) == 5 + len(extra), arguments


def test_engine_map_in_arrow_has_the_classic_modules_it_needs():
    import importlib.util

    assert (importlib.util.find_spec('pyspark.sql.classic') is not None) == (
        pyspark_compat.ENGINE_MAP_IN_ARROW
    )


def test_connect_server_bundled_is_whether_the_jar_is_there():
    import glob
    import os

    import pyspark

    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), 'jars', '*connect*.jar'))
    assert any('spark-connect_' in j for j in jars) == pyspark_compat.CONNECT_SERVER_BUNDLED


# --- Arrow types ---------------------------------------------------------------------

SPARK_SCHEMA = T.StructType(
    [
        T.StructField('id', T.LongType(), False),
        T.StructField('at', T.TimestampType()),
        T.StructField('local', T.TimestampNTZType()),
        T.StructField('price', T.DecimalType(12, 3)),
        T.StructField('day', T.DateType()),
        T.StructField('raw', T.BinaryType()),
        T.StructField('tags', T.ArrayType(T.StringType())),
        T.StructField('counts', T.MapType(T.StringType(), T.IntegerType())),
        T.StructField(
            'nested',
            T.StructType([T.StructField('x', T.DoubleType()), T.StructField('y', T.StringType())]),
        ),
    ]
)
ARROW_SCHEMA = pa.schema(
    [
        pa.field('id', pa.int64(), nullable=False),
        pa.field('at', pa.timestamp('us', tz='UTC')),
        pa.field('local', pa.timestamp('us')),
        pa.field('price', pa.decimal128(12, 3)),
        pa.field('day', pa.date32()),
        pa.field('raw', pa.binary()),
        pa.field('tags', pa.list_(pa.field('element', pa.string()))),
        pa.field(
            'counts',
            pa.map_(pa.field('key', pa.string(), nullable=False), pa.field('value', pa.int32())),
        ),
        pa.field('nested', pa.struct([pa.field('x', pa.float64()), pa.field('y', pa.string())])),
    ]
)


def test_to_arrow_schema_has_timestamps_in_utc():
    assert pyspark_compat.to_arrow_schema(SPARK_SCHEMA) == ARROW_SCHEMA


@pytest.mark.parametrize('index', range(len(SPARK_SCHEMA.fields)))
def test_to_arrow_type_matches_the_schema(index):
    spark_field = SPARK_SCHEMA.fields[index]
    assert pyspark_compat.to_arrow_type(spark_field.dataType) == ARROW_SCHEMA.field(index).type


def test_to_arrow_type_refuses_what_arrow_cannot_hold():
    class Unknown(T.DataType):
        pass

    with pytest.raises(Exception):  # noqa: B017 - PySpark's own error type differs by release
        pyspark_compat.to_arrow_type(Unknown())


def test_from_arrow_schema_keeps_nested_nullability_and_zoned_timestamps():
    arrow = pa.schema(
        [
            pa.field('at', pa.timestamp('us', tz='UTC'), nullable=False),
            pa.field('ids', pa.list_(pa.field('element', pa.int64(), nullable=False))),
            pa.field(
                'm',
                pa.map_(
                    pa.field('key', pa.string(), nullable=False),
                    pa.field('value', pa.list_(pa.field('e', pa.int32(), nullable=False)), False),
                ),
            ),
            pa.field(
                's', pa.struct([pa.field('xs', pa.list_(pa.field('e', pa.float64())), False)])
            ),
        ]
    )
    assert pyspark_compat.from_arrow_schema(arrow) == T.StructType(
        [
            T.StructField('at', T.TimestampType(), False),
            T.StructField('ids', T.ArrayType(T.LongType(), False)),
            T.StructField(
                'm', T.MapType(T.StringType(), T.ArrayType(T.IntegerType(), False), False)
            ),
            T.StructField(
                's', T.StructType([T.StructField('xs', T.ArrayType(T.DoubleType(), True), False)])
            ),
        ]
    )


def test_nested_nullability_flag_is_what_pysparks_own_conversion_does():
    from pyspark.sql.pandas.types import from_arrow_schema

    arrow = pa.schema([pa.field('ids', pa.list_(pa.field('element', pa.int64(), nullable=False)))])
    kept = not from_arrow_schema(arrow)['ids'].dataType.containsNull
    assert kept == pyspark_compat.ARROW_NESTED_NULLABILITY


# --- errors ---------------------------------------------------------------------------


def test_error_condition_of_pysparks_own_error():
    from pyspark.errors import PySparkRuntimeError

    # PySpark's own keywords: errorClass/messageParameters from 4.0, snake case on 3.5.
    if pyspark_compat.VERSION[:2] >= (4, 0):
        keywords = {'errorClass': 'JAVA_GATEWAY_EXITED', 'messageParameters': {}}
    else:
        keywords = {'error_class': 'JAVA_GATEWAY_EXITED', 'message_parameters': {}}
    error = PySparkRuntimeError(**keywords)
    assert pyspark_compat.error_condition(error) == 'JAVA_GATEWAY_EXITED'


def test_error_condition_of_other_errors_is_none():
    assert pyspark_compat.error_condition(ValueError('x')) is None


# --- tags and artifacts: which API each kind of session gets ---------------------------


class _Recorder:
    def __init__(self):
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs))


class _ClassicSession:
    """A stand-in for a classic session: what it and its Spark context were asked."""

    def __init__(self):
        self.session = _Recorder()
        self.sparkContext = _Recorder()  # noqa: N815 - PySpark's name

    def __getattr__(self, name):
        return getattr(self.session, name)


def test_tags_of_a_classic_session_are_the_spark_contexts_job_tags():
    session = _ClassicSession()
    pyspark_compat.add_tag(session, 'run-1')
    pyspark_compat.interrupt_tag(session, 'run-1')
    pyspark_compat.remove_tag(session, 'run-1')
    assert session.sparkContext.calls == [
        ('addJobTag', ('run-1',), {}),
        ('cancelJobsWithTag', ('run-1',), {}),
        ('removeJobTag', ('run-1',), {}),
    ]
    assert session.session.calls == []


@pytest.mark.parametrize('kind', ['pyfile', 'file'])
def test_artifacts_go_to_the_session_or_to_the_spark_context(kind):
    session = _ClassicSession()
    pyspark_compat.add_artifact(session, '/tmp/x.zip', **{kind: True})
    if pyspark_compat.CLASSIC_SESSION_ARTIFACTS:
        assert session.session.calls == [
            ('addArtifacts', ('/tmp/x.zip',), {'pyfile': kind == 'pyfile', 'file': kind == 'file'})
        ]
    else:
        method = 'addPyFile' if kind == 'pyfile' else 'addFile'
        assert session.sparkContext.calls == [(method, ('/tmp/x.zip',), {})]


def test_artifact_of_no_kind_is_refused():
    with pytest.raises(ValueError, match='exactly one'):
        pyspark_compat.add_artifact(_ClassicSession(), '/tmp/x', pyfile=True, file=True)


# --- Python data sources and Spark Connect ----------------------------------------------


def test_python_data_sources_error_names_the_transform_and_the_release():
    message = pyspark_compat.python_data_sources_error('ReadSensors', 'sensors')
    if pyspark_compat.PYTHON_DATA_SOURCES:
        assert message is None
    else:
        assert message is not None and '\n' not in message
        assert message.startswith('ReadSensors: ')
        assert "'sensors'" in message and 'PySpark 4.0' in message
        assert pyspark_compat.VERSION_STRING in message


def test_connect_client_error_on_this_pyspark():
    message = pyspark_compat.connect_client_error('sc://localhost:15002')
    if not pyspark_compat.CONNECT_SUPPORTED:
        assert message is not None and 'from PySpark 4.0' in message
    elif pyspark_compat._connect_client_import_error() is None:
        assert message is None
    else:
        assert message is not None and "'beam-spark-inproc[connect]'" in message


def test_connect_client_missing_names_the_extra(monkeypatch):
    if not pyspark_compat.CONNECT_SUPPORTED:
        pytest.skip(f'Spark Connect needs PySpark 4.0+, this is {pyspark_compat.VERSION_STRING}')
    monkeypatch.setattr(
        pyspark_compat, '_connect_client_import_error', lambda: 'No module named grpc'
    )
    message = pyspark_compat.connect_client_error('sc://localhost:15002')
    assert message is not None and '\n' not in message
    assert "pip install 'beam-spark-inproc[connect]'" in message
    assert 'No module named grpc' in message


def test_connect_client_missing_under_python_c_is_named_not_a_silent_exit():
    """Where the main module has no file (``python -c``, an xdist worker),
    PySpark's own check of the client's packages calls ``sys.exit(0)``; the
    runner names the missing package instead (grpcio-status hidden here)."""
    if not pyspark_compat.CONNECT_SUPPORTED:
        pytest.skip(f'Spark Connect needs PySpark 4.0+, this is {pyspark_compat.VERSION_STRING}')
    code = (
        "import sys; sys.modules['grpc_status'] = None\n"
        'from beam_spark_inproc.compat import pyspark as c\n'
        "print('message:', c.connect_client_error('sc://localhost:15002'))\n"
    )
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 'message:' in done.stdout and 'grpcio-status' in done.stdout, done.stdout
    assert "'beam-spark-inproc[connect]'" in done.stdout


def test_spark_remote_without_connect_is_refused_before_any_connection(monkeypatch):
    """``session.get_or_create`` with ``--spark_remote`` raises the one line
    before PySpark tries to connect (a port nothing listens on)."""
    from beam_spark_inproc.spark import session

    if pyspark_compat.CONNECT_SUPPORTED:
        monkeypatch.setattr(
            pyspark_compat, '_connect_client_import_error', lambda: 'No module named grpc'
        )
    with pytest.raises(SparkConnectUnavailable) as raised:
        session.get_or_create(None, 'sc://127.0.0.1:1', {})
    assert '--spark_remote' in str(raised.value) and '\n' not in str(raised.value)
