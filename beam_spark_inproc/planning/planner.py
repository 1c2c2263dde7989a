"""Turns Beam's fused stages into a SparkPlan (see ``plan``)."""

from __future__ import annotations

import copy
import dataclasses

from apache_beam.internal import pickler
from apache_beam.portability import common_urns
from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import translations
from apache_beam.runners.worker import bundle_processor
from apache_beam.utils import proto_utils

from beam_spark_inproc.io import text_lines
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.planning.native import NATIVE_URNS
from beam_spark_inproc.planning.native import READ_URN
from beam_spark_inproc.planning.native import SQL_URN
from beam_spark_inproc.planning.phases import PANES_BOUNDARY
from beam_spark_inproc.planning.phases import boundary_before
from beam_spark_inproc.planning.phases import fuse
from beam_spark_inproc.planning.ports import input_transform

DATA_URNS = (bundle_processor.DATA_INPUT_URN, bundle_processor.DATA_OUTPUT_URN)
# A descriptor's ports need a non-empty URL; the worker's data channel factory
# answers every URL with the in-process channel of the running bundle.
INPROC_URL = 'beam-spark-inproc'
_PROCESS_SIZED = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn


def plan_pipeline(
    pipeline_proto: beam_runner_api_pb2.Pipeline,
    is_drain: bool = False,
    reshuffle_keeps_panes: bool = True,
    streaming: bool = False,
) -> p.SparkPlan:
    """Fuses the pipeline and describes each stage as plain data.

    ``reshuffle_keeps_panes``: False for pipelines whose
    ``update_compatibility_version`` predates 2.65 (see ``plan.StagePlan.reset_panes``).
    ``streaming``: TestStream stays a runner transform (``phases.fuse``); a
    ParDo reading side inputs in a stage that consumes a GroupByKey gets a
    stage of its own (``phases.boundary_before``).
    """
    context, stages = fuse(pipeline_proto, is_drain, streaming)
    plan = plan_stages(context, stages, reshuffle_keeps_panes, streaming)
    if streaming:  # side inputs read where a GroupByKey's panes are made
        readers = {
            side_input.transform_id
            for stage in plan.stages
            if stage.grouped
            for side_input in stage.side_inputs
        }
        if readers:
            context, stages = fuse(boundary_before(pipeline_proto, readers), is_drain, streaming)
            plan = plan_stages(context, stages, reshuffle_keeps_panes, streaming)
    return plan


def plan_stages(
    context: translations.TransformContext,
    stages: list[translations.Stage],
    reshuffle_keeps_panes: bool = True,
    streaming: bool = False,
) -> p.SparkPlan:
    layouts = _buffer_layouts(context, stages, streaming)
    planned = tuple(_plan_stage(context, stage, layouts, reshuffle_keeps_panes) for stage in stages)
    return p.SparkPlan(
        # A stream's loop reads every stage output as rows (no ``ARROW`` mode).
        stages=planned if streaming else _arrow_inputs(planned),
        components=context.components.SerializeToString(),
    )


def _arrow_inputs(stages: tuple[p.StagePlan, ...]) -> tuple[p.StagePlan, ...]:
    """A runner-native read or SQL query whose output only one plain stage
    reads, as its only input: that stage takes the source's Arrow batches
    itself (``ARROW`` mode, the native stage's output port ``ARROW_LAYOUT``), so
    Spark's reader or query feeds the bundle in one ``mapInArrow`` with no
    re-encoding step in between."""
    readers: dict[bytes, list[int]] = {}
    for i, stage in enumerate(stages):
        for buffer_id in [port.buffer_id for port in stage.inputs] + [
            si.buffer_id for si in stage.side_inputs
        ]:
            readers.setdefault(buffer_id, []).append(i)
    planned = list(stages)
    for i, stage in enumerate(planned):
        if stage.native_urn not in (READ_URN, SQL_URN) or len(stage.outputs) != 1:
            continue
        out = stage.outputs[0]
        reading = readers.get(out.buffer_id, [])
        if len(reading) != 1:
            continue
        consumer = planned[reading[0]]
        if (
            consumer.kind != p.SDK_STAGE
            or consumer.input_mode != p.PLAIN
            or len(consumer.inputs) != 1
        ):
            continue
        planned[i] = dataclasses.replace(
            stage, outputs=(dataclasses.replace(out, layout=p.ARROW_LAYOUT),)
        )
        planned[reading[0]] = dataclasses.replace(consumer, input_mode=p.ARROW)
    return tuple(planned)


def _is_reshuffle(stage: translations.Stage) -> bool:
    return any(t.spec.urn == common_urns.composites.RESHUFFLE.urn for t in stage.transforms)


def _is_splittable(stage: translations.Stage) -> bool:
    return any(
        t.spec.urn == common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn
        for t in stage.transforms
    )


def _buffer_layouts(context, stages, streaming: bool = False) -> dict[bytes, str]:
    """PACKED for GroupByKey buffers and stateful inputs (a row holds many
    elements of one key: a stateful stage reads a key's rows as one stream,
    ``worker.batch.stateful``); PACKED_VALUES for a GroupByKey buffer in batch whose
    windowing is the default (``_values_only``), ELEMENTS for Reshuffle and splittable inputs, else
    CHUNKS. A buffer read both by a stateful stage and by a reader that needs
    one element per row is KEYED_ELEMENTS (one element per row with its key: it serves
    every reader)."""
    layouts: dict[bytes, str] = {}
    keyed: set[bytes] = set()
    for stage in stages:
        for t in stage.transforms:
            if t.spec.urn in DATA_URNS:
                if stage.is_stateful() and (
                    t.spec.urn == bundle_processor.DATA_INPUT_URN
                    and t.spec.payload != translations.IMPULSE_BUFFER
                ):
                    keyed.add(t.spec.payload)
                elif _buffer_kind(t.spec.payload) == 'group':
                    layouts.setdefault(
                        t.spec.payload,
                        p.PACKED_VALUES
                        if (not streaming and _values_only(context, t.spec.payload))
                        else p.PACKED,
                    )
                elif (_is_reshuffle(stage) or _is_splittable(stage)) and (
                    t.spec.urn == bundle_processor.DATA_INPUT_URN
                ):
                    # One element per row: a Reshuffle spreads them, a split
                    # restriction's unprocessed successors are resent one by one.
                    layouts.setdefault(t.spec.payload, p.ELEMENTS)
    for buffer_id in keyed:
        layouts[buffer_id] = p.KEYED_ELEMENTS if layouts.get(buffer_id) == p.ELEMENTS else p.PACKED
    return layouts


def _values_only(context, buffer_id: bytes) -> bool:
    """A GroupByKey whose grouping keeps only the values (global window,
    default trigger, end-of-window timestamps: ``Windowing.is_default``), with
    the same value coder on both sides (so the values' bytes carry over)."""
    grouping = _grouping(context, buffer_id)
    components = context.components
    strategy = components.windowing_strategies[grouping.windowing_strategy_id]
    api = beam_runner_api_pb2
    if not (
        strategy.window_fn.urn == common_urns.global_windows.urn
        and strategy.trigger.WhichOneof('trigger') == 'default'
        and strategy.accumulation_mode == api.AccumulationMode.DISCARDING
        and strategy.output_time == api.OutputTime.END_OF_WINDOW
        and strategy.allowed_lateness == 0
        and not grouping.window_coder_id
    ):
        return False
    coders = components.coders
    pre, post = coders[grouping.pre_coder_id], coders[grouping.post_coder_id]
    if (
        pre.spec.urn != common_urns.coders.WINDOWED_VALUE.urn
        or post.spec.urn != common_urns.coders.WINDOWED_VALUE.urn
    ):
        return False
    pre_kv = coders[pre.component_coder_ids[0]]
    post_kv = coders[post.component_coder_ids[0]]
    if (
        pre_kv.spec.urn != common_urns.coders.KV.urn
        or post_kv.spec.urn != common_urns.coders.KV.urn
        or pre.component_coder_ids[1] != post.component_coder_ids[1]
    ):
        return False
    iterable = coders[post_kv.component_coder_ids[1]]
    return iterable.spec.urn in (
        common_urns.coders.ITERABLE.urn,
        common_urns.coders.STATE_BACKED_ITERABLE.urn,
    ) and list(iterable.component_coder_ids) == [pre_kv.component_coder_ids[1]]


def _integer_windows(t: beam_runner_api_pb2.PTransform) -> bool:
    """A WindowInto with FixedWindows or SlidingWindows (by URN: the worker
    checks the WindowFn it builds, ``worker.assign_windows``)."""
    if t.spec.urn != common_urns.primitives.ASSIGN_WINDOWS.urn:
        return False
    strategy = beam_runner_api_pb2.WindowingStrategy.FromString(t.spec.payload)
    return strategy.window_fn.urn in (
        common_urns.fixed_windows.urn,
        common_urns.sliding_windows.urn,
    )


def _fast_text(t: beam_runner_api_pb2.PTransform) -> None:
    """Beam's splittable DoFn reading a BoundedSource, in the transform that
    processes its restrictions, becomes ``text_lines.LinesReaderDoFn`` (which
    reads a plain text file of Beam's default ReadFromText with Python's line
    iteration and any other source with Beam's ``source.read``)."""
    if t.spec.urn != _PROCESS_SIZED:
        return
    payload = proto_utils.parse_Bytes(t.spec.payload, beam_runner_api_pb2.ParDoPayload)
    if payload.do_fn.urn != python_urns.PICKLED_DOFN_INFO:
        return
    try:
        data = pickler.loads(payload.do_fn.payload)
    except Exception:  # a user's splittable DoFn that will not unpickle here:
        return  # not Beam's reader; its workers report its error
    if not text_lines.is_beams_reader(data[0]):
        return
    fn = text_lines.LinesReaderDoFn(data[0]._dd)
    payload.do_fn.payload = pickler.dumps((fn,) + tuple(data[1:]))
    t.spec.payload = payload.SerializeToString()


def _buffer_kind(buffer_id: bytes) -> str:
    if buffer_id == translations.IMPULSE_BUFFER:
        return 'impulse'
    return translations.split_buffer_id(buffer_id)[0]


def _wire_coder(context, pcoll_id: str) -> str:
    return context.data_channel_coders[pcoll_id]


def _safe_coder(context, pcoll_id: str) -> str:
    coder_id = context.data_channel_coders[pcoll_id]
    return context.safe_coders.get(coder_id, coder_id)


def _grouping(context, buffer_id: bytes) -> p.Grouping:
    _, gbk_id = translations.split_buffer_id(buffer_id)
    gbk = context.components.transforms[gbk_id]
    input_pcoll = translations.only_element(list(gbk.inputs.values()))
    output_pcoll = translations.only_element(list(gbk.outputs.values()))
    pre_coder_id = _safe_coder(context, input_pcoll)
    strategy_id = context.components.pcollections[input_pcoll].windowing_strategy_id
    strategy = context.components.windowing_strategies[strategy_id]
    api = beam_runner_api_pb2
    return p.Grouping(
        gbk_label=gbk.unique_name,
        pre_coder_id=pre_coder_id,
        post_coder_id=_safe_coder(context, output_pcoll),
        windowing_strategy_id=strategy_id,
        window_coder_id=_custom_window_coder(context, input_pcoll),
        default_trigger=(
            strategy.trigger.WhichOneof('trigger') == 'default'
            and strategy.merge_status == api.MergeStatus.NON_MERGING
            and strategy.output_time
            in (
                api.OutputTime.END_OF_WINDOW,
                api.OutputTime.EARLIEST_IN_PANE,
                api.OutputTime.LATEST_IN_PANE,
            )
        ),
    )


def _custom_window_coder(context, pcoll_id: str) -> str | None:
    """The real window coder of a PCollection whose windows the runner's safe
    coder keeps opaque (see ``plan.Grouping.window_coder_id``), else None."""
    coders = context.components.coders
    safe = coders[_safe_coder(context, pcoll_id)]
    if (
        safe.spec.urn != common_urns.coders.WINDOWED_VALUE.urn
        or coders[safe.component_coder_ids[1]].spec.urn
        != python_urns.TIMESTAMP_PREFIXED_OPAQUE_WINDOW_CODER
    ):
        return None
    return coders[_wire_coder(context, pcoll_id)].component_coder_ids[1]


def _plan_stage(
    context, stage: translations.Stage, layouts, reshuffle_keeps_panes: bool = True
) -> p.StagePlan:
    inputs, outputs, side_inputs, labels, timers = [], [], [], [], []
    stateful = stage.is_stateful()
    transforms = {}
    for transform in stage.transforms:
        t = copy.deepcopy(transform)
        if t.spec.urn == bundle_processor.DATA_INPUT_URN:
            buffer_id = t.spec.payload
            pcoll = translations.only_element(list(t.outputs.values()))
            coder_id = _wire_coder(context, pcoll)
            inputs.append(
                p.InputPort(
                    transform_id=t.unique_name,
                    buffer_id=buffer_id,
                    coder_id=coder_id,
                    grouping=dataclasses.replace(
                        _grouping(context, buffer_id),
                        values_only=layouts.get(buffer_id) == p.PACKED_VALUES,
                    )
                    if _buffer_kind(buffer_id) == 'group'
                    else None,
                    keyed=stateful and buffer_id != translations.IMPULSE_BUFFER,
                )
            )
            t.spec.payload = _port(coder_id)
        elif t.spec.urn == bundle_processor.DATA_OUTPUT_URN:
            buffer_id = t.spec.payload
            pcoll = translations.only_element(list(t.inputs.values()))
            coder_id = _wire_coder(context, pcoll)
            layout = layouts.get(buffer_id, p.CHUNKS)
            outputs.append(
                p.OutputPort(
                    transform_id=t.unique_name,
                    buffer_id=buffer_id,
                    coder_id=coder_id,
                    layout=layout,
                    key_coder_id=_safe_coder(context, pcoll)
                    if layout in (p.KEYED_ELEMENTS, p.PACKED, p.PACKED_VALUES)
                    else None,
                )
            )
            t.spec.payload = _port(coder_id)
            if layout in (p.PACKED, p.PACKED_VALUES):
                t.spec.urn = p.PACKED_SINK_URN if layout == p.PACKED else p.PACKED_VALUES_SINK_URN
                t.annotations[p.SAFE_CODER_ANNOTATION] = _safe_coder(context, pcoll).encode()
        else:
            labels.append(t.unique_name)
            if _integer_windows(t):
                t.spec.urn = p.ASSIGN_WINDOWS_URN
            _fast_text(t)
            if t.spec.urn in translations.PAR_DO_URNS:
                side_inputs.extend(_side_inputs(context, t))
                timers.extend(_timer_families(t))
        transforms[t.unique_name] = t

    test_streams = [
        t for t in stage.transforms if t.spec.urn == common_urns.primitives.TEST_STREAM.urn
    ]
    if test_streams:
        return _test_stream_stage(stage, test_streams[0], labels, outputs)

    if _is_reshuffle(stage):
        return p.StagePlan(
            name=stage.name,
            kind=p.RESHUFFLE_STAGE,
            labels=tuple(labels),
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            reset_panes=not reshuffle_keeps_panes
            and not any(PANES_BOUNDARY in t.annotations for t in stage.transforms),
        )

    native = [t for t in stage.transforms if t.spec.urn in NATIVE_URNS]
    if native:
        return _native_stage(stage, native[0], inputs, outputs, labels)

    runner_only = [
        t
        for t in stage.transforms
        if t.spec.urn in context.runner_only_urns
        or (t.spec.urn == common_urns.primitives.FLATTEN.urn and len(t.inputs) > 1)
    ]
    if runner_only:
        raise NotImplementedError(
            'Stage %r contains runner transforms this runner cannot execute: %s'
            % (stage.name, ', '.join('%s (%s)' % (t.unique_name, t.spec.urn) for t in runner_only))
        )

    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor(
        id=stage.name,
        transforms=transforms,
        pcollections=dict(context.components.pcollections.items()),
        coders=dict(context.components.coders.items()),
        windowing_strategies=dict(context.components.windowing_strategies.items()),
        environments=dict(context.components.environments.items()),
    )
    descriptor.state_api_service_descriptor.url = INPROC_URL
    split_input = _split_input(descriptor) if not stateful else ''
    if timers:
        descriptor.timer_api_service_descriptor.url = INPROC_URL
    return p.StagePlan(
        name=stage.name,
        kind=p.SDK_STAGE,
        labels=tuple(labels),
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        side_inputs=tuple(side_inputs),
        descriptor=descriptor.SerializeToString(),
        input_mode=p.input_mode(stateful, any(i.grouping for i in inputs), split_input),
        timers=tuple(timers),
        split_input=split_input,
    )


def _native_stage(stage, transform, inputs, outputs, labels) -> p.StagePlan:
    """A runner-native transform's stage: its ports, URN, payload, and the
    input tag each port feeds (the impulse Beam adds to sources is dropped)."""
    tags = {pcoll: tag for tag, pcoll in transform.inputs.items()}
    ports, port_tags = [], []
    for port in inputs:
        if port.buffer_id == translations.IMPULSE_BUFFER:
            continue
        _, pcoll = translations.split_buffer_id(port.buffer_id)
        ports.append(port)
        port_tags.append(tags.get(pcoll, ''))
    return p.StagePlan(
        name=stage.name,
        kind=p.NATIVE_STAGE,
        labels=tuple(labels),
        inputs=tuple(ports),
        outputs=tuple(outputs),
        native_urn=transform.spec.urn,
        native_payload=transform.spec.payload,
        native_inputs=tuple(port_tags),
    )


def _test_stream_stage(stage, test_stream, labels, outputs) -> p.StagePlan:
    """The TestStream's stage: no SDK work, only its output ports (one per
    output tag it feeds; ``descriptor`` holds the TestStreamPayload)."""
    tag_of = {pcoll: tag for tag, pcoll in test_stream.outputs.items()}
    writes = {
        t.unique_name: translations.only_element(list(t.inputs.values()))
        for t in stage.transforms
        if t.spec.urn == bundle_processor.DATA_OUTPUT_URN
    }
    return p.StagePlan(
        name=stage.name,
        kind=p.TEST_STREAM_STAGE,
        labels=(test_stream.unique_name,),
        inputs=(),
        outputs=tuple(outputs),
        descriptor=test_stream.spec.payload,
        output_tags=tuple(tag_of[writes[port.transform_id]] for port in outputs),
    )


def _split_input(descriptor) -> str:
    """The data input of the stage's SDF Process transform, when it has one."""
    for tid, t in descriptor.transforms.items():
        if t.spec.urn == common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn:
            payload = proto_utils.parse_Bytes(t.spec.payload, beam_runner_api_pb2.ParDoPayload)
            main = [tag for tag in t.inputs if tag not in payload.side_inputs]
            try:
                return input_transform(descriptor, tid, main[0])
            except ValueError:
                return ''
    return ''


def _timer_families(transform) -> list[p.TimerFamily]:
    payload = proto_utils.parse_Bytes(transform.spec.payload, beam_runner_api_pb2.ParDoPayload)
    return [
        p.TimerFamily(
            transform_id=transform.unique_name,
            family_id=family_id,
            event_time=spec.time_domain == beam_runner_api_pb2.TimeDomain.EVENT_TIME,
        )
        for family_id, spec in sorted(payload.timer_family_specs.items())
    ]


def _port(coder_id: str) -> bytes:
    port = beam_fn_api_pb2.RemoteGrpcPort(coder_id=coder_id)
    port.api_service_descriptor.url = INPROC_URL
    return port.SerializeToString()


def _side_inputs(context, transform) -> list[p.SideInput]:
    payload = proto_utils.parse_Bytes(transform.spec.payload, beam_runner_api_pb2.ParDoPayload)
    result = []
    for tag, spec in payload.side_inputs.items():
        pcoll = transform.inputs[tag]
        result.append(
            p.SideInput(
                transform_id=transform.unique_name,
                tag=tag,
                buffer_id=translations.create_buffer_id(pcoll),
                access_pattern_urn=spec.access_pattern.urn,
                coder_id=_safe_coder(context, pcoll),
            )
        )
    return result
