"""Splittable DoFn residuals: self-checkpoints and runner-initiated splits.

*Self-checkpoints* (``defer_remainder``): a bundle returns residual applications
(an encoded element-and-restriction for the transform's main input). As Beam's
FnApiRunner does, they are re-run as a new bundle in the same task, after the
resume delay the DoFn asked for, until none remains; staying in the task keeps
them in one Spark task attempt, so a retry re-runs them all.

*Runner-initiated splits*: a bundle whose current element has been running for
``split_after`` seconds is split with the SDK's ``try_split``: the primary keeps a sliver and
finishes
here; the rest becomes ``ways`` equal residuals that leave (with any input
elements the split cut off) as ``RESIDUAL_TAG`` rows, and the executor runs them
as the stage's next round, spread over all partitions.

*Streaming*: self-checkpoint residuals leave the task as ``SCHEDULED_TAG`` rows
(``scheduled``) for the driver's schedule (``execution.streaming.residuals``):
they re-enter the same stage in the micro-batch where their delay has passed,
and their watermark estimator's state holds the stage's output watermark
until then.
"""

from __future__ import annotations

import pickle
import threading
import time
from typing import Iterator
from typing import Optional

from apache_beam.portability.api import beam_fn_api_pb2

from beam_spark_inproc.planning.ports import input_transform

# Fraction of its remainder a split restriction keeps running in its task.
PRIMARY_KEEPS = 0.02
# Longest single wait honoured for a requested resume delay.
MAX_RESUME_DELAY_SECONDS = 60.0


def wait_for(residuals: list) -> None:
    """Sleeps for the shortest resume delay the residuals requested."""
    delays = [
        r.requested_time_delay.ToTimedelta().total_seconds()
        for r in residuals
        if r.HasField('requested_time_delay')
    ]
    if delays:
        time.sleep(min(max(min(delays), 0.0), MAX_RESUME_DELAY_SECONDS))


def scheduled(entry, residual) -> bytes:
    """A self-checkpoint residual for the streaming loop's schedule:
    (input transform id, element, resume delay in seconds, the watermark its
    estimator reported in micros or None), pickled."""
    app = residual.application
    descriptor = entry.processor.process_bundle_descriptor
    delay = (
        residual.requested_time_delay.ToTimedelta().total_seconds()
        if residual.HasField('requested_time_delay')
        else 0.0
    )
    marks = [w.seconds * 1_000_000 + w.nanos // 1000 for w in app.output_watermarks.values()]
    return pickle.dumps(
        (
            input_transform(descriptor, app.transform_id, app.input_id),
            app.element,
            max(delay, 0.0),
            min(marks) if marks else None,
        )
    )


def residual_inputs(entry, residuals: list) -> Iterator:
    descriptor = entry.processor.process_bundle_descriptor
    for residual in residuals:
        app = residual.application
        yield beam_fn_api_pb2.Elements.Data(
            transform_id=input_transform(descriptor, app.transform_id, app.input_id),
            data=app.element,
        )


class RunnerSplitter:
    """Splits the running bundle's current restriction after a time budget."""

    def __init__(self, processor, input_id: str, split_after: float, ways: int):
        self._processor = processor
        self._input_id = input_id
        self._split_after = split_after
        self._ways = max(ways, 2)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.residual_roots: list = []
        self.first_cut: Optional[int] = None  # first input element not processed
        self._element_start: Optional[float] = None

    def start(self, instruction_id: str) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(instruction_id,), daemon=True, name='beam-sdf-splitter'
        )
        self._thread.start()

    def element_started(self) -> None:
        """Called as each input element is handed to the bundle."""
        self._element_start = time.monotonic()

    def _run(self, instruction_id: str) -> None:
        # Wait until one element (restriction) has been running for the budget:
        # a straggler, not merely a long bundle of short elements.
        while True:
            if self._stop.wait(0.05):
                return
            started = self._element_start
            if started is not None and (time.monotonic() - started >= self._split_after):
                break
        # Split k times so that the primary keeps only a sliver of its
        # remainder and k equal residuals go to the next round, one per core
        # (a round waits for the previous one, so the primary must not keep a
        # share). Split i keeps (R_i - r) / R_i of the remainder R_i = 1 - i*r.
        share = (1 - PRIMARY_KEEPS) / self._ways
        for i in range(self._ways):
            remaining = 1 - i * share
            request = beam_fn_api_pb2.ProcessBundleSplitRequest(
                instruction_id=instruction_id,
                desired_splits={
                    self._input_id: beam_fn_api_pb2.ProcessBundleSplitRequest.DesiredSplit(
                        fraction_of_remainder=((remaining - share) / remaining),
                        estimated_input_elements=0,
                    )
                },
            )
            response = self._processor.try_split(request)
            self.residual_roots.extend(response.residual_roots)
            for channel in response.channel_splits:
                if channel.transform_id == self._input_id:
                    self.first_cut = channel.first_residual_element

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def residual_rows(self, fed: list[bytes]) -> Iterator[tuple[bytes, bytes]]:
        """(DATA_INPUT id, element) for everything this bundle left undone."""
        descriptor = self._processor.process_bundle_descriptor
        for root in self.residual_roots:
            app = root.application
            yield (
                input_transform(descriptor, app.transform_id, app.input_id).encode(),
                app.element,
            )
        if self.first_cut is not None:
            for data in fed[self.first_cut :]:
                yield self._input_id.encode(), data
