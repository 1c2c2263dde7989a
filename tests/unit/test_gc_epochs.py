"""The Python workers' fixed cost per task (``worker.gc_epochs``,
``worker.processors.SAMPLING_MS``), in-process, without Spark.

``tests/integration/test_worker_gc.py`` checks both inside Spark's workers.
"""

from __future__ import annotations

import gc
import weakref

import apache_beam as beam
import pytest
from apache_beam.runners.worker import statesampler

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.worker import gc_epochs
from beam_spark_inproc.worker import processors
from tests.integration.outputs import run_to_lines


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


class _Cycle:
    def __init__(self):
        self.me = self


# ``gc.get_freeze_count()`` walks every frozen object (all of the test run's), so
# the epoch-by-epoch checks run on short epochs; the garbage test below runs the
# default length.
SHORT = 4


def test_a_task_freezes_what_is_alive_and_the_epochs_end_unfrozen(unfrozen):
    """An epoch of one task, then epochs of ``max_tasks``: frozen at an
    epoch's start only, unfrozen when its last task has finished."""
    epochs = gc_epochs.Epochs(active=True, max_tasks=SHORT)
    for length in (1, SHORT, SHORT):
        assert epochs.length == length
        for i in range(length):
            before = gc.get_freeze_count()
            epochs.task_started()
            assert gc.get_freeze_count() > 0
            assert (before == 0) == (i == 0)  # frozen at an epoch's start only
            epochs.task_finished()
            # Frozen until the epoch's last task has finished.
            assert (gc.get_freeze_count() == 0) == (i == length - 1)


def test_by_default_the_first_epoch_is_one_task_then_the_longest(unfrozen):
    """One full collection after the first task, then one every
    ``MAX_EPOCH_TASKS`` tasks: a worker's first 255 tasks end 2 epochs,
    not 8."""
    epochs = gc_epochs.Epochs(active=True, max_tasks=SHORT)
    ends = []
    for task in range(2 * SHORT + 1):
        epochs.task_started()
        assert gc.get_freeze_count() > 0
        epochs.task_finished()
        if gc.get_freeze_count() == 0:
            ends.append(task)
    assert ends == [0, SHORT, 2 * SHORT]
    default = gc_epochs.Epochs(active=True)
    default.task_started()
    default.task_finished()
    assert gc.get_freeze_count() == 0
    assert default.length == gc_epochs.MAX_EPOCH_TASKS == 256


def test_garbage_frozen_in_an_epoch_is_collected_after_it(unfrozen):
    """What dies while frozen is held only until the epoch ends."""
    epochs = gc_epochs.Epochs(active=True)
    epochs.task_finished()  # nothing frozen: nothing counted
    assert epochs.length == 1
    epochs.task_started()
    epochs.task_finished()  # epoch of 1 ends
    garbage = _Cycle()
    dead = weakref.ref(garbage)
    epochs.task_started()  # the next epoch: the cycle is frozen
    del garbage
    gc.collect()  # PySpark's collection after the task
    assert dead() is not None
    epochs.task_finished()
    for _ in range(gc_epochs.MAX_EPOCH_TASKS - 2):
        epochs.task_started()
        epochs.task_finished()
    gc.collect()
    assert dead() is not None  # the epoch's last task is still to come
    epochs.task_started()
    epochs.task_finished()
    gc.collect()  # after the epoch's last task: a full collection
    assert dead() is None


def test_only_a_worker_forked_by_pysparks_daemon_freezes(unfrozen):
    assert not gc_epochs.forked_by_pyspark_daemon()  # pytest's process
    epochs = gc_epochs.Epochs()
    epochs.task_started()
    assert epochs.active is False
    assert gc.get_freeze_count() == 0


class _SamplerPeriod(beam.DoFn):
    """The sampling period of the bundle's state sampler, and its thread."""

    def process(self, element):
        yield statesampler.get_current_tracker().sampling_period_ms


def test_bundles_sample_at_the_runners_period(tmp_path):
    """``SAMPLING_MS``, not Beam's 200 ms."""
    period = processors.SAMPLING_MS
    assert period != 200
    original = statesampler.StateSampler
    seen = run_to_lines(
        InProcessSparkRunner(debug=True),
        lambda p: p | beam.Create([1, 2]) | beam.ParDo(_SamplerPeriod()),
        str(tmp_path / 'out'),
    )
    assert seen == [str(period)] * 2
    assert statesampler.StateSampler is original  # put back after the build


class _Sleep(beam.DoFn):
    def process(self, element):
        import time

        time.sleep(0.05)
        yield element


def test_execution_time_metrics_are_still_reported():
    """The state sampler still measures: each ParDo's msecs are reported."""
    p = beam.Pipeline(runner=InProcessSparkRunner(debug=True))
    _ = p | beam.Create([1, 2, 3]) | 'Sleep' >> beam.ParDo(_Sleep())
    result = p.run()
    result.wait_until_finish()
    msecs = [
        m.committed
        for m in result.monitoring_metrics().query()['counters']
        if m.key.step == 'Sleep' and 'process_bundle_msecs' in m.key.metric.name
    ]
    assert msecs and msecs[0] > 0
