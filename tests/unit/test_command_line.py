"""``python -m beam_spark_inproc``: one usage line naming every command, and
every ``--help`` answered without importing Beam (``flags``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from beam_spark_inproc import flags

# Runs the command line's main() in a fresh interpreter, then says whether
# Beam (or PySpark) was imported on the way.
_PROBE = """
import sys
from beam_spark_inproc.__main__ import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print('IMPORTED', sorted(m for m in ('apache_beam', 'pyspark') if m in sys.modules))
sys.exit(code or 0)
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, '-c', _PROBE, *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    'args',
    [
        ['--help'],
        ['run', '--help'],
        ['explain', '--help'],
        ['status', '--help'],
        ['drain', '--help'],
        ['run', 'pipeline.py', '--help'],
        ['explain', 'pipeline.py', '--spark_master=local[2]', '--help'],
    ],
    ids=' '.join,
)
def test_help_imports_no_beam(args):
    done = _run(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == 'IMPORTED []', done.stdout
    assert 'usage: python -m beam_spark_inproc' in done.stdout


def test_usage_names_every_command():
    done = _run('--help')
    usage = done.stdout.splitlines()[0]
    assert usage == 'usage: python -m beam_spark_inproc [-h] {run,explain,status,drain} ...'
    for command in flags.COMMANDS:
        assert f'\n    {command} ' in done.stdout, command


def test_script_help_lists_the_runner_options():
    """``run SCRIPT --help`` lists every flag of SparkRunnerOptions (the
    ones Beam parses), and runs no script."""
    import argparse

    from beam_spark_inproc.options import SparkRunnerOptions

    parser = argparse.ArgumentParser()
    SparkRunnerOptions._add_argparse_args(parser)
    wanted = {a.option_strings[0] for a in parser._actions if a.option_strings[0] != '-h'}
    done = _run('run', 'no_such_script.py', '--help')
    assert done.returncode == 0, done.stderr
    listed = {word for line in done.stdout.splitlines() for word in line.split()[:1]}
    assert wanted <= listed, wanted - listed


def test_no_command_and_a_missing_script_are_one_clear_error(tmp_path):
    done = _run()
    assert done.returncode == 2
    assert 'the following arguments are required: {run,explain,status,drain}' in done.stderr
    missing = str(tmp_path / 'nope.py')
    done = _run('run', missing)
    assert done.returncode == 2
    assert done.stderr.strip() == f'python -m beam_spark_inproc run: {missing}: no such file'
    assert 'IMPORTED []' in done.stdout
