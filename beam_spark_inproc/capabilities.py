"""What the runner can execute, checked on the pipeline proto before Spark runs.

Every transform must run in this Python process (an embedded Python environment,
or a Python SDK container environment that we run in-process instead), and every
leaf transform's URN must be one Beam's BundleProcessor or this runner executes.
All problems are reported together in one ``UnsupportedPipelineError``.
"""

from __future__ import annotations

from apache_beam.portability import common_urns
from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.runners.worker import bundle_processor
from apache_beam.transforms import environments

from beam_spark_inproc.errors import Problem
from beam_spark_inproc.errors import UnsupportedPipelineError
from beam_spark_inproc.planning.native import NATIVE_URNS

RUNNER_PRIMITIVES = (
    frozenset(
        [
            common_urns.primitives.IMPULSE.urn,
            common_urns.primitives.GROUP_BY_KEY.urn,
            common_urns.primitives.FLATTEN.urn,
            common_urns.composites.RESHUFFLE.urn,
            common_urns.deprecated_primitives.READ.urn,
            # A TestStream makes the pipeline a stream (``execution.streaming.support``),
            # whose driver feeds the TestStream's events itself.
            common_urns.primitives.TEST_STREAM.urn,
        ]
    )
    | NATIVE_URNS
)
# Composites expanded by Beam's phases (combiner lifting, SDF expansion).
EXPANDED_COMPOSITES = frozenset(
    [
        common_urns.composites.COMBINE_PER_KEY.urn,
        common_urns.composites.COMBINE_GLOBALLY.urn,
    ]
)
IN_PROCESS_ENV_URNS = frozenset([python_urns.EMBEDDED_PYTHON])
FOREIGN_ENV_URNS = frozenset(
    [
        common_urns.environments.DOCKER.urn,
        common_urns.environments.PROCESS.urn,
        common_urns.environments.EXTERNAL.urn,
    ]
)


def executable_urns() -> frozenset[str]:
    known = frozenset(bundle_processor.BeamTransformFactory._known_urns)
    return known | RUNNER_PRIMITIVES | EXPANDED_COMPOSITES


def is_in_process_python(env: beam_runner_api_pb2.Environment) -> bool:
    if env.urn in IN_PROCESS_ENV_URNS:
        return True
    if env.urn == common_urns.environments.ANYOF.urn:
        return any(is_in_process_python(e) for e in environments.expand_anyof_environments(env))
    if env.urn in FOREIGN_ENV_URNS or env.urn == common_urns.environments.DEFAULT.urn:
        # A Python SDK container: its transforms are Python code we can run here.
        return any(
            c.startswith(environments.SDK_VERSION_CAPABILITY_PREFIX) and 'python' in c
            for c in env.capabilities
        )
    return False


def _describe(env_id: str, env: beam_runner_api_pb2.Environment | None) -> str:
    if env is None:
        return f'{env_id} (missing from the pipeline)'
    detail = env.urn
    if env.urn == common_urns.environments.DOCKER.urn:
        payload = beam_runner_api_pb2.DockerPayload.FromString(env.payload)
        detail += f', image {payload.container_image}'
    return f'{env_id} [{detail}]'


def problems(proto: beam_runner_api_pb2.Pipeline) -> list[Problem]:
    """Every transform of the pipeline this runner cannot execute.

    Walks the transform tree as Beam's fusion does (``leaf_transform_stages``):
    known composites count as leaves, and a leaf whose outputs are all among its
    inputs is a no-op.
    """
    components = proto.components
    known = executable_urns()
    composites = translations.KNOWN_COMPOSITES | RUNNER_PRIMITIVES
    found: list[Problem] = []

    def visit(transform_id: str) -> None:
        t = components.transforms[transform_id]
        label = t.unique_name or transform_id
        env_id = t.environment_id
        if env_id:
            env = components.environments[env_id] if env_id in components.environments else None
            if env is None or not is_in_process_python(env):
                found.append(
                    Problem(
                        label,
                        t.spec.urn,
                        _describe(env_id, env),
                        'it needs an environment other than this Python process '
                        '(a cross-language transform or a non-Python SDK).',
                        'Use a Python implementation of this transform, or run the '
                        'pipeline on a portable runner with an expansion service '
                        "(e.g. Beam's Flink or Spark job server).",
                    )
                )
                return
        if t.subtransforms and t.spec.urn not in composites:
            for sub in t.subtransforms:
                visit(sub)
            return
        if not set(t.outputs.values()) - set(t.inputs.values()):
            return
        if t.spec.urn not in known:
            found.append(
                Problem(
                    label,
                    t.spec.urn,
                    env_id,
                    "no handler for this URN in Beam's Python BundleProcessor or in this runner.",
                    'Express it with standard Beam Python transforms.',
                )
            )

    for root in proto.root_transform_ids:
        visit(root)
    return found


def check(proto: beam_runner_api_pb2.Pipeline) -> None:
    found = problems(proto)
    if found:
        raise UnsupportedPipelineError(found)
