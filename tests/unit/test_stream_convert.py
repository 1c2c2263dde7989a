"""A stream's SparkSql in Arrow and back (``transforms.stream_convert``).

A windowed PCollection becomes the query's view with one row per element and
window, its window and pane in the columns the transform names; the query's
result rows come back each in the window its start/end columns give. No Spark:
the functions run on Arrow batches made here, and the expected rows and windows
are worked out from Beam's model by hand.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from apache_beam import coders
from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.coders.coders import WindowedValueCoder
from apache_beam.transforms.window import IntervalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfo
from apache_beam.utils.windowed_value import PaneInfoTiming
from apache_beam.utils.windowed_value import WindowedValue

from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import KEY
from beam_spark_inproc.protocol.rows import SCHEMA
from beam_spark_inproc.protocol.rows import TAG
from beam_spark_inproc.transforms import types
from beam_spark_inproc.transforms.stream_convert import WindowedToArrow
from beam_spark_inproc.transforms.stream_convert import WindowedToBeamRows
from beam_spark_inproc.transforms.stream_convert import column_fields

LABEL = "'Count words' (SparkSql query='SELECT ...')"
WORDS = pa.schema([('word', pa.string()), ('n', pa.int64())])
COLUMNS = {'window_start': 'ws', 'window_end': 'we', 'pane_timing': 'pt', 'pane_index': 'pi'}


def _windowed_coder(schema: pa.Schema):
    row_coder = coders.registry.get_coder(types.row_type(schema))
    return WindowedValueCoder(row_coder, IntervalWindowCoder())


def _window(start_s: int, end_s: int) -> IntervalWindow:
    return IntervalWindow(Timestamp(start_s), Timestamp(end_s))


def test_elements_become_one_row_per_window_with_its_pane():
    coder = _windowed_coder(WORDS)
    row = types.row_type(WORDS).user_type
    pane = PaneInfo(False, False, PaneInfoTiming.LATE, 2, 1)
    # 'a' in two sliding windows, 'b' in one.
    values = [
        WindowedValue(row(word='a', n=1), Timestamp(7), (_window(0, 10), _window(5, 15)), pane),
        WindowedValue(row(word='b', n=2), Timestamp(12), (_window(10, 20),), pane),
    ]
    stream = create_OutputStream()
    for value in values:
        coder.get_impl().encode_to_stream(value, stream, True)
    rows = pa.RecordBatch.from_pydict(
        {TAG: [0], KEY: [None], DATA: [stream.get()]},
        schema=SCHEMA,
    )
    schema = pa.schema(list(WORDS) + column_fields(COLUMNS))
    to_arrow = WindowedToArrow(coder, schema, columns=tuple(COLUMNS.items()))
    (batch,) = list(to_arrow(iter([rows])))
    assert batch.schema == schema
    got = batch.to_pydict()
    assert got['word'] == ['a', 'a', 'b'] and got['n'] == [1, 1, 2]
    seconds = [[t.timestamp() for t in got[c]] for c in ('ws', 'we')]
    assert seconds == [[0, 5, 10], [10, 15, 20]]
    assert got['pt'] == ['LATE'] * 3 and got['pi'] == [2] * 3


def _result(starts, ends) -> pa.RecordBatch:
    micros = pa.timestamp('us', tz='UTC')
    return pa.RecordBatch.from_pydict(
        {
            'word': ['a', 'b'],
            'n': [3, 4],
            'ws': pa.array(starts, pa.int64()).cast(micros),
            'we': pa.array(ends, pa.int64()).cast(micros),
        }
    )


def _to_beam(global_window: bool = False) -> WindowedToBeamRows:
    return WindowedToBeamRows(
        _windowed_coder(WORDS),
        types.row_type(WORDS),
        tuple(WORDS.names),
        'ws',
        'we',
        global_window,
        LABEL,
    )


def test_result_rows_come_back_in_the_windows_their_columns_name():
    fn = _to_beam()
    chunks = [data for _, _, data in fn.rows(iter([_result([0, 5_000_000], [10**7, 15 * 10**6])]))]
    stream = create_InputStream(b''.join(chunks))
    impl = fn.windowed_coder.get_impl()
    decoded = []
    while stream.size() > 0:
        decoded.append(impl.decode_from_stream(stream, True))
    assert [(v.value.word, v.value.n) for v in decoded] == [('a', 3), ('b', 4)]
    assert [v.windows for v in decoded] == [(_window(0, 10),), (_window(5, 15),)]
    # Each row at its window's last instant (as Beam's GroupByKey emits it), at
    # the windowed coder's millisecond precision.
    assert [v.timestamp for v in decoded] == [
        Timestamp(micros=9_999_000),
        Timestamp(micros=14_999_000),
    ]


def test_a_row_without_a_window_names_the_transform_and_the_column():
    fn = _to_beam()
    with pytest.raises(ValueError) as raised:
        list(fn.rows(iter([_result([0, None], [10**7, 15 * 10**6])])))
    message = str(raised.value)
    assert message.startswith(f'{LABEL}: a result row has no window:')
    assert "'ws'" in message and "word='b'" in message and '\n' not in message
