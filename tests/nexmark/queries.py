"""Beam's Python Nexmark queries over ``generator`` events, as test pipelines.

``pipeline(query, events)`` returns a ``build(p)`` function (the shape of
``tests.integration.test_semantics.run_on``) that reads the events with
``Create``, gives each its ``date_time`` as timestamp (as Beam's Nexmark
launcher does), runs ``queries/query<N>.load`` and writes each result as one
line naming its value, window, timestamp and pane. Results are Beam's model
objects (printed as Nexmark's JSON) or dicts (printed with sorted keys).

``streaming_pipeline(query, events, per_step)`` is the same query reading the
events as a stream (``generator.test_stream``: in order, the event-time
watermark following them); ``run_stream`` runs a build as a stream and
returns its lines.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
import uuid

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.benchmarks.nexmark import nexmark_util
from apache_beam.transforms import window

from tests.nexmark import generator

# The launcher's defaults (nexmark_launcher.py), at this data's scale.
METADATA = {
    'auction_skip': 123,
    'window_size_sec': 10,
    'window_period_sec': 5,
    'fanout': 5,
    'num_key_buckets': 2000,
    'max_log_events': 100000,
    'occasional_delay_sec': 3,
    'max_auction_waiting_time': 600,
}


def describe(value) -> str:
    if isinstance(value, dict):
        return json.dumps(
            {k: repr(v) if not isinstance(v, (int, float, str, bool)) else v
             for k, v in value.items()}, sort_keys=True)
    return repr(value)


class Describe(beam.DoFn):
    def process(self, element, w=beam.DoFn.WindowParam,
                ts=beam.DoFn.TimestampParam, pane=beam.DoFn.PaneInfoParam):
        yield '%s @ %s %s %s' % (describe(element), describe_window(w), ts,
                                 describe_pane(pane))


def describe_window(w) -> str:
    if isinstance(w, window.GlobalWindow):
        return 'global'
    return '[%s, %s)' % (w.start, w.end)


def describe_pane(pane) -> str:
    return 'pane(first=%s last=%s %s)' % (
        pane.is_first, pane.is_last, pane.timing)


def load(query: int):
    return importlib.import_module(
        'apache_beam.testing.benchmarks.nexmark.queries.query%d' % query).load


def pipeline(query: int, events: list):
    """build(p) -> PCollection of result lines, for ``run_on``."""
    nexmark_util.setup_coder()

    def build(p):
        read = (p
                | 'Events' >> beam.Create(events)
                | 'Timestamps' >> beam.Map(
                    lambda e: window.TimestampedValue(e, e.date_time)))
        return (load(query)(read, METADATA)
                | 'Describe' >> beam.ParDo(Describe())
                | 'Rewindow' >> beam.WindowInto(window.GlobalWindows()))
    return build


def streaming_pipeline(query: int, events: list, per_step: int):
    """build(p) reading ``events`` as a stream, ``per_step`` at a time."""
    nexmark_util.setup_coder()

    def build(p):
        read = p | 'Events' >> generator.test_stream(events, per_step)
        return (load(query)(read, METADATA)
                | 'Describe' >> beam.ParDo(Describe())
                | 'Rewindow' >> beam.WindowInto(window.GlobalWindows()))
    return build


class _Lines(beam.DoFn):
    """Writes each line to a file of its own (works in any process)."""

    def __init__(self, folder: str):
        self._folder = folder

    def process(self, line):
        with open(os.path.join(self._folder, uuid.uuid4().hex), 'w') as f:
            f.write(line)


def run_stream(runner, build, options: dict | None = None) -> list[str]:
    """Runs ``build`` as a stream on ``runner``; its sorted result lines."""
    folder = tempfile.mkdtemp(prefix='nexmark-stream-')
    try:
        opts = PipelineOptions(**(options or {}))
        opts.view_as(StandardOptions).streaming = True
        p = beam.Pipeline(runner=runner, options=opts)
        _ = build(p) | 'Lines' >> beam.ParDo(_Lines(folder))
        result = p.run()
        assert result.wait_until_finish() == 'DONE', result.state
        lines = []
        for name in os.listdir(folder):
            with open(os.path.join(folder, name)) as f:
                lines.append(f.read())
        return sorted(lines)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
