"""A streaming keyed stage's state I/O, done by its own task (no extra Spark job).

The stage's input is shuffled ``BUCKETED`` (``execution.engine``): every shard
(``crc32(key) % STATE_BUCKETS``) lies wholly in one partition, its rows sorted
by key. A shard holds the stage's state buckets ``crc32(key) % buckets`` that
are congruent to it (``buckets``, a power-of-two multiple of the shards, grows
with the keys the stage holds: ``protocol.buckets.bucket_count``). The task
gets ``StateFiles``: the bucket count, for each bucket the Parquet file holding
its current version (from the commit record), and the folder where this
micro-batch's new versions go. So the task, not the driver, reads and writes:

* **read**: the first time a shard's rows meet a bucket, the bucket's rows
  ``(key, data, hash)`` are taken from its file: a file holds every bucket its
  task wrote, its rows sorted by bucket in row groups of ``_GROUP_ROWS`` whose
  ``bucket`` column's statistics give their range, so only the row groups that
  may hold the bucket are read (the footer once per file and task; a file of
  up to ``_WHOLE_FILE_BYTES`` is read whole once, which beats a read per
  bucket when a small state is touched everywhere), then the rows whose
  ``hash``, the key's crc32,
  falls in the bucket (a file written before the buckets doubled holds both
  halves of a bucket; its schema's metadata says how many buckets it was
  written with); each key's state row (``STATE_TAG``) is put
  in front of the key's new rows, and the keys of the shard's buckets that got
  no new rows follow at the shard's end (their timers may be due). A
  ``MARKER_TAG`` row (the driver adds one per bucket whose timers are due,
  the bucket in its data) makes a bucket run without new rows; it goes no
  further.
* **write**: the state rows the stage's input functions forward
  (``worker.streaming.grouping``, ``worker.streaming.stateful``) go to one Parquet file per
  task, ``part-<uuid>.parquet`` in the micro-batch's folder, sorted by bucket (a retried or
  speculative attempt writes its own file; only the file named by the attempt
  Spark committed is ever read). The per-bucket summaries they forward are
  merged and sent with the file's path as one control row (``state_report``):
  every bucket the task ran, with its summary and file, or none (no state left).

State I/O grows with the buckets a micro-batch touches, not with the state held.
"""

from __future__ import annotations

import os
import pickle
import uuid
import zlib
from typing import Callable
from typing import Iterator
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from beam_spark_inproc.protocol.buckets import STATE_BUCKETS
from beam_spark_inproc.protocol.buckets import bucket_of
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import KEY
from beam_spark_inproc.protocol.rows import MARKER_TAG
from beam_spark_inproc.protocol.rows import STATE_TAG
from beam_spark_inproc.protocol.rows import SUMMARY_TAG
from beam_spark_inproc.protocol.rows import TAG
from beam_spark_inproc.protocol.rows import BatchBuilder
from beam_spark_inproc.protocol.rows import column_slices
from beam_spark_inproc.protocol.state import STATE_REPORT
from beam_spark_inproc.protocol.state import StateFiles
from beam_spark_inproc.protocol.state import Summary

STATE_SCHEMA = pa.schema(
    [('key', pa.binary()), ('data', pa.binary()), ('hash', pa.int64()), ('bucket', pa.int64())]
)
# In a state file's schema metadata: the bucket count it was written with.
_BUCKETS_METADATA = b'beam_spark_inproc.buckets'
_WRITE_ROWS = 8192  # state rows held before they are written, sorted by bucket
# Rows per Parquet row group: about a bucket's worth once the buckets follow the
# state size (``protocol.buckets.KEYS_PER_BUCKET``).
_GROUP_ROWS = 1024
# A state file up to this size is read whole, once per task, rather than by
# row groups (a small state touched everywhere: one read beats one per bucket).
_WHOLE_FILE_BYTES = 1 << 20


def read_bucket(table: pa.Table, bucket: int, buckets: int) -> dict[bytes, bytes]:
    """{key: state} of one bucket in (row groups of) a state file's table."""
    rows = table.filter(pc.equal(pc.bit_wise_and(table.column('hash'), buckets - 1), bucket))
    return dict(zip(rows.column('key').to_pylist(), rows.column('data').to_pylist()))


class StateFile:
    """A state file, its footer read once: the range of buckets (those it was
    written with) each row group holds, from the ``bucket`` column's
    statistics. A small file, or one without the column (written before rows
    were sorted by bucket), is read whole once."""

    def __init__(self, path: str):
        self.file = pq.ParquetFile(path)
        metadata = self.file.schema_arrow.metadata or {}
        self.buckets = int(metadata.get(_BUCKETS_METADATA, 0))
        self.table: pa.Table | None = None
        self.groups: list[tuple[int, int, int]] = []  # (min, max, row group)
        names = self.file.schema_arrow.names
        meta = self.file.metadata
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if self.buckets and 'bucket' in names and size > _WHOLE_FILE_BYTES:
            column = names.index('bucket')
            for i in range(meta.num_row_groups):
                stats = meta.row_group(i).column(column).statistics
                if stats is None or not stats.has_min_max:
                    self.groups = []
                    break
                self.groups.append((stats.min, stats.max, i))
        if not self.groups:
            self.table = self.file.read(columns=['key', 'data', 'hash'])

    def read(self, bucket: int, buckets: int) -> dict[bytes, bytes]:
        """{key: state} of ``bucket`` of ``buckets`` (never fewer than the
        file was written with)."""
        table = self.table
        if table is None:
            mine = bucket % self.buckets
            groups = [i for low, high, i in self.groups if low <= mine <= high]
            if not groups:
                return {}
            table = self.file.read_row_groups(groups, columns=['key', 'data', 'hash'])
        return read_bucket(table, bucket, buckets)


class StateIO:
    """One task's state reads and writes (see the module doc)."""

    def __init__(self, files: StateFiles):
        self.files = files
        self._current = dict(files.current)
        self._read: dict[str, StateFile] = {}
        self._ran: set[int] = set()
        self._summaries: dict[int, Summary] = {}
        self._path = ''
        self._writer: Optional[pq.ParquetWriter] = None
        self._pending: dict[int, list[tuple[bytes, bytes, int]]] = {}
        self._held = 0

    # -- read -------------------------------------------------------------
    def _bucket_state(self, bucket: int) -> dict[bytes, bytes]:
        self._ran.add(bucket)
        path = self._current.get(bucket)
        if path is None:
            return {}
        if path not in self._read:
            self._read[path] = StateFile(path)
        return self._read[path].read(bucket, self.files.buckets)

    def merged(self, batches) -> Iterator[pa.RecordBatch]:
        """The input batches with each key's state row in front of its rows."""
        out: list[pa.RecordBatch] = []
        builder = BatchBuilder(out.append)
        buckets = self.files.buckets
        shard, key_now = None, None
        loaded: dict[int, dict[bytes, bytes]] = {}  # the shard's buckets met

        def state_of(b: int) -> dict[bytes, bytes]:
            if b not in loaded:
                loaded[b] = self._bucket_state(b)
            return loaded[b]

        def end_shard():
            for b in sorted(loaded):  # keys with no new rows: timers may be due
                state = loaded[b]
                for k in sorted(state):
                    builder.add(STATE_TAG, k, state[k])
            loaded.clear()

        for columns in column_slices(batches, TAG, KEY, DATA):
            for tag, key, data in zip(*columns):
                if key is None:
                    builder.add(tag, key, data)
                    continue
                if tag == MARKER_TAG:
                    s = bucket_of(key)
                    if s != shard:
                        end_shard()
                        shard = s
                    state_of(int(data))  # the bucket runs; the row goes no further
                    continue
                if key != key_now:
                    key_now = key
                    h = zlib.crc32(key)
                    if h % STATE_BUCKETS != shard:
                        end_shard()
                        shard = h % STATE_BUCKETS
                    saved = state_of(h % buckets).pop(key, None)
                    if saved is not None:
                        builder.add(STATE_TAG, key, saved)
                builder.add(tag, key, data)
            yield from out
            out.clear()
        end_shard()
        builder.flush()
        yield from out

    # -- write ------------------------------------------------------------
    def forward(self, forward: Callable) -> Callable:
        """``forward`` with state and summary rows kept here."""
        buckets = self.files.buckets

        def add(tag: int, key, data: bytes) -> None:
            if tag == STATE_TAG:
                h = zlib.crc32(key)
                self._pending.setdefault(h & (buckets - 1), []).append((key, data, h))
                self._held += 1
                if self._held >= _WRITE_ROWS:
                    self._flush()
            elif tag == SUMMARY_TAG:
                self._summaries.setdefault(int(key), Summary()).add(Summary.decode(data))
            else:
                forward(tag, key, data)

        return add

    def _flush(self) -> None:
        """Writes the rows held, sorted by bucket, in row groups of
        ``_GROUP_ROWS``."""
        if not self._pending:
            return
        if self._writer is None:
            os.makedirs(self.files.folder, exist_ok=True)
            self._path = os.path.join(self.files.folder, f'part-{uuid.uuid4().hex}.parquet')
            schema = STATE_SCHEMA.with_metadata({_BUCKETS_METADATA: b'%d' % self.files.buckets})
            self._writer = pq.ParquetWriter(self._path, schema)
        rows = [(b,) + row for b in sorted(self._pending) for row in self._pending[b]]
        self._writer.write_table(
            pa.Table.from_arrays(
                [
                    pa.array([r[1] for r in rows], pa.binary()),
                    pa.array([r[2] for r in rows], pa.binary()),
                    pa.array([r[3] for r in rows], pa.int64()),
                    pa.array([r[0] for r in rows], pa.int64()),
                ],
                schema=self._writer.schema,
            ),
            row_group_size=_GROUP_ROWS,
        )
        self._pending.clear()
        self._held = 0

    def finish(self, forward: Callable) -> None:
        """Closes the file; reports every bucket the task ran."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
        if not self._ran and not self._summaries:
            return
        buckets: dict[int, tuple[Optional[bytes], str]] = {b: (None, '') for b in self._ran}
        for b, summary in self._summaries.items():
            buckets[b] = (summary.encode(), self._path)
        forward(CONTROL_TAG, None, pickle.dumps({'stage': self.files.stage, STATE_REPORT: buckets}))


def with_state_io(read: Callable) -> Callable:
    """Wraps a streaming stage's input function (``stage_task``) with its
    task's state reads and writes."""

    def elements(task, entry, batches, forward) -> Iterator:
        io = StateIO(task.state_files)
        yield from read(task, entry, io.merged(batches), io.forward(forward))
        io.finish(forward)

    return elements
