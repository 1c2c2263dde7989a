"""A local session the runner creates maps the driver JVM's classes from a
class-data-sharing archive (``spark.class_archive``): one the JVM cannot map
costs a second start without it, never the run (``tests/unit/
test_class_archive.py`` checks how the archive is written and settled)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_a_class_archive_the_jvm_cannot_map_is_deleted_and_the_session_starts(tmp_path):
    """A truncated archive in place (which crashes a JVM mapping it) costs a
    second start without it, and is deleted: the run goes on."""
    script = textwrap.dedent("""
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
    """)
    out = subprocess.run(
        [sys.executable, '-c', script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path)),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ['5', 'False']
    assert 'exited at its start with its class archive' in out.stderr
    assert not list(tmp_path.glob('hs_err*'))  # no crash report in its folder
