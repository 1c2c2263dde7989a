"""Bucket math of streaming state: which shard and bucket a key belongs to.

A streaming keyed stage's input is shuffled ``BUCKETED`` (``execution.engine``):
the Spark engine picks a row's shard with Spark SQL's ``crc32`` of the key
column, the debug engine with ``bucket_of``, the worker reads and writes each
bucket's state file by the same number, and the driver decides how many
buckets a stage has (``bucket_count``) and which to run without new rows
(``marker_rows``). All of them must compute the same number for a key.
"""

from __future__ import annotations

import os
import zlib

from beam_spark_inproc.protocol.rows import MARKER_TAG

# A keyed stage's input is shuffled into this many shards (crc32 of the key
# bytes; Spark SQL's ``crc32`` gives the same number, so a shard can be chosen
# in a query): each shard lies wholly in one partition, its rows sorted by key.
STATE_BUCKETS = 64
# A shard holds one or more state buckets (``crc32 % buckets``, ``buckets`` a
# power-of-two multiple of ``STATE_BUCKETS``, so a bucket lies in one shard),
# each a unit of state read and written. A stage starts with STATE_BUCKETS and
# doubles them while it holds more than this many keys per bucket
# (``bucket_count``; ``BEAM_SPARK_INPROC_KEYS_PER_BUCKET`` in the driver's
# environment sets another): a micro-batch touching one key rewrites about
# this many.
KEYS_PER_BUCKET = 1024
MAX_BUCKETS = 1 << 14


def bucket_of(key: bytes, buckets: int = STATE_BUCKETS) -> int:
    return zlib.crc32(key) % buckets


def bucket_count(keys: int, buckets: int) -> int:
    """The state buckets for a stage holding ``keys`` keys in ``buckets``
    (never fewer: a split bucket's file stays valid for both halves)."""
    per_bucket = int(os.environ.get('BEAM_SPARK_INPROC_KEYS_PER_BUCKET', KEYS_PER_BUCKET))
    while keys > buckets * per_bucket and buckets < MAX_BUCKETS:
        buckets *= 2
    return buckets


def _marker_keys() -> tuple[bytes, ...]:
    """One key per shard (``bucket_of(key) == shard``), for marker rows."""
    found: dict[int, bytes] = {}
    i = 0
    while len(found) < STATE_BUCKETS:
        key = b'\x00beam-spark-inproc-marker-%d' % i
        found.setdefault(bucket_of(key), key)
        i += 1
    return tuple(found[b] for b in range(STATE_BUCKETS))


# A ``MARKER_TAG`` row makes its state bucket run in a micro-batch without new
# rows (its timers are due); its key puts it in the bucket's shard, its data
# names the bucket. The worker reads it and sends it no further.
MARKER_KEYS = _marker_keys()


def marker_rows(buckets) -> list[tuple[int, bytes, bytes]]:
    """A row per bucket to run, in its shard, the bucket in its data."""
    return [(MARKER_TAG, MARKER_KEYS[b % STATE_BUCKETS], b'%d' % b) for b in sorted(buckets)]
