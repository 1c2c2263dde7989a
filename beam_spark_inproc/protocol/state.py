"""What a streaming micro-batch tells a stage's tasks, and what they report back.

The driver's loop (``execution.streaming``) gives each task of a streaming
stage a ``StreamingStep`` (its watermarks and clock) and, for a keyed stage,
``StateFiles`` (the bucket count, each bucket's current state file from the
commit record, the folder for this micro-batch's new files). The task answers
with a ``Summary`` per state bucket (its keys' earliest hold and timers): in a
``SUMMARY_TAG`` row while the state travels as rows, or, where the task
reads and writes its state files itself (``worker.streaming.state_io``), in one
control row per task: ``{STATE_REPORT: {bucket: (summary, file)}}``, a
``part-<uuid>.parquet`` file in the micro-batch's folder, which the driver reads
with ``decode_report`` and records as the bucket's next version.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Optional

from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.protocol.buckets import STATE_BUCKETS

# The key of the control row's dict that tells a state report from a bundle's.
STATE_REPORT = 'state_buckets'


@dataclasses.dataclass(frozen=True)
class StreamingStep:
    """What one micro-batch tells a streaming stage's tasks."""

    input_watermark: Timestamp  # before this micro-batch
    next_input_watermark: Timestamp  # after it: timers fire up to here
    output_watermark: Timestamp  # before this micro-batch
    processing_time: float  # seconds: the wall clock or TestStream's clock


@dataclasses.dataclass(frozen=True)
class StateFiles:
    """Where a streaming keyed stage's task reads and writes its state."""

    stage: str
    current: tuple = ()  # (bucket, Parquet file of its current version) pairs
    folder: str = ''  # where this micro-batch's new versions go
    buckets: int = STATE_BUCKETS  # the stage's state buckets (a power of two)
    # (old, new) transform ids a stateful stage's state rows may name: its
    # stateful DoFn was renamed by an update (``execution.streaming.update``)
    aliases: tuple = ()


@dataclasses.dataclass
class Summary:
    """A state bucket's keys, from one task: their earliest watermark hold,
    event-time timer and processing-time timer (seconds)."""

    keys: int = 0
    hold: Timestamp = MAX_TIMESTAMP
    event_timer: Timestamp = MAX_TIMESTAMP
    processing_timer: float = float('inf')

    def add(self, other: 'Summary') -> None:
        self.keys += other.keys
        self.hold = min(self.hold, other.hold)
        self.event_timer = min(self.event_timer, other.event_timer)
        self.processing_timer = min(self.processing_timer, other.processing_timer)

    def encode(self) -> bytes:
        return pickle.dumps(
            (self.keys, self.hold.micros, self.event_timer.micros, self.processing_timer)
        )

    @classmethod
    def decode(cls, data: bytes) -> 'Summary':
        keys, hold, event_timer, processing_timer = pickle.loads(data)
        return cls(keys, Timestamp(micros=hold), Timestamp(micros=event_timer), processing_timer)


def decode_report(report: dict) -> dict[int, tuple[Optional[Summary], str]]:
    """{bucket: (its summary and file, or (None, '') when nothing is left)}."""
    return {
        b: (Summary.decode(s) if s is not None else None, path)
        for b, (s, path) in report[STATE_REPORT].items()
    }
