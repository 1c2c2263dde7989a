"""The capability check rejects what cannot run in-process, before Spark runs."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms import environments
from apache_beam.transforms import userstate

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc import UnsupportedPipelineError
from beam_spark_inproc import capabilities


class _NoSpark:
    """A stand-in session: any use of it fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f'the runner touched the Spark session ({name})')


def _proto(build) -> beam_runner_api_pb2.Pipeline:
    p = beam.Pipeline()
    build(p)
    return p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())


def _with_java_env(proto, labels):
    """Puts the transforms with these labels in a Java SDK container environment."""
    java = environments.DockerEnvironment.from_container_image(
        'apache/beam_java17_sdk:2.77.0'
    ).to_runner_api(None)
    java.ClearField('capabilities')
    java.capabilities.append('beam:coder:bytes:v1')
    proto.components.environments['java'].CopyFrom(java)
    for t in proto.components.transforms.values():
        if t.unique_name in labels:
            t.environment_id = 'java'
    return proto


def _simple(p):
    (
        p
        | 'Create' >> beam.Create([1, 2, 3])
        | 'JavaMap' >> beam.Map(lambda x: x + 1)
        | 'JavaFilter' >> beam.Filter(lambda x: x > 1)
        | 'PyMap' >> beam.Map(str)
    )


def test_embedded_python_pipeline_has_no_problems():
    assert capabilities.problems(_proto(_simple)) == []


def test_foreign_environment_rejected_naming_every_transform():
    proto = _with_java_env(_proto(_simple), {'JavaMap', 'JavaFilter'})
    runner = InProcessSparkRunner(spark=_NoSpark())
    with pytest.raises(UnsupportedPipelineError) as info:
        runner.run_portable_pipeline(proto, beam.options.pipeline_options.PipelineOptions())
    message = str(info.value)
    assert 'nothing was submitted to Spark' in message
    assert "'JavaMap'" in message and "'JavaFilter'" in message
    assert "'PyMap'" not in message
    assert 'apache/beam_java17_sdk:2.77.0' in message
    assert common_urns.primitives.PAR_DO.urn in message
    assert {p.label for p in info.value.problems} == {'JavaMap', 'JavaFilter'}


def test_python_container_environment_runs_in_process():
    env = environments.DockerEnvironment.from_container_image(
        environments.DockerEnvironment.default_docker_image()
    ).to_runner_api(None)
    assert capabilities.is_in_process_python(env)


def test_unknown_urn_rejected():
    proto = _proto(_simple)
    for t in proto.components.transforms.values():
        if t.unique_name == 'PyMap':
            t.spec.urn = 'beam:transform:org.example:magic:v1'
    found = capabilities.problems(proto)
    assert [(p.label, p.urn) for p in found] == [('PyMap', 'beam:transform:org.example:magic:v1')]


def test_test_stream_accepted():
    """A TestStream makes the pipeline a stream, whose driver feeds it."""
    from apache_beam.testing.test_stream import TestStream

    def build(p):
        p | TestStream().add_elements([1]) | beam.Map(str)

    assert capabilities.problems(_proto(build)) == []


def test_state_and_timers_accepted():
    class Stateful(beam.DoFn):
        COUNT = userstate.ReadModifyWriteStateSpec('count', beam.coders.VarIntCoder())

        def process(self, kv, count=beam.DoFn.StateParam(COUNT)):
            yield kv

    def build(p):
        p | beam.Create([('a', 1)]) | 'Stateful' >> beam.ParDo(Stateful())

    assert capabilities.problems(_proto(build)) == []


def test_bundle_finalization_accepted():
    class Finalizing(beam.DoFn):
        def process(self, x, finalizer=beam.DoFn.BundleFinalizerParam):
            finalizer.register(lambda: None)
            yield x

    def build(p):
        p | beam.Create([1]) | 'Finalizing' >> beam.ParDo(Finalizing())

    assert capabilities.problems(_proto(build)) == []
