"""Runs a streaming pipeline on this runner and on Beam's BundleBasedDirectRunner
(the Python oracle for TestStream) and returns what each one's sink saw.

The sink records (element, window, timestamp, pane timing, index, is_first,
is_last) as files in a fresh folder, one per record, so it works wherever the
DoFn runs (this process, the DirectRunner, Spark's Python workers).
Timestamps are compared at millisecond precision: Beam's wire coders encode
event times in milliseconds, the DirectRunner never encodes them.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import uuid

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.utils.timestamp import Timestamp


def _normal(value):
    if isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[1], (list, tuple)):
        return (value[0], tuple(sorted(value[1])))
    return value


class Record(beam.DoFn):
    def __init__(self, folder: str):
        self._folder = folder

    def process(
        self,
        element,
        window=beam.DoFn.WindowParam,
        timestamp=beam.DoFn.TimestampParam,
        pane=beam.DoFn.PaneInfoParam,
    ):
        record = (
            _normal(element),
            str(window),
            Timestamp(micros=timestamp.micros // 1000 * 1000),
            pane.timing,
            pane.index,
            pane.is_first,
            pane.is_last,
        )
        with open(os.path.join(self._folder, uuid.uuid4().hex), 'wb') as f:
            pickle.dump(record, f)


def run(build, runner, *flags: str, results: list | None = None) -> list:
    """Builds ``build(pipeline)`` (it returns the PCollection to record), runs
    it as a stream on ``runner``; returns the sorted records (and appends the
    pipeline result to ``results`` if given)."""
    folder = tempfile.mkdtemp(prefix='beam-spark-oracle-')
    options = PipelineOptions(list(flags))
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=runner, options=options)
    build(p) | 'Record' >> beam.ParDo(Record(folder))
    result = p.run()
    assert result.wait_until_finish() == 'DONE'
    if results is not None:
        results.append(result)
    records = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), 'rb') as f:
            records.append(pickle.load(f))
    shutil.rmtree(folder, ignore_errors=True)
    return sorted(records, key=repr)


def direct(build) -> list:
    return run(build, BundleBasedDirectRunner())
