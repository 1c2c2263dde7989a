"""The streaming loop on Spark (the same micro-batches as on the debug engine,
each one Spark jobs): a few pipelines against BundleBasedDirectRunner, and a
user failure's error quality."""

from __future__ import annotations

import logging
import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.errors import PipelineExecutionError
from tests.streaming import oracle
from tests.streaming import test_side_inputs
from tests.streaming import test_sources
from tests.streaming import test_triggers
from tests.streaming.test_mode import Boom


@pytest.mark.parametrize(
    'build',
    [
        test_triggers.early_late_accumulating,
        test_triggers.two_groupings,
        test_triggers.stateful_timers,
        # side inputs shipped to Spark's workers, new values in later micro-batches
        test_side_inputs._views,
        # a Reshuffle stage keeping panes between a GroupByKey and a side input's reader
        test_side_inputs._grouped_with_side,
    ],
    ids=lambda b: b.__name__,
)
def test_same_panes_as_direct_runner_on_spark(spark, build):
    expected = oracle.direct(build)
    assert expected
    results = []
    assert oracle.run(build, InProcessSparkRunner(spark=spark), results=results) == expected
    # On Spark a micro-batch's time splits into its Spark jobs and the
    # driver's work (``progress.JobClock``;).
    recent = results[0].recent_progress()
    assert any(r['job_seconds'] > 0 for r in recent)
    assert all(0 <= r['job_seconds'] <= r['duration_seconds'] for r in recent)


@pytest.mark.parametrize('debug', [True, False], ids=['debug', 'spark'])
def test_a_leaf_keyed_stage_run_early_is_not_run_again(spark, monkeypatch, debug):
    """A keyed stage nothing reads, run in a micro-batch's earlier job (a
    later keyed stage waited for another one in that job), is not run again
    by the micro-batch's last job: its counter and the other branch's panes
    as on BundleBasedDirectRunner (before the fix the counter doubled on
    both engines: on Spark the leaf ran twice, on the debug engine its
    reports were taken twice; the cause of a rare failure of Beam's
    ``test_multiple_outputs_with_watermark_advancement`` here, whose
    ``assert_that`` matcher saw its panes twice). Beam's stage order among
    independent branches follows set iteration (the hash seed): the leaf's
    branch is put first, the order in which it happens."""
    from apache_beam.runners.portability.fn_api_runner import translations

    from beam_spark_inproc.planning import phases

    def leaf_branch_first(stages, context):
        return translations.sort_stages(sorted(stages, key=lambda s: 'Leaf' not in s.name), context)

    monkeypatch.setattr(
        phases,
        'PHASES',
        [
            leaf_branch_first if phase is translations.sort_stages else phase
            for phase in phases.PHASES
        ],
    )
    build = test_triggers.leaf_grouping_beside_a_cascade
    direct, ours = [], []
    expected = oracle.run(build, oracle.BundleBasedDirectRunner(), results=direct)
    runner = InProcessSparkRunner(debug=True) if debug else InProcessSparkRunner(spark=spark)
    assert oracle.run(build, runner, results=ours) == expected

    def panes(result):
        counters = (
            result[0].metrics().query(beam.metrics.MetricsFilter().with_name('panes'))['counters']
        )
        return [c.committed for c in counters]

    assert panes(direct) == [1]  # one window, one key: one pane
    assert panes(ours) == panes(direct)


def _global_factor(p):
    """Five micro-batches of main input read one unchanging side input."""
    events = TestStream()
    for i in range(5):
        events = events.add_elements([window.TimestampedValue(i, i)]).advance_watermark_to(i + 1)
    factor = p | beam.Create([10])
    return (
        p
        | events.advance_watermark_to_infinity()
        | beam.Map(lambda x, f: x * f, beam.pvalue.AsSingleton(factor))
    )


@pytest.mark.parametrize(
    'build', [_global_factor, test_side_inputs._views], ids=lambda b: b.__name__
)
def test_large_side_inputs_are_files_under_the_checkpoint_location(
    spark, monkeypatch, tmp_path, build
):
    """Side inputs past ``--spark_inline_side_input_mb`` (0 here: all but the
    empty ones) reach Spark's workers as files under the checkpoint location,
    never added to the session (classic Spark lists such a file, and each
    executor keeps its copy, until the process exits): the same panes as
    BundleBasedDirectRunner; a file is written when a side input's value
    changes, not every micro-batch (one file in five micro-batches of an
    unchanging side input); after each commit only the files of the values a
    later micro-batch reads are left (at most 2 per side input: the current
    ones and those this micro-batch read)."""
    from beam_spark_inproc.execution.streaming.store import CheckpointStore
    from beam_spark_inproc.spark.shipping import Shipper

    added, after_commits = [], []
    monkeypatch.setattr(Shipper, 'ship_bytes', lambda self, data, kind: added.append(kind))
    remove = CheckpointStore.remove_side_inputs

    def listing(store, keep):
        remove(store, keep)
        after_commits.append(sorted(os.listdir(store.side_input_folder)))

    monkeypatch.setattr(CheckpointStore, 'remove_side_inputs', listing)
    expected = oracle.direct(build)
    assert expected
    assert (
        oracle.run(
            build,
            InProcessSparkRunner(spark=spark),
            '--spark_inline_side_input_mb=0',
            f'--checkpoint_location={tmp_path}',
        )
        == expected
    )
    assert added == []
    written = {name for names in after_commits for name in names}
    sides = 1 if build is _global_factor else 4
    assert written and max(map(len, after_commits)) <= 2 * sides, after_commits
    if build is _global_factor:
        assert len(written) == 1, after_commits
    assert len(os.listdir(tmp_path / 'side-inputs')) <= sides


def test_unbounded_sdf_on_spark(spark, monkeypatch):
    """Residuals leave Spark's tasks as rows, wait in the driver, re-enter
    the stage as rows; their estimator holds the watermark (by hand, as on the
    debug engine: ``test_sources``). What a micro-batch cached (the
    splittable and the keyed stages' results) is freed before it commits:
    nothing of micro-batch N is held by Spark's block managers after it."""
    from beam_spark_inproc.execution.streaming.store import CheckpointStore

    # classic-only: whether the session's cache manager holds any cached
    # DataFrame (the persisted-RDD map is weak: it showed none either way)
    manager = spark._jsparkSession.sharedState().cacheManager()
    before, at_commit = manager.isEmpty(), []
    commit = CheckpointStore.commit

    def counting(store, micro_batch, record):
        at_commit.append(manager.isEmpty())
        commit(store, micro_batch, record)

    monkeypatch.setattr(CheckpointStore, 'commit', counting)
    records = oracle.run(test_sources._ticks, InProcessSparkRunner(spark=spark))
    assert [(r[0], r[3]) for r in records] == [
        ([0, 1, 2, 3], 1),
        ([4, 5, 6, 7], 1),
        ([8, 9, 10, 11], 1),
    ]
    assert len(at_commit) >= 3 and set(at_commit) == {before}, at_commit
    # The runner's session keeps the last 100 jobs and SQL executions in
    # Spark's status store (``session.LOCAL_DEFAULTS``), not 1,000 (in a whole
    # test run this session has run thousands).
    retained = spark._jsparkSession.sharedState().statusStore().executionsCount()
    assert retained <= 100
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup(None)) <= 100


def test_unbounded_sdf_stage_runs_once_per_micro_batch_on_spark(spark):
    """By hand: each tick recorded once. The splittable stage runs in a job
    of its own (its residuals go to the driver); its result was not cached
    when nothing read it (here the recording is fused into it), so the
    micro-batch's last job ran it again: every tick was recorded twice."""
    records = oracle.run(
        lambda p: p | beam.Impulse() | beam.ParDo(test_sources.Ticks()),
        InProcessSparkRunner(spark=spark),
    )
    assert sorted(r[0] for r in records) == list(range(test_sources._TOTAL))


def test_next_micro_batch_is_made_while_the_last_job_runs(spark, monkeypatch):
    """The next micro-batch's rows are made in the prefetch thread, started
    by the last job's ``engine.collect`` (``started``) or at once when a
    micro-batch runs no job: every element event after the first comes made
    (never started: none would, and the loop would make them itself), and
    the panes are the DirectRunner's. The steps from the source's rows to
    the keyed stage's shuffle are built there too (``prebuild``): each
    micro-batch after the first takes every one of them built."""
    from beam_spark_inproc.execution.streaming.prebuild import Prebuilder
    from beam_spark_inproc.execution.streaming.teststream_source import TestStreamSource

    counts = []
    finish = Prebuilder.finish

    def counted(prebuilder, micro_batch):
        if prebuilder._finished != micro_batch:
            counts.append((prebuilder.hits, prebuilder.misses))
            prebuilder.hits = prebuilder.misses = 0
        finish(prebuilder, micro_batch)

    monkeypatch.setattr(Prebuilder, 'finish', counted)
    taken = []
    take = TestStreamSource.take_made

    def recorded(source):
        made = take(source)
        taken.append(made is not None)
        return made

    monkeypatch.setattr(TestStreamSource, 'take_made', recorded)

    def build(p):
        stream = TestStream()
        for i in range(4):
            stream = stream.add_elements(
                [window.TimestampedValue((f'k{j % 3}', j), i) for j in range(5)]
            ).advance_watermark_to(i + 1)
        return (
            p
            | stream.advance_watermark_to_infinity()
            | beam.WindowInto(window.FixedWindows(1))
            | beam.CombinePerKey(sum)
        )

    expected = oracle.direct(build)
    taken.clear()
    assert oracle.run(build, InProcessSparkRunner(spark=spark)) == expected
    # The loop asks each micro-batch; the element events after the first come
    # made, the watermark-only ones after them have nothing made.
    assert taken[1:4] == [True] * 3 and not any(taken[4:]), taken
    # (hits, misses) per micro-batch: the element events' four, then the
    # final watermark's (no rows: nothing to build); the steps: at least
    # the stateless stage's and the shuffle
    steps = counts[0][1]
    assert steps >= 2 and counts[:4] == [(0, steps)] + [(steps, 0)] * 3, counts


def test_user_failure_names_the_transform_and_spark_stays_usable(spark):
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options)
    _ = p | TestStream().add_elements([1, 2]).add_elements([3]) | 'Explode' >> beam.ParDo(Boom())
    result = p.run()
    with pytest.raises(PipelineExecutionError) as info:
        result.wait_until_finish()
    message = str(info.value)
    assert "Beam transform 'Explode' failed" in message
    assert 'ValueError: bad element 3' in message
    assert 'in process' in info.value.worker_traceback  # the user's frame
    assert result.state == 'FAILED'
    assert spark.range(3).count() == 3


class _CountThenFail(beam.DoFn):
    def process(self, x):
        beam.metrics.Metrics.counter('attempts', 'seen').inc()
        if x == 3:
            raise RuntimeError('fails on purpose after counting')
        yield x


def test_failed_attempt_metrics_reach_attempted_in_a_stream(spark):
    """A streaming task that fails sends its counts over the attempt channel
    (``worker.attempts``): attempted counts them, committed does not."""
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options)
    _ = (
        p
        | TestStream().add_elements([1, 2]).advance_processing_time(1).add_elements([3])
        | beam.ParDo(_CountThenFail())
    )
    result = p.run()
    with pytest.raises(PipelineExecutionError, match='fails on purpose'):
        result.wait_until_finish()
    [counter] = result.metrics().query()['counters']
    assert counter.committed == 2  # the first micro-batch committed
    assert counter.attempted == 3  # plus the failed attempt's count


class _LogThenFail(beam.DoFn):
    def process(self, x):
        if x == 3:
            raise RuntimeError('fails on purpose after logging')
        logging.getLogger('user.dofn').info('logged in a stream: %s', x)
        yield x


def test_log_records_of_committed_micro_batches_reach_the_driver(spark):
    """Workers' log records are logged on the driver as each micro-batch
    commits: a stream that fails later has logged its earlier micro-batches'
    records (they were relayed only when a stream ended well)."""
    from tests.integration.test_batch_correctness import LogCapture

    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)  # the driver's level goes to the workers
    try:
        with LogCapture() as seen:
            p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options)
            _ = (
                p
                | TestStream().add_elements([1, 2]).advance_processing_time(1).add_elements([3])
                | beam.ParDo(_LogThenFail())
            )
            result = p.run()
            with pytest.raises(PipelineExecutionError, match='after logging'):
                result.wait_until_finish()
    finally:
        root.setLevel(level)
    messages = [r.getMessage() for r in seen.records if r.name == 'user.dofn']
    assert sorted(messages) == ['logged in a stream: 1', 'logged in a stream: 2']


def _greetings(p):
    from tests.integration.test_batch_correctness import _ValueOptions

    greeting = _ValueOptions([]).greeting  # a RuntimeValueProvider

    class Greet(beam.DoFn):
        def setup(self):
            self.at_setup = greeting.get()

        def process(self, name):
            yield '%s %s %s' % (self.at_setup, greeting.get(), name)

    return p | TestStream().add_elements(['ann']) | beam.ParDo(Greet())


def test_runtime_value_provider_in_a_stream(spark):
    """A RuntimeValueProvider read in a streaming stage's workers gets the
    option the pipeline runs with, else its default, as in batch (where
    FnApiRunner's SDK harness serves them; BundleBasedDirectRunner gives the
    default even when the option is set, so it is no oracle here)."""
    for flags, word in (((), 'hello'), (('--greeting', 'hi'), 'hi')):
        records = oracle.run(_greetings, InProcessSparkRunner(spark=spark), *flags)
        assert [r[0] for r in records] == ['%s %s ann' % (word, word)]
