"""Getting a pipeline's output back to the test: DoFns run in Spark's Python
workers, so outputs travel through files, not through the test's memory."""

from __future__ import annotations

import glob

import apache_beam as beam


def run_to_lines(runner, build, prefix: str, options=None) -> list[str]:
    """Runs ``build(p)`` on ``runner`` (with ``options``, a PipelineOptions);
    returns the repr of each output, sorted."""
    with beam.Pipeline(runner=runner, options=options) as p:
        build(p) | beam.Map(repr) | beam.io.WriteToText(prefix)
    lines = []
    for path in glob.glob(prefix + '*'):
        with open(path) as f:
            lines.extend(f.read().splitlines())
    return sorted(lines)
