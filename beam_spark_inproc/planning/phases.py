"""Beam's fusion phases, used as a library.

The list is FnApiRunner's (``fn_runner.FnApiRunner.create_stages``) plus
``annotate_stateful_dofns_as_roots``, so a stateful DoFn starts a stage whose input
is shuffled by key, and ``sdf_reshuffle_main_input_only``. Reshuffle is a runner URN, so
Create/Impulse data and SDF
restrictions are spread over partitions by a Spark repartition.
"""

from __future__ import annotations

import copy

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.utils import proto_utils

from beam_spark_inproc.planning.native import NATIVE_URNS

# Runner-native transforms (``planning.native``) are runner URNs too: each one
# is a stage of its own, never fused with SDK transforms.
RUNNER_URNS = (
    frozenset(
        [
            common_urns.primitives.FLATTEN.urn,
            common_urns.primitives.GROUP_BY_KEY.urn,
            common_urns.composites.RESHUFFLE.urn,
        ]
    )
    | NATIVE_URNS
)


def sdf_reshuffle_main_input_only(
    stages: list[translations.Stage],
    context: translations.TransformContext,
) -> list[translations.Stage]:
    """Keeps only the main input of the Reshuffles ``expand_sdf`` inserts.

    ``expand_sdf`` builds the Reshuffle in front of a splittable DoFn's Process
    (when RESHUFFLE is a runner URN, as here; FnApiRunner has none) as a copy of
    the ParDo with the main input replaced, so it keeps the ParDo's side inputs
    as inputs. Fusion then reads them as elements of the Reshuffle (they were
    shuffled into the restrictions: "'dict' object has no attribute 'metadata'"
    in ``beam.dataframe.io``), and ``sort_stages``, which takes a stage reading
    a PCollection for its producer, could order the Reshuffle before the stage
    that writes its input (whose ParDo reads the same side input): then the
    Reshuffle read nothing. The Process transform reads the side inputs itself.
    """
    for stage in stages:
        for transform in stage.transforms:
            if (
                transform.spec.urn != common_urns.composites.RESHUFFLE.urn
                or len(transform.inputs) <= 1
            ):
                continue
            output = translations.only_element(transform.outputs.values())
            side_tags = set()
            for consumer in context.components.transforms.values():
                if (
                    consumer.spec.urn in translations.PAR_DO_URNS
                    and output in consumer.inputs.values()
                ):
                    side_tags.update(
                        proto_utils.parse_Bytes(
                            consumer.spec.payload, beam_runner_api_pb2.ParDoPayload
                        ).side_inputs
                    )
            main = [tag for tag in transform.inputs if tag not in side_tags]
            if len(main) != 1:
                raise ValueError(
                    f'Reshuffle {transform.unique_name!r} ({transform.spec.urn}) '
                    f'has inputs {dict(transform.inputs)}, none or several of '
                    f"them main inputs (its consumers' side inputs: "
                    f'{sorted(side_tags)}); a Reshuffle has one input.'
                )
            for tag in list(transform.inputs):
                if tag != main[0]:
                    del transform.inputs[tag]
    return stages


PHASES = [
    translations.annotate_downstream_side_inputs,
    translations.annotate_stateful_dofns_as_roots,
    translations.fix_side_input_pcoll_coders,
    translations.pack_combiners,
    translations.lift_combiners,
    translations.expand_sdf,
    sdf_reshuffle_main_input_only,
    translations.expand_gbk,
    translations.sink_flattens,
    translations.greedily_fuse,
    translations.read_to_impulse,
    translations.impulse_to_input,
    translations.sort_stages,
    translations.add_impulse_to_dangling_transforms,
    translations.setup_timer_mapping,
    translations.populate_data_channel_coders,
]


# Grouped values past this many encoded bytes are read lazily through state.
STATE_ITERABLE_BYTES = 1 << 20


# Streaming: TestStream is a runner source (its own stage). Beam's
# ``lift_combiners`` lifts only under triggers where a partial combine before the
# GroupByKey is invisible, so the phases are the same as in batch.
STREAMING_RUNNER_URNS = RUNNER_URNS | {common_urns.primitives.TEST_STREAM.urn}


def _unlift_timestamped_combines(proto: beam_runner_api_pb2.Pipeline) -> None:
    """Streaming: a CombinePerKey whose windowing does not output at the end of
    the window runs as its expansion, unlifted (a lifted partial combine stamps
    its partial results with the window's end, so OUTPUT_AT_EARLIEST/LATEST panes
    got the wrong timestamp). Beam's ``lift_combiners`` checks the trigger
    only."""
    components = proto.components
    eow = beam_runner_api_pb2.OutputTime.END_OF_WINDOW
    for transform in components.transforms.values():
        if (
            transform.spec.urn == common_urns.composites.COMBINE_PER_KEY.urn
            and transform.subtransforms
        ):
            pcoll = components.pcollections[next(iter(transform.inputs.values()))]
            strategy = components.windowing_strategies[pcoll.windowing_strategy_id]
            if strategy.output_time != eow:
                transform.spec.Clear()


# A Reshuffle the planner puts before a ParDo (``boundary_before``): it keeps
# panes whatever the pipeline's compatibility version (``StagePlan.reset_panes``).
PANES_BOUNDARY = 'beam_spark_inproc:panes_boundary'


def boundary_before(
    proto: beam_runner_api_pb2.Pipeline, pardo_names: set[str]
) -> beam_runner_api_pb2.Pipeline:
    """A copy of ``proto`` with a runner-executed Reshuffle (a stage boundary
    passing elements, windows, timestamps and panes as they are) in front of
    the main input of each ParDo named.

    Streaming: a ParDo reading side inputs that fusion put in the stage
    consuming a GroupByKey gets its own stage, where its main input can wait
    for the side inputs in the driver (``execution.streaming.side_inputs``):
    in the grouped stage the panes are made inside Spark's task, too late to
    wait. The boundary costs a round-robin shuffle of the panes."""
    proto = copy.deepcopy(proto)
    components = proto.components
    parents = {
        child: parent for parent, t in components.transforms.items() for child in t.subtransforms
    }
    for transform_id, pardo in list(components.transforms.items()):
        if pardo.unique_name not in pardo_names or pardo.spec.urn not in translations.PAR_DO_URNS:
            continue
        side_tags = proto_utils.parse_Bytes(
            pardo.spec.payload, beam_runner_api_pb2.ParDoPayload
        ).side_inputs
        [tag] = [tag for tag in pardo.inputs if tag not in side_tags]
        source = pardo.inputs[tag]
        boundary_pcoll = f'{source}/{transform_id}/panes'
        components.pcollections[boundary_pcoll].CopyFrom(components.pcollections[source])
        components.pcollections[boundary_pcoll].unique_name = boundary_pcoll
        boundary_id = f'{transform_id}/PanesBeforeSideInputs'
        boundary = components.transforms[boundary_id]
        boundary.unique_name = f'{pardo.unique_name}/PanesBeforeSideInputs'
        boundary.spec.urn = common_urns.composites.RESHUFFLE.urn
        boundary.inputs['input'] = source
        boundary.outputs['output'] = boundary_pcoll
        boundary.annotations[PANES_BOUNDARY] = b'1'
        if pardo.environment_id:
            boundary.environment_id = pardo.environment_id
        pardo.inputs[tag] = boundary_pcoll
        parent = parents.get(transform_id)
        siblings = (
            components.transforms[parent].subtransforms
            if parent is not None
            else proto.root_transform_ids
        )
        ids = list(siblings)
        ids.insert(ids.index(transform_id), boundary_id)
        del siblings[:]
        siblings.extend(ids)
    return proto


def fuse(
    pipeline_proto: beam_runner_api_pb2.Pipeline,
    is_drain: bool = False,
    streaming: bool = False,
) -> tuple[translations.TransformContext, list[translations.Stage]]:
    """Runs the fusion phases on a copy of the proto; returns context and stages.

    ``is_drain``: splittable DoFns truncate their restrictions first (Beam's
    drain; with bounded restrictions the default truncation keeps them whole).
    ``streaming``: TestStream stays a runner transform (``STREAMING_RUNNER_URNS``).
    """
    pipeline_proto = copy.deepcopy(pipeline_proto)
    if streaming:
        _unlift_timestamped_combines(pipeline_proto)
    context, stages = translations.create_and_optimize_stages(
        pipeline_proto,
        phases=PHASES,
        known_runner_urns=STREAMING_RUNNER_URNS if streaming else RUNNER_URNS,
        use_state_iterables=True,
        is_drain=is_drain,
    )
    # Beam writes a threshold of 1 byte (every iterable through state, to test
    # it); only large groups need it (see ``worker.batch.grouped_values``).
    for coder in context.components.coders.values():
        if coder.spec.urn == common_urns.coders.STATE_BACKED_ITERABLE.urn:
            coder.spec.payload = b'%d' % STATE_ITERABLE_BYTES
    return context, stages
