"""The update check (``execution.streaming.update.check``) on hand-made
``pipeline.json`` descriptions: what moves, what is refused and why. The runs
themselves are in ``tests/streaming/test_update.py``."""

from __future__ import annotations

import pytest

from beam_spark_inproc.execution.streaming.update import GROUP_BY_KEY
from beam_spark_inproc.execution.streaming.update import SIDE_INPUTS
from beam_spark_inproc.execution.streaming.update import STATEFUL
from beam_spark_inproc.execution.streaming.update import IncompatibleUpdateError
from beam_spark_inproc.execution.streaming.update import check
from beam_spark_inproc.execution.streaming.update import parse_mapping


def _holder(kind, label, stage, **coders):
    coders = coders or {'key': 'varint'}
    return {'kind': kind, 'label': label, 'stage': stage, 'coders': coders, 'shows': dict(coders)}


def _pipeline(*holders, roots=(), labels=()):
    stages = sorted({h['stage'] for h in holders})
    return {
        'stages': [[s, []] for s in stages],
        'holders': list(holders),
        'roots': list(roots),
        'labels': sorted({h['label'] for h in holders} | set(labels)),
    }


OLD = _pipeline(
    _holder(GROUP_BY_KEY, 'Count/Group', 'A'),
    _holder(STATEFUL, 'Dedup', 'B', key='varint', **{'state seen value': 'bytes'}),
    labels=['Count', 'Read'],
)


def _refusal(mine, mapping=None) -> str:
    with pytest.raises(IncompatibleUpdateError) as refused:
        check(OLD, mine, mapping or {}, '/ck')
    return str(refused.value)


def test_nothing_moved_is_no_update():
    assert check(OLD, OLD, {}, '/ck') is None


def test_a_prefix_mapping_renames_the_transforms_under_it():
    mine = _pipeline(
        _holder(GROUP_BY_KEY, 'CountWords/Group', 'A2'),
        _holder(STATEFUL, 'Dedup', 'B', key='varint', **{'state seen value': 'bytes'}),
        labels=['CountWords'],
    )
    update = check(OLD, mine, {'Count': 'CountWords'}, '/ck')
    assert update.moved == {'A': 'A2'}
    assert update.renamed == {}


def test_a_renamed_stateful_dofn_gets_an_alias():
    mine = _pipeline(
        _holder(GROUP_BY_KEY, 'Count/Group', 'A'),
        _holder(STATEFUL, 'Unique', 'B2', key='varint', **{'state seen value': 'bytes'}),
        labels=['Count'],
    )
    mine['holders'][1]['transform_id'] = 'Unique'
    update = check(OLD, mine, {'Dedup': 'Unique'}, '/ck')
    assert update.moved == {'B': 'B2'}
    assert update.renamed == {'B2': [('Dedup', 'Unique')]}


def test_a_new_stateful_transform_starts_empty_and_dropping_needs_a_mapping():
    mine = _pipeline(
        _holder(GROUP_BY_KEY, 'Count/Group', 'A'),
        _holder(GROUP_BY_KEY, 'Window/Group', 'C'),
        labels=['Count'],
    )
    assert (
        "stateful DoFn 'Dedup' holds state in the checkpoint and is not "
        'in this pipeline' in _refusal(mine)
    )
    update = check(OLD, mine, {'Dedup': ''}, '/ck')
    assert "stateful DoFn 'Dedup': its state is dropped" in update.changes[0]
    assert "'Window/Group' is new: it starts with no state" in update.changes


def test_every_problem_is_named():
    mine = _pipeline(
        _holder(GROUP_BY_KEY, 'Count/Group', 'A', key='bytes'),
        _holder(STATEFUL, 'Dedup', 'B', key='varint'),
        roots=['Create'],
        labels=['Count', 'Create'],
    )
    message = _refusal(mine, {'Reed': 'Read', 'Count': 'Nope'})
    assert "maps 'Reed', which is not a transform of the pipeline" in message
    assert "maps 'Count' to 'Nope', which is not a transform of this pipeline" in message
    assert "GroupByKey 'Count/Group' is mapped to 'Nope/Group'" in message
    assert "stateful DoFn 'Dedup': state seen value was removed" in message
    assert "'Create' is new and reads the pipeline's impulse" in message


def test_a_changed_coder_and_a_stage_split_are_refused():
    mine = _pipeline(
        _holder(GROUP_BY_KEY, 'Count/Group', 'A', key='bytes'),
        _holder(STATEFUL, 'Dedup', 'B', key='varint', **{'state seen value': 'bytes'}),
        labels=['Count'],
    )
    assert "GroupByKey 'Count/Group': key coder changed: varint -> bytes" in _refusal(mine)
    old = _pipeline(
        _holder(GROUP_BY_KEY, 'G', 'A'), _holder(SIDE_INPUTS, 'S', 'A', **{'side input 0': 'x'})
    )
    old['holders'][1]['feeds'] = [['S']]
    mine = _pipeline(
        _holder(GROUP_BY_KEY, 'G', 'A1'), _holder(SIDE_INPUTS, 'S', 'A2', **{'side input 0': 'x'})
    )
    mine['holders'][1]['feeds'] = [['T', 'S']]
    with pytest.raises(IncompatibleUpdateError) as refused:
        check(old, mine, {}, '/ck')
    assert "the state of stage 'A' would be split between stages 'A1' and 'A2'" in str(
        refused.value
    )
    assert "side-input holder 'S': the main-input elements it holds were fed to" in str(
        refused.value
    )


def test_the_mapping_option():
    assert parse_mapping(None, '') == {}
    assert parse_mapping({'a': 'b'}, '{"c": "d", "a": "e"}') == {'a': 'e', 'c': 'd'}
    with pytest.raises(ValueError, match='not JSON'):
        parse_mapping('{a: b}')
    with pytest.raises(ValueError, match='old label -> new label'):
        parse_mapping('["a"]')
