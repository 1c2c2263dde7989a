"""Beam pipelines over Spark Connect, compared with classic Spark and FnApiRunner.

The pipelines (GroupByKey with FixedWindows and Sessions, AsSingleton/AsList/AsDict
side inputs, CombinePerKey/CombineGlobally, Flatten including one PCollection
twice) live in ``spark_connect_pipelines.py``; each checks itself with
``assert_that`` and writes its outputs with ``WriteToText``. Every pipeline runs
on Beam's FnApiRunner (the reference), on the classic ``spark`` session of this
test run, and over Spark Connect; the files each engine wrote must be equal.

Why the Connect part runs in other processes (found experimentally, pyspark 4.3):

* ``SparkSession.builder.remote("local[2]")`` in a process that already has the
  classic session fails with ``[SESSION_ALREADY_EXIST]``; the other order makes
  every later ``SparkSession.builder.getOrCreate()`` (the ``spark`` fixture)
  return the *Connect* session.
* A Connect client made with ``pyspark.sql.connect.SparkSession.builder`` next to
  a classic session can be created, but ``pyspark.sql.functions`` picks classic
  or Connect columns from a process-wide flag (``SPARK_CONNECT_MODE_ENABLED``), so
  the runner's ``data.filter(f.col(...) == ...)`` fails with
  ``TypeError: 'Column' object is not callable`` on the Connect DataFrame (and
  setting the flag breaks the classic session instead).

So this module starts a standalone Spark Connect server (``SparkConnectServer``
through ``spark-submit``, ``local[2]``, a free loopback port instead of 15002 so
concurrent runs do not collide) and a client process
(``spark_connect_pipelines.py``) with no JVM of its own, the way a Databricks or
remote-cluster user runs. Both start in the background when the first test of
this module runs, so the Connect run overlaps the classic runs; the server is
stopped as soon as the client is done (and again at module teardown), and the
last test checks that nothing is left listening.

The Connect server must get ``PYSPARK_PYTHON`` in its environment: Connect
starts Python workers from that variable (``spark.pyspark.python`` set on the
client cannot be changed), and with ``python3`` from PATH the workers lack
pyarrow and Beam.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from beam_spark_inproc.compat import pyspark as pyspark_compat

from . import spark_connect_pipelines as pipelines


def _connect_unavailable() -> str:
    """Why this installation cannot run the Connect server and client ('' if it can)."""
    if not pyspark_compat.CONNECT_SERVER_BUNDLED:
        return f'PySpark {pyspark_compat.VERSION_STRING} carries no Spark Connect server'
    return pyspark_compat.connect_client_error('sc://localhost') or ''


pytestmark = [
    pytest.mark.connect,
    pytest.mark.skipif(bool(_connect_unavailable()), reason=_connect_unavailable()),
]

HELPER = Path(pipelines.__file__)
NAMES = sorted(pipelines.PIPELINES)
# Classic Spark runs the semantics scenarios in test_semantics.py already
# (test_connect_scenarios_on_this_backend[spark]): only Connect runs them here.
CLASSIC_NAMES = [n for n in NAMES if n != 'semantics']

SERVER_START_TIMEOUT = 120
# The client runs every case (batch, interop, streaming): ~500 s on the shared
# machine under load 15-20 (2026-11-24), plus ~140 s for the streaming writes
# case (spark_stream_writes, under load ~20, 2026-11-28).
CLIENT_TIMEOUT = 850
SERVER_CLASS = 'org.apache.spark.sql.connect.service.SparkConnectServer'
# Environment that would turn a process into a Connect client of some other server.
_CONNECT_ENV = (
    'SPARK_REMOTE',
    'SPARK_CONNECT_MODE_ENABLED',
    'SPARK_LOCAL_REMOTE',
    'SPARK_API_MODE',
    'PYSPARK_SUBMIT_ARGS',
    'SPARK_CONNECT_AUTHENTICATE_TOKEN',
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(('127.0.0.1', port), timeout=1).close()
        return True
    except OSError:
        return False


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors='replace')[-chars:]
    except OSError:
        return ''


class ConnectRun:
    """A Spark Connect server and a client process running all pipelines, in the background."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.out = workdir / 'out'
        self.status_path = workdir / 'status.json'
        self.server_log = workdir / 'server.log'
        self.client_log = workdir / 'client.log'
        self.port = _free_port()
        self.server = None
        self.client = None
        self.error = None
        self.client_returncode = None
        self.seconds = None
        self._thread = threading.Thread(target=self._run, daemon=True, name='spark-connect-run')

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in _CONNECT_ENV}
        env['PYSPARK_PYTHON'] = sys.executable
        return env

    def start(self) -> 'ConnectRun':
        import pyspark

        from beam_spark_inproc.spark.session import LOCAL_DEFAULTS

        spark_home = os.path.dirname(pyspark.__file__)
        env = self._env()
        env['SPARK_HOME'] = spark_home
        conf = dict(LOCAL_DEFAULTS)
        conf.update(
            {
                'spark.connect.grpc.binding.address': '127.0.0.1',
                'spark.connect.grpc.binding.port': str(self.port),
                'spark.pyspark.python': sys.executable,
                'spark.sql.shuffle.partitions': '4',
            }
        )
        command = [
            os.path.join(spark_home, 'bin', 'spark-submit'),
            '--class',
            SERVER_CLASS,
            '--name',
            'beam-spark-inproc connect test',
            '--master',
            'local[2]',
            '--driver-memory',
            '2g',
        ]
        for key, value in conf.items():
            command += ['--conf', f'{key}={value}']
        self.out.mkdir(parents=True, exist_ok=True)
        self._started = time.monotonic()
        with open(self.server_log, 'wb') as log:
            # Own process group: stopping it also stops the server's Python workers.
            self.server = subprocess.Popen(
                command,
                env=env,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._thread.start()
        return self

    def _run(self) -> None:
        # The client starts with the server (its imports overlap the JVM start)
        # and waits for the port itself.
        try:
            with open(self.client_log, 'wb') as log:
                self.client = subprocess.Popen(
                    [
                        sys.executable,
                        str(HELPER),
                        '--remote',
                        f'sc://127.0.0.1:{self.port}',
                        '--wait',
                        str(SERVER_START_TIMEOUT),
                        '--out',
                        str(self.out),
                        '--status',
                        str(self.status_path),
                    ],
                    env=self._env(),
                    cwd=self.workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + SERVER_START_TIMEOUT + CLIENT_TIMEOUT
            while self.client.poll() is None:
                if self.server.poll() is not None:
                    raise RuntimeError(
                        'Spark Connect server exited with '
                        f'{self.server.returncode} while the client ran'
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        'Spark Connect client still running after '
                        f'{SERVER_START_TIMEOUT + CLIENT_TIMEOUT} s'
                    )
                time.sleep(0.2)
            self.client_returncode = self.client.returncode
        except BaseException as e:  # reported by result()
            self.error = f'{type(e).__name__}: {e}'
        finally:
            self.seconds = time.monotonic() - self._started
            self.stop()

    def stop(self) -> None:
        """Stops the client (if still running) and the server with its workers."""
        if self.client is not None and self.client.poll() is None:
            self.client.kill()
            self.client.wait(10)
        server = self.server
        if server is None:
            return
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            if server.poll() is not None:
                break
            try:
                os.killpg(server.pid, sig)
                server.wait(wait)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        # The group (the server's own session) may still hold Python workers
        # the server forked; none may outlive it.
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def result(self) -> dict:
        """The client's status file, once the client and server are done."""
        import json

        self._thread.join(CLIENT_TIMEOUT + SERVER_START_TIMEOUT + 60)
        if self._thread.is_alive():
            pytest.fail('The Spark Connect run did not finish.\n' + self.logs())
        if self.error is not None:
            pytest.fail(f'The Spark Connect run failed: {self.error}\n' + self.logs())
        if not self.status_path.exists():
            pytest.fail(
                'The Spark Connect client wrote no status '
                f'(exit code {self.client_returncode}).\n' + self.logs()
            )
        return json.loads(self.status_path.read_text())

    def logs(self) -> str:
        return (
            f'--- client log (tail) ---\n{_tail(self.client_log)}\n'
            f'--- server log (tail) ---\n{_tail(self.server_log)}'
        )


@pytest.fixture(scope='module')
def connect_run(tmp_path_factory):
    run = ConnectRun(tmp_path_factory.mktemp('spark_connect')).start()
    yield run
    run.stop()
    run._thread.join(30)


@pytest.fixture(scope='module')
def fn_api_outputs(tmp_path_factory):
    """{pipeline name: outputs} on Beam's FnApiRunner, the reference; computed on demand."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    out = tmp_path_factory.mktemp('fn_api_runner')
    cache = {}

    def get(name):
        if name not in cache:
            pipelines.run(name, FnApiRunner(), str(out))
            cache[name] = pipelines.read_outputs(str(out), name)
            assert cache[name], f'FnApiRunner wrote no output for {name}'
        return cache[name]

    return get


# Requests connect_run first, so the Connect run overlaps these classic runs.
@pytest.mark.parametrize('name', CLASSIC_NAMES)
def test_classic_matches_fn_api_runner(connect_run, fn_api_outputs, request, tmp_path, name):
    from beam_spark_inproc import InProcessSparkRunner

    expected = fn_api_outputs(name)
    spark = request.getfixturevalue('spark')
    pipelines.run(name, InProcessSparkRunner(spark=spark), str(tmp_path))
    assert pipelines.read_outputs(str(tmp_path), name) == expected


@pytest.mark.parametrize('name', NAMES)
def test_connect_matches_fn_api_runner(connect_run, fn_api_outputs, name):
    expected = fn_api_outputs(name)
    status = connect_run.result()
    assert status.get('is_connect'), status
    entry = status['pipelines'].get(name)
    assert entry is not None, f'{name} did not run over Connect.\n' + connect_run.logs()
    assert entry['ok'], (
        f'{name} failed over Spark Connect: {entry.get("error")}\n'
        f'{entry.get("traceback")}\n' + connect_run.logs()
    )
    assert pipelines.read_outputs(str(connect_run.out), name) == expected


def test_connect_attempted_metrics_include_failed_attempt(connect_run):
    """Over Connect too, a failed task attempt's counts reach ``attempted``."""
    status = connect_run.result()
    entry = status.get('attempt_metrics')
    assert entry and 'attempted' in entry, f'{entry}\n' + connect_run.logs()
    assert entry['state'] == 'FAILED', entry
    assert 'fails on purpose after counting' in entry['error'], entry
    assert entry['committed'] == 0
    assert entry['attempted'] > 0, entry
    print('over Connect: attempted', entry['attempted'], 'committed', entry['committed'])


def test_connect_user_settings_set_for_the_run_and_restored(connect_run):
    """Over Connect, a user's session gets the runner's runtime SQL settings
    for the run's queries and its own values back afterwards."""
    from beam_spark_inproc.spark.session import RUNTIME_SETTINGS

    entry = connect_run.result().get('runtime_settings')
    assert entry and 'during' in entry, f'{entry}\n' + connect_run.logs()
    assert entry['before'] == pipelines.USER_SETTINGS
    assert entry['during'] and all(d == RUNTIME_SETTINGS for d in entry['during'])
    assert entry['after'] == pipelines.USER_SETTINGS


def test_connect_client_had_no_jvm_and_server_stopped(connect_run):
    status = connect_run.result()
    assert status.get('local_jvm') is False, status
    assert status.get('stopped'), status
    assert connect_run.server.poll() is not None, 'Spark Connect server still running'
    assert not _listening(connect_run.port), f'port {connect_run.port} still open'
    # No process of the server's group is left (e.g. Python workers): killed
    # processes take a moment to exit and be reaped, so allow a few seconds.
    deadline = time.monotonic() + 15
    while True:
        try:
            os.killpg(connect_run.server.pid, 0)
        except ProcessLookupError:
            break
        if time.monotonic() > deadline:
            pytest.fail('processes of the Spark Connect server are still running')
        time.sleep(0.2)


# --- Spark interop over Connect ---------------------------------------
# The client runs spark_interop_pipelines' cases after its own pipelines, on the
# same session (see ``main`` there); each case checks its own results.

from . import spark_interop_pipelines as interop_cases  # noqa: E402


@pytest.mark.parametrize('name', sorted(interop_cases.CASES))
def test_interop_case_over_connect(connect_run, name):
    status = connect_run.result()
    entry = status.get('interop', {}).get(name)
    assert entry is not None, f'{name} did not run over Connect.\n' + connect_run.logs()
    assert entry['ok'], (
        f'{name} failed over Spark Connect: {entry.get("error")}\n'
        f'{entry.get("traceback")}\n' + connect_run.logs()
    )


# --- Streaming over Connect --------------------------------------------
# The client runs spark_connect_streaming's cases last: the micro-batch loop in
# the client, records compared with BundleBasedDirectRunner there.

from . import spark_connect_streaming as streaming_cases  # noqa: E402


@pytest.mark.parametrize(
    'name', sorted(streaming_cases.CASES) + sorted(streaming_cases.SOURCE_CASES)
)
def test_streaming_case_over_connect(connect_run, name):
    status = connect_run.result()
    entry = status.get('streaming', {}).get(name)
    assert entry is not None, f'{name} did not run over Connect.\n' + connect_run.logs()
    assert entry['ok'], (
        f'{name} failed over Spark Connect: {entry.get("error")}\n'
        f'{entry.get("traceback")}\n' + connect_run.logs()
    )
