"""Updating a stream: changed code run on the same checkpoint location.

Dataflow's update is the model: state belongs to the transforms that hold it,
a change that keeps every one of them (its label and its coders) resumes
from the checkpoint, stateless transforms may be added, removed or changed
freely, and a renamed stateful transform is named in a mapping
(``--spark_transform_name_mapping``, or Beam's ``--transform_name_mapping``:
a JSON object of old label -> new label; a
key also maps the labels under it, ``"Count"`` maps ``"Count/Group"``; an
empty new label drops the transform's state).

**What holds state** in a checkpoint (``holders``), each found from the plan:

* a **GroupByKey**: buffered panes and trigger state, in the state buckets of
  the stage reading it (``buckets``); its coders: key, value, window;
* a **stateful DoFn**: user state and timers, in its stage's buckets, named
  inside by the transform's label (a rename is applied to them as they are
  read: ``aliases`` in the commit record, ``StateFiles.aliases``); its coders:
  the input's key, value and window, each state's and timer family's;
* a **splittable DoFn**: its pending residuals (element and restriction),
  held by the driver (``residuals``); its coder: the element-and-restriction's;
* a **side-input holder** (a stage reading side inputs): side-input values
  and the main-input elements pushed back behind them (``side_inputs``),
  which are fed again to the transforms that read the stage's input; its
  coders: each main input's and side input's, and the labels it feeds;
* a **source** (a TestStream): its position, clock and watermarks; its
  coders: each output's.

They are written to ``pipeline.json`` (``store``) with every run. A run on a
folder whose owner differs is checked against it (``check``) before anything
in the folder is touched and before any Spark job: each old holder must find
a new one of the same kind under its (mapped) label, with the same coders
(compared as the coders' structure: URNs, payloads and components, not their
ids; a pickled Python coder by its class), and the holders of one old stage
must land in one new stage. Anything else is refused with every problem named
(``IncompatibleUpdateError``). A new holder with no old one starts empty; a
new transform reading the impulse is refused (a stream feeds the impulse in
its first micro-batch only).

**Keyed by stage.** A commit record keys watermarks and state buckets by the
stage's name, and the driver's state by ``stage_key``; fusion names stages
after the transforms and PCollections they fuse, so an added Map changes the
name of the stage it joins. The check yields, for each old stage holding
state, the new stage its holders went to (``Update.moved``): the restore
takes the old stage's record for it (``index``); an old stateless stage that
is gone is dropped, and a new stateless stage takes its watermarks from its
inputs as restored (``after_restore``). ``pipeline.json`` is rewritten at the
updated run's first commit, so until then (a run that dies before it) the
old description still reads the newest record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from typing import Any

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import translations

from beam_spark_inproc.execution.streaming.store import CheckpointOwnedError
from beam_spark_inproc.execution.streaming.store import fingerprint
from beam_spark_inproc.execution.streaming.store import stage_key
from beam_spark_inproc.planning import plan as p

_LOGGER = logging.getLogger(__name__)

GROUP_BY_KEY = 'GroupByKey'
STATEFUL = 'stateful DoFn'
SPLITTABLE = 'splittable DoFn'
SIDE_INPUTS = 'side-input holder'
SOURCE = 'source'
_PAR_DO = common_urns.primitives.PAR_DO.urn
_PROCESS_SIZED = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn
_KV = common_urns.coders.KV.urn
_WINDOWED = common_urns.coders.WINDOWED_VALUE.urn
_PICKLED = 'beam:coder:pickled_python:v1'
_OPTION = '--transform_name_mapping'


class IncompatibleUpdateError(CheckpointOwnedError):
    """The pipeline cannot take over the state its checkpoint location holds
    (a stateful transform removed, renamed without a mapping, or with other
    coders; a mapping naming unknown transforms). Nothing was changed."""


# -- what holds state -------------------------------------------------------
class _Coders:
    """Coder signatures (structure, not ids) and readable names."""

    def __init__(self, *coders):
        self._coders = {}  # the first map naming an id wins
        for found in reversed(coders):
            self._coders.update(found)

    def signature(self, coder_id: str) -> str:
        coder = self._coders[coder_id]
        payload = coder.spec.payload
        parts = [coder.spec.urn]
        if coder.spec.urn == _PICKLED:
            # By its class: the pickle holds more than the encoding (Beam's
            # deterministic coders keep the label of the step they serve).
            parts.append(_pickled_name(payload) or _digest(payload))
        elif payload:
            parts.append(_digest(payload))
        inner = ','.join(self.signature(c) for c in coder.component_coder_ids)
        return ':'.join(parts) + (f'({inner})' if inner else '')

    def show(self, coder_id: str) -> str:
        coder = self._coders[coder_id]
        name = coder.spec.urn.split(':')[-2] if coder.spec.urn.count(':') > 1 else coder.spec.urn
        if coder.spec.urn == _PICKLED:
            name = _pickled_name(coder.spec.payload) or name
        inner = ', '.join(self.show(c) for c in coder.component_coder_ids)
        return name + (f'<{inner}>' if inner else '')

    def kv(self, coder_id: str, window_coder_id: str | None) -> dict:
        """{'key': .., 'value': .., 'window': ..} of a (windowed) KV coder."""
        coder = self._coders[coder_id]
        if coder.spec.urn == _WINDOWED:
            coder_id, window_coder_id = coder.component_coder_ids[:2]
            coder = self._coders[coder_id]
        found = (
            {'key': coder.component_coder_ids[0], 'value': coder.component_coder_ids[1]}
            if coder.spec.urn == _KV
            else {'element': coder_id}
        )
        if window_coder_id:
            found['window'] = window_coder_id
        return found


def _digest(payload: bytes) -> str:
    return hashlib.sha1(payload).hexdigest()[:12]


def _pickled_name(payload: bytes) -> str:
    """The class name of a pickled Python coder (Beam's ``serialize_coder``
    writes ``Name$`` before the pickle)."""
    found = re.search(rb'([A-Za-z_][A-Za-z0-9_]*)\$', payload[:200])
    return found.group(1).decode('ascii') if found else ''


def _holder(
    kind: str, label: str, stage: p.StagePlan, coders: _Coders, ids: dict[str, str], **extra
) -> dict:
    return {
        'kind': kind,
        'label': label,
        'stage': stage_key(stage.name),
        'coders': {n: coders.signature(c) for n, c in sorted(ids.items())},
        'shows': {n: coders.show(c) for n, c in sorted(ids.items())},
        **extra,
    }


def holders(plan: p.SparkPlan) -> list[dict]:
    """The transforms of ``plan`` whose state a checkpoint holds (see the
    module doc), as JSON-able dicts."""
    components = beam_runner_api_pb2.Components.FromString(plan.components)
    coders = _Coders(components.coders)
    by_label = {t.unique_name: t for t in components.transforms.values()}

    def window_of(pcoll_id: str) -> str | None:
        strategy = components.windowing_strategies.get(
            components.pcollections[pcoll_id].windowing_strategy_id
        )
        return strategy.window_coder_id if strategy else None

    def input_of(transform) -> str:
        side = set()
        if transform.spec.urn == _PAR_DO:
            side = set(
                beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload).side_inputs
            )
        [main] = [pc for tag, pc in sorted(transform.inputs.items()) if tag not in side][:1] or [
            None
        ]
        return main

    found = []
    for stage in plan.stages:
        if stage.kind == p.TEST_STREAM_STAGE:
            found.append(
                _holder(
                    SOURCE,
                    stage.labels[0],
                    stage,
                    coders,
                    {
                        f'output {tag}': port.coder_id
                        for tag, port in zip(stage.output_tags, stage.outputs)
                    },
                )
            )
            continue
        for port in stage.inputs:
            if port.grouping is None:
                continue
            label = port.grouping.gbk_label
            gbk = by_label.get(label)
            if gbk is not None and input_of(gbk):
                pcoll = input_of(gbk)
                ids = coders.kv(components.pcollections[pcoll].coder_id, window_of(pcoll))
            else:
                ids = coders.kv(port.grouping.pre_coder_id, None)
            found.append(_holder(GROUP_BY_KEY, label, stage, coders, ids))
        if stage.kind != p.SDK_STAGE or not stage.descriptor:
            continue
        descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
        # The stage's own coders, for ids the pipeline's do not know.
        own = _Coders(components.coders, descriptor.coders)
        for tid, transform in sorted(descriptor.transforms.items()):
            if transform.spec.urn == _PAR_DO:
                payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
                if not (payload.state_specs or payload.timer_family_specs):
                    continue
                original = by_label.get(transform.unique_name, transform)
                pcoll = input_of(original)
                ids = (
                    coders.kv(components.pcollections[pcoll].coder_id, window_of(pcoll))
                    if pcoll in components.pcollections
                    else {}
                )
                for name, spec in payload.state_specs.items():
                    for kind in (
                        'read_modify_write_spec',
                        'bag_spec',
                        'combining_spec',
                        'map_spec',
                        'set_spec',
                        'ordered_list_spec',
                        'multimap_spec',
                    ):
                        if spec.HasField(kind):
                            sub = getattr(spec, kind)
                            for field, value in sub.ListFields():
                                if field.name.endswith('coder_id'):
                                    part = field.name[: -len('_coder_id')]
                                    ids[f'state {name} {part or "value"}'] = value
                for name, spec in payload.timer_family_specs.items():
                    ids[f'timer {name}'] = spec.timer_family_coder_id
                found.append(
                    _holder(STATEFUL, transform.unique_name, stage, own, ids, transform_id=tid)
                )
            elif transform.spec.urn == _PROCESS_SIZED and stage.split_input:
                [port] = [q for q in stage.inputs if q.transform_id == stage.split_input]
                found.append(
                    _holder(
                        SPLITTABLE,
                        transform.unique_name.rsplit('/', 1)[0],
                        stage,
                        own,
                        {'element and restriction': port.coder_id},
                    )
                )
        if stage.side_inputs:
            feeds = []
            for port in stage.inputs:
                outputs = (
                    set(descriptor.transforms[port.transform_id].outputs.values())
                    if port.transform_id in descriptor.transforms
                    else set()
                )
                feeds.append(
                    sorted(
                        t.unique_name
                        for t in descriptor.transforms.values()
                        if outputs & set(t.inputs.values())
                    )
                )
            ids = {f'main input {i}': port.coder_id for i, port in enumerate(stage.inputs)}
            ids.update({f'side input {s.tag}': s.coder_id for s in stage.side_inputs})
            label = sorted({s.transform_id for s in stage.side_inputs})[0]
            found.append(_holder(SIDE_INPUTS, label, stage, own, ids, feeds=feeds))
    return sorted(found, key=lambda h: (h['kind'], h['label'], h['stage']))


class Owner:
    """What ``pipeline.json`` says of a plan (``description``), and how the
    plan takes over the state of the pipeline another one describes."""

    def __init__(self, plan: p.SparkPlan, mapping: dict[str, str]):
        self.description = describe(plan, fingerprint(plan))
        self.mapping = mapping

    def take_over(self, theirs: dict, root: str) -> Update | None:
        return check(theirs, self.description, self.mapping, root)


def describe(plan: p.SparkPlan, stages: list) -> dict:
    """What ``pipeline.json`` says of a pipeline: its stages (``stages``:
    ``store.fingerprint``), the transforms holding state, every transform
    label (composites' too), and the labels of the stages reading the
    impulse (run in a stream's first micro-batch only)."""
    if not getattr(plan, 'components', b''):  # a plan of stage names only
        return {
            'stages': stages,
            'holders': [],
            'roots': [],
            'labels': sorted({label for stage in plan.stages for label in stage.labels}),
        }
    components = beam_runner_api_pb2.Components.FromString(plan.components)
    return {
        'stages': stages,
        'holders': holders(plan),
        'labels': sorted(
            {t.unique_name for t in components.transforms.values()}
            | {label for stage in plan.stages for label in stage.labels}
        ),
        'roots': sorted(
            {
                label
                for stage in plan.stages
                for label in stage.labels
                if any(port.buffer_id == translations.IMPULSE_BUFFER for port in stage.inputs)
            }
        ),
    }


# -- the mapping ------------------------------------------------------------
def parse_mapping(*values: Any) -> dict[str, str]:
    """The transform name mapping from the options: each a JSON object (text,
    or already parsed by Beam's own ``--transform_name_mapping``) of old
    label -> new label; later values add to earlier ones."""
    mapping: dict[str, str] = {}
    for value in values:
        if value in (None, '', {}):
            continue
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as e:
                raise ValueError(
                    f'{_OPTION}: not JSON ({e}): {value!r}; give an object '
                    'of old label -> new label, e.g. '
                    '\'{"Count": "CountWords"}\'.'
                ) from None
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValueError(
                f'{_OPTION}: expected a JSON object of old '
                f'label -> new label (strings), got {value!r}.'
            )
        mapping.update(value)
    return mapping


def _mapped(label: str, mapping: dict[str, str]) -> str:
    """``label`` renamed by the mapping's longest key that is it or a prefix
    of it (``key/...``); '' when its state is dropped."""
    for key in sorted(mapping, key=len, reverse=True):
        if label == key or label.startswith(key + '/'):
            return mapping[key] + label[len(key) :] if mapping[key] else ''
    return label


# -- the check --------------------------------------------------------------
@dataclasses.dataclass
class Update:
    """How an updated pipeline takes over a checkpoint (see the module doc)."""

    # old stage key -> new stage key, for the stages whose state moves
    moved: dict[str, str]
    # new stage key -> [(old id, new id)] of its renamed stateful DoFn
    renamed: dict[str, list[tuple[str, str]]]
    changes: list[str]  # what the update does, logged when it resumes

    def index(self, index_of: dict[str, int]) -> None:
        """Adds the old stage keys whose state moved to ``index_of`` (stage
        key -> index in the new plan)."""
        for old, new in self.moved.items():
            if old not in index_of and new in index_of:
                index_of[old] = index_of[new]

    def after_restore(self, executor: Any, record: dict) -> None:
        """The parts ``restart.restore`` does not know of: residuals re-enter
        their stage's splittable input, renamed stateful DoFns read their
        state under the new label, a new stage's watermarks follow its
        inputs' as restored."""
        plan = executor.plan
        index_of = {stage_key(s.name): i for i, s in enumerate(plan.stages)}
        restored = set()
        for stage in record['stages']:
            key = stage_key(stage['name'])
            if key not in index_of:
                key = self.moved.get(key, key)
            if key in index_of:
                restored.add(index_of[key])
        for key, renames in self.renamed.items():
            i = index_of[key]
            aliases = dict(executor.buckets.aliases[i])
            for old, new in renames:
                aliases = {a: new for a in aliases}
                aliases[old] = new
            executor.buckets.aliases[i] = sorted((a, n) for a, n in aliases.items() if a != n)
        executor.residuals.rename(
            {i: s.split_input for i, s in enumerate(plan.stages) if s.split_input}
        )
        watermarks = executor.watermarks
        for i in range(len(plan.stages)):
            if i in restored or i in executor.sources:
                continue
            wm = watermarks.next_input(i)
            watermarks.restore(i, wm, wm)
        for line in self.changes:
            _LOGGER.info('Updated stream: %s', line)


def check(theirs: dict, mine: dict, mapping: dict[str, str], root: str) -> Update | None:
    """Whether the pipeline described by ``mine`` (``holders``, ``labels``,
    ``stages``) can take over the state of ``theirs`` (the checkpoint's
    ``pipeline.json``) under ``mapping``: the update, None when nothing
    moves; raises ``IncompatibleUpdateError`` naming every problem."""
    problems = []
    old_labels, new_labels = set(theirs.get('labels', ())), set(mine['labels'])
    for key, value in sorted(mapping.items()):
        if key not in old_labels and not any(label.startswith(key + '/') for label in old_labels):
            problems.append(
                f'{_OPTION} maps {key!r}, which is not a transform of the '
                'pipeline whose state the checkpoint holds'
            )
        if (
            value
            and value not in new_labels
            and not any(label.startswith(value + '/') for label in new_labels)
        ):
            problems.append(
                f'{_OPTION} maps {key!r} to {value!r}, which is not a transform of this pipeline'
            )
    old_roots = {_mapped(label, mapping) for label in theirs.get('roots', ())}
    for label in mine['roots']:
        if label not in old_roots:
            problems.append(
                f"{label!r} is new and reads the pipeline's impulse (a "
                'Create, an Impulse), which a stream feeds in its first '
                'micro-batch only: it would never run in the resumed stream'
            )
    new_by = {(h['kind'], h['label']): h for h in mine['holders']}
    moved: dict[str, str] = {}
    renamed: dict[str, list] = {}
    dropped: dict[str, list[str]] = {}
    changes = []
    for old in theirs['holders']:
        kind, label = old['kind'], old['label']
        target = _mapped(label, mapping)
        name = f'{kind} {label!r}'
        if not target:
            dropped.setdefault(old['stage'], []).append(name)
            changes.append(f'{name}: its state is dropped ({_OPTION})')
            continue
        new = new_by.get((kind, target))
        if new is None:
            if target != label:
                problems.append(
                    f'{name} is mapped to {target!r}, which is not a {kind} of this pipeline'
                )
            else:
                problems.append(
                    f'{name} holds state in the checkpoint and is not in this '
                    f'pipeline (removed or renamed): if it was renamed, name '
                    f'its new label with {_OPTION}=\'{{"{label}": "NEW"}}\'; '
                    'an empty new label drops its state'
                )
            continue
        if target != label:
            changes.append(f'{name} is now {target!r}')
            if kind == STATEFUL:
                renamed.setdefault(new['stage'], []).append(
                    (old.get('transform_id', label), new.get('transform_id', target))
                )
        for coder in sorted(set(old['coders']) | set(new['coders'])):
            before, after = old['coders'].get(coder), new['coders'].get(coder)
            if before == after:
                continue
            if before is None:
                problems.append(f'{name}: {coder} is new (a {kind} must keep its state and coders)')
            elif after is None:
                problems.append(
                    f'{name}: {coder} was removed (a {kind} must keep its state and coders)'
                )
            else:
                problems.append(
                    f'{name}: {coder} coder changed: {old["shows"][coder]} -> '
                    f"{new['shows'][coder]} (the checkpoint's state was "
                    'encoded with the old one)'
                )
        if kind == SIDE_INPUTS and [
            sorted(_mapped(f, mapping) for f in feeds) for feeds in old.get('feeds', [])
        ] != new.get('feeds'):
            problems.append(
                f'{name}: the main-input elements it holds were fed to '
                f'{old.get("feeds")}, in this pipeline its stage feeds '
                f'{new.get("feeds")}'
            )
        went = moved.setdefault(old['stage'], new['stage'])
        if went != new['stage']:
            problems.append(
                f'{name}: the state of stage {old["stage"]!r} would be split '
                f'between stages {went!r} and {new["stage"]!r}'
            )
    for stage, names in dropped.items():
        if stage in moved:
            problems.append(
                f'{", ".join(names)}: its state cannot be dropped '
                'while the state of its stage moves on'
            )
    came: dict[str, str] = {}
    for old, new in moved.items():
        other = came.setdefault(new, old)
        if other != old:
            problems.append(
                f'stages {other!r} and {old!r} hold state and would both go to stage {new!r}'
            )
    if problems:
        raise IncompatibleUpdateError(
            f'--checkpoint_location {root!r} holds the state of a pipeline '
            'this one cannot take over:\n  - '
            + '\n  - '.join(problems)
            + '\nNothing in the checkpoint was changed. An update must keep '
            'every transform holding state (GroupByKey, stateful and '
            'splittable DoFns, side-input readers, sources) with its label '
            f'and coders; rename one with {_OPTION}; or give this pipeline its '
            'own checkpoint location.'
        )
    old_keys = {key for key, _ in theirs['stages']}
    new_keys = {key for key, _ in mine['stages']}
    moved = {old: new for old, new in moved.items() if old != new}
    added = sorted(
        {h['label'] for h in mine['holders']}
        - {_mapped(h['label'], mapping) for h in theirs['holders']}
    )
    changes += [f'{label!r} is new: it starts with no state' for label in added]
    if not moved and not renamed and old_keys == new_keys and not dropped:
        return None
    return Update(moved, renamed, changes)
