"""Beam's own runner with more than one bundle per stage, to measure which
tests of the tier hold on a multi-process runner (docs/conformance.md).

``BEAM_CONFORMANCE_REFERENCE=fnapi-multi`` runs every wrapper module's tests on
``MultiProcessFnApiRunner`` instead of this runner (``conftest``): FnApiRunner
with ``--direct_num_workers=2 --direct_running_mode=multi_processing``, whose
``ParallelBundleManager`` splits each stage's input over two SDK worker
processes. A measuring tool, not part of the CI run.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

WORKERS = 2
OPTIONS = (
    f'--runner=tests.conformance.beam.reference.MultiProcessFnApiRunner '
    f'--direct_num_workers={WORKERS} '
    '--direct_running_mode=multi_processing'
)


class MultiProcessFnApiRunner(FnApiRunner):
    """FnApiRunner in two SDK worker processes, whatever the options say
    (a plain ``beam.Pipeline()`` has none)."""

    def run_pipeline(self, pipeline, options):
        direct = options.view_as(DirectOptions)
        direct.direct_num_workers = WORKERS
        direct.direct_running_mode = 'multi_processing'
        return super().run_pipeline(pipeline, options)
