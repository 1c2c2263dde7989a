"""The TestStream-driven tests of Beam's transform suites on this runner
(debug engine): ``userstate_test``, ``ptransform_test`` (stateful DoFns), ``util_test``
(GroupIntoBatches, BatchElements, Reshuffle), ``deduplicate_test``,
``combiners_test``, ``sideinputs_test`` and the streaming snippets.

Only the tests that build a TestStream run here; the rest of each class runs in
the batch conformance tier (``tests/conformance/beam``), which skips these with
a pointer to this module. Beam runs them on its BundleBasedDirectRunner (the
oracle); here the same tests, unchanged, run on the micro-batch loop.
"""

from __future__ import annotations

import os

from apache_beam.examples.snippets import snippets_test
from apache_beam.transforms import combiners_test
from apache_beam.transforms import deduplicate_test
from apache_beam.transforms import ptransform_test
from apache_beam.transforms import sideinputs_test
from apache_beam.transforms import userstate_test
from apache_beam.transforms import util_test

from tests.conformance.beam import skips
from tests.streaming.beam_suites import debug_runner
from tests.streaming.beam_suites import spark_runner
from tests.streaming.beam_suites import suite_on

# (Beam's class, the tests of it that run here, skips with their reasons)
_RESHUFFLE = (
    'test_reshuffle_custom_window_preserves_metadata_0',
    'test_reshuffle_custom_window_preserves_metadata_1',
)
SUITES: dict[str, tuple[type, tuple[str, ...], dict[str, str]]] = {
    'StatefulDoFn': (
        userstate_test.StatefulDoFnOnDirectRunnerTest,
        (
            'test_simple_stateful_dofn',
            'test_clearing_bag_state',
            'test_two_timers_one_function',
            'test_simple_read_modify_write_stateful_dofn',
            'test_clearing_read_modify_write_state',
            'test_simple_set_stateful_dofn',
            'test_clearing_set_state',
            'test_stateful_set_state_compaction_race_portably',
            'test_generate_sequence_with_realtime_timer',
            'test_simple_stateful_dofn_combining',
            'test_timer_output_timestamp',
            'test_timer_output_timestamp_and_window',
            'test_timer_default_tag',
            'test_dynamic_timer_simple_dofn',
            'test_dynamic_timer_clear_timer',
            'test_dynamic_timer_multiple',
            'test_dynamic_timer_and_simple_timer',
            'test_index_assignment',
            'test_hash_join',
        ),
        {},
    ),
    'BatchElements': (
        util_test.BatchElementsTest,
        (
            'test_stateful_buffering_timer_in_fixed_window_streaming',
            'test_stateful_buffering_timer_in_global_window_streaming',
        ),
        {},
    ),
    'GroupIntoBatches': (
        util_test.GroupIntoBatchesTest,
        (
            'test_buffering_timer_in_fixed_window_streaming',
            'test_buffering_timer_in_global_window_streaming',
        ),
        {},
    ),
    'Reshuffle': (
        util_test.ReshuffleTest,
        _RESHUFFLE,
        {
            # the same gap as in batch (a plain beam.Pipeline: DEFAULT_RUNNER)
            name: skips.RUNNER_GAPS[f'util_test__ReshuffleTest::{name}']
            for name in _RESHUFFLE
        },
    ),
    'Deduplicate': (
        deduplicate_test.DeduplicateTest,
        (
            'test_deduplication_in_different_windows',
            'test_deduplication_with_event_time',
            'test_deduplication_with_processing_time',
        ),
        {},
    ),
    'Combine': (
        combiners_test.CombineTest,
        ('test_combining_with_accumulation_mode_and_fanout',),
        {},
    ),
    'TimestampCombiner': (
        combiners_test.TimestampCombinerTest,
        ('test_combiner_earliest', 'test_combiner_latest'),
        {},
    ),
    'SideInputs': (sideinputs_test.SideInputsTest, ('test_multi_triggered_gbk_side_input',), {}),
    'PTransform': (
        ptransform_test.PTransformTest,
        ('test_group_by_key_unbounded_global_default_trigger',),
        {},
    ),
    'Snippets': (
        snippets_test.SnippetsTest,
        (
            'test_model_composite_triggers',
            'test_model_early_late_triggers',
            'test_model_other_composite_triggers',
            'test_model_setting_trigger',
        ),
        {},
    ),
}

# Beam skips these itself ('TestStream not yet supported'); they run here
# unskipped (Beam's own skip decorator removed): they pass on this runner and
# on BundleBasedDirectRunner alike. (Beam's
# ``test_deduplication_with_processing_time`` stays skipped: it fails on
# BundleBasedDirectRunner too, missing ('k1', 70).)
UNSKIP = {('Deduplicate', 'test_deduplication_with_event_time')}


_DRIVER_MEMORY = (
    "records its output in a class attribute of the test in the driver's "
    "memory (StatefulDoFnOnDirectRunnerTest.all_records), which Spark's "
    'Python workers (other processes) cannot reach: runs on the debug engine'
)
# Spark only: tests that need the DoFns to run in the test's own process.
SPARK_SKIPS: dict[str, dict[str, str]] = {
    'StatefulDoFn': {
        name: _DRIVER_MEMORY
        for name in SUITES['StatefulDoFn'][1]
        if name != 'test_stateful_set_state_compaction_race_portably'
    },
    'BatchElements': {
        'test_stateful_buffering_timer_in_global_window_streaming': (
            "assumes one worker process: BatchElements' stateful mode keys "
            'elements by a per-process uuid (WithSharedKey), so on Spark two '
            'Python workers buffer (and time out) separately and the batches '
            'are [5, 4, 1] instead of [9, 1]; Beam allows either'
        ),
    },
}


def _suite(name: str, base: type, only, skips, make_runner, prefix: str) -> None:
    cls = suite_on(base, make_runner, f'{prefix}{name}Test', skips, only)
    cls.__module__ = __name__
    for suite, test in UNSKIP:
        if suite == name:
            setattr(cls, test, getattr(base, test).__wrapped__)
    globals()[cls.__name__] = cls


for _name, (_base, _only, _skips) in SUITES.items():
    _suite(_name, _base, _only, _skips, debug_runner, 'Debug')
    if os.environ.get('BEAM_SPARK_INPROC_FULL_CONFORMANCE'):
        # The same tests on Spark: slow (every micro-batch is Spark jobs), so
        # only when asked for.
        _suite(_name, _base, _only, {**_skips, **SPARK_SKIPS.get(_name, {})}, spark_runner, 'Spark')
del _base, _only, _skips, _name
