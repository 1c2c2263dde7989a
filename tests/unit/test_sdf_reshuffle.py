"""planning.phases.sdf_reshuffle_main_input_only: the Reshuffle Beam's
``expand_sdf`` puts in front of a splittable DoFn moves its main input only,
and runs after the stage writing it, whatever order fusion's sets give."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import translations

from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.planning.planner import plan_pipeline
from tests.integration.test_batch_correctness import _splittable_with_side_inputs


def test_sdf_reshuffle_reads_main_input_after_its_writer():
    # Stage order comes from Beam's sort_stages over sets of stages (hash order
    # by object id): fuse the same pipeline many times. Before the phase, a
    # quarter of the plans ordered the Reshuffle before the split stage, and
    # every plan fed it the side inputs as elements.
    for _ in range(10):
        pipeline = beam.Pipeline()
        _splittable_with_side_inputs(pipeline)
        plan = plan_pipeline(pipeline.to_runner_api())
        written: set[bytes] = set()
        reshuffles = 0
        for stage in plan.stages:
            for port in stage.inputs:
                assert port.buffer_id == translations.IMPULSE_BUFFER or port.buffer_id in written, (
                    stage.name,
                    port.buffer_id,
                )
            if stage.labels == ('ParDo(_CountTo)/Reshuffle',):
                assert stage.kind == p.RESHUFFLE_STAGE
                reshuffles += 1
                (port,) = stage.inputs  # the restrictions, no side input
                assert port.buffer_id.endswith(b'_split'), port.buffer_id
            written.update(port.buffer_id for port in stage.outputs)
        assert reshuffles == 1
