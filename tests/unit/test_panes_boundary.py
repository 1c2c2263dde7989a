"""planning.phases.boundary_before: in a stream, a ParDo reading side inputs
after a GroupByKey gets a stage of its own behind a Reshuffle that keeps panes
(the streaming behaviour: tests/streaming/test_side_inputs.py)."""

from __future__ import annotations

import apache_beam as beam

from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.planning.planner import plan_pipeline
from tests.streaming.test_side_inputs import _grouped_with_side


def _plan(streaming: bool, keeps_panes: bool = True) -> p.SparkPlan:
    pipeline = beam.Pipeline()
    _grouped_with_side(pipeline)
    return plan_pipeline(
        pipeline.to_runner_api(), streaming=streaming, reshuffle_keeps_panes=keeps_panes
    )


def _reader(plan: p.SparkPlan) -> p.StagePlan:
    [stage] = [s for s in plan.stages if s.side_inputs]
    return stage


def test_side_input_reader_leaves_the_grouped_stage_in_a_stream():
    for keeps_panes in (True, False):
        plan = _plan(streaming=True, keeps_panes=keeps_panes)
        reader = _reader(plan)
        assert not reader.grouped
        [boundary] = [s for s in plan.stages if s.kind == p.RESHUFFLE_STAGE]
        assert boundary.labels == (reader.labels[0] + '/PanesBeforeSideInputs',)
        assert not boundary.reset_panes  # whatever the compatibility version
        assert [port.buffer_id for port in reader.inputs] == [
            port.buffer_id for port in boundary.outputs
        ]


def test_batch_plans_are_unchanged():
    pipeline = beam.Pipeline()
    side = pipeline | 'Side' >> beam.Create([1, 2])
    _ = (
        pipeline
        | 'Main' >> beam.Create([('k', 1)])
        | beam.GroupByKey()
        | beam.Map(lambda kv, s: kv, beam.pvalue.AsList(side))
    )
    plan = plan_pipeline(pipeline.to_runner_api())
    assert _reader(plan).grouped  # fused with the GroupByKey's reader, as before
    assert not any(s.labels[0].endswith('/PanesBeforeSideInputs') for s in plan.stages)
