"""Why a Beam test does not run on this runner: one table per cause.

Keys are ``<module>__<Class>::<test>`` (or a prefix ``<module>__<Class>`` for
the whole class) as the wrapper modules name them. docs/conformance.md lists
them with the counts.
"""

from __future__ import annotations

import inspect
import os

STREAMING = (
    'TestStream / streaming pipeline: runs in the streaming tier '
    'instead, not twice (tests/streaming/test_beam_*_suite.py: debug '
    'engine in CI, Spark with BEAM_SPARK_INPROC_FULL_CONFORMANCE=1; '
    'issue #13)'
)

_ONE_BUNDLE = (
    'asserts one bundle: counts the elements start_bundle/finish_bundle '
    'emit, one per bundle; a runner with more than one bundle (any '
    'partitioned runner) emits one per bundle'
)
_ORDER = (
    'asserts an order Beam does not guarantee ({what}); FnApiRunner keeps '
    'input order in one bundle, a partitioned runner does not'
)
_PARTIAL_COMBINE = (
    'the callable CombineFn (max over multiples of d) fails on a bundle holding '
    'no multiple of d: holds only when one bundle sees every input'
)

# Integration tests Beam skips in unit runs (no --test-pipeline-options) that
# need a service; those marked as such are skipped by marker (``conftest``).
INTEGRATION: dict[str, str] = {
    'filters_test__FiltersTest::test_filters_output_bigquery_matcher': (
        'integration test: queries BigQuery (GCP extra not installed, '
        '"Bigquery dependencies are not installed")'
    ),
}

# (b) Cannot hold on any multi-process runner, the only skips for assuming one
# process. Proven, each of them: it fails the same way on Beam's FnApiRunner
# with --direct_num_workers=2 --direct_running_mode=multi_processing
# (``BEAM_CONFORMANCE_REFERENCE=fnapi-multi BEAM_CONFORMANCE_RUN_SKIPPED=1
# BEAM_SPARK_INPROC_FULL_CONFORMANCE=1``, docs/conformance.md). A test that builds a
# TestStream (FnApiRunner does not run one) cannot be proven there: it skips
# as streaming instead.
_PROVEN = (
    "; proven: fails the same way on Beam's FnApiRunner with "
    '--direct_running_mode=multi_processing --direct_num_workers=2'
)


def _proven(reasons: dict[str, str]) -> dict[str, str]:
    return {test: reason + _PROVEN for test, reason in reasons.items()}


_BATCH_PER_BUNDLE = (
    'asserts one bundle (Beam\'s own comment: "Assumes a single bundle"): '
    'BatchElements batches within a bundle, so the input split over bundles '
    'gives other sizes ([10, 8, 10, 7] for [10, 10, 10, 5]; [2, 1] for [3])'
)
MULTI_PROCESS: dict[str, str] = _proven(
    {
        **{
            f'util_test__BatchElementsTest::{name}': _BATCH_PER_BUNDLE
            for name in (
                'test_constant_batch',
                'test_constant_batch_no_metrics',
                'test_length_fn_without_stateful_is_ignored',
            )
        },
        'ptransform_test__PTransformTest::test_do_fn_with_finish': _ONE_BUNDLE,
        'ptransform_test__PTransformTest::test_do_fn_with_start': _ONE_BUNDLE,
        'ptransform_test__PTransformTest::test_combine_with_side_input_as_arg': _PARTIAL_COMBINE,
        (
            'ptransform_test__PTransformTest::test_combine_per_key_with_side_input_as_arg'
        ): _PARTIAL_COMBINE,
        (
            'combiners_test__CombineTest::test_combining_with_session_windows_and_fanout'
        ): _ORDER.format(what='of the list ToListCombineFn builds with fanout'),
        (
            'combiners_test__CombineTest::test_combining_with_sliding_windows_and_fanout'
        ): _ORDER.format(what='of the list ToListCombineFn builds with fanout'),
        'ptransform_test__PTransformTypeCheckTestCase::'
        'test_combine_runtime_type_check_violation_using_decorators': (
            'expects the return-type check to fire first; with more than one bundle '
            'the CombineFn (returning str) is first merged over its own str outputs '
            'and fails in reduce(operator.mul) ("can\'t multiply sequence by '
            'non-int"): holds only with one bundle'
        ),
        'ptransform_test__PTransformTest::test_group_by_key_allow_unsafe_triggers': _ORDER.format(
            what='of the values GroupByKey outputs'
        ),
        # Beam's IO and ML inference tests (test_io_ml.py): each fails on
        # FnApiRunner with two workers too.
        **{
            f'watch_test__WatchEndToEndTest::{name}': (
                'assumes one process: the poll function counts its calls in a module '
                'global (_POLL_CALLS) that the test clears and reads in the driver '
                '(the test asks for direct_running_mode=in_memory); polls in a worker '
                'process count there (3 != 0 in the driver), and a reused worker keeps '
                'counts from earlier pipelines, so the polled source grows differently. '
                'On FnApiRunner with two workers it fails too (only x:0 and y:0 '
                'emitted)'
            )
            for name in (
                'test_multi_round_dedups_stops_and_is_per_input',
                'test_timestamp_cursor_dedups_growing_source',
            )
        },
        'base_test__RunInferenceBaseTest::test_env_vars_set_correctly': (
            'assumes one process: the model handler sets FOO in the environment of '
            'the process that loads the model (a worker), the test reads the '
            "driver's os.environ; fails on FnApiRunner with two workers too"
        ),
        **{
            f'sklearn_inference_test__SkLearnRunInferenceTest::{name}': (
                'assumes one process: SklearnModelHandler sets FOO in the environment '
                'of the process that loads the model (a worker), the test reads the '
                'driver\'s os.environ ("False is not true"); passes here only while '
                'the stage is small enough to run in the driver'
            )
            for name in (
                'test_env_vars_set_correctly_numpy',
                'test_pipeline_pandas_env_vars_set_correctly',
            )
        },
        'base_test__RunInferenceBaseTest::test_run_inference_loads_different_models': (
            'asserts one bundle: the fake model returns how many predictions it has '
            'made, so [1, 2, 3] needs all three elements in one batch of one model; '
            'over two bundles (two processes) each loads its own model: [1, 1, 2], '
            'on FnApiRunner with two workers too'
        ),
        'base_test__RunInferenceBaseTest::'
        'test_runinference_loads_same_model_with_identifier_multi_process_shared': (
            'asserts one bundle: both RunInference steps share one counting model '
            'across processes; [4, 5, 6] needs the first step to predict all three '
            'elements before the second predicts any; over two bundles they '
            'interleave ([3, 4, 6] on FnApiRunner with two workers)'
        ),
        'base_test__RunInferenceBaseTest::test_timing_metrics': (
            'asserts one bundle: 3 batches and 1 model load for 4 elements; '
            'batching is per bundle and a model is loaded per process, so more '
            'bundles give more batches (4 != 3 on FnApiRunner with two workers)'
        ),
        'base_test__RunInferenceBaseTest::test_run_inference_timeout_does_garbage_collection': (
            'asserts one bundle: the model whose inference timed out is collected '
            '(its __del__ writes a file) while the 15 elements after it run in the '
            'same worker; over two bundles the timed-out one may get none and the '
            'file is not written by the end (FileNotFoundError on FnApiRunner with '
            'two workers too)'
        ),
        'distribopt_test__DistribOptimizationTest::test_basics': (
            'assumes one process: the test stands a mock in for scipy in the '
            "driver's sys.modules (mock.patch.dict) and the pipeline's DoFns "
            'import scipy where they run; a worker process imports the real scipy '
            '(the test extra brings it with scikit-learn), whose optimum differs '
            "from the mock's (454.072 != 454.39597), or has none "
            "(ModuleNotFoundError: No module named 'scipy'); the same on "
            'FnApiRunner with two workers'
        ),
        **{
            f'doctests_test__DoctestTest::{name}': (
                "assumes one process: Beam's doctest checker computes each frame with "
                'a pipeline whose FlatMap records the results in a class attribute '
                '(_InMemoryResultRecorder._ALL_RESULTS) of the process running it and '
                'reads them in the driver; here the stage runs in the driver while it '
                'is small and fast and in a Spark worker when handed over (under CPU '
                'load: the doctest then fails with Expected and Got equal, as the '
                'report computes again); fails on FnApiRunner with two workers too'
            )
            for name in ('test_file', 'test_good', 'test_failure')
        },
        'textio_test__CsvTest::test_csv_read_with_filename': (
            'asserts one bundle: expects WriteToCsv to write one file (one shard '
            'per bundle), 2 != 1 on FnApiRunner with two workers too'
        ),
    }
)

# Runner gaps: error and reason.
RUNNER_GAPS: dict[str, str] = {
    **{
        f'util_test__ReshuffleTest::{name}': (
            'runner gap: a runner-executed Reshuffle moves elements in '
            "Beam's portable encoding, whose timestamps have millisecond "
            "precision, while Beam's expansion carries them inside the value: "
            'GlobalWindow().max_timestamp() (...454.774999) arrives as ...454.774000. '
            'Pane info and windows are kept (and reset before 2.65) as Beam does'
        )
        for name in (
            'test_reshuffle_custom_window_preserves_metadata_0',
            'test_reshuffle_custom_window_preserves_metadata_1',
        )
    },
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

# Tests that keep what they check in the driver's globals (they pass when the
# pipeline runs in the driver's process).
MULTI_PROCESS.update(
    _proven(
        {
            'snippets_test__TypeHintsTest::test_deterministic_key': (
                'cannot hold on any multi-process runner: the test defines class Player '
                "at run time into its module's globals (`global Player`); a worker "
                'process imports the module without it ("Can\'t get attribute '
                "'Player'\"): driver globals"
            ),
            'util_test__WaitOnTest::test_find': (
                'cannot hold on any multi-process runner: numbers the elements with a '
                'counter kept as an attribute of the apache_beam module in the process '
                'running each Map; worker processes each count from 0 (FnApiRunner '
                "with two workers: [(None, 'x', 0), (None, 'x', 0)])"
            ),
        }
    )
)


def uses_test_stream(function) -> bool:
    """The test's own source builds a TestStream (streaming)."""
    try:
        return 'TestStream' in inspect.getsource(function)
    except (OSError, TypeError):
        return False


# BEAM_CONFORMANCE_RUN_SKIPPED=1 runs the tests the MULTI_PROCESS and
# RUNNER_GAPS tables skip (to check whether a skip still holds);
# streaming and integration tests stay skipped.
RUN_SKIPPED = os.environ.get('BEAM_CONFORMANCE_RUN_SKIPPED', '') == '1'


def reason(test_id: str) -> str:
    tables = [(STREAMING_TESTS, STREAMING), (INTEGRATION, None)]
    if not RUN_SKIPPED:
        tables += [(MULTI_PROCESS, None), (RUNNER_GAPS, None)]
    for table, fixed in tables:
        for key in table:
            if test_id == key or test_id.startswith(key + '::'):
                return fixed or table[key]
    return ''
