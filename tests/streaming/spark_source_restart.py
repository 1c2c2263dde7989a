"""A driver reading a Spark file stream, for the restart test (runnable as a
script: a driver to kill).

``python -m tests.streaming.spark_source_restart LANDING OUT CHECKPOINT
[--kill MARKER]``: the windowed sums of ``spark_source_pipelines`` over the
JSON files in LANDING, written with Beam's ``fileio.WriteToFiles`` into OUT,
on the debug engine (DoFns run in this process). With ``--kill``, the driver
SIGKILLs itself the first time (MARKER absent) row ``KILL_ID`` reaches a
DoFn: in the middle of the micro-batch that read it, once Spark's query has
staged and committed (in its own checkpoint) every batch, before the loop's
commit record: Spark's checkpoint is ahead of the loop's. Prints the committed counter of rows read
as JSON.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import sys
import time

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from tests.streaming import spark_source_pipelines as cases

KILL_ID = 3 * cases.PER_FILE + 1  # in the fourth Spark batch


def _count(row):
    Metrics.counter('spark_source', 'rows').inc()
    return row


def spark_committed(checkpoint: str) -> list[int]:
    """The batch ids Spark's staging query committed in its own checkpoint."""
    found = []
    for path in glob.glob(os.path.join(checkpoint, 'sources', '*', 'checkpoint', 'commits', '*')):
        name = os.path.basename(path)
        if name.isdigit():
            found.append(int(name))
    return sorted(found)


def _kill_once(row, marker: str, checkpoint: str):
    if marker and row.id == KILL_ID and not os.path.exists(marker):
        # Spark's checkpoint ahead of the loop's: the query has committed
        # every batch (the loop is at the fourth), then the driver dies.
        deadline = time.monotonic() + 120
        while cases.FILES - 1 not in spark_committed(checkpoint) and time.monotonic() < deadline:
            time.sleep(0.1)
        open(marker, 'w').close()
        os.kill(os.getpid(), signal.SIGKILL)
    return row


def run(landing: str, out: str, checkpoint: str, marker: str = '') -> dict:
    from beam_spark_inproc import InProcessSparkRunner
    from beam_spark_inproc.spark import session

    spark, _ = session.get_or_create(
        'local[2]', None, {'spark.ui.enabled': 'false', 'spark.sql.shuffle.partitions': '2'}
    )
    p = beam.Pipeline(
        runner=InProcessSparkRunner(spark=spark, debug=True),
        options=PipelineOptions(['--checkpoint_location', checkpoint]),
    )
    rows = (
        p
        | cases.read(landing, spark)
        | 'Count' >> beam.Map(_count)
        | 'Kill' >> beam.Map(_kill_once, marker, checkpoint)
    )
    _ = (
        cases.windowed_sums(rows)
        | 'Line' >> beam.Map(json.dumps)
        | fileio.WriteToFiles(path=out, file_naming=fileio.default_file_naming('sums', '.txt'))
    )
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter())['counters']
    return {
        c.key.metric.name: c.committed for c in counters if c.key.metric.namespace == 'spark_source'
    }


def outputs(out: str) -> list:
    lines = []
    for name in os.listdir(out):
        if name.startswith('sums'):
            with open(os.path.join(out, name)) as f:
                lines += [tuple(json.loads(line)) for line in f if line.strip()]
    return sorted(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('landing')
    parser.add_argument('out')
    parser.add_argument('checkpoint')
    parser.add_argument('--kill', default='')
    args = parser.parse_args(argv)
    print(json.dumps(run(args.landing, args.out, args.checkpoint, args.kill)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
