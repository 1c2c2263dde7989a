"""Input batches become Python lists a bounded slice at a time."""

import pyarrow as pa

from beam_spark_inproc.protocol import rows


def _batch(sizes):
    return pa.RecordBatch.from_arrays(
        [
            pa.array([0] * len(sizes), pa.int32()),
            pa.array([b'k%d' % i for i in range(len(sizes))], pa.binary()),
            pa.array([b'x' * n for n in sizes], pa.binary()),
        ],
        schema=rows.SCHEMA,
    )


def test_slices_are_bounded_and_keep_every_row_in_order(monkeypatch):
    monkeypatch.setattr(rows, 'SLICE_BYTES', 10_000)
    sizes = [1000] * 95 + [50_000] + [10] * 7
    batches = [_batch(sizes), _batch([]), _batch([3, 4])]
    slices = list(rows.column_slices(batches, rows.KEY, rows.DATA))
    assert len(slices) > 10
    # about SLICE_BYTES each (rows of ~1 KB: at most ~10 of them per slice)
    assert max(len(keys) for keys, _ in slices) <= 12
    keys = [k for ks, _ in slices for k in ks]
    data = [d for _, ds in slices for d in ds]
    expected = [b'k%d' % i for i in range(len(sizes))] + [b'k0', b'k1']
    assert keys == expected
    assert [len(d) for d in data] == sizes + [3, 4]


def test_small_batch_is_one_slice():
    slices = list(rows.column_slices([_batch([5, 6, 7])], rows.TAG, rows.DATA))
    assert slices == [[[0, 0, 0], [b'x' * 5, b'x' * 6, b'x' * 7]]]
