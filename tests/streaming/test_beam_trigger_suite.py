"""The TestStream cases of Beam's ``transforms/trigger_test.py`` on this runner
(debug engine): ``TriggerPipelineTest`` and the TestStream transcript tests.

Beam runs them on its BundleBasedDirectRunner (the oracle); here the same tests,
unchanged, run on the micro-batch loop.
"""

from __future__ import annotations

import os

from apache_beam.transforms import trigger_test

from tests.streaming.beam_suites import debug_runner
from tests.streaming.beam_suites import spark_runner
from tests.streaming.beam_suites import suite_on

DebugTriggerPipelineTest = suite_on(
    trigger_test.TriggerPipelineTest, debug_runner, 'DebugTriggerPipelineTest', {}
)
DebugTriggerPipelineTest.__module__ = __name__
TRANSCRIPT_SKIPS = {
    # The second transcript of that name (OUTPUT_AT_EARLIEST_TRANSFORMED).
    'test_timestamp_combiner_custom_timestamping_earliest_1': 'OUTPUT_AT_EARLIEST_TRANSFORMED '
    "has no portable form (the proto's "
    'OutputTime has EARLIEST, LATEST and END_OF_WINDOW only), so the '
    "WindowFn's get_transformed_output_time is lost on the way to any "
    'portable runner; Beam marks it broken on its DirectRunner too',
}
DebugTestStreamTranscriptTest = suite_on(
    trigger_test.TestStreamTranscriptTest,
    debug_runner,
    'DebugTestStreamTranscriptTest',
    TRANSCRIPT_SKIPS,
)
DebugTestStreamTranscriptTest.__module__ = __name__
if os.environ.get('BEAM_SPARK_INPROC_FULL_CONFORMANCE'):
    # The same transcripts, checked order-agnostically: ~90 s more, so only
    # when asked for (the strict variant above already checks every pane).
    DebugWeakTestStreamTranscriptTest = suite_on(
        trigger_test.WeakTestStreamTranscriptTest,
        debug_runner,
        'DebugWeakTestStreamTranscriptTest',
        TRANSCRIPT_SKIPS,
    )
    DebugWeakTestStreamTranscriptTest.__module__ = __name__

if os.environ.get('BEAM_SPARK_INPROC_FULL_CONFORMANCE'):
    # The same suites on Spark: slow (every micro-batch is Spark jobs), so
    # only when asked for.
    SparkTriggerPipelineTest = suite_on(
        trigger_test.TriggerPipelineTest, spark_runner, 'SparkTriggerPipelineTest', {}
    )
    SparkTriggerPipelineTest.__module__ = __name__
    SparkTestStreamTranscriptTest = suite_on(
        trigger_test.TestStreamTranscriptTest,
        spark_runner,
        'SparkTestStreamTranscriptTest',
        TRANSCRIPT_SKIPS,
    )
    SparkTestStreamTranscriptTest.__module__ = __name__
