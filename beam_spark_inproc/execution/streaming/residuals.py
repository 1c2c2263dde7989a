"""Splittable DoFns in a stream: self-checkpoint residuals wait in the driver.

A splittable stage's task in a micro-batch runs its bundle once; the residuals
of ``defer_remainder(delay)`` (an unbounded restriction, PeriodicImpulse's
``ImpulseSeqGenDoFn``, a poll that found nothing new) leave the task as
``SCHEDULED_TAG`` rows (``worker.sdf.scheduled``): the restriction's input
transform, its encoded element-and-restriction, the resume delay and the
watermark its estimator reported. ``ResidualSchedule`` keeps them per stage:

* a residual is **due** once the processing time (the wall clock, or
  TestStream's clock) reached the time it was scheduled plus its delay; due
  residuals re-enter the **same stage** in the next micro-batch as
  ``RESIDUAL_TAG`` rows (key: the input transform), as Beam's "feed residuals
  back to the stage" approach;
* until then, each pending residual's watermark **holds** the stage's output
  watermark (none reported: the watermark the stage had when it was
  scheduled, so it does not advance past unfinished work);
* the stream is not done while residuals are pending; when nothing else moves
  the loop waits for the earliest due time (``next_due``).

A bounded splittable read (a file read) inside a stream simply leaves no
residual. Runner-initiated splits (``try_split``) are not used in a stream.
Pending residuals are kept in the driver and go with every commit record
(``restart``: ``checkpoint``/``restore``, due times and watermarks included).
"""

from __future__ import annotations

import dataclasses
import pickle

from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.protocol.rows import RESIDUAL_TAG


@dataclasses.dataclass
class Residual:
    due: float  # processing time, seconds
    input_transform: str
    element: bytes
    watermark: Timestamp


class ResidualSchedule:
    def __init__(self):
        self._pending: dict[int, list[Residual]] = {}

    def add(
        self, stage: int, payloads: list[bytes], now: float, current_watermark: Timestamp
    ) -> None:
        for payload in payloads:
            transform, element, delay, micros = pickle.loads(payload)
            watermark = current_watermark if micros is None else Timestamp(micros=micros)
            self._pending.setdefault(stage, []).append(
                Residual(now + delay, transform, element, watermark)
            )

    def due(self, stage: int, now: float) -> list[tuple[int, bytes, bytes]]:
        """Pops the stage's due residuals as ``RESIDUAL_TAG`` rows."""
        pending = self._pending.get(stage, [])
        ready = [r for r in pending if r.due <= now]
        if ready:
            self._pending[stage] = [r for r in pending if r.due > now]
        return [(RESIDUAL_TAG, r.input_transform.encode(), r.element) for r in ready]

    def hold(self, stage: int) -> Timestamp:
        return min((r.watermark for r in self._pending.get(stage, [])), default=MAX_TIMESTAMP)

    def expedite(self, now: float) -> None:
        """Every pending residual is due at ``now`` (a drain truncates them:
        ``drain``)."""
        for residuals in self._pending.values():
            for r in residuals:
                r.due = min(r.due, now)

    @property
    def pending(self) -> bool:
        return any(self._pending.values())

    def next_due(self) -> float:
        return min((r.due for rs in self._pending.values() for r in rs), default=float('inf'))

    def next_due_of(self, stage: int) -> float:
        """When the stage's earliest pending residual is due (inf: none)."""
        return min((r.due for r in self._pending.get(stage, [])), default=float('inf'))

    def waiting(self, stage: int, now: float) -> tuple[int, int]:
        """(pending, of which due at ``now``) residuals of a stage."""
        pending = self._pending.get(stage, [])
        return len(pending), sum(1 for r in pending if r.due <= now)

    def checkpoint(self, stage: int) -> list:
        return [
            (r.due, r.input_transform, r.element, r.watermark.micros)
            for r in self._pending.get(stage, [])
        ]

    def restore(self, stage: int, saved: list) -> None:
        self._pending[stage] = [
            Residual(due, transform, element, Timestamp(micros=micros))
            for due, transform, element, micros in saved
        ]

    def rename(self, inputs: dict[int, str]) -> None:
        """Pending residuals re-enter their stage at ``inputs[stage]`` (its
        splittable DoFn's data input, named anew by an updated plan)."""
        for stage, pending in self._pending.items():
            for r in pending:
                r.input_transform = inputs.get(stage, r.input_transform)

    def counts(self) -> dict[str, int]:
        """For the commit record: pending residuals per stage."""
        return {str(stage): len(rs) for stage, rs in sorted(self._pending.items()) if rs}
