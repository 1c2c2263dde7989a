"""Beam's Python Nexmark queries over ``beam_spark_inproc.nexmark`` events.

``pipeline(query, n)`` returns a ``build(p)`` function (the shape of
``tests.integration.test_semantics.run_on``) that reads events ``0 .. n-1``
with the bounded ``ReadEvents`` (each event's ``date_time`` as its timestamp,
as Beam's Nexmark launcher does), runs ``queries/query<N>.load`` and writes
each result as one line naming its value, window, timestamp and pane. Results
are Beam's model objects (printed as Nexmark's JSON) or dicts (printed with
sorted keys).

``streaming_pipeline(query, n, events_per_second, period, max_per_call)`` is
the same query on the unbounded, paced ``ReadEvents`` (in order, the
event-time watermark following them; what has arrived, at most
``max_per_call``, per call: with ``events_per_second`` far above what the
runner reads, every call reads ``max_per_call``);
``test_stream_pipeline(query, n, per_step)`` reads the same events from a
TestStream, ``per_step`` a step (Beam's BundleBasedDirectRunner, the streaming
reference, runs it; it does not run the paced splittable DoFn).
``run_stream`` runs a build as a stream and returns its lines (its sink,
``_Lines``, writes a file per bundle).

Query 10 writes no file in Beam's Python version (its
``open_writable_gcs_file`` is empty) and outputs nothing; ``query10_files``
points it at a local folder and makes that function create the file it names,
so the names written (a log file per window, shard and pane, an index per
window) are the query's output.
"""

from __future__ import annotations

import contextlib
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
from apache_beam.testing.benchmarks.nexmark.queries import query10
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window

from beam_spark_inproc.nexmark import ReadEvents
from beam_spark_inproc.nexmark import generator

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
            {
                k: repr(v) if not isinstance(v, (int, float, str, bool)) else v
                for k, v in value.items()
            },
            sort_keys=True,
        )
    return repr(value)


class Describe(beam.DoFn):
    def process(
        self,
        element,
        w=beam.DoFn.WindowParam,
        ts=beam.DoFn.TimestampParam,
        pane=beam.DoFn.PaneInfoParam,
    ):
        yield '%s @ %s %s %s' % (describe(element), describe_window(w), ts, describe_pane(pane))


def describe_window(w) -> str:
    if isinstance(w, window.GlobalWindow):
        return 'global'
    return '[%s, %s)' % (w.start, w.end)


def describe_pane(pane) -> str:
    return 'pane(first=%s last=%s %s index=%d)' % (
        pane.is_first,
        pane.is_last,
        pane.timing,
        pane.index,
    )


def load(query: int):
    return importlib.import_module(
        'apache_beam.testing.benchmarks.nexmark.queries.query%d' % query
    ).load


def _query(query: int, read, p):
    return (
        load(query)(read, METADATA, p.options)
        | 'Describe' >> beam.ParDo(Describe())
        | 'Rewindow' >> beam.WindowInto(window.GlobalWindows())
    )


def pipeline(query: int, num_events: int):
    """build(p) -> PCollection of result lines, for ``run_on``."""

    def build(p):
        return _query(query, p | 'Events' >> ReadEvents(num_events), p)

    return build


def streaming_pipeline(
    query: int,
    num_events: int,
    events_per_second: float,
    period: float = 0.05,
    max_per_call: int = 50_000,
):
    """build(p) reading the events from the paced, unbounded ReadEvents."""

    def build(p):
        return _query(
            query,
            p
            | 'Events'
            >> ReadEvents(
                num_events,
                events_per_second=events_per_second,
                period=period,
                max_per_call=max_per_call,
            ),
            p,
        )

    return build


def test_stream_pipeline(query: int, num_events: int, per_step: int):
    """build(p) reading the events from a TestStream, ``per_step`` at a time."""
    nexmark_util.setup_coder()
    events = list(generator.events(num_events))

    def build(p):
        return _query(query, p | 'Events' >> test_stream(events, per_step), p)

    return build


test_stream_pipeline.__test__ = False  # not a pytest test


def test_stream(events: list, per_step: int) -> TestStream:
    """The events ``per_step`` at a time, in order, each step followed by the
    event-time watermark moving to its last event's time (as the paced
    ReadEvents does), then to +inf."""
    stream = TestStream()
    for start in range(0, len(events), per_step):
        chunk = events[start : start + per_step]
        stream = stream.add_elements([window.TimestampedValue(e, e.date_time) for e in chunk])
        stream = stream.advance_watermark_to(chunk[-1].date_time)
    return stream.advance_watermark_to_infinity()


test_stream.__test__ = False  # not a pytest test


def _create_file(options, filename):
    open(filename, 'w').close()


@contextlib.contextmanager
def _query10_writing_to(folder: str):
    """query10's module globals pointing at ``folder`` (and creating the file
    named) while inside, in this process."""
    saved = query10.output_path, query10.open_writable_gcs_file
    query10.output_path, query10.open_writable_gcs_file = folder, _create_file
    try:
        yield
    finally:
        query10.output_path, query10.open_writable_gcs_file = saved


class _WriteEventFiles(query10.WriteEventDoFn):
    """Beam's WriteEventDoFn with the folder in the DoFn, not only in the
    driver's module globals: a Spark worker imports query10 afresh."""

    def __init__(self, folder: str):
        self._folder = folder

    def process(
        self,
        element,
        pipeline_options,
        window=beam.DoFn.WindowParam,
        pane_info=beam.DoFn.PaneInfoParam,
    ):
        with _query10_writing_to(self._folder):
            yield from super().process(element, pipeline_options, window, pane_info)


class _WriteIndexFiles(query10.WriteIndexDoFn):
    def __init__(self, folder: str):
        self._folder = folder

    def process(self, element, pipeline_options, window=beam.DoFn.WindowParam):
        with _query10_writing_to(self._folder):
            result = super().process(element, pipeline_options, window)
            yield from result or ()


@contextlib.contextmanager
def query10_files(folder: str):
    """Query 10 built inside writes (empty) files into ``folder`` (see the
    module doc), in any process: its two writing DoFns are built as
    subclasses that carry the folder (Spark's workers do not see the
    driver's module globals)."""
    saved = query10.WriteEventDoFn, query10.WriteIndexDoFn
    query10.WriteEventDoFn = lambda: _WriteEventFiles(folder)
    query10.WriteIndexDoFn = lambda: _WriteIndexFiles(folder)
    try:
        with _query10_writing_to(folder):
            yield
    finally:
        query10.WriteEventDoFn, query10.WriteIndexDoFn = saved


class _Lines(beam.DoFn):
    """Writes each bundle's lines (one a line) to a file of its own (works in
    any process; a file appears whole, by a rename): a file per bundle, not
    per line, so that a sink of many results costs little beside the query."""

    def __init__(self, folder: str):
        self._folder = folder

    def start_bundle(self):
        self._lines = []

    def process(self, line):
        assert '\n' not in line, line
        self._lines.append(line)

    def finish_bundle(self):
        if not self._lines:
            return
        name = uuid.uuid4().hex
        # Whole files only for a reader polling the folder meanwhile.
        with open(os.path.join(self._folder, '.' + name), 'w') as f:
            f.write('\n'.join(self._lines))
        os.rename(os.path.join(self._folder, '.' + name), os.path.join(self._folder, name))
        self._lines = []


def read_lines(folder: str) -> list[str]:
    """The lines ``_Lines`` wrote into ``folder`` so far (whole files)."""
    lines = []
    for name in os.listdir(folder):
        if not name.startswith('.'):  # '.' + name: being written
            with open(os.path.join(folder, name)) as f:
                lines.extend(f.read().split('\n'))
    return lines


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
        return sorted(read_lines(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
