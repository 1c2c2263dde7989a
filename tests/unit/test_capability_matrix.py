"""The capability matrix (docs/capabilities.md) is generated and still covers the whole suite."""

from __future__ import annotations

import collections
import pathlib
import re

import pytest
from apache_beam.runners.portability.fn_api_runner import fn_runner_test

from beam_spark_inproc.compat import beam as beam_compat
from tests.conformance import capability_matrix as cm

MATRIX_DOC = pathlib.Path(cm.ROOT / 'docs' / 'capabilities.md').read_text()


def _suite_counts() -> collections.Counter:
    names = [
        n
        for cls in (fn_runner_test.FnApiRunnerTest, fn_runner_test.FnApiRunnerMetricsTest)
        for n in dir(cls)
        if n.startswith('test')
    ]
    return collections.Counter(cm.capability(n) for n in names)


def _matrix_rows() -> dict[str, list[str]]:
    begin, end = cm.MARKERS
    assert begin in MATRIX_DOC and end in MATRIX_DOC, (
        'matrix markers missing from docs/capabilities.md'
    )
    block = MATRIX_DOC[MATRIX_DOC.index(begin) : MATRIX_DOC.index(end)]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) == 5 and cells[1].strip('*').isdigit():
            rows[cells[0].strip('*')] = cells
    return rows


def _matrix_beam() -> str:
    found = re.search(re.escape(cm.SUITE_OF) + r' (\S+)\.$', MATRIX_DOC, re.M)
    assert found, 'the matrix does not name the Beam whose suite it counts'
    return found.group(1)


def test_matrix_covers_every_suite_test():
    if _matrix_beam() != beam_compat.VERSION_STRING:
        pytest.skip(
            f"the matrix counts apache-beam {_matrix_beam()}'s suite; Beam's test "
            f'files differ in the installed {beam_compat.VERSION_STRING}'
        )
    rows = _matrix_rows()
    expected = _suite_counts()
    assert {k: int(v[1]) for k, v in rows.items() if k != 'all'} == dict(expected)
    assert int(rows['all'][1].strip('*')) == sum(expected.values())


def test_matrix_counts_add_up():
    for label, cells in _matrix_rows().items():
        tests, spark = int(cells[1].strip('*')), int(cells[2].strip('*'))
        debug, of = map(int, re.findall(r'\d+', cells[3]))
        assert spark <= tests and debug <= of <= tests, label
        if label != 'all':
            # Every test not passing on Spark is named, with its reason.
            assert cells[4].count('`test_') == tests - spark, label


def test_render_from_junit(tmp_path):
    junit = tmp_path / 'r.xml'
    junit.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="x.InProcessSparkRunnerTest" name="test_pardo"/>'
        '<testcase classname="x.InProcessSparkRunnerTest" name="test_sdf">'
        '<skipped message="needs X"/></testcase>'
        '<testcase classname="x.InProcessDebugRunnerTest" name="test_pardo"/>'
        '<testcase classname="x.InProcessSparkRunnerMetricsTest" name="test_metrics">'
        '<failure message="boom"/></testcase>'
        '</testsuite></testsuites>'
    )
    table = cm.render(cm.read_junit(junit))
    assert '| Create, ParDo, outputs, composites | 1 | 1 | 1 of 1 | - |' in table
    assert '`test_sdf` skipped: needs X' in table
    assert '`test_metrics` failed: boom' in table
    assert '| **all** | **3** | **1** | **1 of 1** | |' in table
