"""Bad input gets one clear error, before Spark starts where it can
(``spark.session.check_master``, ``runner.translate_error``'s remedies,
``runner.interruption``, the CLI's ``--help``); no Spark here."""

from __future__ import annotations

import logging
import socket

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_spark_inproc import __main__ as cli
from beam_spark_inproc import runner
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


def test_closed_port_is_refused_and_a_listening_one_accepted():
    with socket.socket() as server:
        server.bind(('127.0.0.1', 0))
        server.listen()
        port = server.getsockname()[1]
        check_master(f'spark://127.0.0.1:{port}', timeout=2)
        # Another master listed first that refuses: the listening one is enough.
        with socket.socket() as closed:
            closed.bind(('127.0.0.1', 0))
            refused = closed.getsockname()[1]
        check_master(f'spark://127.0.0.1:{refused},127.0.0.1:{port}', timeout=2)
    with pytest.raises(SparkMasterError, match=f'127.0.0.1:{port}: .*refused'):
        check_master(f'spark://127.0.0.1:{port}', timeout=2)


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
    wrapped.add_note(failure.note())
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


def test_top_level_help_lists_the_runner_options(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(['--help'])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert all(flag in out for flag, _ in _runner_flags())
