"""The state-bucket table: what the driver knows of each keyed stage's state.

A keyed stage (reading a GroupByKey, or running a stateful DoFn) keeps its
state between micro-batches in buckets (``crc32(key) % buckets``,
``worker.streaming``), each a Parquet file under the checkpoint location
written by the stage's tasks (``worker.streaming.state_io``). The driver never
reads the state itself; per stage and bucket it holds:

* the bucket's current **version**: the file a task reads it from;
* its **summary** (``Summary``): how many keys it holds, the earliest
  watermark hold of its buffered panes and pending timers, its earliest
  event-time and processing-time timers.

From these it decides what is **due**: a bucket whose earliest event-time
timer is at or behind the stage's new input watermark, or whose earliest
processing-time timer is at or behind the processing time, gets a marker row
so that the stage runs for it even without new input (``marker_rows``); and
what **holds** the stage's output watermark: its buckets' earliest hold.

After a micro-batch the stage's tasks report the buckets they rewrote (a new
summary and file, or none for a bucket left empty) as control rows
(``apply``); once every task's report is in, a stage holding more than
``KEYS_PER_BUCKET`` keys a bucket has its bucket count doubled (``split``).
The table is part of the commit record (``restart``).
"""

from __future__ import annotations

from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.protocol.buckets import STATE_BUCKETS
from beam_spark_inproc.protocol.buckets import bucket_count
from beam_spark_inproc.protocol.state import StateFiles
from beam_spark_inproc.protocol.state import Summary
from beam_spark_inproc.protocol.state import decode_report


class BucketTable:
    """Per stage: its state buckets' summaries and current versions (files),
    and its bucket count. ``names``: the plan's stage names, in order (the
    tasks' state reports name their stage)."""

    def __init__(self, names: list[str]):
        self._index_of = {name: i for i, name in enumerate(names)}
        n = len(names)
        self.summaries: list[dict[int, Summary]] = [{} for _ in range(n)]
        self.versions: list[dict[int, str]] = [{} for _ in range(n)]
        # Each keyed stage's state bucket count (``worker.streaming``).
        self.counts: list[int] = [STATE_BUCKETS] * n
        # Per stage: [(old, new)] transform ids its state may still name
        # (a stateful DoFn renamed by an update, ``update``).
        self.aliases: list[list] = [[] for _ in range(n)]

    def restore(
        self,
        index: int,
        count: int | None,
        summaries: dict[int, Summary],
        versions: dict[int, str],
        aliases=(),
    ) -> None:
        """A stage's buckets as a commit record holds them (``count`` None:
        the default count)."""
        self.summaries[index] = summaries
        self.versions[index] = versions
        self.aliases[index] = [tuple(a) for a in aliases]
        if count is not None:
            self.counts[index] = count

    def due(self, index: int, input_wm: Timestamp, now: float) -> set[int]:
        """The buckets with a timer due at input watermark ``input_wm`` and
        processing time ``now``."""
        return {
            b
            for b, s in self.summaries[index].items()
            if s.event_timer <= input_wm or s.processing_timer <= now
        }

    def hold(self, index: int) -> Timestamp:
        """The earliest watermark hold of a stage's buckets."""
        return min((s.hold for s in self.summaries[index].values()), default=MAX_TIMESTAMP)

    def next_processing_timer(self, default: float) -> float:
        """The earliest processing-time timer of any bucket (``default``
        when no bucket is held)."""
        return min(
            (s.processing_timer for summaries in self.summaries for s in summaries.values()),
            default=default,
        )

    def files(self, index: int, stage: str, folder: str) -> StateFiles:
        """What a stage's tasks read and write this micro-batch: its
        buckets' current versions, new ones into ``folder``."""
        return StateFiles(
            stage=stage,
            current=tuple(sorted(self.versions[index].items())),
            folder=folder,
            buckets=self.counts[index],
            aliases=tuple(self.aliases[index]),
        )

    def apply(self, reports: list[dict]) -> None:
        """The state reports of a job's tasks (decoded control rows): the
        buckets they rewrote replace the old ones; then the stages they came
        from split their buckets if they must."""
        updated = set()
        for decoded in reports:
            index = self._index_of[decoded['stage']]
            updated.add(index)
            self._update(index, decode_report(decoded))
        for index in updated:  # once every task's report is in
            self.split(index)

    def _update(self, index: int, buckets: dict) -> None:
        summaries, versions = self.summaries[index], self.versions[index]
        for bucket, (summary, path) in buckets.items():
            if summary is None:
                summaries.pop(bucket, None)
                versions.pop(bucket, None)
            else:
                summaries[bucket] = summary
                versions[bucket] = path

    def split(self, index: int) -> None:
        """Doubles a stage's state buckets while it holds more keys per bucket
        than ``KEYS_PER_BUCKET``: bucket b of n becomes b, b + n, ... of the
        new count, each still read from b's file (whose rows carry their
        key's hash, so a reader takes its own half) until a micro-batch
        rewrites it; each half starts with b's summary (its hold and timers
        hold or run both halves; its keys are shared out)."""
        old = self.counts[index]
        summaries = self.summaries[index]
        new = bucket_count(sum(s.keys for s in summaries.values()), old)
        if new == old:
            return
        versions, parts = self.versions[index], new // old
        self.summaries[index] = {
            b + i * old: Summary(-(-s.keys // parts), s.hold, s.event_timer, s.processing_timer)
            for b, s in summaries.items()
            for i in range(parts)
        }
        self.versions[index] = {
            b + i * old: path for b, path in versions.items() for i in range(parts)
        }
        self.counts[index] = new
