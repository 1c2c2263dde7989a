"""The package's shape: Connect-compatible Spark APIs only, imports one way, no
exceptions raised into other threads."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / 'beam_spark_inproc'
TRANSFORMS = pathlib.Path(__file__).resolve().parents[2] / 'transforms'

FORBIDDEN = re.compile(
    r'\.rdd\b|sparkContext|SparkContext|\.broadcast\(|accumulator|mapPartitions\('
)


def _sources():
    for root in (PACKAGE, TRANSFORMS):
        yield from sorted(root.rglob('*.py'))


def _imports(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _module_name(path: pathlib.Path) -> str:
    if TRANSFORMS in path.parents:
        parts = ['beam_spark_inproc', 'transforms', *path.relative_to(TRANSFORMS).parts]
    else:
        parts = ['beam_spark_inproc', *path.relative_to(PACKAGE).parts]
    parts[-1] = parts[-1][: -len('.py')]
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


MODULES = {_module_name(path): path for path in _sources()}


def _module_imports(name: str) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in it (at
    the top or inside a function): ``from pkg import mod`` counts as ``mod``,
    and a module's own enclosing packages do not count (importing it loads
    them anyway)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [
                f'{node.module}.{alias.name}'
                if f'{node.module}.{alias.name}' in MODULES
                else node.module
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition('.')[0]
            if target and target != name and not name.startswith(target + '.'):
                found.add(target)
    return found


def _in(name: str, *packages: str) -> bool:
    return any(
        name == f'beam_spark_inproc.{p}' or name.startswith(f'beam_spark_inproc.{p}.')
        for p in packages
    )


def _classic_only(path: pathlib.Path, line: str) -> bool:
    """The allowed exceptions, in the Spark engine, each behind a Connect
    check: job descriptions on classic sessions (Connect has no API for
    them); a mapInArrow UDF made in fewer Py4J calls (``_JvmUdfs``); the
    JVM a local session of the runner's own runs in (``session.get_or_create``
    past its Connect branch: ``class_archive``); and the executors' running
    tasks after Ctrl-C (``cancel.wait_for_tasks_to_end``: a Connect client
    has no local JVM to stop under them)."""
    if path.parent.name == 'compat':
        # Job tags that cancel from any thread, and what PySpark 3.5's
        # classic sessions lack (artifacts): ``compat.pyspark`` uses the Spark
        # context for them on classic sessions.
        return path.name == 'pyspark.py' and line.rstrip().endswith(
            ('# classic-only: PySpark 3.5', '# classic-only: job tags')
        )
    if path.parent.name != 'spark':
        return False
    return (
        (
            path.name == 'engine.py'
            and line.rstrip().endswith(
                ('# classic-only: job descriptions', '# classic-only: mapInArrow UDFs')
            )
        )
        or (path.name == 'session.py' and line.rstrip().endswith('# classic-only: a local JVM'))
        or (
            path.name == 'cancel.py'
            and line.rstrip().endswith('# classic-only: tasks ending after a cancel')
        )
    )


def test_sources_found():
    assert len(list(_sources())) > 10


@pytest.mark.parametrize('path', list(_sources()), ids=lambda p: p.name)
def test_no_classic_only_spark_api(path):
    """No RDD, SparkContext, broadcast or accumulator: they fail over Spark Connect."""
    hits = [
        line
        for line in path.read_text().splitlines()
        if FORBIDDEN.search(line) and not _classic_only(path, line)
    ]
    assert not hits, f'{path}: {hits}'


@pytest.mark.parametrize('path', list(_sources()), ids=lambda p: p.name)
def test_no_exception_raised_into_other_threads(path):
    """The runner never raises into code it does not own: no ``ctypes`` into
    CPython (``PyThreadState_SetAsyncExc`` stops a thread at a random
    instruction, and can leave the interpreter's state broken), no
    ``_thread.interrupt_main``. A stage in the driver is stopped between
    its inputs (``execution.small``)."""
    text = path.read_text()
    assert not {'ctypes', '_ctypes'} & _imports(path), path
    for name in ('SetAsyncExc', 'interrupt_main', 'pythonapi'):
        assert name not in text, (path, name)


def test_planning_imports_no_pyspark():
    for path in (PACKAGE / 'planning').rglob('*.py'):
        # A shipped file is found through SparkFiles, inside PySpark's own
        # worker (where pyspark is loaded already): the one worker use of it.
        spark_files = {'pyspark'} if path.name == 'shipped.py' else set()
        assert not any(n.startswith('pyspark') for n in _imports(path) - spark_files), path


def test_worker_imports_no_driver_module():
    driver = (
        'beam_spark_inproc.spark',
        'beam_spark_inproc.runner',
        'beam_spark_inproc.capabilities',
        'beam_spark_inproc.debug',
        'beam_spark_inproc.testing',
        'beam_spark_inproc.planning.planner',
        'beam_spark_inproc.planning.phases',
        'beam_spark_inproc.execution',
        'beam_spark_inproc.options',
        'beam_spark_inproc.result',
    )
    for path in (PACKAGE / 'worker').rglob('*.py'):
        bad = [n for n in _imports(path) if n.startswith(driver)]
        assert not bad, f'{path}: {bad}'
        # A shipped file is found through SparkFiles, inside PySpark's own
        # worker (where pyspark is loaded already): the one worker use of it.
        spark_files = {'pyspark'} if path.name == 'shipped.py' else set()
        assert not any(n.startswith('pyspark') for n in _imports(path) - spark_files), path


def test_only_spark_package_imports_pyspark():
    allowed = {PACKAGE / 'spark', PACKAGE / 'testing'}
    # What differs between PySpark releases, and the versions a worker reports.
    compat = {PACKAGE / 'compat' / 'pyspark.py', PACKAGE / 'compat' / 'versions.py'}
    for path in PACKAGE.rglob('*.py'):
        if any(parent in allowed for parent in path.parents) or path in compat:
            continue
        names = _imports(path)
        # runner.py may catch pyspark's PythonException to translate it.
        # worker/shipped.py finds shipped files through pyspark.SparkFiles.
        offending = [
            n
            for n in names
            if n.startswith('pyspark')
            and not (path.name == 'runner.py' and n == 'pyspark.errors')
            and not (path.name == 'shipped.py' and n == 'pyspark')
        ]
        assert not offending, f'{path}: {offending}'


def test_execution_is_engine_agnostic():
    """The executor and its bookkeeping know no backend: no Spark, no debug engine."""
    backends = ('beam_spark_inproc.spark', 'beam_spark_inproc.debug', 'pyspark')
    paths = list((PACKAGE / 'execution').rglob('*.py'))
    assert paths
    for path in paths:
        bad = [n for n in _imports(path) if n.startswith(backends)]
        assert not bad, f'{path}: {bad}'


def test_no_import_cycles():
    """No module of the package reaches itself through imports, counting the
    imports inside functions: each cycle is listed."""
    graph = {name: _module_imports(name) for name in MODULES}
    cycles = []
    for start in sorted(graph):
        stack, seen = [(start, (start,))], set()
        while stack:
            name, path = stack.pop()
            for target in sorted(graph[name]):
                if target == start:
                    cycles.append(' -> '.join(path + (start,)))
                elif target not in seen and target > start:
                    seen.add(target)
                    stack.append((target, path + (target,)))
    assert not cycles, '\n'.join(cycles)


def test_transforms_sit_on_top():
    """The Spark PTransforms (``transforms/``) use the package; the package's
    own modules never import them. The runner alone loads their runtime, to
    hand the executor its handler for runner-native stages."""
    for name in MODULES:
        if _in(name, 'transforms'):
            continue
        bad = [n for n in _module_imports(name) if _in(n, 'transforms')]
        if name == 'beam_spark_inproc.runner':
            bad.remove('beam_spark_inproc.transforms.runtime')
        assert not bad, f'{name}: {bad}'


def test_transforms_import_no_backend():
    """The transforms reach Spark through the engine contract and the session
    they are given, never through the Spark engine, the debug engine or the
    streaming loop; they write rows by the protocol, not through the worker."""
    for name in MODULES:
        if not _in(name, 'transforms'):
            continue
        bad = [
            n
            for n in _module_imports(name)
            if _in(n, 'spark', 'debug', 'execution.streaming', 'worker')
        ]
        assert not bad, f'{name}: {bad}'


def test_planning_imports_no_execution_or_backend():
    """Planning is pure: it imports no executor, engine or result."""
    for name in MODULES:
        if not _in(name, 'planning'):
            continue
        bad = [
            n
            for n in _module_imports(name)
            if _in(n, 'execution', 'spark', 'debug', 'metrics', 'testing', 'runner', 'result')
        ]
        assert not bad, f'{name}: {bad}'


# What driver code may take from ``worker/``: what builds a task (or, for the
# planner, what goes into a stage), never the contract (``protocol/``).
TASK_BUILDING = {
    'beam_spark_inproc.worker.stage_task': {'StageTask', 'stage_task'},
    'beam_spark_inproc.worker.recode': {'Recode'},  # a Reshuffle's task
    'beam_spark_inproc.worker.shipped': {'ShippedFile'},  # a task's side input file
    'beam_spark_inproc.worker.logs': {'logs'},  # the task's log level
}


def _worker_names(path: pathlib.Path) -> set[tuple[str, str]]:
    """(worker module, name) for each name imported from ``worker/``; a
    module imported whole counts as its own last name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and (node.module.startswith('beam_spark_inproc.worker'))
        ):
            for alias in node.names:
                full = f'{node.module}.{alias.name}'
                if full in MODULES:
                    found.add((full, alias.name))
                else:
                    found.add((node.module, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith('beam_spark_inproc.worker'):
                    found.add((alias.name, alias.name.rpartition('.')[2]))
    return found


def test_driver_imports_worker_only_to_build_a_task():
    """Driver and worker share the contract through ``protocol/``; driver code
    imports ``worker/`` only for what builds a task (``TASK_BUILDING``)."""
    for name, path in MODULES.items():
        if _in(name, 'worker', 'protocol', 'transforms'):
            continue
        bad = [
            f'{module}.{n}'
            for module, n in _worker_names(path)
            if n not in TASK_BUILDING.get(module, ())
        ]
        assert not bad, f'{name}: {bad}'


def test_io_imports_no_module_of_the_package():
    """The readers the planner puts into stages (``io/``) are loaded by the
    planner and by workers alike: they import Beam only."""
    names = [n for n in MODULES if _in(n, 'io')]
    assert names
    for name in names:
        bad = [n for n in _module_imports(name) if not _in(n, 'io')]
        assert not bad, f'{name}: {bad}'


def test_protocol_imports_only_protocol():
    """The contract is plain data and pure functions, loaded by workers and the
    driver alike: it imports no other module of the package."""
    names = [n for n in MODULES if _in(n, 'protocol')]
    assert len(names) > 3
    for name in names:
        bad = [n for n in _module_imports(name) if not _in(n, 'protocol')]
        assert not bad, f'{name}: {bad}'


def test_every_package_is_installed():
    """``setup.cfg`` lists its packages by name: a package missing there is
    absent from the installed distribution (as CI installs it), though an
    editable install still finds it."""
    import configparser

    setup = configparser.ConfigParser()
    setup.read(PACKAGE.parent / 'setup.cfg')
    listed = set(setup['options']['packages'].split())
    found = {
        '.'.join(init.parent.relative_to(PACKAGE.parent).parts)
        for init in PACKAGE.rglob('__init__.py')
    }
    found |= {
        'beam_spark_inproc.transforms.'
        + '.'.join(init.parent.relative_to(PACKAGE.parent / 'transforms').parts)
        for init in (PACKAGE.parent / 'transforms').rglob('__init__.py')
        if init.parent != PACKAGE.parent / 'transforms'
    }
    assert found - listed == set()


# A Beam release written as a string (``'2.65.0'``, ``'2.77'``).
_BEAM_RELEASE = re.compile(r'2\.\d{1,3}(\.\d+)?')


def _reads_beam_version(path: pathlib.Path) -> list[str]:
    """What in one source reads Beam's version: ``apache_beam.version``
    imported, ``__version__`` of ``apache_beam`` (under any name it is bound
    to), or a string that is a Beam release (a version to compare with)."""
    tree = ast.parse(path.read_text())
    beam_names = {'apache_beam'}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == 'apache_beam.version':
                    found.append(f'line {node.lineno}: import {alias.name}')
                elif alias.name == 'apache_beam':
                    beam_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = {alias.name for alias in node.names}
            if node.module == 'apache_beam.version' or (
                node.module == 'apache_beam' and names & {'version', '__version__'}
            ):
                found.append(f'line {node.lineno}: from {node.module} import {sorted(names)}')
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == '__version__'
            and isinstance(node.value, ast.Name)
            and node.value.id in beam_names
        ):
            found.append(f'line {node.lineno}: {node.value.id}.__version__')
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _BEAM_RELEASE.fullmatch(node.value)
        ):
            found.append(f'line {node.lineno}: {node.value!r}')
    return found


def test_only_compat_reads_beams_version():
    """What differs between Beam releases is decided in ``compat.beam``
    (named flags and functions, keyed by a feature test or the version): no
    other module reads Beam's version or names a Beam release to compare
    with."""
    checked = 0
    for name, path in MODULES.items():
        if _in(name, 'compat'):
            continue
        checked += 1
        found = _reads_beam_version(path)
        assert not found, f'{name} reads the Beam version (use compat.beam): {found}'
    assert checked > 10


def test_the_version_rule_sees_what_it_forbids(tmp_path: pathlib.Path):
    """The rule above finds each way of reading Beam's version."""
    source = tmp_path / 'reader.py'
    for text in (
        'import apache_beam.version',
        'from apache_beam import version',
        'from apache_beam.version import __version__',
        'import apache_beam as beam\nif beam.__version__ >= "x": pass',
        'RELEASE = "2.72.0"',
        'if release < "2.77": pass',
    ):
        source.write_text(text)
        assert _reads_beam_version(source), text
    source.write_text('import apache_beam as beam\nVERSION = "0.2.0"\n"""Since Beam 2.65."""')
    assert not _reads_beam_version(source)
    compat = _reads_beam_version(PACKAGE / 'compat' / 'beam.py')
    assert compat, 'compat.beam reads the version itself'


# A PySpark release written as a string (``'3.5.0'``, ``'4.2'``).
_PYSPARK_RELEASE = re.compile(r'[34]\.\d{1,2}(\.\d+)?')


def _reads_pyspark_version(path: pathlib.Path) -> list[str]:
    """What in one source reads PySpark's version: ``pyspark.version``
    imported, ``__version__`` of ``pyspark`` (under any name it is bound to),
    its installed distribution's version (``importlib.metadata``), or a
    string that is a PySpark release (a version to compare with)."""
    tree = ast.parse(path.read_text())
    pyspark_names = {'pyspark'}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == 'pyspark.version':
                    found.append(f'line {node.lineno}: import {alias.name}')
                elif alias.name == 'pyspark':
                    pyspark_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = {alias.name for alias in node.names}
            if node.module == 'pyspark.version' or (
                node.module == 'pyspark' and names & {'version', '__version__'}
            ):
                found.append(f'line {node.lineno}: from {node.module} import {sorted(names)}')
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == '__version__'
            and isinstance(node.value, ast.Name)
            and node.value.id in pyspark_names
        ):
            found.append(f'line {node.lineno}: {node.value.id}.__version__')
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, 'attr', None) or getattr(node.func, 'id', None)) == 'version'
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == 'pyspark'
        ):
            found.append(f"line {node.lineno}: version('pyspark')")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _PYSPARK_RELEASE.fullmatch(node.value)
        ):
            found.append(f'line {node.lineno}: {node.value!r}')
    return found


def test_only_compat_reads_pysparks_version():
    """What differs between PySpark releases is decided in ``compat.pyspark``
    (named flags and functions): no other module reads PySpark's version or
    names a PySpark release to compare with (``compat.versions`` reports the
    worker's version string through ``compat.pyspark``)."""
    checked = 0
    for name, path in MODULES.items():
        if name == 'beam_spark_inproc.compat.pyspark':
            continue
        checked += 1
        found = _reads_pyspark_version(path)
        assert not found, f'{name} reads the PySpark version (use compat.pyspark): {found}'
    assert checked > 10


def test_the_pyspark_version_rule_sees_what_it_forbids(tmp_path: pathlib.Path):
    """The rule above finds each way of reading PySpark's version."""
    source = tmp_path / 'reader.py'
    for text in (
        'import pyspark.version',
        'from pyspark import __version__',
        'from pyspark.version import __version__',
        'import pyspark as ps\nif ps.__version__ >= "x": pass',
        'import pyspark\nV = pyspark.__version__',
        'from importlib import metadata\nV = metadata.version("pyspark")',
        'RELEASE = "3.5.0"',
        'if release < "4.2": pass',
    ):
        source.write_text(text)
        assert _reads_pyspark_version(source), text
    source.write_text('import pyspark\nVERSION = "0.2.0"\n"""Since PySpark 4.0."""')
    assert not _reads_pyspark_version(source)
    assert _reads_pyspark_version(PACKAGE / 'compat' / 'pyspark.py'), (
        'compat.pyspark reads the version itself'
    )
