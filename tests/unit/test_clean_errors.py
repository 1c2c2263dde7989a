"""Bad input gets one clear error, before Spark starts where it can
(``spark.session.check_master``, ``runner.translate_error``'s remedies,
``runner.interruption``, the CLI's ``--help``); no Spark here."""

from __future__ import annotations

import logging
import socket
import struct
import threading

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_spark_inproc import __main__ as cli
from beam_spark_inproc import runner
from beam_spark_inproc.compat import python as python_compat
from beam_spark_inproc.errors import PipelineExecutionError
from beam_spark_inproc.errors import SparkMasterError
from beam_spark_inproc.options import SparkRunnerOptions
from beam_spark_inproc.planning.plan import StagePlan
from beam_spark_inproc.protocol.report import Failure
from beam_spark_inproc.spark.session import check_master


@pytest.mark.parametrize(
    'master',
    [
        'local',
        'local[2]',
        'local[*]',
        'local[2,3]',
        'local[*, 4]',
        'local-cluster[2,1,1024]',
        'yarn',
        'k8s://https://example.com:6443',
    ],
)
def test_master_forms_spark_accepts_pass(master):
    check_master(master)


@pytest.mark.parametrize(
    'master', ['lokal[2]', 'local[two]', 'local[2', 'spark', 'mesos://host:5050', '']
)
def test_malformed_master_names_itself_and_the_forms(master):
    with pytest.raises(SparkMasterError) as raised:
        check_master(master)
    text = str(raised.value)
    assert repr(master) in text and 'local[N]' in text and 'spark://host:port' in text


def test_standalone_master_without_a_port_is_refused():
    with pytest.raises(SparkMasterError, match="'nohost' is not host:port"):
        check_master('spark://nohost')


def test_unresolvable_standalone_master_names_host_and_reason():
    with pytest.raises(SparkMasterError) as raised:
        check_master('spark://nohost.invalid:7077', timeout=2)
    text = str(raised.value)
    assert "Cannot reach the Spark master 'spark://nohost.invalid:7077'" in text
    assert 'nohost.invalid:7077: ' in text


class _Endpoint(threading.Thread):
    """A server on 127.0.0.1 answering each connection with ``answer(data
    received)`` (None: say nothing, keep the connection open until closed)."""

    def __init__(self, answer):
        super().__init__(daemon=True)
        self._answer = answer
        self._server = socket.socket()
        self._server.bind(('127.0.0.1', 0))
        self._server.listen()
        self.port = self._server.getsockname()[1]
        self.received: list[bytes] = []
        self._open: list[socket.socket] = []

    def run(self):
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            self._open.append(connection)
            connection.settimeout(5)
            try:
                data = connection.recv(65536)
            except OSError:
                continue
            self.received.append(data)
            reply = self._answer(data)
            if reply is not None:
                connection.sendall(reply)
                connection.close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._server.close()
        self.join(10)
        for connection in self._open:
            connection.close()


def _spark_failure(data: bytes) -> bytes:
    """What a Spark RPC endpoint answers a request to an endpoint it does not
    have: an RpcFailure frame (length, type 5, request id, the error)."""
    (request_id,) = struct.unpack('>q', data[9:17])
    error = b'org.apache.spark.SparkException: Could not find beam-spark-inproc-probe.'
    body = struct.pack('>q', request_id) + struct.pack('>i', len(error)) + error
    return struct.pack('>q', 9 + len(body)) + bytes([5]) + body


def _http(data: bytes) -> bytes:
    return b'HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n'


def test_a_spark_endpoint_is_accepted_and_a_closed_port_refused():
    with _Endpoint(_spark_failure) as spark:
        check_master(f'spark://127.0.0.1:{spark.port}', timeout=2)
        # The probe's request is one RpcRequest frame (type 3) of its length.
        [request] = spark.received
        assert struct.unpack('>q', request[:8])[0] == len(request) and request[8] == 3
        # Another master listed first that refuses: the answering one is enough.
        with socket.socket() as closed:
            closed.bind(('127.0.0.1', 0))
            refused = closed.getsockname()[1]
        check_master(f'spark://127.0.0.1:{refused},127.0.0.1:{spark.port}', timeout=2)
    with pytest.raises(SparkMasterError, match=f'127.0.0.1:{spark.port}: .*refused'):
        check_master(f'spark://127.0.0.1:{spark.port}', timeout=2)


@pytest.mark.parametrize(
    'answer, said',
    [
        (_http, "an HTTP server ('HTTP/1.1 400 Bad Request')"),
        (lambda data: None, 'accepted the connection but answered nothing within 1 s'),
        (lambda data: b'', 'accepted the connection, then closed it without an answer'),
        (lambda data: b'SSH-2.0-OpenSSH_9.6\r\n', "answered 'SSH-2.0-OpenSSH_9.6'"),
    ],
    ids=['http', 'silent', 'closing', 'ssh'],
)
def test_a_port_that_is_not_spark_is_refused_naming_what_answered(answer, said):
    with _Endpoint(answer) as other:
        master = f'spark://127.0.0.1:{other.port}'
        with pytest.raises(SparkMasterError) as raised:
            check_master(master, timeout=1)
    text = str(raised.value)
    assert text.startswith(
        f'--spark_master={master!r} is not a Spark master: 127.0.0.1:{other.port}: '
    )
    assert said in text, text
    assert '7077' in text and 'Nothing was started' in text


def test_tls_rpc_in_the_conf_skips_the_probe():
    """A master whose RPC runs over TLS closes a plain frame: with the conf
    saying so, a connection is enough."""
    with _Endpoint(lambda data: b'') as tls:
        master = f'spark://127.0.0.1:{tls.port}'
        check_master(master, timeout=1, conf={'spark.ssl.rpc.enabled': 'true'})
        with pytest.raises(SparkMasterError, match='spark.ssl.rpc.enabled=true'):
            check_master(master, timeout=1)


STAGE = StagePlan(name='s1', kind='sdk', labels=('Create', 'Map(stop)'), inputs=(), outputs=())


class _Plan:
    stages = (STAGE,)


def _driver_failure(error: BaseException) -> Exception:
    """A stage's failure as the driver sees it: a record in a note."""
    try:
        raise error
    except BaseException as e:
        failure = Failure.of(e, STAGE)
    wrapped = RuntimeError(str(error))
    python_compat.add_note(wrapped, failure.note())
    return wrapped


def test_bdb_quit_suggests_inproc_debug():
    import bdb

    error = runner.translate_error(
        _driver_failure(RuntimeError("bdb.BdbQuit [while running 'Map(stop)']")), _Plan()
    )
    assert isinstance(error, PipelineExecutionError)
    assert '--inproc_debug' in str(error) and error.transform == 'Map(stop)'
    error = runner.translate_error(_driver_failure(bdb.BdbQuit()), _Plan())
    assert '--inproc_debug' in str(error)


def test_other_failures_get_no_debugger_hint():
    error = runner.translate_error(_driver_failure(ValueError('bad 3')), _Plan())
    assert isinstance(error, PipelineExecutionError)
    assert 'ValueError: bad 3' in str(error) and '--inproc_debug' not in str(error)


def test_interruption_found_behind_a_chained_error():
    interrupt = KeyboardInterrupt()
    try:
        try:
            raise interrupt
        except KeyboardInterrupt:
            raise RuntimeError('job cancelled')  # noqa: B904 (as pyspark's getResult() does)
    except RuntimeError as e:
        chained = e
    assert runner.interruption(chained) is interrupt
    assert runner.interruption(interrupt) is interrupt
    assert runner.interruption(ValueError('x')) is None


@pytest.mark.parametrize('kind', ['DOCKER', 'PROCESS', 'EXTERNAL', 'LOOPBACK'])
def test_unused_environment_type_warns_once(kind, caplog):
    with caplog.at_level(logging.WARNING, logger='beam_spark_inproc.runner'):
        runner.InProcessSparkRunner().default_environment(
            PipelineOptions([f'--environment_type={kind}'])
        )
    [record] = caplog.records
    assert f'--environment_type={kind} is not used' in record.getMessage()
    assert "Spark's Python workers" in record.getMessage()
    assert '\n' not in record.getMessage()


def test_no_environment_type_no_warning(caplog):
    with caplog.at_level(logging.WARNING, logger='beam_spark_inproc.runner'):
        runner.InProcessSparkRunner().default_environment(PipelineOptions([]))
    assert caplog.records == []


def _runner_flags() -> list[str]:
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    SparkRunnerOptions._add_argparse_args(parser)
    return [(a.option_strings[0], a.help) for a in parser._actions]


def test_run_script_help_lists_every_runner_option_without_running_it(tmp_path, capsys):
    ran = tmp_path / 'ran'
    script = tmp_path / 'pipeline.py'
    script.write_text(f'open({str(ran)!r}, "w").close()\n')
    assert cli.main(['run', str(script), '--spark_master=local[1]', '--help']) == 0
    out = capsys.readouterr().out
    assert not ran.exists()
    flags = _runner_flags()
    assert len(flags) > 10
    for flag, help_text in flags:
        assert flag in out, flag
        assert help_text.split()[0] in out, flag
    assert f'python {script} --help' in out


@pytest.mark.parametrize('command', ['run', 'explain'])
def test_command_help_lists_the_runner_options(command, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main([command, '--help'])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert all(flag in out for flag, _ in _runner_flags())
