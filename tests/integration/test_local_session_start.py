"""What the local sessions the runner creates start with: Python workers
forked from ``worker.daemon``, which imported Beam and the worker's modules
first; the driver JVM's class archive (``spark.class_archive``). The suite's
session (``session.get_or_create``, as a user's run) has both."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.spark import session
from beam_spark_inproc.worker import daemon
from tests.integration.outputs import run_to_lines


class _Parent(beam.DoFn):
    """The worker's parent (PySpark's daemon): its command line, and whether
    PyArrow's library is mapped into it (the stock daemon never imports it)."""

    def process(self, element):
        parent = os.getppid()
        with open(f'/proc/{parent}/cmdline', 'rb') as f:
            command = f.read().replace(b'\0', b' ').decode()
        with open(f'/proc/{parent}/maps') as f:
            arrow = 'libarrow' in f.read()
        yield element, daemon.MODULE in command.split(), arrow


def test_workers_fork_from_a_daemon_that_imported_beam(spark, tmp_path):
    assert spark.conf.get(session.DAEMON_MODULE) == daemon.MODULE
    lines = run_to_lines(
        InProcessSparkRunner(spark=spark),
        lambda p: (p | beam.Create(range(4)) | beam.Reshuffle()
                   | beam.ParDo(_Parent())),
        str(tmp_path / 'out'),
        PipelineOptions(['--spark_small_data_kb=0']))  # on Spark's workers
    assert lines == [repr((i, True, True)) for i in range(4)]


def test_a_forked_worker_draws_its_own_numpy_randoms():
    """Two processes forked after ``preload`` get different draws from
    NumPy's global generator, as two that imported NumPy themselves would."""
    script = textwrap.dedent('''
        import os, sys
        from beam_spark_inproc.worker import daemon
        daemon.preload()
        import numpy
        draws = []
        for _ in range(2):
            read, write = os.pipe()
            if os.fork() == 0:
                os.write(write, str(numpy.random.randint(2**62)).encode())
                os._exit(0)
            os.close(write)
            os.wait()
            draws.append(os.read(read, 64))
        sys.exit(draws[0] == draws[1])
    ''')
    subprocess.run([sys.executable, '-c', script], check=True)


def test_a_copy_of_the_same_sources_is_the_same_code(tmp_path, monkeypatch):
    """Workers that find an installed copy of the driver's source tree (as
    CI's venv, with pytest importing the tree) preload it; another version
    of it is not preloaded (the workers take the driver's, shipped)."""
    copy = tmp_path / 'site' / 'beam_spark_inproc'
    ignore = shutil.ignore_patterns('__pycache__')
    shutil.copytree(pathlib.Path(session.__file__).resolve().parents[1], copy,
                    ignore=ignore)
    if not (copy / 'transforms').exists():  # a source tree's: installed there
        transforms = importlib.util.find_spec('beam_spark_inproc.transforms')
        shutil.copytree(transforms.submodule_search_locations[0],
                        copy / 'transforms', ignore=ignore)
    monkeypatch.setenv('PYTHONPATH', str(copy.parent))
    assert session._workers_import_this_package(sys.executable)
    with open(copy / 'worker' / 'daemon.py', 'a') as f:
        f.write('# another version\n')
    assert not session._workers_import_this_package(sys.executable)


def test_an_interpreter_without_the_package_keeps_pysparks_daemon():
    assert session._workers_import_this_package(sys.executable)
    base = getattr(sys, '_base_executable', None)
    if not base or subprocess.run(
            [base, '-c', 'import beam_spark_inproc'], cwd='/',
            capture_output=True).returncode == 0:
        pytest.skip('no interpreter here lacks the package')
    assert not session._workers_import_this_package(base)


def test_a_class_archive_the_jvm_cannot_map_is_deleted_and_the_session_starts(
        tmp_path):
    """A truncated archive in place (which crashes a JVM mapping it) costs a
    second start without it, and is deleted: the run goes on."""
    script = textwrap.dedent('''
        import os, subprocess, sys
        from beam_spark_inproc.spark import class_archive, session
        archive = class_archive.Archive.for_this_install()
        subprocess.run([str(archive._java), '-Xlog:cds*=off',
                        f'-XX:ArchiveClassesAtExit={archive.path}', '-version'],
                       check=True, capture_output=True)
        data = archive.path.read_bytes()
        os.chmod(archive.path, 0o600)
        archive.path.write_bytes(data[:len(data) // 2])
        spark, _ = session.get_or_create('local[1]', None, {})
        print(spark.range(5).count(), archive.path.exists())
    ''')
    out = subprocess.run(
        [sys.executable, '-c', script], cwd=tmp_path, capture_output=True,
        text=True, env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path)),
        timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ['5', 'False']
    assert 'exited at its start with its class archive' in out.stderr
    assert not list(tmp_path.glob('hs_err*'))  # no crash report in its folder
