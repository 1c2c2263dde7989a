"""A class-data-sharing archive of the driver JVM's classes, for the local
sessions the runner creates (``session.get_or_create``).

A local session's JVM spends most of its start loading and verifying Spark's
classes, and its first job loading more: 7.4 s to a session and 3.3 s for a
first job on the development machine (docs/performance.md, "Cold start").
Java's application class-data sharing maps the classes from an archive
instead: 3.4-3.9 s and 1.1 s.

The archive is made by the JVM itself. A session started while none exists
for this Java and this PySpark (``Archive``: one file per pair, under the
user's cache folder) runs with ``-XX:ArchiveClassesAtExit``: its JVM writes
the classes it loaded to a ``.dump`` file when it exits, after this process
did. One process at a time does so (a lock file holding the JVM's process id
and class path); the others start as usual meanwhile. The next session to
start once that JVM is gone checks the dump with the JVM itself (``java
-Xshare:on`` with the same class path, which fails on a truncated archive:
mapping one crashes a JVM) and moves it into place, or deletes it. Later
sessions start with ``-XX:SharedArchiveFile``. The first session on a machine
pays for this once: its JVM starts a few seconds slower and writes ~146 MB
(PySpark 4.3, Java 17) after its process ended.

A JVM that cannot use the archive (other classes on its classpath, e.g. from
``spark.jars``) starts without it, silently (``-Xlog:cds*=off``); a session
that fails to start with it is started again without it and the archive is
deleted. The archive applies only where the runner sets the driver's Java
options: a ``spark.driver.extraJavaOptions`` of the user's replaces them, and
the archive with them. Deleting the folder at any time is safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import subprocess
import time
from typing import Optional

_LOGGER = logging.getLogger(__name__)

# A lock whose JVM was never recorded (its process ended while starting it)
# is taken for one left over after this long; one whose JVM was recorded once
# that JVM has ended, or after a day (its process id may have been reused).
_UNRECORDED_SECONDS = 600.0
_RECORDED_SECONDS = 24 * 3600.0
_CHECK_SECONDS = 60.0
# No messages about the archive; a JVM's crash report (not its working
# folder's hs_err file) next to the archive.
_QUIET = '-Xlog:cds*=off -XX:ErrorFile={folder}/hs_err_%p.log'


def cache_folder() -> pathlib.Path:
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return pathlib.Path(base) / 'beam-spark-inproc' / 'jvm-classes'


def java() -> Optional[pathlib.Path]:
    """The Java runtime a session's JVM would run: JAVA_HOME's, else the
    ``java`` on PATH; None where there is none (``session.ensure_java``)."""
    home = os.environ.get('JAVA_HOME')
    if home and os.path.exists(os.path.join(home, 'bin', 'java')):
        return pathlib.Path(home, 'bin', 'java').resolve()
    import shutil

    found = shutil.which('java')
    return pathlib.Path(found).resolve() if found else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _unlink(*paths: pathlib.Path) -> None:
    for path in paths:
        try:
            path.unlink()
        except OSError:
            pass


class Archive:
    """The archive of one Java runtime and one PySpark install."""

    def __init__(self, path: pathlib.Path, java: pathlib.Path):
        self.path = path
        self._java = java
        self._lock = path.with_suffix('.lock')
        self._dump = path.with_suffix('.dump')
        self._dumping = False

    @classmethod
    def for_this_install(cls) -> Optional['Archive']:
        """None where no Java runtime is found or the cache folder cannot be
        made (the session starts as usual)."""
        import pyspark

        from beam_spark_inproc.compat import pyspark as pyspark_compat

        java_path = java()
        if java_path is None:
            return None
        stat = java_path.stat()
        key = hashlib.sha256(
            repr(
                (
                    str(java_path),
                    stat.st_size,
                    stat.st_mtime_ns,
                    os.path.dirname(os.path.abspath(pyspark.__file__)),
                    pyspark_compat.VERSION_STRING,
                )
            ).encode()
        ).hexdigest()[:16]
        folder = cache_folder()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return cls(folder / f'spark-{pyspark_compat.VERSION_STRING}-{key}.jsa', java_path)

    def java_options(self) -> str:
        """Options that map the archive, or make this process's JVM write it
        (when no other JVM is doing so), or none."""
        if not self.path.exists():
            self._settle()
        if self.path.exists():
            return f'-XX:SharedArchiveFile={self.path} {self._quiet()}'
        if not self._take_lock():
            return ''
        self._dumping = True
        return f'-XX:ArchiveClassesAtExit={self._dump} {self._quiet()}'

    def _quiet(self) -> str:
        return _QUIET.format(folder=self.path.parent)

    def _settle(self) -> None:
        """A dump whose JVM has ended is checked and moved into place (or
        deleted), and its lock removed; a lock whose JVM runs is kept."""
        try:
            age = time.time() - self._lock.stat().st_mtime
            held = json.loads(self._lock.read_text() or '{}')
        except (OSError, ValueError):
            return
        pid = held.get('pid')
        if pid is None and age < _UNRECORDED_SECONDS:
            return
        if pid is not None and age < _RECORDED_SECONDS and _alive(pid):
            return
        if (
            pid is not None
            and self._dump.exists()
            and self._maps(self._dump, held.get('class_path', ''))
        ):
            try:
                os.replace(self._dump, self.path)
            except OSError:  # another process settled it first
                pass
        _unlink(self._dump, self._lock)

    def _maps(self, archive: pathlib.Path, class_path: str) -> bool:
        try:
            return (
                subprocess.run(
                    [
                        str(self._java),
                        '-Xshare:on',
                        f'-XX:SharedArchiveFile={archive}',
                        '-Xlog:cds*=off',
                        '-XX:ErrorFile=/dev/null',
                        '-cp',
                        class_path,
                        '-version',
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=_CHECK_SECONDS,
                ).returncode
                == 0
            )
        except (OSError, subprocess.SubprocessError):
            return False

    def _take_lock(self) -> bool:
        try:
            os.close(os.open(self._lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except OSError:
            return False
        return True

    def started(self, gateway) -> None:
        """The session started with ``java_options``: a JVM that will write
        the archive is recorded in the lock (its process id and class path)."""
        if not self._dumping:
            return
        try:
            self._lock.write_text(
                json.dumps(
                    {
                        'pid': gateway.proc.pid,
                        'class_path': gateway.jvm.System.getProperty('java.class.path'),
                    }
                )
            )
        except Exception as e:  # pylint: disable=broad-except
            _LOGGER.debug('JVM class archive not recorded: %s', e)

    def failed(self) -> None:
        """The session did not start with ``java_options``: no archive is
        used or written until one is made anew."""
        _unlink(self.path, *((self._dump, self._lock) if self._dumping else ()))
