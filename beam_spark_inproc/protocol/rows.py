"""The row format every stage boundary uses: ``(tag int32, key binary, data binary)``.

The planner decides each output's layout (``planning.plan``); the worker writes
rows (``worker.channel``, through ``BatchBuilder``) and reads them
(``worker.stage_task``, ``worker.batch.grouping``); the engines shuffle and order
them (``execution.engine``). What they agree on is here: the columns, the tags
of control rows (negative; elements are ``0..n-1``, the producing stage's output
index), the key column's encoding (``key_extractor``) and the batch bounds.
"""

from __future__ import annotations

import itertools
from typing import Callable
from typing import Iterator
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.coders.coder_impl import create_InputStream

TAG, KEY, DATA = 'tag', 'key', 'data'
SCHEMA = pa.schema(
    [
        pa.field(TAG, pa.int32(), nullable=False),
        pa.field(KEY, pa.binary()),
        pa.field(DATA, pa.binary()),
    ]
)

# Rows with this tag are reports for the driver (``protocol.report``), not elements.
# Every step passes them through untouched; exactly one reader of each stage
# result carries them on, so each report reaches the driver once.
CONTROL_TAG = -1
# Rows with this tag are restrictions split off a running bundle by the runner,
# for the stage's next round (key: the DATA_INPUT transform id they re-enter by).
RESIDUAL_TAG = -2
# Streaming (``protocol.state``): a key's state between micro-batches (key:
# the key's bytes) and a summary of the state a task wrote, per state bucket.
STATE_TAG = -3
SUMMARY_TAG = -4
# Streaming: a splittable DoFn's self-checkpoint residual for the driver's
# schedule (``worker.sdf.scheduled``); it re-enters the stage as a
# ``RESIDUAL_TAG`` row once its resume delay has passed.
SCHEDULED_TAG = -5
# Streaming: a row that makes its state bucket run in a micro-batch without
# new rows (timers due; ``protocol.buckets.marker_rows``).
MARKER_TAG = -6

# Output batches are cut at whichever comes first (pitfall: Arrow binary arrays
# are capped at 2 GB and Spark re-batches at 64 MB).
MAX_BATCH_ROWS = 8192
MAX_BATCH_BYTES = 8 << 20
# CHUNKS outputs cut their encoded stream into rows of about this size.
CHUNK_BYTES = 1 << 20
# Input batches from Spark reach 64 MB by default (packed GroupByKey rows are up
# to 64 KB each); they become Python objects a slice of about this size at a time.
SLICE_BYTES = 4 << 20


def column_slices(batches, *columns: str):
    """Per slice of each input batch, one Python list per named column; a slice
    holds about ``SLICE_BYTES`` (at least one row)."""
    for batch in batches:
        rows = batch.num_rows
        if not rows:
            continue
        step = max(1, rows * SLICE_BYTES // max(1, batch.nbytes))
        for start in range(0, rows, step):
            piece = batch.slice(start, step) if step < rows else batch
            yield [piece.column(name).to_pylist() for name in columns]


class BatchBuilder:
    """Accumulates rows and hands out bounded RecordBatches."""

    def __init__(self, emit, max_rows: int = MAX_BATCH_ROWS, max_bytes: int = MAX_BATCH_BYTES):
        self._emit = emit
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        self._tags: list[int] = []
        self._keys: list = []
        self._data: list[bytes] = []
        self._bytes = 0

    def add(self, tag: int, key, data: bytes) -> None:
        self._tags.append(tag)
        self._keys.append(key)
        self._data.append(data)
        self._bytes += len(data) + (len(key) if key else 0)
        if len(self._data) >= self._max_rows or self._bytes >= self._max_bytes:
            self.flush()

    def flush(self) -> None:
        if self._data:
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array(self._tags, pa.int32()),
                    pa.array(self._keys, pa.binary()),
                    pa.array(self._data, pa.binary()),
                ],
                schema=SCHEMA,
            )
            self._tags, self._keys, self._data, self._bytes = [], [], [], 0
            self._emit(batch)


def holding_elements(batches) -> tuple[Optional[Iterator], list]:
    """``(batches, [])`` when the partition holds an element row (its batches
    read so far are put back in front), else ``(None, control rows)``: a
    partition without elements runs no bundle, so a DoFn's ``start_bundle`` /
    ``finish_bundle`` never run for nothing (an empty shuffle partition, or all
    of Impulse's partitions but one), while its control rows go on."""
    held = []
    for batch in batches:
        held.append(batch)
        if batch.num_rows and pc.any(pc.not_equal(batch.column(TAG), CONTROL_TAG)).as_py():
            return itertools.chain(held, batches), []
    control: list = []
    for batch in held:
        control.extend(zip(*(batch.column(c).to_pylist() for c in (TAG, KEY, DATA))))
    return None, control


def key_extractor(coder, key_coder) -> Callable[[bytes], bytes]:
    """The ``key`` column of an element bound for a keyed shuffle: the
    deterministic encoding of its key, from the element's encoded bytes."""
    decode = coder.get_impl().decode_from_stream
    encode_key = key_coder.get_impl().encode

    def key_of(data: bytes) -> bytes:
        return encode_key(decode(create_InputStream(data), True).value[0])

    return key_of
