"""State buckets that follow the state size: a keyed stage starts
with ``STATE_BUCKETS`` buckets and doubles them while it holds more than
``KEYS_PER_BUCKET`` keys per bucket; a bucket's file written before a split is
read by both halves, each taking its own keys. Checked on the debug engine
against BundleBasedDirectRunner (panes, late data, timers) with a small
``BEAM_SPARK_INPROC_KEYS_PER_BUCKET`` so that a few hundred keys split."""

from __future__ import annotations

import glob
import json
import os

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.execution.streaming.store import CheckpointStore
from beam_spark_inproc.protocol.buckets import KEYS_PER_BUCKET
from beam_spark_inproc.protocol.buckets import MAX_BUCKETS
from beam_spark_inproc.protocol.buckets import bucket_count
from beam_spark_inproc.protocol.buckets import bucket_of
from beam_spark_inproc.protocol.buckets import marker_rows
from beam_spark_inproc.protocol.rows import STATE_TAG
from beam_spark_inproc.protocol.rows import BatchBuilder
from beam_spark_inproc.protocol.state import StateFiles
from beam_spark_inproc.worker.streaming import state_io
from beam_spark_inproc.worker.streaming.state_io import StateIO
from tests.streaming import oracle
from tests.streaming.test_triggers import BufferUntilTimer

KEYS = 400


def test_bucket_count_doubles_while_over_the_keys_per_bucket(monkeypatch):
    monkeypatch.delenv('BEAM_SPARK_INPROC_KEYS_PER_BUCKET', raising=False)
    per = KEYS_PER_BUCKET
    assert bucket_count(0, 64) == 64
    assert bucket_count(64 * per, 64) == 64
    assert bucket_count(64 * per + 1, 64) == 128
    assert bucket_count(1_000_000, 64) == 1024  # ~977 keys a bucket
    assert bucket_count(10, 256) == 256  # never fewer
    assert bucket_count(10**12, 64) == MAX_BUCKETS
    monkeypatch.setenv('BEAM_SPARK_INPROC_KEYS_PER_BUCKET', '2')
    assert bucket_count(KEYS, 64) == 256


def _write_state(folder, keys) -> str:
    """One task's state file holding ``keys`` (value ``b'v' + key``)."""
    io = StateIO(StateFiles('s', (), str(folder)))
    forward = io.forward(lambda *row: None)
    for k in keys:
        forward(STATE_TAG, k, b'v' + k)
    io.finish(lambda *row: None)
    (path,) = glob.glob(str(folder / '*.parquet'))
    return path


def test_a_split_bucket_reads_its_half_of_the_old_file(tmp_path):
    """A file written with 64 buckets, read with 128: bucket b and b + 64 each
    get the keys whose crc32 says so, and a marker runs a bucket alone."""
    keys = [b'key%d' % i for i in range(300)]
    path = _write_state(tmp_path / 'old', keys)
    assert sorted(pq.read_table(path).column('key').to_pylist()) == sorted(keys)
    bucket = bucket_of(keys[0])
    halves = {bucket: {}, bucket + 64: {}}
    for b in halves:
        reader = StateIO(StateFiles('s', ((b, path),), str(tmp_path / 'new'), buckets=128))
        rows = [
            r
            for batch in reader.merged(_batches(marker_rows([b])))
            for r in zip(*(batch.column(c).to_pylist() for c in ('tag', 'key', 'data')))
        ]
        halves[b] = {key: data for _, key, data in rows}
    assert halves[bucket] and halves[bucket + 64]
    for b, got in halves.items():
        assert got == {k: b'v' + k for k in keys if bucket_of(k, 128) == b}


def _batches(rows):
    out = []
    builder = BatchBuilder(out.append)
    for row in rows:
        builder.add(*row)
    builder.flush()
    return out


def _stream() -> TestStream:
    """KEYS keys buffered in windows [0, 10) and [10, 20), then one key at a
    time, a late element within the allowed lateness and one past it."""
    s = TestStream().add_elements(
        [window.TimestampedValue((f'k{i}', i), i % 20) for i in range(KEYS)]
    )
    s = s.advance_watermark_to(5)
    for i in range(4):
        s = s.add_elements([window.TimestampedValue((f'k{i * 7}', 1000 + i), 6)])
        s = s.advance_processing_time(1)
    s = s.advance_watermark_to(12)
    s = s.add_elements(
        [
            window.TimestampedValue(('k3', 2000), 3),  # late, kept
            window.TimestampedValue(('k5', 3000), 1),
        ]
    )
    s = s.advance_watermark_to(25)
    s = s.add_elements([window.TimestampedValue(('k8', 4000), 2)])  # dropped
    return s.advance_watermark_to_infinity()


def _grouped(p):
    return (
        p
        | _stream()
        | beam.WindowInto(
            window.FixedWindows(10),
            trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
            allowed_lateness=10,
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: (k, sorted(vs)))
    )


def _stateful(p):
    return p | _stream() | beam.ParDo(BufferUntilTimer())


@pytest.mark.parametrize('build', [_grouped, _stateful])
def test_split_buckets_keep_beams_results(build, tmp_path, monkeypatch):
    monkeypatch.setenv('BEAM_SPARK_INPROC_KEYS_PER_BUCKET', '2')
    monkeypatch.setattr(CheckpointStore, 'RETAIN', 10**6)
    checkpoint = str(tmp_path / 'ck')
    got = oracle.run(build, InProcessSparkRunner(debug=True), f'--checkpoint_location={checkpoint}')
    assert got == oracle.direct(build)
    counts = []
    for name in sorted(
        glob.glob(os.path.join(checkpoint, 'commits', '*.json')),
        key=lambda n: int(os.path.basename(n).split('.')[0]),
    ):
        with open(name) as f:
            record = json.load(f)
        counts.append(max(s.get('state_buckets', 0) for s in record['stages']))
    # The first micro-batch wrote under 64 buckets, then they split: later
    # micro-batches read the halves of its files.
    assert counts[0] >= 256 and counts == sorted(counts), counts


def _expiring(p):
    s = (
        TestStream()
        .add_elements([window.TimestampedValue((f'a{i}', i), 1) for i in range(20)])
        .advance_processing_time(1)  # a micro-batch holding 20 keys
        .advance_watermark_to(15)  # [0, 10) fires and expires
        .add_elements(
            [window.TimestampedValue(('b', 1), 21), window.TimestampedValue(('a1', 7), 2)]
        )  # too late
        .advance_watermark_to(25)
        .advance_processing_time(1)
        .advance_watermark_to_infinity()
    )
    return (
        p
        | s
        | beam.WindowInto(window.FixedWindows(10))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: (k, sorted(vs)))
    )


def test_grouped_state_of_expired_windows_is_dropped(tmp_path, monkeypatch):
    """A GroupByKey's key state goes once its windows are past their end and
    fired (Beam's driver kept a window-id map per key forever, so every key
    ever seen stayed in the state buckets until +inf)."""
    monkeypatch.setattr(CheckpointStore, 'RETAIN', 10**6)
    checkpoint = str(tmp_path / 'ck')
    assert oracle.run(
        _expiring, InProcessSparkRunner(debug=True), f'--checkpoint_location={checkpoint}'
    ) == oracle.direct(_expiring)
    held = []
    for name in sorted(
        glob.glob(os.path.join(checkpoint, 'commits', '*.json')),
        key=lambda n: int(os.path.basename(n).split('.')[0]),
    ):
        with open(name) as f:
            record = json.load(f)
        held.append(sum(b['keys'] for s in record['stages'] for b in s['buckets'].values()))
    # 20 keys, none once [0, 10) fired (not only at +inf), then only 'b'.
    assert held[0] == 20 and 0 in held[:-1] and 1 in held, held


def test_a_bucket_is_read_from_its_row_groups_only(tmp_path, monkeypatch):
    """A state file's rows are sorted by bucket in bounded row groups: a
    reader of a large file loads only the row groups whose bucket range holds
    its bucket, with the same rows as a filter over the whole file; a small
    file, or one without the bucket column (written before), is read whole
    once per task."""
    monkeypatch.setattr(state_io, '_GROUP_ROWS', 64)
    keys = [b'key%d' % i for i in range(6000)]
    path = _write_state(tmp_path / 'w', keys)
    whole = pq.read_table(path)
    assert whole.column('bucket').to_pylist() == sorted(bucket_of(k) for k in keys)
    assert pq.ParquetFile(path).metadata.num_row_groups >= 6000 // 64
    read_rows = []
    original = pq.ParquetFile.read_row_groups

    def recording(self, groups, *args, **kwargs):
        table = original(self, groups, *args, **kwargs)
        read_rows.append(table.num_rows)
        return table

    monkeypatch.setattr(pq.ParquetFile, 'read_row_groups', recording)
    monkeypatch.setattr(state_io, '_WHOLE_FILE_BYTES', 0)
    for buckets in (64, 128):
        state_file = state_io.StateFile(path)
        assert state_file.table is None
        for b in (bucket_of(keys[0], buckets), bucket_of(keys[1], buckets)):
            want = {k: b'v' + k for k in keys if bucket_of(k, buckets) == b}
            assert state_file.read(b, buckets) == want
            assert want == state_io.read_bucket(whole, b, buckets)
            # About the writer's bucket (~94 rows) plus a row group's worth.
            assert read_rows[-1] < len(keys) // 16
    monkeypatch.setattr(state_io, '_WHOLE_FILE_BYTES', 1 << 30)
    assert state_io.StateFile(path).table.num_rows == len(keys)
    old = str(tmp_path / 'old.parquet')
    pq.write_table(whole.drop_columns(['bucket']).replace_schema_metadata(None), old)
    monkeypatch.setattr(state_io, '_WHOLE_FILE_BYTES', 0)
    b = bucket_of(keys[0])
    assert state_io.StateFile(old).read(b, 64) == {k: b'v' + k for k in keys if bucket_of(k) == b}
