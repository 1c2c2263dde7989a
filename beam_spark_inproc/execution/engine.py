"""The engine contract: the few primitives a backend supplies to the executor.

dask's ``get_async(submit, ...)`` / ``get_sync`` pattern: one core walks the plan
(``executor``), thin backends move rows. Data is whatever the engine likes (a
Spark DataFrame, a list of partitions of Arrow batches) holding rows of
``protocol.rows.SCHEMA``; rows tagged ``CONTROL_TAG`` are reports and every
primitive passes them through (``select`` only when asked, see ``control``).

Primitives:

* ``impulse()``: one partition holding Beam's encoded impulse element (tag 0);
* ``rows(rows, parts=1)``: driver rows ``(tag, key, data)`` as data (a
  stream's source events, markers): one partition, or up to ``parts``
  partitions of consecutive rows, in order (no shuffle; Spark gives at most
  one per core);
* ``union(datas)``: all rows of each (``union([])`` is empty);
* ``map_stage(data, task)``: ``task(batches) -> batches`` per partition;
* ``select(data, tag, new_tag, control)``: rows of one tag, retagged, plus the
  control rows if ``control``;
* ``shuffle(data, how)``: repartition by ``GROUP`` (hash of the key, sorted
  by tag then key within partitions: a GroupByKey's input), ``KEY_SORTED`` (hash of
  the key, sorted by key then tag: a stateful stage's input) or ``SPREAD``
  (round-robin, unsorted: a Reshuffle, or SDF restrictions) or ``BUCKETED``
  (the key's shard, ``protocol.buckets.bucket_of`` with the default
  ``STATE_BUCKETS``: shard b in partition b % parallelism; sorted by shard,
  key, tag, then the row's input partition and position in it; rows without a
  key first: a streaming keyed stage's input, each shard, so each of its
  state buckets, wholly in one partition, and a key's rows in their input
  order, whichever executor they come from);
* ``cache(data)``: computed once however often it is read; ``uncache(data)``
  frees it (a stream caches per micro-batch);
* ``collect(data, elements, started)``: (element data, control data) on the
  driver; with ``elements=False`` only the control rows travel (the leaves'
  job); ``started`` (if given) is called once, just before the action runs;
* ``side_input(entries, folder=None)``: what a task carries for a side input's
  state entries (the entries, or a file they were shipped as; with ``folder``,
  a stream's folder the workers read, a large side input is written there as a
  file its owner removes, instead of being added to the session);
* ``spread_restrictions(data, stage, ways)``: a splittable stage's input the
  driver holds, its restrictions cut into ``ways`` parts of equal size, one
  partition each (``execution.initial_split``): (data, balanced); None for rows
  the driver does not hold (a Spark DataFrame) or nothing to cut;
* ``job(tag, description)``: a context naming the jobs started inside;
* ``release()``: frees what the run cached or shipped.

Spark interop (runner-native stages, ``beam_spark_inproc.transforms.runtime``):

* ``spark_session()``: the SparkSession that does Spark's part (the debug engine
  makes or finds a local one when first asked; raises if it cannot);
* ``arrow_source(dataframe)``: a DataFrame's own Arrow batches (its columns, not
  rows of the row format) as data ``map_stage`` can run a task over;
* ``to_dataframe(data, fn, arrow_schema)``: a DataFrame of ``fn(batches)`` per
  partition of ``data``, batches of ``arrow_schema`` (what Spark writes or queries).

``tests/integration/test_engine_contract.py`` holds every engine to these.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from typing import Callable
from typing import ContextManager
from typing import Protocol

GROUP = 'group'
KEY_SORTED = 'key_sorted'
SPREAD = 'spread'
BUCKETED = 'bucketed'
SHUFFLES = (GROUP, KEY_SORTED, SPREAD, BUCKETED)


@dataclasses.dataclass(frozen=True)
class ArrowOutput:
    """What a runner-native read or query with an ``ARROW_LAYOUT`` output
    returns: its source as engine data of Arrow batches (``Engine.arrow_source``),
    the converter its ``ARROW`` reader's task makes rows with
    (``StageTask.arrow_input``) and the control rows of the native stage's own
    inputs (a query's upstream bundles' reports) for the reader to pass on."""

    data: Any
    rows: Any
    control: Any = None


class Engine(Protocol):
    def impulse(self) -> Any: ...
    def rows(self, rows: list, parts: int = 1) -> Any: ...
    def union(self, datas: list) -> Any: ...
    def map_stage(self, data: Any, task: Any) -> Any: ...
    def select(self, data: Any, tag: int, new_tag: int, control: bool) -> Any: ...
    def shuffle(self, data: Any, how: str) -> Any: ...
    def cache(self, data: Any) -> Any: ...
    def uncache(self, data: Any) -> None: ...
    def collect(
        self, data: Any, elements: bool = True, started: Callable[[], None] | None = None
    ) -> tuple[list[bytes], list[bytes]]: ...
    def side_input(self, entries: tuple, folder: str | None = None) -> Any: ...
    def spread_restrictions(self, data: Any, stage: Any, ways: int) -> tuple[Any, bool] | None: ...
    def job(self, tag: str, description: str) -> ContextManager: ...
    def release(self) -> None: ...
    def spark_session(self) -> Any: ...
    def arrow_source(self, dataframe: Any) -> Any: ...
    def to_dataframe(self, data: Any, fn: Any, arrow_schema: Any) -> Any: ...


def unknown_shuffle(how: str) -> ValueError:
    return ValueError(f'Unknown shuffle {how!r}: expected one of {SHUFFLES}.')
