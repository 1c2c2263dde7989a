"""Small data in the driver (``execution.small``): results as Beam's FnApiRunner
gives them, no Spark job while data is tiny, Spark as soon as it is not, the
pickling round trip and the user's error as on Spark."""

from __future__ import annotations

import logging
import pickle
import threading
import uuid

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc import PipelineExecutionError

ON = ['--spark_small_data_kb=64']
OFF = ['--spark_small_data_kb=0']


def pin_spark_cost(monkeypatch, seconds: float) -> None:
    """What a stage handed to Spark costs (``SparkHandOver.cost``), fixed at
    ``seconds`` whatever the session's state and the machine's load."""
    from beam_spark_inproc.spark.hand_over import SparkHandOver

    monkeypatch.setattr(SparkHandOver, 'cost', lambda self: seconds)


@pytest.fixture
def unhurried(monkeypatch):
    """A driver run handed over only by its data, never by its pace: a test
    that says "no Spark job while data is tiny" must not depend on the
    machine's load."""
    pin_spark_cost(monkeypatch, 3600.0)


def _jobs(spark, build, args=ON):
    """(result, Spark jobs) of a pipeline run under a job group of its own."""
    context = spark.sparkContext  # classic-only: counting the run's jobs
    group = 'small-data-test-' + uuid.uuid4().hex
    context.setJobGroup(group, 'test')
    try:
        p = beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=PipelineOptions(args))
        build(p)
        result = p.run()
        result.wait_until_finish()
    finally:
        context.setJobGroup(None, None)
    return result, len(context.statusTracker().getJobIdsForGroup(group))


def _small(p):
    counted = (
        p
        | beam.Create(list(range(10)))
        | beam.Map(lambda x: (x % 3, x))
        | beam.GroupByKey()
        | beam.Map(lambda kv: (kv[0], sorted(kv[1])))
        | beam.combiners.Count.Globally()
    )
    assert_that(counted, equal_to([3]))


def _side_inputs_and_outputs(p):
    side = p | 'Side' >> beam.Create([('a', 1), ('b', 2)])
    outs = (
        p
        | 'Main' >> beam.Create(list(range(20)))
        | beam.Map(lambda x, d: (x, d['a'] + d['b']), d=beam.pvalue.AsDict(side))
        | beam.ParDo(_Split()).with_outputs('odd', main='even')
    )
    assert_that(
        outs.even | 'SumEven' >> beam.CombineGlobally(sum),
        equal_to([sum(x + 3 for x in range(0, 20, 2))]),
        label='even',
    )
    assert_that(
        outs.odd | beam.combiners.Count.PerElement(),
        equal_to([((x, 3), 1) for x in range(1, 20, 2)]),
        label='odd',
    )


class _Split(beam.DoFn):
    def process(self, kv):
        x, s = kv
        if x % 2:
            yield beam.pvalue.TaggedOutput('odd', kv)
        else:
            yield x + s


class _Counting(beam.DoFn):
    def __init__(self):
        self.seen = Metrics.counter('small', 'seen')

    def process(self, x):
        self.seen.inc()
        for i in range(5000):
            yield x * 5000 + i


def _grows(p):
    """Ten elements that become 50,000 crossing a GroupByKey: past the
    limit, on Spark."""
    counted = (
        p
        | beam.Create(list(range(10)))
        | beam.ParDo(_Counting())
        | beam.Map(lambda x: (x % 7, x))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, xs: (k, sum(xs)))
    )
    assert_that(
        counted, equal_to([(k, sum(x for x in range(50000) if x % 7 == k)) for k in range(7)])
    )


def _heavy(p):
    """Four seeds that become 1M elements combined within their stage: tiny
    input and output, much work; handed over by its element count (or its pace)."""
    counted = (
        p
        | beam.Create(list(range(4)))
        | beam.FlatMap(lambda s: range(s * 250_000, (s + 1) * 250_000))
        | beam.Map(lambda x: (x % 5, x))
        | beam.CombinePerKey(sum)
    )
    assert_that(counted, equal_to([(k, sum(range(k, 1_000_000, 5))) for k in range(5)]))


@pytest.mark.parametrize(
    'build',
    [_small, _side_inputs_and_outputs, _grows, _heavy],
    ids=['small', 'side_inputs_and_outputs', 'grows', 'heavy'],
)
def test_results_match_fnapi_runner(spark, build, unhurried):
    with beam.Pipeline(runner=FnApiRunner()) as p:
        build(p)  # assert_that checks Beam's own result
    _, jobs = _jobs(spark, build)
    if build in (_grows, _heavy):
        assert jobs >= 1  # handed over to Spark
    else:
        assert jobs == 0


PER_SEED = 4000


class _Where(beam.DoFn):
    """A seed's PER_SEED elements; counts seeds per Spark partition (TaskContext
    is None in the driver: a dropped driver run's counts are not committed)."""

    def process(self, seed):
        from pyspark import TaskContext

        context = TaskContext.get()
        where = 'driver' if context is None else f'partition-{context.partitionId()}'
        Metrics.counter('where', where).inc()
        yield from range(seed * PER_SEED, (seed + 1) * PER_SEED)


def _handed_over(p):
    """Eight seeds that become 32,000 elements in their stage: past the
    bytes limit (~160 KB of GroupByKey values; 8000 elements were, as
    windowed elements, before GroupByKey inputs kept values only), so the
    stage is handed over to Spark with its tiny input."""
    sums = (
        p
        | beam.Create(list(range(8)))
        | beam.ParDo(_Where())
        | beam.Map(lambda x: (x % 3, x))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, xs: (k, sum(xs)))
    )
    assert_that(sums, equal_to([(k, sum(range(k, 8 * PER_SEED, 3))) for k in range(3)]))


def test_handed_over_stage_runs_on_every_core(spark):
    """A stage handed over reads its input (here the seeds of Create's
    Reshuffle) spread over the run's parallelism: one task per core, not
    the whole stage in one task (P1 at 4M ran 1.56x slower so)."""
    from beam_spark_inproc.spark import session

    with beam.Pipeline(runner=FnApiRunner()) as p:
        _handed_over(p)
    result, jobs = _jobs(spark, _handed_over)
    assert jobs >= 1
    counters = result.metrics().query(MetricsFilter().with_namespace('where'))['counters']
    seeds = {c.key.metric.name: c.committed for c in counters if c.committed}
    ways = session.parallelism(spark, None)
    assert seeds == {f'partition-{i}': 8 // ways for i in range(ways)}, seeds


def test_hand_over_on_time_logs_no_error(spark, caplog):
    """A driver run dropped for Spark is no error of the user's: Beam's
    DoFnRunner, which logs any exception leaving a DoFn, stays quiet."""
    with caplog.at_level(logging.ERROR, logger='apache_beam'):
        _, jobs = _jobs(spark, _heavy)
    assert jobs >= 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_expanding_stage_handed_over_by_its_element_count(spark, unhurried):
    """Four seeds a FlatMap turns into 1M elements: the stage is handed over
    once its operations have moved ``MAX_ELEMENTS`` elements, whatever its
    pace says (Spark's cost here an hour: by time alone the whole stage ran in
    the driver, no Spark job); the result is FnApiRunner's."""
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _heavy(p)
    _, jobs = _jobs(spark, _heavy)
    assert jobs >= 1  # output 5 rows: only the element count hands it over


def test_on_by_default(spark, monkeypatch, unhurried):
    """Without the option or the variable tiny stages run in the driver."""
    from beam_spark_inproc.options import SMALL_DATA_ENV

    monkeypatch.delenv(SMALL_DATA_ENV, raising=False)
    _, jobs = _jobs(spark, _small, [])
    assert jobs == 0


def test_off_runs_on_spark(spark):
    _, jobs = _jobs(spark, _small, OFF)
    assert jobs >= 1


def test_dropped_driver_run_counts_metrics_once(spark):
    result, jobs = _jobs(spark, _grows)
    assert jobs >= 1
    counters = result.metrics().query(MetricsFilter().with_name('seen'))['counters']
    assert [c.committed for c in counters] == [10]


class _Unpicklable:
    def __reduce__(self):
        raise pickle.PicklingError('this object does not pickle')


def test_task_that_does_not_pickle_fails_as_on_spark(spark):
    holder = {}

    def build(p):
        bad = _Unpicklable()
        (p | beam.Create([1, 2]) | beam.Map(lambda x: (x, holder.get('bad', bad))))

    errors = []
    for args in (ON, OFF):
        with pytest.raises(Exception) as info:
            _jobs(spark, build, args)
        errors.append(info.value)
    assert all('does not pickle' in str(e) for e in errors), errors


def test_user_error_names_transform_as_on_spark(spark):
    def fail(x):
        if x == 3:
            raise ValueError('bad element %d' % x)
        return x

    def build(p):
        p | beam.Create([1, 2, 3]) | 'Explode' >> beam.Map(fail)

    with pytest.raises(PipelineExecutionError) as info:
        _jobs(spark, build)
    message = str(info.value)
    assert message.startswith("Beam transform 'Explode' failed (stage ")
    assert 'ValueError: bad element 3' in message
    assert "raise ValueError('bad element %d' % x)" in info.value.worker_traceback
    assert info.value.transform == 'Explode'


def test_user_error_as_on_spark_without_thread_names_in_logs(spark, monkeypatch, caplog):
    """With ``logging.logThreads`` off log records carry no thread name: a
    driver bundle's failure still reaches the caller naming its transform,
    and Beam's log of it stays quiet (a Spark worker's stays in its task)."""
    monkeypatch.setattr(logging, 'logThreads', False)

    def fail(x):
        if x == 3:
            raise ValueError('bad element %d' % x)
        return x

    def build(p):
        p | beam.Create([1, 2, 3]) | 'Explode' >> beam.Map(fail)

    with caplog.at_level(logging.ERROR, logger='apache_beam'):
        with pytest.raises(PipelineExecutionError) as info:
            _jobs(spark, build)
    assert info.value.transform == 'Explode'
    assert 'ValueError: bad element 3' in str(info.value)
    assert not [r for r in caplog.records if r.name == 'apache_beam.runners.common'], caplog.text


def _heavy_total(p):
    """``_heavy``'s work, then CombineGlobally: its default is injected by a
    1-element stage (DoOnce) reading the combined value as a side input."""
    total = (
        p
        | beam.Create(list(range(4)))
        | beam.FlatMap(lambda s: range(s * 250_000, (s + 1) * 250_000))
        | beam.Map(lambda x: (x % 5, x))
        | beam.CombinePerKey(sum)
        | beam.Values()
        | beam.CombineGlobally(sum)
    )
    assert_that(total, equal_to([sum(range(1_000_000))]))


def test_later_tiny_stage_runs_in_the_driver_after_a_hand_over(spark, monkeypatch, unhurried):
    """The expanding stage is handed over; CombineGlobally's last stage (a
    1-element Create reading the combined value as a side input) holds its
    input in the driver and runs there: one Spark job fewer than when the first
    hand-over made the rest of the run Spark's (``MAX_HANDOVERS`` 1); the
    result is FnApiRunner's. Hand-over by element count only (``unhurried``)."""
    from beam_spark_inproc.execution import small

    with beam.Pipeline(runner=FnApiRunner()) as p:
        _heavy_total(p)
    _, jobs = _jobs(spark, _heavy_total)
    monkeypatch.setattr(small, 'MAX_HANDOVERS', 1)
    _, jobs_before = _jobs(spark, _heavy_total)
    assert jobs >= 1 and jobs == jobs_before - 1, (jobs, jobs_before)


SIDE_SEEDS, PER_SIDE_SEED = 4, 5000


def _large_side_input(p):
    """Four seeds that become 20,000 side-input entries (past the driver's
    row and byte limits), read as an AsDict by ten main elements."""
    side = (
        p
        | 'SideSeeds' >> beam.Create(list(range(SIDE_SEEDS)))
        | 'Entries'
        >> beam.FlatMap(
            lambda s: ((k, k * 3) for k in range(s * PER_SIDE_SEED, (s + 1) * PER_SIDE_SEED))
        )
    )
    looked_up = (
        p
        | 'Main' >> beam.Create(list(range(10)))
        | beam.Map(lambda x, table: (x, table[x * 1999]), table=beam.pvalue.AsDict(side))
    )
    assert_that(looked_up, equal_to([(x, x * 1999 * 3) for x in range(10)]))


def test_side_input_stage_stays_in_the_driver_past_the_size_limits(spark, monkeypatch, unhurried):
    """A stage whose output is read only as a side input (collected to the
    driver whole anyway, ``StageTask.collected``) runs in the driver whatever
    its output's size: no Spark job; with ``COLLECTED_SECONDS`` 0 it has the
    usual limits and is handed over by its 20,000 rows. The result is
    FnApiRunner's (``assert_that``) both ways. The clock is lifted (a loaded
    machine may pass 0.6 s)."""
    from beam_spark_inproc.execution import small

    with beam.Pipeline(runner=FnApiRunner()) as p:
        _large_side_input(p)
    monkeypatch.setattr(small, 'COLLECTED_SECONDS', 3600.0)
    _, jobs = _jobs(spark, _large_side_input)
    assert jobs == 0
    monkeypatch.setattr(small, 'COLLECTED_SECONDS', 0)
    _, jobs_before = _jobs(spark, _large_side_input)
    assert jobs_before >= 1


class _Slow(beam.DoFn):
    def process(self, seed):
        import time

        time.sleep(0.3)
        yield seed, seed


def test_slow_side_input_stage_is_handed_over_by_its_pace(spark, monkeypatch):
    """Its pace still hands a side-input stage over: twelve elements of 0.3 s
    each, Spark costing 0.3 s (and the collect, ``COLLECTED_SECONDS``): after
    three elements the driver's rest (2.7 s) is longer than Spark's whole
    stage on two cores (0.6 + 1.8 s)."""
    from beam_spark_inproc.execution import small

    monkeypatch.setattr(small, 'COLLECTED_SECONDS', 0.3)
    pin_spark_cost(monkeypatch, 0.3)
    seeds = list(range(12))

    def build(p):
        side = p | 'Side' >> beam.Create(seeds) | beam.ParDo(_Slow())
        got = (
            p
            | 'Main' >> beam.Create(seeds)
            | beam.Map(lambda x, d: d[x] * 10, d=beam.pvalue.AsDict(side))
        )
        assert_that(got, equal_to([x * 10 for x in seeds]))

    _, jobs = _jobs(spark, build)
    assert jobs >= 1


# What ``_Recorded`` did in this process (the driver): the DoFn unpickled in
# the driver finds this very list; in Spark's workers it records nothing.
_DRIVER_ELEMENTS: list = []


class _Recorded(beam.DoFn):
    """Records each element's start and end when it runs in the process that
    built it (the driver), taking 0.2 s an element there."""

    def __init__(self):
        import os

        self._driver = os.getpid()

    def process(self, x):
        import os
        import time

        here = os.getpid() == self._driver
        if here:
            _DRIVER_ELEMENTS.append(('start', x))
            time.sleep(0.2)
        yield x * 10
        if here:
            _DRIVER_ELEMENTS.append(('end', x))


def test_a_driver_run_stops_between_elements_never_inside_one(spark, monkeypatch):
    """A stage whose pace hands it over (0.2 s an element, Spark costing
    0.1 s) leaves the driver between two of its inputs: every element it
    started there ran to its end (nothing is raised into a running element),
    it stopped before its last input, and the result is FnApiRunner's."""
    pin_spark_cost(monkeypatch, 0.1)
    _DRIVER_ELEMENTS.clear()

    def build(p):
        got = p | beam.Create(list(range(8))) | beam.ParDo(_Recorded())
        assert_that(got, equal_to([x * 10 for x in range(8)]))

    with beam.Pipeline(runner=FnApiRunner()) as p:
        build(p)
    _DRIVER_ELEMENTS.clear()  # FnApiRunner ran it in this process too
    _, jobs = _jobs(spark, build)
    assert jobs >= 1  # handed over to Spark
    started = [x for event, x in _DRIVER_ELEMENTS if event == 'start']
    ended = [x for event, x in _DRIVER_ELEMENTS if event == 'end']
    assert started and started == ended, _DRIVER_ELEMENTS
    assert len(started) < 8, _DRIVER_ELEMENTS


def test_no_thread_is_left_running_after_a_hand_over(spark):
    """A dropped driver run leaves no bundle thread behind."""
    _, jobs = _jobs(spark, _heavy)
    assert jobs >= 1
    assert not [
        t for t in threading.enumerate() if t.name.startswith('beam-bundle-') and t.is_alive()
    ]


@pytest.fixture
def loaded(monkeypatch):
    """The machine as loaded as the issue's CI machine (load average 4 per
    core): Spark's cost scales with it (``hand_over.load_factor``)."""
    import os

    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, 'getloadavg', lambda: (4.0 * cores, 4.0 * cores, 4.0 * cores))


class _Sluggish(beam.DoFn):
    """0.1 s an element, as a loaded machine makes a tiny stage's elements."""

    def process(self, x):
        import time

        time.sleep(0.1)
        yield x % 2, x


def _tiny_sluggish(p):
    sums = p | beam.Create(list(range(5))) | beam.ParDo(_Sluggish()) | beam.CombinePerKey(sum)
    assert_that(sums, equal_to([(0, 6), (1, 4)]))


def test_a_tiny_slow_stage_stays_in_the_driver_on_a_loaded_machine(spark, loaded):
    """Five elements that take 0.5 s in the driver (past the 0.3 s a quiet
    machine's Spark job costs): on a machine this loaded a Spark job costs
    more than the whole stage here, so it runs in the driver, no Spark job.
    The result is FnApiRunner's."""
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _tiny_sluggish(p)
    _, jobs = _jobs(spark, _tiny_sluggish)
    assert jobs == 0


def test_a_big_stage_still_goes_to_spark_on_a_loaded_machine(spark, loaded):
    """Four seeds that become 1M elements: handed over by their data (the
    elements the stage moved), however much Spark costs now."""
    _, jobs = _jobs(spark, _heavy)
    assert jobs >= 1


class _Steady(beam.DoFn):
    """0.02 s an element; records the elements run in the driver (TaskContext
    is None there)."""

    def process(self, x):
        import time

        from pyspark import TaskContext

        if TaskContext.get() is None:
            _STEADY_IN_DRIVER.append(x)
        time.sleep(0.02)
        yield x


_STEADY_IN_DRIVER: list = []


def test_many_slow_elements_leave_the_driver_early(spark, monkeypatch):
    """200 elements of 0.02 s (4 s in the driver), Spark costing 0.3 s: the
    stage's pace hands it over once the driver has spent about that, after a
    fraction of its input; the result is FnApiRunner's."""
    pin_spark_cost(monkeypatch, 0.3)

    def build(p):
        got = p | beam.Create(list(range(200))) | beam.ParDo(_Steady())
        assert_that(got | beam.CombineGlobally(sum), equal_to([sum(range(200))]))

    with beam.Pipeline(runner=FnApiRunner()) as p:
        build(p)
    _STEADY_IN_DRIVER.clear()
    _, jobs = _jobs(spark, build)
    assert jobs >= 1
    assert 0 < len(_STEADY_IN_DRIVER) < 100, len(_STEADY_IN_DRIVER)
