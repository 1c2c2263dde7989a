"""A readable account of a SparkPlan: what each Spark step runs of the pipeline."""

from __future__ import annotations

from apache_beam.runners.portability.fn_api_runner import translations

from beam_spark_inproc.planning import plan as p


def _buffer(buffer_id: bytes) -> str:
    if buffer_id == translations.IMPULSE_BUFFER:
        return 'impulse'
    kind, name = translations.split_buffer_id(buffer_id)
    return f'{kind}:{name}'


def describe(plan: p.SparkPlan) -> str:
    """Stages in execution order, with their shuffles, side inputs and outputs."""
    n = len(plan.stages)
    readers: dict[bytes, int] = {}
    for stage in plan.stages:
        for port in stage.inputs:
            readers[port.buffer_id] = readers.get(port.buffer_id, 0) + 1
        for si in stage.side_inputs:
            readers[si.buffer_id] = readers.get(si.buffer_id, 0) + 1
    lines = [
        f"{n} stages; each is one DataFrame step (mapInArrow running Beam's "
        'BundleProcessor) unless noted.'
    ]
    for i, stage in enumerate(plan.stages, 1):
        kind = {
            p.SDK_STAGE: 'Beam stage',
            p.RESHUFFLE_STAGE: 'Reshuffle',
            p.NATIVE_STAGE: f'Spark ({stage.native_urn})',
            p.TEST_STREAM_STAGE: 'TestStream',
        }.get(stage.kind, stage.kind)
        extra = []
        if stage.stateful:
            extra.append('stateful: input shuffled by key, keys processed in order')
        if stage.split_input:
            extra.append('splittable DoFn: stragglers may be split into a second round')
        lines.append(f'[{i}/{n}] {kind}' + (f' ({"; ".join(extra)})' if extra else ''))
        if stage.labels:
            lines.append('    transforms: ' + ', '.join(stage.labels))
        for port in stage.inputs:
            how = (
                f'shuffle by key + sort, GroupAlsoByWindow for {port.grouping.gbk_label!r}'
                if port.grouping
                else 'shuffle by key + sort'
                if port.keyed
                else 'repartition (round robin)'
                if stage.kind == p.RESHUFFLE_STAGE
                else "the source's Arrow batches, rows made in this stage"
                if stage.input_mode == p.ARROW
                else 'no shuffle'
            )
            lines.append(f'    reads  {_buffer(port.buffer_id)} ({how})')
        for si in stage.side_inputs:
            lines.append(
                f'    side input {si.tag!r} of {si.transform_id!r}: '
                f'{_buffer(si.buffer_id)} collected once on the driver'
            )
        for output in stage.outputs:
            uses = readers.get(output.buffer_id, 0)
            lines.append(
                f'    writes {_buffer(output.buffer_id)} ({output.layout}, '
                f'{uses} reader{"s" if uses != 1 else ""})'
            )
        if not stage.outputs:
            lines.append('    leaf: runs in the final Spark job')
    return '\n'.join(lines)
