"""The result of a streaming run: the loop runs in a driver thread.

``run()`` returns at once; ``wait_until_finish(duration)`` waits up to
``duration`` milliseconds (Beam's unit) and returns the state (RUNNING when the
time is up); ``cancel()`` stops the loop after the current micro-batch
(CANCELLED), interrupting its running Spark jobs; a failure ends the run
FAILED and ``wait_until_finish`` raises it.

**Ctrl-C** while ``wait_until_finish`` waits (``beam_spark_inproc.interrupts``:
the runner owns SIGINT meanwhile, PySpark's handler does not run): the first
lets the micro-batch under way finish and commit, printing
``Stream ID: stopping after micro-batch N; Ctrl-C again to cancel it``; the
second cancels that micro-batch's Spark jobs (a restart replays it whole);
once the loop has stopped, a KeyboardInterrupt (``interrupts.interrupted``,
one line when uncaught) names the last committed micro-batch and where a
rerun resumes. **SIGTERM** stops it as the first Ctrl-C does, then the process
ends with SIGTERM's own status. Either way the interpreter never finalizes
under a loop thread still inside a Py4J call, and the last commit record is
whole, so a rerun on the same checkpoint resumes after it.
``drain()`` ends it DONE once everything read so far has fired
(``execution.streaming.drain``).
Metrics are the run's ``metrics.RunMetrics``: each micro-batch's reports go to
its pusher (``after_job``), so ``metrics()`` answers while the pipeline runs and
``--metrics_sink`` gets them; the final push carries the final state.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import TYPE_CHECKING
from typing import Callable

from apache_beam.runners.runner import PipelineState

from beam_spark_inproc import interrupts
from beam_spark_inproc.protocol import report
from beam_spark_inproc.result import STOP_GRACE_SECONDS
from beam_spark_inproc.result import SparkPipelineResult

if TYPE_CHECKING:
    from beam_spark_inproc.execution.streaming.loop import StreamingExecutor


class StreamingPipelineResult(SparkPipelineResult):
    def __init__(self, run_metrics):
        super().__init__(PipelineState.RUNNING, live=run_metrics.live)
        self._run_metrics = run_metrics
        self.cancelled = self.cancel_requested
        # Workers' warnings, one per (category, message), re-issued when the
        # stream ends (``report.rewarn``): a stream keeps no micro-batch's
        # reports after taking them, or its driver would grow with its age.
        self._warnings: dict[tuple, tuple] = {}
        self.executor: StreamingExecutor | None = None  # the loop's (set by ``run``)
        self._sigterm: Callable | None = None  # the runner's SIGTERM handler, while set
        self._settle: Callable[..., object] | None = None  # ``start``

    def start(
        self,
        body: Callable[[], None],
        translate: Callable[[BaseException], BaseException],
        cancel: Callable[[], None] | None = None,
        settle: Callable[..., object] | None = None,
    ) -> None:
        """Runs ``body`` (the loop) in a driver thread; ``cancel`` interrupts
        the stream's running Spark jobs (by the run's tag), ``settle`` waits
        for their tasks to end."""
        self._settle = settle

        def main():
            try:
                body()
            except BaseException as e:  # reaches the caller via wait_until_finish
                if self.cancelled.is_set():  # a job cancelled by a stop
                    self.finished(PipelineState.CANCELLED)
                else:
                    self.finished(PipelineState.FAILED, translate(e))
            else:
                self.finished(
                    PipelineState.CANCELLED if self.cancelled.is_set() else PipelineState.DONE
                )
            finally:
                self._run_metrics.finish(self._state)

        thread = threading.Thread(target=main, name='beam-stream', daemon=True)
        self.running(thread, cancel)
        thread.start()
        self._stop_on_sigterm()

    def _stop_on_sigterm(self) -> None:
        """SIGTERM (a service manager's stop, ``kill``) stops the stream as
        Ctrl-C does, then ends the process with SIGTERM's own status; a second
        SIGTERM ends it at once (the checkpoint is as the last commit left
        it). Only where the stream was started from the main thread and the
        program has no SIGTERM handler of its own."""
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        ):
            return

        def on_sigterm(signum, frame):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if not self.ended:
                stream, n, running = self._where()
                interrupts.say(
                    f'Stream {stream}: SIGTERM: stopping after micro-batch {n}'
                    if running
                    else f'Stream {stream}: SIGTERM: stopping'
                )
                self.stop_on_interrupt()
            os.kill(os.getpid(), signal.SIGTERM)

        self._sigterm = on_sigterm
        signal.signal(signal.SIGTERM, on_sigterm)

    def wait_until_finish(self, duration=None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            if self.ended:
                self._release_sigterm()

    def _release_sigterm(self) -> None:
        """SIGTERM back to its default once the stream has ended (the
        handler was the runner's only while the stream ran)."""
        if (
            self._sigterm is not None
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is self._sigterm
        ):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self._sigterm = None

    # -- Ctrl-C (module doc) -----------------------------------------------
    def _where(self) -> tuple[str, int, bool]:
        """(stream id, micro-batch running or next, whether one runs)."""
        executor = self.executor
        if executor is None:
            return '?', 0, False
        return executor.stream_id, executor.micro_batch, executor.in_micro_batch

    def _on_interrupt(self) -> None:
        self.interrupted.set()
        self.cancelled.set()
        stream, n, running = self._where()
        if running:
            interrupts.say(
                f'Stream {stream}: stopping after micro-batch {n}; Ctrl-C again to cancel it'
            )
        elif n:
            interrupts.say(f'Stream {stream}: stopping (micro-batch {n - 1} is committed)')
        else:
            interrupts.say(f'Stream {stream}: stopping before its first micro-batch')

    def _on_second_interrupt(self) -> None:
        stream, n, running = self._where()
        if not running:
            return
        if self._cancel is None:  # the debug engine: it runs in this process
            interrupts.say(
                f'Stream {stream}: micro-batch {n} runs in this process and cannot be '
                f'cancelled; exiting in {STOP_GRACE_SECONDS:.0f} s unless it ends (a restart '
                'replays it)'
            )
            return
        interrupts.say(
            f"Stream {stream}: cancelling micro-batch {n}'s Spark jobs (a restart replays it)"
        )
        cancel, settle = self._cancel, self._settle

        def cancel_and_settle() -> None:
            # The cancelled tasks end before the process may exit (this
            # thread is not a daemon): an exit under them stops the JVM
            # while they end, and Spark prints their errors.
            cancel()
            if settle is not None:
                settle()

        interrupts.in_thread(cancel_and_settle, 'beam-cancel')

    def _interrupted_text(self) -> str:
        stream, n, _ = self._where()
        store = self.executor.store if self.executor is not None else None
        done = f'stopped after micro-batch {n - 1}' if n else 'stopped before its first commit'
        if store is None or store.temporary:
            return (
                f'stream {stream} {done} (Ctrl-C); its checkpoint was a temporary folder, '
                'give --checkpoint_location to resume a stream'
            )
        return (
            f'stream {stream} {done} (Ctrl-C); a run on '
            f'--checkpoint_location={store.root} resumes there'
        )

    def drain(self, duration=None) -> str:
        """Drains the stream (``execution.streaming.drain``): from its next
        micro-batch boundary it reads nothing more, splittable DoFns truncate
        their restrictions, every pending window and timer fires. Waits for
        the run to end (``duration``: at most that many milliseconds, as
        ``wait_until_finish``) and returns its state: DONE, or DRAINING while
        it is still draining; raises the run's error as
        ``wait_until_finish`` does if the drain fails. A run that already
        ended is left as it is: its final state is returned."""
        if self.ended:
            return self._state
        assert self.executor is not None  # set before the result is returned
        self.executor.drain.request('result.drain()')
        self.wait_until_finish(duration)
        return self.state

    @property
    def state(self) -> str:
        """RUNNING, DRAINING once a drain has begun, then the final state."""
        if (
            self._state == PipelineState.RUNNING
            and self.executor is not None
            and self.executor.drain.active
        ):
            return PipelineState.DRAINING
        return self._state

    def progress(self) -> dict | None:
        """The last committed micro-batch's progress (None before the
        first): per stage its watermarks, their lag, elements, state; the
        micro-batch's duration and backlog (``progress``). As Spark's
        ``StreamingQuery.lastProgress``."""
        return self.executor.progress.latest() if self.executor is not None else None

    def recent_progress(self) -> list[dict]:
        """The progress of the recent micro-batches, oldest first (as
        ``recentProgress``; up to ``progress.RECENT``)."""
        return self.executor.progress.recent() if self.executor is not None else []

    @property
    def reports(self) -> list[dict]:
        """What the stream keeps of its reports: one report holding each
        distinct warning of its workers, once."""
        return [{'warnings': list(self._warnings.values())}]

    def add_reports(self, reports: list[dict]) -> None:
        """A committed micro-batch's reports (its workers' log records are
        logged on the driver now, their metrics go to the run's metrics,
        their warnings are kept for ``reports``)."""
        for r in reports:
            for warning in r.get('warnings', ()):
                self._warnings.setdefault(warning[:2], warning)
        report.relog(reports)
        self._run_metrics.pusher.after_job(reports)
