"""A subset of Beam's FnApiRunner suite on separate executor JVMs.

One test of each kind of state a stage keeps between processes (GroupByKey
with windows and merging windows, side inputs, combines, state and timers,
splittable reads with checkpoints, finalization, metrics, a user error's
traceback): nothing may rely on driver memory or driver-process globals. The
whole suite runs on local[2] in tests/conformance.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_spark_inproc import InProcessSparkRunner
from tests.conformance import test_fn_api_runner_suite as suite
from tests.conftest import shared_session

# Separate executors are the point here: every stage on Spark, none of these
# small stages in the driver (``execution.small``).
ON_SPARK = ['--spark_small_data_kb=0']

SUBSET = {
    'test_group_by_key',
    'test_windowing',
    'test_custom_merging_window',
    'test_pardo_side_inputs',
    'test_gbk_side_input',
    'test_combine_per_key',
    'test_pardo_state_timers',
    'test_pardo_dynamic_timer',
    'test_sdf_with_sdf_initiated_checkpointing',
    'test_read',
    'test_register_finalizations',
    'test_metrics',
    'test_error_traceback_includes_user_code',
}
METRICS_SUBSET = {'test_element_count_metrics', 'test_non_user_metrics'}


def _only(cls, names):
    for name in dir(cls):
        if name.startswith('test') and name not in names:
            setattr(cls, name, None)  # not collected
    return cls


class ClusterConformanceTest(suite.InProcessSparkRunnerTest):
    def create_pipeline(self, is_drain=False):
        return beam.Pipeline(
            runner=InProcessSparkRunner(spark=shared_session(), is_drain=is_drain),
            options=PipelineOptions(ON_SPARK),
        )


class ClusterMetricsTest(suite.InProcessSparkRunnerMetricsTest):
    def create_pipeline(self):
        return beam.Pipeline(
            runner=InProcessSparkRunner(spark=shared_session()), options=PipelineOptions(ON_SPARK)
        )


_only(ClusterConformanceTest, SUBSET)
_only(ClusterMetricsTest, METRICS_SUBSET)


def test_subset_names_exist():
    for name in SUBSET:
        assert callable(getattr(suite.InProcessSparkRunnerTest, name)), name
    for name in METRICS_SUBSET:
        assert callable(getattr(suite.InProcessSparkRunnerMetricsTest, name)), name
