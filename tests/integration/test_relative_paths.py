"""Relative local paths resolve against the driver's working directory on Spark
too (``worker.directory``): Spark's Python workers run in a directory of their
own, where ``./in.txt`` matched nothing and raised nothing. Compared with
FnApiRunner, whose workers share the driver's directory."""

from __future__ import annotations

import glob
import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.worker import directory


@pytest.fixture
def in_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'in.txt').write_text('b\na\nc\n')
    (tmp_path / 'other.txt').write_text('d\n')
    return tmp_path


def _run(runner, out: str, **options) -> list[str]:
    """Reads ./in.txt, writes its lines upper-cased to ``out`` (relative)."""
    with beam.Pipeline(runner=runner, options=PipelineOptions(**options)) as p:
        _ = p | beam.io.ReadFromText('./in.txt') | beam.Map(str.upper) | beam.io.WriteToText(out)
    lines = []
    for name in glob.glob(out + '*'):
        with open(name) as f:
            lines += f.read().split()
    return sorted(lines)


@pytest.mark.parametrize('small_data', [True, False], ids=['defaults', 'small_data_off'])
def test_relative_read_and_write_as_fnapi(in_folder, spark, small_data):
    expected = _run(FnApiRunner(), 'fnapi/out')
    assert expected == ['A', 'B', 'C']
    options = {} if small_data else {'spark_small_data_kb': 0}
    got = _run(InProcessSparkRunner(spark=spark), 'spark/out', **options)
    assert got == expected


def test_driver_directory_only_while_the_task_runs(tmp_path, monkeypatch):
    worker, driver = tmp_path / 'worker', tmp_path / 'driver'
    worker.mkdir()
    driver.mkdir()
    monkeypatch.chdir(worker)
    with directory.driver_directory(str(driver)):
        assert os.getcwd() == str(driver)
        assert directory.worker_directory() == str(worker)
    assert os.getcwd() == str(worker)
    with directory.driver_directory(str(tmp_path / 'not-here')):
        assert os.getcwd() == str(worker)  # not on this machine: stays
    assert directory.worker_directory() == str(worker)
