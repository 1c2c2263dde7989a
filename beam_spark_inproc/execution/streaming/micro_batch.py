"""One micro-batch's bookkeeping: what the loop built, ran and took in it.

A micro-batch builds each stage's result as lazy engine data (``produced``),
runs it in as few jobs as the watermarks allow (``StreamingExecutor``), and
takes the control rows that reach the driver. The rules kept here:

* **Control rows go on once.** A result's control rows (bundles' reports:
  metrics, warnings) travel with its first reader only (``carry``, the batch
  executor's ``CarryOnce``), never with a second one (they would count twice); a keyed stage's
  result holds
  state reports and summaries besides, which the driver takes when it runs
  (``harvested``), so its readers carry nothing.
* **Control rows taken** (``take``) are bundles' reports (to the run's
  metrics, and committed with the micro-batch) or keyed stages' state
  reports (to the bucket table, ``buckets``).
* What is cached for the micro-batch (``cached``) is uncached at its end.

Nothing here outlives the micro-batch: the loop makes a new one each time.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from beam_spark_inproc.execution.executor import CarryOnce
from beam_spark_inproc.protocol import report
from beam_spark_inproc.protocol.state import STATE_REPORT


@dataclasses.dataclass
class MicroBatch:
    """The scratch of one micro-batch."""

    now: float  # processing time (``StreamingExecutor.now``)
    started: float = dataclasses.field(
        default_factory=time.perf_counter
    )  # for its duration (``progress``)
    produced: dict[int, Any] = dataclasses.field(default_factory=dict)  # stage -> its data (lazy)
    pending: list[int] = dataclasses.field(default_factory=list)  # keyed stages built, not run yet
    carried: CarryOnce = dataclasses.field(
        default_factory=CarryOnce
    )  # results whose control rows have a reader
    harvested: set[int] = dataclasses.field(
        default_factory=set
    )  # results whose control rows were taken
    cached: list = dataclasses.field(default_factory=list)
    reports: list[dict] = dataclasses.field(default_factory=list)
    state_reports: list[dict] = dataclasses.field(default_factory=list)

    def carry(self, writer: int, keyed: bool) -> bool:
        """Whether a reader of ``writer`` carries its control rows on: the
        first reader of a result whose control rows nobody took (``keyed``:
        the writer is a keyed stage, whose are always taken)."""
        first = self.carried.first(writer)
        return first and writer not in self.harvested and not keyed

    def take(self, control: list) -> None:
        """Control rows that reached the driver: bundles' reports and keyed
        stages' state reports."""
        for payload in control:
            if payload:
                decoded = report.decode(payload)
                if STATE_REPORT in decoded:
                    self.state_reports.append(decoded)
                else:
                    self.reports.append(decoded)

    def take_state_reports(self) -> list[dict]:
        """The state reports taken since the last call."""
        reports, self.state_reports = self.state_reports, []
        return reports
