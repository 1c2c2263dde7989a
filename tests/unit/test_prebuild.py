"""``execution.streaming.prebuild``: the last micro-batch's steps from a
source's data replayed on the next one's, taken by the loop's same calls."""

from beam_spark_inproc.execution.streaming.prebuild import Prebuilder


class _Engine:
    """Steps as nested tuples (a pure function of their arguments, as
    DataFrame steps are), each call counted."""

    def __init__(self):
        self.calls = []

    def select(self, data, tag, new_tag, control):
        self.calls.append('select')
        return ('select', data, tag, new_tag, control)

    def map_stage(self, data, task):
        self.calls.append(f'map_stage {task}')
        return ('map', data, task)

    def shuffle(self, data, how):
        self.calls.append('shuffle')
        return ('shuffle', data, how)

    def union(self, datas):
        return ('union', *datas)


def _micro_batch(engine, data, stateless, keyed_task, marker=None):
    """A loop's building: select, stateless stage, select, (union,) shuffle,
    keyed stage."""
    selected = engine.select(
        engine.map_stage(engine.select(data, 0, 0, True), stateless), 1, 0, False
    )
    if marker is not None:
        selected = engine.union([selected, marker])
    return engine.map_stage(engine.shuffle(selected, 'bucketed'), keyed_task)


def test_the_next_micro_batch_takes_its_stateless_steps_built_ahead():
    engine = _Engine()
    stateless = 'stateless'
    prebuilder = Prebuilder(engine, lambda task: task == stateless)
    first = ['rows', 0]
    prebuilder.source(0, first)
    assert _micro_batch(prebuilder, first, stateless, 'keyed 0') == _micro_batch(
        _Engine(), first, stateless, 'keyed 0'
    )
    prebuilder.finish(0)
    assert (prebuilder.hits, prebuilder.misses) == (0, 4)
    # the prefetch thread: the four steps, not the keyed stage's new task
    second = ['rows', 1]
    engine.calls.clear()
    assert prebuilder.prebuild(0, second, 1) is second
    assert engine.calls == ['select', 'map_stage stateless', 'select', 'shuffle']
    engine.calls.clear()
    prebuilder.source(0, second)
    result = _micro_batch(prebuilder, second, stateless, 'keyed 1')
    assert result == _micro_batch(_Engine(), second, stateless, 'keyed 1')
    assert engine.calls == ['map_stage keyed 1']  # the rest was built
    assert prebuilder.hits == 4


def test_steps_after_a_union_are_built_by_the_loop_and_leftovers_dropped():
    engine = _Engine()
    prebuilder = Prebuilder(engine, lambda task: task == 'stateless')
    first, second = ['rows', 0], ['rows', 1]
    prebuilder.source(0, first)
    _micro_batch(prebuilder, first, 'stateless', 'keyed 0')
    prebuilder.finish(0)
    prebuilder.prebuild(0, second, 1)
    engine.calls.clear()
    prebuilder.source(0, second)
    # due timers' markers joined: the shuffle's input is new, built here
    result = _micro_batch(prebuilder, second, 'stateless', 'keyed 1', marker=('markers',))
    assert result == _micro_batch(_Engine(), second, 'stateless', 'keyed 1', marker=('markers',))
    assert engine.calls == ['shuffle', 'map_stage keyed 1']
    prebuilder.finish(1)
    assert not prebuilder._built  # the shuffle built ahead, not taken
