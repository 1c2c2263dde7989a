"""What streaming mode cannot run yet: rejected before any Spark job, every
offending transform named (as the batch capability check does)."""

from __future__ import annotations

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2

from beam_spark_inproc.errors import Problem
from beam_spark_inproc.errors import UnsupportedPipelineError
from beam_spark_inproc.execution.streaming import spark_sinks
from beam_spark_inproc.planning import plan as p

_LATER = 'Streaming mode does not run this yet.'


def is_streaming(proto: beam_runner_api_pb2.Pipeline, streaming_flag: bool) -> bool:
    """``--streaming``, a TestStream, or an unbounded PCollection (an unbounded
    splittable DoFn's output, PeriodicImpulse's) in the pipeline."""
    return (
        streaming_flag
        or any(
            t.spec.urn == common_urns.primitives.TEST_STREAM.urn
            for t in proto.components.transforms.values()
        )
        or any(
            pc.is_bounded == beam_runner_api_pb2.IsBounded.UNBOUNDED
            for pc in proto.components.pcollections.values()
        )
    )


def problems(plan: p.SparkPlan, proto: beam_runner_api_pb2.Pipeline) -> list[Problem]:
    found = []
    transforms = {t.unique_name: t for t in proto.components.transforms.values()}

    def urn(label: str) -> str:
        t = transforms.get(label)
        return t.spec.urn if t is not None else ''

    test_streams = [s for s in plan.stages if s.kind == p.TEST_STREAM_STAGE]
    for stage in test_streams:
        payload = beam_runner_api_pb2.TestStreamPayload.FromString(stage.descriptor)
        if payload.endpoint.url:
            found.append(
                Problem(
                    stage.labels[0],
                    common_urns.primitives.TEST_STREAM.urn,
                    '',
                    f'a TestStream reading its events from a service '
                    f'({payload.endpoint.url}). ' + _LATER,
                    'Give the TestStream its events in the pipeline.',
                )
            )
    for stage in plan.stages:
        if stage.kind == p.NATIVE_STAGE:
            native = spark_sinks.problem(stage)
            if native is not None:
                found.append(native)
        for side_input in stage.side_inputs if stage.grouped else ():
            found.append(
                Problem(
                    side_input.transform_id,
                    urn(side_input.transform_id),
                    '',
                    f'side input {side_input.tag!r} in the stage that reads a '
                    "GroupByKey's panes. " + _LATER,
                    'Read the side input in a ParDo of its own after the '
                    'GroupByKey (e.g. behind a Reshuffle), or run it as a batch '
                    'pipeline.',
                )
            )
    return found


def check(plan: p.SparkPlan, proto: beam_runner_api_pb2.Pipeline) -> None:
    found = problems(plan, proto)
    if found:
        raise UnsupportedPipelineError(found)
