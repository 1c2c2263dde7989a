"""Runner classes by name, for settings that take a runner's name only.

``InProcessDebugRunner``: ``InProcessSparkRunner(debug=True)``, e.g. as
``StandardOptions.DEFAULT_RUNNER`` so a plain ``beam.Pipeline()`` runs in debug
mode (the conformance tier does this for Beam's own tests).
"""

from __future__ import annotations

from beam_spark_inproc.runner import InProcessSparkRunner


class InProcessDebugRunner(InProcessSparkRunner):
    def __init__(self, spark=None, is_drain: bool = False):
        super().__init__(spark=spark, is_drain=is_drain, debug=True)
