"""Shipping what executors need and may not have: code and large side inputs.

Executors run separate Python workers, often on other machines. They must
import, to unpickle a stage's DoFns, the runner package and every module the
pipeline's code refers to by name. Installed packages (site-packages, the
standard library) are the cluster's business, as on any Spark job; what exists
only on the driver is shipped here: packages and modules imported from a
directory of the driver's ``sys.path`` that is not an installation (the
pipeline script's folder, a source checkout, an editable install), the runner
itself, and the user's ``--spark_py_files``. They go as one zip, added with
``SparkSession.addArtifacts(pyfile=True)``, which works on classic Spark and
over Spark Connect alike and puts the zip on the workers' ``sys.path``
(``compat.pyspark.add_artifact``: on PySpark 3.5's classic sessions, the Spark
context's ``addPyFile``/``addFile``, which 4.x's classic ``addArtifacts`` calls).

Large side inputs travel the same way, as files (``worker.shipped.ShippedFile``): a task's
closure would carry them to every task, and Spark Connect refuses closures over
128 MB.

Files are written to private temporary directories (mode 0700); see
``Shipper`` for when they are removed. Names are unique (by content for code,
by run for data): Spark refuses to register two different files under one name.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import io
import logging
import os
import pathlib
import shutil
import site
import sys
import sysconfig
import tempfile
import threading
import zipfile
from typing import Callable
from typing import Iterable
from typing import Optional

from beam_spark_inproc.worker.shipped import ShippedFile

_LOGGER = logging.getLogger(__name__)
_RUNNER_PACKAGE = 'beam_spark_inproc'
_MAX_SOURCE_BYTES = 10 << 20  # a bigger .py file is data, not code


def _installed_roots() -> list[pathlib.Path]:
    paths = set()
    for name in ('stdlib', 'platstdlib', 'purelib', 'platlib'):
        value = sysconfig.get_paths().get(name)
        if value:
            paths.add(value)
    paths.update(site.getsitepackages() if hasattr(site, 'getsitepackages') else ())
    user = site.getusersitepackages() if hasattr(site, 'getusersitepackages') else None
    if user:
        paths.add(user)
    paths.update({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return [pathlib.Path(p).resolve() for p in paths]


def _within(path: pathlib.Path, roots: list[pathlib.Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _module_files(name: str, module) -> dict[str, pathlib.Path]:
    """Archive name -> source file, for a module or a package (all its .py files)."""
    files: dict[str, pathlib.Path] = {}
    paths = getattr(module, '__path__', None)
    if paths is not None:  # a package: every source file below its folders
        for folder in list(paths):
            folder = pathlib.Path(folder)
            if not folder.is_dir():
                continue
            for source in folder.rglob('*.py'):
                rel = source.relative_to(folder)
                if any(part.startswith('.') or part == '__pycache__' for part in rel.parts):
                    continue
                files[str(pathlib.PurePosixPath(*name.split('.'), *rel.parts))] = source
    else:
        origin = getattr(module, '__file__', None)
        if origin and origin.endswith('.py'):
            files[name.replace('.', '/') + '.py'] = pathlib.Path(origin)
    return files


# (top-level module name, file, folders) -> whether it is driver-only: where a
# module was imported from does not change, and resolving every module's path
# against the installed roots cost 0.1-0.2 s per pipeline.
_LOCAL_TOPS: dict[tuple, bool] = {}


def driver_only_modules() -> dict[str, pathlib.Path]:
    """Archive name -> source file of the code executors may lack (see module doc).

    Subpackages mapped to other folders (``package_dir``) keep their dotted
    names: they are walked after their parents and override them.
    """
    try:  # installed from its own folder (package_dir), or beside a source tree
        importlib.import_module(_RUNNER_PACKAGE + '.transforms')
    except ModuleNotFoundError as e:
        if e.name != _RUNNER_PACKAGE + '.transforms':
            raise
    roots = None
    local_tops = set()
    for name, module in list(sys.modules.items()):
        if '.' in name or name == '__main__' or module is None:
            continue
        origin = getattr(module, '__file__', None)
        paths = tuple(getattr(module, '__path__', None) or ())
        key = (name, origin, paths)
        local = _LOCAL_TOPS.get(key)
        if local is None:
            where = [pathlib.Path(origin)] if origin else [pathlib.Path(p) for p in paths]
            if roots is None:
                roots = _installed_roots()
            local = bool(where) and (
                name == _RUNNER_PACKAGE or not any(_within(w.resolve(), roots) for w in where)
            )
            _LOCAL_TOPS[key] = local
        if local:
            local_tops.add(name)
    files: dict[str, pathlib.Path] = {}
    for name in sorted(n for n in list(sys.modules) if n.split('.')[0] in local_tops):
        loaded = sys.modules.get(name)
        if loaded is None or (
            name != name.split('.')[0] and getattr(loaded, '__path__', None) is None
        ):
            continue  # modules of a package come with the package's folders
        files.update(_module_files(name, loaded))
    return {
        arc: path
        for arc, path in files.items()
        if path.is_file() and path.stat().st_size <= _MAX_SOURCE_BYTES
    }


# Code zips already added, per session: (id(session), file name). Named by
# content, so an unchanged program is shipped once per session.
_shipped: set[tuple[int, str]] = set()
_lock = threading.Lock()
_code_dir: Optional[str] = None
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so equal sources give equal zips


def _process_dir() -> str:
    """A private folder for code shipped by this process, removed at its exit."""
    global _code_dir
    if _code_dir is None:
        _code_dir = tempfile.mkdtemp(prefix='beam-spark-inproc-code-')
        atexit.register(shutil.rmtree, _code_dir, True)
    return _code_dir


def _digest(modules: dict[str, pathlib.Path]) -> str:
    """A name for the zip of ``modules``, from their names and sources: an
    unchanged program is found shipped without being zipped again (deflating
    the driver's ~100 modules cost ~35 ms of every run's driver CPU)."""
    digest = hashlib.sha256()
    for arc, source in sorted(modules.items()):
        data = source.read_bytes()
        digest.update(b'%d:%s:%d:' % (len(arc), arc.encode(), len(data)))
        digest.update(data)
    return digest.hexdigest()[:16]


def _zip(modules: dict[str, pathlib.Path]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED) as archive:
        for arc, source in sorted(modules.items()):
            archive.writestr(
                zipfile.ZipInfo(arc, _ZIP_TIME), source.read_bytes(), zipfile.ZIP_DEFLATED
            )
    return buffer.getvalue()


class Shipper:
    """Ships one run's files through a session.

    Over Spark Connect a file is uploaded to the server, so the local copy is
    removed at once. Classic Spark serves files from where the driver keeps
    them, and every executor that starts later (a replacement for a lost one)
    fetches every file ever added to the session: so code stays until this
    process exits (it is named by content and added once), and a run's data
    files are emptied when the run ends, their empty names kept until exit.
    """

    def __init__(self, session, run_id: str, connect: bool = False):
        self._session = session
        self._run_id = run_id[:12]
        self._connect = connect
        self._dir: Optional[str] = None
        self._files: list[str] = []
        self._count = 0

    def _folder(self) -> str:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix='beam-spark-inproc-')  # mode 0700
            if not self._connect:
                atexit.register(shutil.rmtree, self._dir, True)
        return self._dir

    def _add(self, path: str, **kind) -> None:
        from beam_spark_inproc.compat import pyspark as pyspark_compat

        pyspark_compat.add_artifact(self._session, path, **kind)
        if self._connect:
            os.remove(path)  # the server has its copy

    def ship_code(self, py_files: Iterable[str] = ()) -> list[str]:
        """Adds the driver-only code, zipped, and ``py_files`` to the workers'
        path. Returns the names of the files shipped."""
        modules = driver_only_modules()
        # (name, its bytes made only when the session lacks it)
        payloads: list[tuple[str, Callable[..., bytes]]] = [
            ('beam-code-%s.zip' % _digest(modules), lambda: _zip(modules))
        ]
        for given in py_files:
            base = os.path.basename(given)
            if given.endswith('.py'):  # zipped, to keep its module name
                data = _zip({base: pathlib.Path(given)})
                name = 'beam-py-%s.zip' % hashlib.sha256(data).hexdigest()[:16]
            else:
                with open(given, 'rb') as f:
                    data = f.read()
                name = 'beam-py-%s-' % hashlib.sha256(data).hexdigest()[:16] + base
            payloads.append((name, lambda data=data: data))
        names = []
        for name, make in payloads:
            names.append(name)
            with _lock:
                if (id(self._session), name) in _shipped:
                    continue
                path = os.path.join(_process_dir(), name)
                with open(path, 'wb') as f:
                    f.write(make())
                self._add(path, pyfile=True)
                _shipped.add((id(self._session), name))
        _LOGGER.debug(
            'Shipped %d source files and %d py files as %s', len(modules), len(payloads) - 1, names
        )
        return names

    def ship_bytes(self, data: bytes, kind: str) -> ShippedFile:
        self._count += 1
        name = f'beam-{kind}-{self._run_id}-{self._count}.bin'
        path = os.path.join(self._folder(), name)
        with open(path, 'wb') as f:
            f.write(data)
        self._files.append(path)
        self._add(path, file=True)
        return ShippedFile(name, len(data))

    def close(self) -> None:
        """Removes the run's data: its folder over Connect; on classic Spark,
        the files' contents (see the class doc)."""
        if self._dir is None:
            return
        if self._connect:
            shutil.rmtree(self._dir, ignore_errors=True)
        else:
            for path in self._files:
                with contextlib.suppress(OSError):
                    os.truncate(path, 0)
        self._files.clear()
        self._dir = None
