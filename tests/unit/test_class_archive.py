"""The driver JVM's class archive (``spark.class_archive``), with the JVM
itself but without Spark: a dump is moved into place only once the JVM that
wrote it has ended and the dump maps; one process at a time writes one."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from beam_spark_inproc.spark import class_archive


@pytest.fixture
def archive(tmp_path):
    java = class_archive.java()
    if java is None:
        pytest.skip('no Java runtime')
    return class_archive.Archive(tmp_path / 'spark.jsa', java)


def _dump(archive, truncate: bool = False) -> None:
    """A real archive (of the classes ``java -version`` loads), written where
    a JVM writes its dump; truncated as a JVM killed while writing leaves it."""
    subprocess.run(
        [
            str(archive._java),
            f'-XX:ArchiveClassesAtExit={archive._dump}',
            '-Xlog:cds*=off',
            '-version',
        ],
        check=True,
        capture_output=True,
    )
    if truncate:
        data = archive._dump.read_bytes()
        os.chmod(archive._dump, 0o600)
        archive._dump.write_bytes(data[: len(data) // 2])


def _ended_pid() -> int:
    proc = subprocess.Popen(['true'])
    proc.wait()
    return proc.pid


def _lock(archive, pid=None) -> None:
    archive._lock.write_text(json.dumps({'pid': pid, 'class_path': ''}) if pid is not None else '')


def test_a_dump_whose_jvm_ended_is_checked_and_moved_into_place(archive):
    _dump(archive)
    _lock(archive, _ended_pid())
    options = archive.java_options()
    assert options.startswith(f'-XX:SharedArchiveFile={archive.path} ')
    assert archive.path.exists()
    assert not archive._dump.exists() and not archive._lock.exists()


def test_a_truncated_dump_is_deleted_and_made_anew(archive):
    _dump(archive, truncate=True)
    _lock(archive, _ended_pid())
    options = archive.java_options()
    assert not archive.path.exists() and not archive._dump.exists()
    # This process now writes one: its lock is taken until its JVM is recorded.
    assert options.startswith(f'-XX:ArchiveClassesAtExit={archive._dump} ')
    assert archive._lock.exists()
    assert class_archive.Archive(archive.path, archive._java).java_options() == ''


def test_a_dump_whose_jvm_still_runs_is_left_alone(archive):
    _dump(archive)
    _lock(archive, os.getpid())  # a live process
    assert archive.java_options() == ''
    assert archive._dump.exists() and not archive.path.exists()


def test_a_lock_without_a_recorded_jvm_is_left_until_it_is_stale(archive):
    _lock(archive)
    assert archive.java_options() == ''
    old = time.time() - class_archive._UNRECORDED_SECONDS - 1
    os.utime(archive._lock, (old, old))
    assert archive.java_options().startswith('-XX:ArchiveClassesAtExit=')


def test_a_failed_start_deletes_the_archive(archive):
    _dump(archive)
    os.replace(archive._dump, archive.path)
    assert archive.java_options().startswith('-XX:SharedArchiveFile=')
    archive.failed()
    assert not archive.path.exists()
