"""Why a Beam test does not run on this runner: one table per cause.

Keys are ``<module>__<Class>::<test>`` (or a prefix ``<module>__<Class>`` for
the whole class) as the wrapper modules name them. docs/conformance.md lists
them with the counts.
"""
from __future__ import annotations

import inspect
import os

STREAMING = ('TestStream / streaming pipeline: runs in the streaming tier '
             'instead, not twice (tests/streaming/test_beam_*_suite.py: debug '
             'engine in CI, Spark with BEAM_SPARK_INPROC_FULL_CONFORMANCE=1; '
             'issue #13)')

_ONE_BUNDLE = ('asserts one bundle: counts the elements start_bundle/finish_bundle '
               'emit, one per bundle; a runner with more than one bundle (any '
               'partitioned runner) emits one per bundle')
_ORDER = ('asserts an order Beam does not guarantee ({what}); FnApiRunner keeps '
          'input order in one bundle, a partitioned runner does not')
_PARTIAL_COMBINE = (
    'the callable CombineFn (max over multiples of d) fails on a bundle holding '
    'no multiple of d: holds only when one bundle sees every input')

# Integration tests Beam skips in unit runs (no --test-pipeline-options) that
# need a service; those marked as such are skipped by marker (``conftest``).
INTEGRATION: dict[str, str] = {
    'filters_test__FiltersTest::test_filters_output_bigquery_matcher': (
        'integration test: queries BigQuery (GCP extra not installed, '
        '"Bigquery dependencies are not installed")'),
}

# (b) Cannot hold on any multi-process runner.
MULTI_PROCESS: dict[str, str] = {
    'ptransform_test__PTransformTest::test_do_fn_with_finish': _ONE_BUNDLE,
    'ptransform_test__PTransformTest::test_do_fn_with_start': _ONE_BUNDLE,
    'ptransform_test__PTransformTest::test_combine_with_side_input_as_arg':
        _PARTIAL_COMBINE,
    'ptransform_test__PTransformTest::test_combine_per_key_with_side_input_as_arg':
        _PARTIAL_COMBINE,
    'combiners_test__CombineTest::test_combining_with_accumulation_mode_and_fanout':
        _ORDER.format(what='of the list ToListCombineFn builds with fanout'),
    'combiners_test__CombineTest::test_combining_with_session_windows_and_fanout':
        _ORDER.format(what='of the list ToListCombineFn builds with fanout'),
    'combiners_test__CombineTest::test_combining_with_sliding_windows_and_fanout':
        _ORDER.format(what='of the list ToListCombineFn builds with fanout'),
    'snippets_test__TypeHintsTest::test_deterministic_key': (
        'the test defines class Player at run time into its module\'s globals '
        '(`global Player`); a worker process imports the module without it '
        '("Can\'t get attribute \'Player\'"): driver globals'),
    'ptransform_test__PTransformTest::'
    'test_combine_runtime_type_check_violation_using_decorators': (
        'expects the return-type check to fire first; with more than one bundle '
        'the CombineFn (returning str) is first merged over its own str outputs '
        'and fails in reduce(operator.mul) ("can\'t multiply sequence by '
        'non-int"): holds only with one bundle'),
    'ptransform_test__PTransformTest::test_group_by_key_allow_unsafe_triggers':
        _ORDER.format(what='of the values GroupByKey outputs'),
}

# Runner gaps being fixed in issue #18 (the `batch` work): error and reason.
RUNNER_GAPS: dict[str, str] = {
    **{f'util_test__ReshuffleTest::{name}': (
        'runner gap, issue #18 item 2: Reshuffle does not keep the pane info / '
        'window metadata Beam\'s expansion gives it') for name in (
        'test_reshuffle_custom_window_preserves_metadata_0',
        'test_reshuffle_custom_window_preserves_metadata_1',
        'test_reshuffle_default_window_preserves_metadata_1',
        'test_reshuffle_window_fn_preserved')},
    **{f'util_test__BatchElementsTest::{name}': (
        'fails here, not yet investigated (issue #18; BEAM_CONFORMANCE=full '
        'only): batch sizes differ, likely the bundle layout') for name in (
        'test_constant_batch', 'test_constant_batch_no_metrics',
        'test_length_fn_without_stateful_is_ignored')},
}

# Streaming tests: every test whose source builds a TestStream
# (``uses_test_stream``), and these, which call a snippet that does.
STREAMING_TESTS: set[str] = {
    'trigger_test__TestStreamTranscriptTest',  # transcripts drive a TestStream
    'trigger_test__WeakTestStreamTranscriptTest',
    'combiners_test__TimestampCombinerTest::test_combiner_earliest',
    'combiners_test__TimestampCombinerTest::test_combiner_latest',
    'snippets_test__SnippetsTest::test_model_composite_triggers',
    'snippets_test__SnippetsTest::test_model_early_late_triggers',
    'snippets_test__SnippetsTest::test_model_other_composite_triggers',
    'snippets_test__SnippetsTest::test_model_setting_trigger',
}

_REREAD = (
    'runner gap on Spark only (issue #18, not root-caused): ReadFromText of '
    '"<file>*" then WriteToText("<file>.result") gives every line 3 times '
    '([\'aa\', \'aa\', \'aa\', ...] != [\'aa\', \'bb\', \'cc\']); the output '
    'files match the input glob, so a read stage Spark evaluates again after '
    'the write is the likely cause; passes on the debug engine')
_DOUBLED = (
    'runner gap on Spark only, issue #18 (item 1 likely: bundles for empty '
    'partitions / a stage from Impulse run once per partition): the output is '
    'doubled, e.g. [\'abc: 4\', \'def: 2\'] != [\'abc: 2\', \'def: 1\']; passes on '
    'the debug engine')
# Known runner gaps seen on Spark only (the debug engine runs these).
SPARK_ONLY: dict[str, str] = {
    **{f'snippets_test__SnippetsTest::{name}': _DOUBLED for name in (
        'test_construct_pipeline', 'test_examples_ptransforms_templated',
        'test_examples_wordcount_0', 'test_examples_wordcount_1',
        'test_examples_wordcount_2', 'test_examples_wordcount_3',
        'test_examples_wordcount_debugging', 'test_model_pipelines',
        'test_model_textio', 'test_model_textio_compressed',
        'test_pipeline_options_command_line')},
    'snippets_test__SnippetsTest::test_pipeline_options_local': _REREAD,
    'snippets_test__SnippetsTest::test_pipeline_options_remote': _REREAD,
    'sideinputs_test__SideInputsTest::test_accessing_valueprovider_info_after_run': (
        'runner gap on Spark only, issue #18 item 3: RuntimeValueProvider.get() '
        'in a worker ("not called from a runtime context"); the debug engine '
        'runs in the driver, where the runtime options are set'),
}


def uses_test_stream(function) -> bool:
    """The test's own source builds a TestStream (streaming, issue #13)."""
    try:
        return 'TestStream' in inspect.getsource(function)
    except (OSError, TypeError):
        return False


# BEAM_CONFORMANCE_RUN_SKIPPED=1 runs the tests the MULTI_PROCESS,
# RUNNER_GAPS and SPARK_ONLY tables skip (to check whether a skip still holds);
# streaming and integration tests stay skipped.
RUN_SKIPPED = os.environ.get('BEAM_CONFORMANCE_RUN_SKIPPED', '') == '1'


def reason(test_id: str, engine: str) -> str:
    tables = [(STREAMING_TESTS, STREAMING), (INTEGRATION, None)]
    if not RUN_SKIPPED:
        tables += [(MULTI_PROCESS, None), (RUNNER_GAPS, None)]
        if engine == 'spark':
            tables.append((SPARK_ONLY, None))
    for table, fixed in tables:
        for key in table:
            if test_id == key or test_id.startswith(key + '::'):
                return fixed or table[key]
    return ''
