"""``fileio.WriteToFiles`` and a window's later panes (``io.file_naming``).

Window [0, 10) fires twice: its on-time pane (5 rows) when the watermark
passes 10, then a late pane (3 rows, within the allowed lateness, one pane
per late element batch). Beam's default naming names both panes' files
alike (window and shard only), so the late pane's file replaces the on-time
one: 3 of 8 rows are left, on this runner as on Beam's BundleBasedDirectRunner.
``pane_file_naming`` (with ``max_writers_per_bundle=0, shards=``) keeps one
file per pane: all 8 rows. Without them Beam gives the naming no pane: one
clear error."""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.io import fileio
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.io import pane_file_naming

ON_TIME = [f'on-time {i}' for i in range(1, 6)]
LATE = [f'late {i}' for i in range(2, 5)]


def _write(runner, out: str, **write) -> None:
    stream = (
        TestStream()
        .add_elements([window.TimestampedValue(v, int(v.split()[1])) for v in ON_TIME])
        .advance_watermark_to(20)
        .add_elements([window.TimestampedValue(v, int(v.split()[1])) for v in LATE])
        .advance_watermark_to_infinity()
    )
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with beam.Pipeline(runner=runner, options=options) as p:
        _ = (
            p
            | stream
            | beam.WindowInto(
                window.FixedWindows(10),
                trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
                allowed_lateness=100,
            )
            | fileio.WriteToFiles(out, **write)
        )


def _files(out: str) -> dict[str, list[str]]:
    found = {}
    for name in sorted(os.listdir(out)):
        if name.startswith('.'):  # Beam's temporary folder
            continue
        with open(os.path.join(out, name)) as f:
            found[name] = sorted(f.read().splitlines())
    return found


@pytest.mark.parametrize('shards', [None, 1], ids=['unsharded', 'shards=1'])
def test_default_naming_keeps_only_a_windows_last_pane_as_beam_does(tmp_path, shards):
    write = {} if shards is None else {'shards': shards}
    ours, beams = str(tmp_path / 'ours'), str(tmp_path / 'beam')
    _write(InProcessSparkRunner(debug=True), ours, **write)
    _write(BundleBasedDirectRunner(), beams, **write)
    assert _files(ours) == _files(beams)
    [(name, rows)] = _files(ours).items()
    assert name.startswith('output-1970-01-01T00:00:00-1970-01-01T00:00:10')
    assert rows == sorted(LATE)  # the on-time pane's file was replaced


@pytest.mark.parametrize('engine', ['debug', 'spark'])
def test_pane_file_naming_keeps_every_pane(tmp_path, engine, request):
    out = str(tmp_path / 'out')
    runner = (
        InProcessSparkRunner(debug=True)
        if engine == 'debug'
        else InProcessSparkRunner(spark=request.getfixturevalue('spark'))
    )
    _write(
        runner,
        out,
        shards=1,
        max_writers_per_bundle=0,
        file_naming=pane_file_naming('counts', '.txt'),
    )
    window_ = 'counts-1970-01-01T00:00:00-1970-01-01T00:00:10'
    assert _files(out) == {
        f'{window_}-pane-0-00000-of-00001.txt': sorted(ON_TIME),
        f'{window_}-pane-1-00000-of-00001.txt': sorted(LATE),
    }


def test_pane_file_naming_without_shards_is_one_clear_error(tmp_path):
    """On the debug engine the DoFn's error keeps its type (ValueError), with
    the transform that raised it in its notes."""
    with pytest.raises(
        ValueError, match='give WriteToFiles max_writers_per_bundle=0 and shards=N'
    ) as e:
        _write(
            InProcessSparkRunner(debug=True), str(tmp_path / 'out'), file_naming=pane_file_naming()
        )
    said = '\n'.join([str(e.value), *getattr(e.value, '__notes__', [])])
    assert "while running 'WriteToFiles/ParDo(_MoveTempFilesIntoFinalDestinationFn)'" in said
