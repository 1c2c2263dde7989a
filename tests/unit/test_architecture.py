"""The package's shape: Connect-compatible Spark APIs only, imports one way."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / 'beam_spark_inproc'
TRANSFORMS = pathlib.Path(__file__).resolve().parents[2] / 'transforms'

FORBIDDEN = re.compile(
    r'\.rdd\b|sparkContext|SparkContext|\.broadcast\(|accumulator|mapPartitions\(')


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


def _classic_only(path: pathlib.Path, line: str) -> bool:
    """The allowed exceptions, in the Spark engine, each behind a Connect
    check: job descriptions on classic sessions (Connect has no API for
    them); a mapInArrow UDF made in fewer Py4J calls (``_JvmUdfs``)."""
    return (path.name == 'engine.py' and path.parent.name == 'spark'
            and line.rstrip().endswith(('# classic-only: job descriptions',
                                        '# classic-only: mapInArrow UDFs')))


def test_sources_found():
    assert len(list(_sources())) > 10


@pytest.mark.parametrize('path', list(_sources()), ids=lambda p: p.name)
def test_no_classic_only_spark_api(path):
    """No RDD, SparkContext, broadcast or accumulator: they fail over Spark Connect."""
    hits = [line for line in path.read_text().splitlines()
            if FORBIDDEN.search(line) and not _classic_only(path, line)]
    assert not hits, f'{path}: {hits}'


def test_planning_imports_no_pyspark():
    for path in (PACKAGE / 'planning').rglob('*.py'):
        # A shipped file is found through SparkFiles, inside PySpark's own
        # worker (where pyspark is loaded already): the one worker use of it.
        spark_files = path.name == 'shipped.py' and {'pyspark'} or set()
        assert not any(n.startswith('pyspark') for n in _imports(path) - spark_files), path


def test_worker_imports_no_driver_module():
    driver = ('beam_spark_inproc.spark', 'beam_spark_inproc.runner',
              'beam_spark_inproc.capabilities', 'beam_spark_inproc.debug',
              'beam_spark_inproc.testing', 'beam_spark_inproc.planning.planner',
              'beam_spark_inproc.planning.phases', 'beam_spark_inproc.execution',
              'beam_spark_inproc.options', 'beam_spark_inproc.result')
    for path in (PACKAGE / 'worker').rglob('*.py'):
        bad = [n for n in _imports(path) if n.startswith(driver)]
        assert not bad, f'{path}: {bad}'
        # A shipped file is found through SparkFiles, inside PySpark's own
        # worker (where pyspark is loaded already): the one worker use of it.
        spark_files = path.name == 'shipped.py' and {'pyspark'} or set()
        assert not any(n.startswith('pyspark') for n in _imports(path) - spark_files), path


def test_only_spark_package_imports_pyspark():
    allowed = {PACKAGE / 'spark', PACKAGE / 'testing'}
    for path in PACKAGE.rglob('*.py'):
        if any(parent in allowed for parent in path.parents):
            continue
        names = _imports(path)
        # runner.py may catch pyspark's PythonException to translate it.
        # worker/shipped.py finds shipped files through pyspark.SparkFiles.
        offending = [n for n in names if n.startswith('pyspark')
                     and not (path.name == 'runner.py' and n == 'pyspark.errors')
                     and not (path.name == 'shipped.py' and n == 'pyspark')]
        assert not offending, f'{path}: {offending}'


def test_execution_is_engine_agnostic():
    """The executor and its bookkeeping know no backend: no Spark, no debug engine."""
    backends = ('beam_spark_inproc.spark', 'beam_spark_inproc.debug', 'pyspark')
    paths = list((PACKAGE / 'execution').rglob('*.py'))
    assert paths
    for path in paths:
        bad = [n for n in _imports(path) if n.startswith(backends)]
        assert not bad, f'{path}: {bad}'
