"""A readable account of a SparkPlan: what each Spark step runs of the pipeline.

Named as the user named things: transforms by their labels (Beam's full
labels, ``'Outer/Count'``), data between stages by what makes it: the output
of a transform (a PCollection's ``unique_name`` in the pipeline proto), the
shuffle of a GroupByKey by its label, a Flatten's union by its label. Ids that
Beam's fusion made up for its own PCollections (a splittable DoFn's
restrictions: ``<pcollection>_split``) are described as ``(internal) split of
the output of '<its producer>'``. A stage holding no transform of the
pipeline is described by the GroupByKey or Flatten whose data it moves; one
with nothing of the pipeline at all (it only passes data on) is not listed,
and the header says how many such steps there are.
"""

from __future__ import annotations

from typing import Optional

from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import translations

from beam_spark_inproc.planning import plan as p


class _Names:
    """The pipeline's labels for the ids a plan refers to."""

    def __init__(self, pipeline: Optional[beam_runner_api_pb2.Pipeline]):
        components = pipeline.components if pipeline is not None else None
        self._transforms = dict(
            (tid, t.unique_name) for tid, t in (components.transforms.items() if components else ())
        )
        self._labels = set(self._transforms.values())
        self._pcollections: dict[str, str] = {}
        if components is not None:
            # A PCollection is named after the outermost transform giving it
            # (a Create's output is 'Numbers', not 'Numbers/Map(decode)').
            deepest_first = sorted(
                components.transforms.values(), key=lambda t: -t.unique_name.count('/')
            )
            for t in deepest_first:
                for tag, pcoll in t.outputs.items():
                    self._pcollections[pcoll] = (
                        f'the output of {t.unique_name!r}'
                        if len(t.outputs) == 1
                        else f'output {tag!r} of {t.unique_name!r}'
                    )

    def transform(self, transform_id: str) -> str:
        return self._transforms.get(transform_id, transform_id)

    def pcollection(self, pcoll_id: str) -> str:
        if pcoll_id in self._pcollections:
            return self._pcollections[pcoll_id]
        base, suffix = pcoll_id, list[str]()
        while '_' in base:  # Beam's fusion names its own after the original
            base, _, part = base.rpartition('_')
            suffix.insert(0, part)
            if base in self._pcollections:
                return f'(internal) {" ".join(suffix)} of {self._pcollections[base]}'
        return repr(pcoll_id)

    def buffer(self, buffer_id: bytes) -> str:
        if buffer_id == translations.IMPULSE_BUFFER:
            return 'impulse'
        kind, name = translations.split_buffer_id(buffer_id)
        if kind == 'group':
            return f'the shuffle of {self.transform(name)!r}'
        if name in self._labels and name not in self._pcollections:
            return f'the union of {name!r}'  # a Flatten's inputs, by its label
        return self.pcollection(name)

    def serves(self, stage: p.StagePlan) -> list[str]:
        """What of the pipeline a stage holding none of its transforms runs:
        the grouping or shuffle of a GroupByKey, the union of a Flatten."""
        found = [f'{port.grouping.gbk_label} (grouping)' for port in stage.inputs if port.grouping]
        buffers = [port.buffer_id for port in stage.inputs] + [o.buffer_id for o in stage.outputs]
        for buffer_id in buffers:
            if buffer_id == translations.IMPULSE_BUFFER:
                continue
            kind, name = translations.split_buffer_id(buffer_id)
            if kind == 'materialize' and name in self._labels and name not in self._pcollections:
                found.append(f'{name} (union)')
        for output in stage.outputs:
            kind, name = translations.split_buffer_id(output.buffer_id)
            if kind == 'group':
                found.append(f'{self.transform(name)} (shuffle write)')
        return list(dict.fromkeys(found))


def describe(plan: p.SparkPlan, pipeline: Optional[beam_runner_api_pb2.Pipeline] = None) -> str:
    """Stages in execution order, with their shuffles, side inputs and
    outputs, named by the labels of ``pipeline`` (the proto the plan was
    made from; without it, by the plan's ids)."""
    names = _Names(pipeline)
    readers: dict[bytes, int] = {}
    for stage in plan.stages:
        for port in stage.inputs:
            readers[port.buffer_id] = readers.get(port.buffer_id, 0) + 1
        for si in stage.side_inputs:
            readers[si.buffer_id] = readers.get(si.buffer_id, 0) + 1
    listed = [
        (stage, labels)
        for stage in plan.stages
        if (labels := list(stage.labels) or names.serves(stage)) or pipeline is None
    ]
    n = len(listed)
    folded = len(plan.stages) - n
    lines = [
        f"{n} stages; each is one DataFrame step (mapInArrow running Beam's "
        'BundleProcessor) unless noted.'
        + (
            f' {folded} more pass{"es" if folded != 1 else ""} data on and '
            f'run{"s" if folded == 1 else ""} no transform of the pipeline.'
            if folded
            else ''
        )
    ]
    for i, (stage, labels) in enumerate(listed, 1):
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
        if labels:
            lines.append('    transforms: ' + ', '.join(labels))
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
            lines.append(f'    reads  {names.buffer(port.buffer_id)} ({how})')
        for si in stage.side_inputs:
            lines.append(
                f'    side input {si.tag!r} of {names.transform(si.transform_id)!r}: '
                f'{names.buffer(si.buffer_id)} collected once on the driver'
            )
        for output in stage.outputs:
            uses = readers.get(output.buffer_id, 0)
            lines.append(
                f'    writes {names.buffer(output.buffer_id)} ({output.layout}, '
                f'{uses} reader{"s" if uses != 1 else ""})'
            )
        if not stage.outputs:
            lines.append('    leaf: runs in the final Spark job')
    return '\n'.join(lines)
