"""Runner classes by name, for settings that take a runner's name only, and
the pytest plugin's runner.

``InProcessDebugRunner``: ``InProcessSparkRunner(debug=True)``, e.g. as
``StandardOptions.DEFAULT_RUNNER`` so a plain ``beam.Pipeline()`` runs in debug
mode (the conformance tier does this for Beam's own tests).

``TrackingRunner``: the plugin's ``inproc_runner``; it keeps the result of
each pipeline it ran, so that one a test leaves running (a stream, a run
with ``--no_wait_until_finish``) is cancelled when the test ends
(``stop_left_running``) and the test fails naming it, the session free for
the next test.
"""

from __future__ import annotations

import threading

from beam_spark_inproc.result import SparkPipelineResult
from beam_spark_inproc.runner import InProcessSparkRunner

# How long a pipeline left running may take to stop once cancelled.
STOP_SECONDS = 60.0


class InProcessDebugRunner(InProcessSparkRunner):
    def __init__(self, spark=None, is_drain: bool = False):
        super().__init__(spark=spark, is_drain=is_drain, debug=True)


class TrackingRunner(InProcessSparkRunner):
    def __init__(self, spark=None, is_drain: bool = False, debug: bool = False):
        super().__init__(spark=spark, is_drain=is_drain, debug=debug)
        # (the pipeline's top-level transform labels, its result)
        self.runs: list[tuple[list[str], SparkPipelineResult]] = []

    def run_pipeline(self, pipeline, options):
        result = super().run_pipeline(pipeline, options)
        labels = [part.full_label for part in pipeline.transforms_stack[0].parts]
        self.runs.append((labels, result))
        return result

    def stop_left_running(self, timeout: float = STOP_SECONDS) -> list[str]:
        """Cancels every pipeline of this runner still running and waits up
        to ``timeout`` seconds for each to stop; what each was (its kind,
        its transforms, whether it stopped)."""
        from beam_spark_inproc.execution.streaming.result import StreamingPipelineResult

        left = []
        for labels, result in self.runs:
            if result.ended:
                continue
            # ``cancel`` waits until the run stops: in a thread of its own,
            # so that a run that does not stop cannot hold the test run.
            threading.Thread(target=result.cancel, daemon=True, name='beam-test-cancel').start()
            stopped = result.ended_event.wait(timeout)
            kind = 'a stream' if isinstance(result, StreamingPipelineResult) else 'a batch run'
            left.append(
                f'{kind} of {", ".join(labels) or "no transforms"}'
                + ('' if stopped else f' (still running {timeout:.0f} s after its cancel)')
            )
        self.runs.clear()
        return left
