"""``worker.profiling.Profile``: the rows of code objects that share a label
add up (``pstats`` alone keeps the last one's)."""

from __future__ import annotations

import cProfile
import pstats

import cloudpickle

from beam_spark_inproc.worker.profiling import Profile


def _double(x):
    return 2 * x


def _calls(profiler, name: str) -> tuple:
    """(calls, callers' calls) of the row named ``name``."""
    (row,) = [
        row for (_, _, function), row in pstats.Stats(profiler).stats.items() if function == name
    ]
    return row[1], sum(c[0] for c in row[4].values())


def _run(profiler) -> None:
    # Two unpickled copies of one function: two code objects, one label, as
    # the copies of a DoFn's function in two stages of a worker.
    first, second = (cloudpickle.loads(cloudpickle.dumps(lambda x: _double(x))) for _ in range(2))
    assert first.__code__ is not second.__code__
    profiler.enable()
    for i in range(1000):
        first(i)
    second(0)
    profiler.disable()


def test_code_objects_of_one_label_add_up():
    profiler = Profile()
    _run(profiler)
    assert _calls(profiler, '<lambda>')[0] == 1001
    # Called 1001 times, by the one row of both copies.
    assert _calls(profiler, '_double') == (1001, 1001)


def test_cprofile_alone_keeps_one_copy():
    """What ``Profile`` is for: cProfile's own stats keep one copy's row
    (which one depends on the order of its entries)."""
    profiler = cProfile.Profile()
    _run(profiler)
    assert _calls(profiler, '<lambda>')[0] in (1, 1000)
