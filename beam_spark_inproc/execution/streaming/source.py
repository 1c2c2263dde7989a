"""What the micro-batch loop asks of a source: ``StreamSource``.

A source is a plan stage the loop does not run on the engine: the driver steps
it once per micro-batch and it returns that micro-batch's new rows (``(tag,
key, value)``, tag = the stage's output port) and says how far each of its
outputs' watermarks has come. Everything downstream (stages, GroupByKeys,
state, timers) is ordinary engine work fed from those rows.

Today's source is a TestStream (``teststream_source.TestStreamSource``): its events
replayed in order, its processing-time events moving a virtual clock. A
splittable DoFn is not a source in this sense: it is a stage the loop runs
on the engine, whose self-checkpointed residuals wait in the driver's
schedule (``residuals``) and re-enter it. A reader of Spark's own streams is
one too (``beam_spark_inproc.transforms.spark_stream``, given to the loop by
the runner as ``native_source``): a streaming DataFrame's staged batches per
micro-batch, the next Spark batch id as the position, a watermark from an
event-time column. Its rows never reach the driver: ``step_micro_batch``
returns none and ``take_made`` the engine data, made in Spark tasks.

**Replay.** The commit record after each micro-batch holds each source's
``checkpoint()``; a restarted stream ``restore``\\ s it, and from there
``step_micro_batch`` yields what it yielded after that checkpoint. A source
that cannot replay (a queue that forgets what it delivered) would lose or
repeat the events of the micro-batch running when the driver died.

**Clock.** ``clock`` is the source's processing time in seconds: the loop's
processing time is the latest of its sources' clocks (TestStream's virtual
clock), or the wall clock when there is no source. The loop moves it forward
itself when nothing but a splittable DoFn's resume delay is left to wait for.

**Prefetch.** While a micro-batch's last job runs, the loop lets each source
make the next micro-batch's rows ahead, in a thread of its own (``prefetch``);
the next ``step_micro_batch`` returns them and ``take_made`` the engine data
made from them, if ``make`` was given. A source with nothing to make ahead
does nothing in ``prefetch`` and returns None from ``take_made``.
"""

from __future__ import annotations

from typing import Any
from typing import Callable
from typing import Protocol
from typing import runtime_checkable

from apache_beam.utils.timestamp import Timestamp


@runtime_checkable
class StreamSource(Protocol):
    """A source of the micro-batch loop: one step per micro-batch."""

    clock: float  # processing time, seconds (the loop may move it forward)

    @property
    def exhausted(self) -> bool:
        """Whether every event was stepped (its watermarks are final)."""

    def watermark(self, port: int) -> Timestamp:
        """The watermark of output ``port`` after the last step."""

    def step_micro_batch(self, coalesce_elements: bool = False) -> list:
        """The next micro-batch's rows ``(tag, key, value)``; moves the
        watermarks and clock as its events say. ``coalesce_elements``: events
        whose boundaries no transform can see may share a micro-batch
        (``teststream_source.bundles_invisible``)."""

    def take_made(self) -> Any:
        """The engine data of the rows the last ``step_micro_batch``
        returned if ``prefetch`` made it, else None (the loop makes it)."""

    def prefetch(
        self, coalesce_elements: bool = False, make: Callable[[list], Any] | None = None
    ) -> None:
        """Starts making the next micro-batch's rows (and, with ``make``, its
        engine data) while the current micro-batch's last job runs."""

    def close(self) -> None:
        """Stops any prefetch; the loop calls it once, at its end."""

    def drain(self) -> None:
        """Stops reading at the current position: the next step ends the
        source (``exhausted``, its watermarks +inf), and so does a restore
        of a checkpoint taken from then on (``drain``)."""

    def checkpoint(self) -> dict:
        """Where the source stands after the last step (JSON-able)."""

    def restore(self, record: dict) -> None:
        """Back to a ``checkpoint()``: the next ``step_micro_batch`` yields
        what the step after that checkpoint yielded."""

    def describe_position(self) -> str:
        """Where it stands, in a few words for a person (a restart's line:
        ``event 12 of 40``, ``next Spark batch 7``)."""
