"""Beam's ``WatchFilePattern`` (``apache_beam.ml.inference.utils``) with the
start time it compares files against fixed when the pipeline runs.

``WatchFilePattern`` passes on a matched file only if it changed after "the
time the pipeline began running": its ``_GetLatestFileByTimeStamp`` keeps
the newest modification time per path in a combining state whose default is
``_START_TIME_STAMP``, the time its module was imported. On Beam's
one-process runners that is the driver's import, before the pipeline runs.
Spark's Python workers import the module when a stage first unpickles the
DoFn, and Spark starts workers while a stream runs (a second one where a task
chains two stages, a new one after an idle one timed out): a worker started
after a model file landed took the file's time as older than its start and
ignored the new model for good.

``start_pinned`` gives each such DoFn, for the run, ``LatestFileSince`` with
the driver's ``_START_TIME_STAMP``: Beam's own ``process``, reading its state
as at least that time, and writing it as Beam's does.

The runner imports this module only when Beam's is loaded (a pipeline with
``WatchFilePattern`` has imported it): importing Beam's ML utilities costs
~40 ms and logs a warning where Google Cloud's libraries are missing.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Iterator

import apache_beam as beam
from apache_beam.ml.inference import utils
from apache_beam.pipeline import PipelineVisitor
from apache_beam.transforms.userstate import CombiningValueStateSpec


class _AtLeast:
    """A combining state whose read is at least ``floor``."""

    def __init__(self, state, floor):
        self._state = state
        self._floor = floor

    def read(self):
        value = self._state.read()
        return self._floor if value is None or value < self._floor else value

    def add(self, value) -> None:
        self._state.add(value)

    def clear(self) -> None:
        self._state.clear()


class LatestFileSince(utils._GetLatestFileByTimeStamp):
    """``_GetLatestFileByTimeStamp`` against ``start`` (the driver's
    ``_START_TIME_STAMP``) rather than the worker's import time."""

    # Beam's name and kind, without a default of the worker's own.
    TIME_STATE = CombiningValueStateSpec('max', combine_fn=partial(max, default=None))

    def __init__(self, start):
        super().__init__()
        self._start = start

    def process(self, element, time_state=beam.DoFn.StateParam(TIME_STATE)):
        return super().process(element, _AtLeast(time_state, self._start))


@contextlib.contextmanager
def start_pinned(pipeline) -> Iterator[int]:
    """While in the block, each ``_GetLatestFileByTimeStamp`` ParDo of the
    pipeline runs ``LatestFileSince`` (module doc); yields how many."""
    originals = []

    class _Visitor(PipelineVisitor):
        def visit_transform(self, node):
            transform = node.transform
            if (
                isinstance(transform, beam.ParDo)
                and type(transform.fn) is utils._GetLatestFileByTimeStamp
            ):
                originals.append((transform, transform.fn))
                transform.fn = transform.dofn = LatestFileSince(utils._START_TIME_STAMP)

    pipeline.visit(_Visitor())
    try:
        yield len(originals)
    finally:
        for transform, fn in originals:
            transform.fn = transform.dofn = fn
