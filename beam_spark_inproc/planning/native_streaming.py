"""Which runner-native transforms a stream can run, from their specs alone.

Pure (no pyspark): ``transforms.spark_io`` asks it while a pipeline is built
(errors naming the transform before anything runs), and the streaming
capability check (``execution.streaming.support``) asks it of the plan of a
pipeline run with ``--streaming``.

* WriteToSpark: to a path or a catalog table, in mode ``append``, on a file
  system the driver can rename files on (``transforms.stream_runtime``
  publishes each micro-batch by renaming). Which tables (file-backed
  datasource tables) is decided with the session, while the pipeline is
  built (``transforms.stream_tables``).
* SparkSql: built over an unbounded windowed input (its spec then names the
  window columns); one built for a batch is refused.
* ReadFromSpark: over a streaming DataFrame (``READ_STREAM_URN``), a source
  of the loop (``transforms.spark_stream``); a bounded read is not.
"""

from __future__ import annotations

import json
import urllib.parse

from beam_spark_inproc.planning.native import READ_STREAM_URN
from beam_spark_inproc.planning.native import READ_URN
from beam_spark_inproc.planning.native import SQL_URN
from beam_spark_inproc.planning.native import WRITE_URN

LATER = 'Streaming mode does not run this yet.'
# Formats whose tables are a log over files: renaming files in breaks them.
TABLE_FORMATS = frozenset(['delta', 'iceberg', 'hudi'])


def write_problems(spec: dict) -> list[str]:
    """Why a WriteToSpark with this spec cannot run in a stream (empty: it
    can)."""
    found = []
    if spec['mode'] != 'append':
        found.append(
            f'mode {spec["mode"]!r} is a batch mode: a stream appends every '
            "micro-batch; use mode='append'."
        )
    if (spec.get('format') or '').lower() in TABLE_FORMATS:
        found.append(
            f'format {spec["format"]!r} keeps its own transaction log, which '
            "the stream's file renames would bypass; idempotent appends by its "
            "transaction ids (Delta's txnAppId/txnVersion) are not offered "
            'yet: write parquet (or orc, json, csv).'
        )
    path = spec.get('path')
    if path and urllib.parse.urlparse(path).scheme not in ('', 'file'):
        found.append(
            f'path {path!r}: a stream publishes each micro-batch by renaming '
            "files in the driver, on a file system it shares with Spark's "
            'executors (a local or mounted path).'
        )
    return found


def stream_problem(urn: str, payload: bytes) -> tuple[str, str] | None:
    """(reason, remedy) when a runner-native stage cannot run in a stream."""
    if urn == READ_STREAM_URN:
        return None  # a source of the loop
    spec = json.loads(payload)
    if urn == WRITE_URN:
        found = write_problems(spec)
        return (
            (
                ' '.join(found),
                'Change the write as said, or run the '
                'pipeline as a batch (bounded input, no --streaming).',
            )
            if found
            else None
        )
    if urn == SQL_URN:
        if spec.get('window_columns'):
            return None  # built over unbounded windowed input
        return (
            'SparkSql over bounded input in a stream (--streaming): in a '
            'stream it runs over each fired pane of one windowed unbounded '
            'input, and this one was built for a batch (the global window, '
            'whose only pane fires at the end).',
            'Run the pipeline as a batch, or query an unbounded windowed PCollection.',
        )
    what = 'ReadFromSpark' if urn == READ_URN else 'a runner-native transform'
    return (
        f'{what} in a stream. ' + LATER,
        'Run it as a batch pipeline (bounded input, no --streaming).',
    )
