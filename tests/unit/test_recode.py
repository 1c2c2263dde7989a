"""worker.recode: a Reshuffle's elements re-encoded between coders, and its
pane info dropped for pipelines older than Beam 2.65 (planner flag)."""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
from apache_beam.coders import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils import windowed_value

from beam_spark_inproc.compat import beam as beam_compat
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.planning.planner import plan_pipeline
from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import SCHEMA
from beam_spark_inproc.worker.recode import Recode

PANE = windowed_value.PaneInfo(True, True, windowed_value.PaneInfoTiming.ON_TIME, 0, 0)


def _rows(recode: Recode, datas: list[bytes]) -> list[tuple]:
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([0] * len(datas) + [CONTROL_TAG], pa.int32()),
            pa.array([None] * (len(datas) + 1), pa.binary()),
            pa.array(datas + [b'report'], pa.binary()),
        ],
        schema=SCHEMA,
    )
    out = []
    for b in recode(iter([batch])):
        out.extend(zip(*(b.column(i).to_pylist() for i in range(3))))
    return out


def test_recode_between_coders_keeps_or_drops_panes():
    wv = GlobalWindows.windowed_value(('k', 1), pane_info=PANE)
    source = coders.WindowedValueCoder(
        coders.TupleCoder([coders.PickleCoder(), coders.VarIntCoder()])
    )
    target = coders.WindowedValueCoder(
        coders.TupleCoder([coders.StrUtf8Coder(), coders.VarIntCoder()])
    )
    data = source.encode(wv) + source.encode(wv.with_value(('j', 2)))
    for reset in (False, True):
        rows = _rows(Recode(source, target, reset), [data])
        assert rows[-1] == (CONTROL_TAG, None, b'report')
        impl = target.get_impl()
        stream = beam.coders.coder_impl.create_InputStream(rows[0][2])
        got = []
        while stream.size():
            got.append(impl.decode_from_stream(stream, True))
        assert [g.value for g in got] == [('k', 1), ('j', 2)]
        assert {g.pane_info for g in got} == {windowed_value.PANE_INFO_UNKNOWN if reset else PANE}


def test_planner_marks_reshuffles_of_old_pipelines():
    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create([1, 2]) | beam.Reshuffle() | beam.Map(str)
    proto = pipeline.to_runner_api()
    for keeps in (True, False):
        reshuffles = [
            s
            for s in plan_pipeline(proto, reshuffle_keeps_panes=keeps).stages
            if s.kind == p.RESHUFFLE_STAGE
        ]
        assert reshuffles and all(s.reset_panes != keeps for s in reshuffles)
    old = PipelineOptions(update_compatibility_version='2.60.0')
    assert not beam_compat.reshuffle_keeps_panes(old)
    assert beam_compat.reshuffle_keeps_panes(PipelineOptions())
    assert beam_compat.reshuffle_keeps_panes(PipelineOptions(update_compatibility_version='2.65.0'))
