"""``execution.streaming.source.StreamSource``: the loop's sources have every
member the loop calls, and the loop calls nothing else on them."""

import ast
import inspect

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.testing import test_stream

from beam_spark_inproc.execution.streaming import loop
from beam_spark_inproc.execution.streaming import watermarks
from beam_spark_inproc.execution.streaming.source import StreamSource
from beam_spark_inproc.execution.streaming.teststream_source import TestStreamSource
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.planning.planner import plan_pipeline


def _members() -> set[str]:
    return {name for name in vars(StreamSource) if not name.startswith('_')} | set(
        StreamSource.__annotations__
    )


def test_test_stream_is_a_stream_source():
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    pipeline = beam.Pipeline(options=options)
    _ = (
        pipeline
        | test_stream.TestStream().add_elements([1]).advance_watermark_to_infinity()
        | beam.Map(lambda x: x)
    )
    plan = plan_pipeline(pipeline.to_runner_api(), streaming=True)
    [stage] = [s for s in plan.stages if s.kind == p.TEST_STREAM_STAGE]
    context = pipeline_context.PipelineContext(
        beam_runner_api_pb2.Components.FromString(plan.components)
    )
    source = TestStreamSource(stage, context)
    assert isinstance(source, StreamSource)
    assert all(hasattr(source, name) for name in _members())


def test_the_loop_calls_only_the_protocol():
    """Every attribute the loop and its watermarks read of a source (they
    name each of the loop's sources ``source``) is a member of
    ``StreamSource``."""
    used = {
        node.attr
        for module in (loop, watermarks)
        for node in ast.walk(ast.parse(inspect.getsource(module)))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == 'source'
    }
    assert used and used <= _members(), used - _members()
