"""When a stage leaves the driver by its pace (``small.spark_sooner``) and
what Spark costs now (``SparkHandOver.cost``): the rule's arithmetic, without
Spark."""

from __future__ import annotations

import pytest

from beam_spark_inproc.execution.small import spark_sooner
from beam_spark_inproc.spark import engine
from beam_spark_inproc.spark import hand_over
from beam_spark_inproc.spark.hand_over import SparkHandOver


def test_a_tiny_stage_slowed_by_load_stays():
    # Four elements, three fed in 0.4 s (past a quiet machine's 0.3 s job):
    # a warm job at load factor 4 costs 1.2 s, more than the driver has spent.
    assert not spark_sooner(0.4, 3, 4, cost=1.2, parallelism=2)
    # Even past Spark's cost, the last element is no reason to redo three.
    assert not spark_sooner(1.5, 3, 4, cost=1.2, parallelism=2)


def test_many_slow_elements_go_to_spark_once_the_driver_spent_what_spark_costs():
    # 31 of 200 elements in 0.62 s: the driver's rest (3.4 s) is longer than
    # Spark's whole stage on two cores (0.3 + 4.0 / 2 s).
    assert spark_sooner(0.62, 31, 200, cost=0.3, parallelism=2)
    # The same pace before the driver has spent Spark's cost: not yet.
    assert not spark_sooner(0.28, 14, 200, cost=0.3, parallelism=2)


def test_a_cold_session_keeps_a_long_stage_here():
    # A session still to start (10 s): a stage of ~4 s stays in the driver.
    assert not spark_sooner(1.0, 50, 200, cost=10.0, parallelism=2)
    # A stage of ~400 s does not.
    assert spark_sooner(11.0, 5, 200, cost=10.0, parallelism=2)


def test_one_core_never_pays_for_redoing_the_work():
    assert not spark_sooner(5.0, 1, 1000, cost=0.3, parallelism=1)
    # Nor handing over only the rest (a split run): on one core it takes as
    # long there, plus the cost.
    assert not spark_sooner(5.0, 1, 1000, cost=0.3, parallelism=1, redo=False)


def test_a_split_run_hands_over_its_rest_where_two_cores_halve_it():
    # The rest (6 s) on two cores: 3 s + a first job of 2 s.
    assert spark_sooner(3.0, 100, 300, cost=2.0, parallelism=2, redo=False)
    # The rest (3 s): 1.5 s + 2 s, longer than finishing here.
    assert not spark_sooner(3.0, 150, 300, cost=2.0, parallelism=2, redo=False)


@pytest.mark.parametrize('fed', [0, 200])
def test_nothing_fed_or_everything_fed_hands_nothing_over(fed):
    assert not spark_sooner(100.0, fed, 200, cost=0.0, parallelism=2)


class _Start:
    def __init__(self, created: bool, ready: bool):
        self.created, self.ready = created, ready


class _Session:
    pass


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.setattr(hand_over, 'load_factor', lambda: 1.0)


def _cost(start, session) -> float:
    return SparkHandOver(lambda: session, lambda: None, 2, start=start).cost()


def test_spark_costs_by_the_state_of_its_session(quiet):
    session = _Session()
    assert _cost(_Start(False, False), session) == hand_over.START_SECONDS
    assert _cost(_Start(True, False), session) == hand_over.FIRST_JOB_SECONDS
    assert _cost(_Start(True, True), session) == hand_over.FIRST_JOB_SECONDS
    assert _cost(None, session) == hand_over.FIRST_JOB_SECONDS
    engine.mark_ran(session)
    assert _cost(_Start(True, True), session) == hand_over.JOB_SECONDS
    assert _cost(None, session) == hand_over.JOB_SECONDS
    assert hand_over.START_SECONDS > hand_over.FIRST_JOB_SECONDS > hand_over.JOB_SECONDS


def test_load_scales_what_spark_costs(monkeypatch):
    import os

    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, 'getloadavg', lambda: (6.0 * cores, 0.0, 0.0))
    assert hand_over.load_factor() == pytest.approx(6.0)
    session = _Session()
    engine.mark_ran(session)
    assert _cost(None, session) == pytest.approx(6.0 * hand_over.JOB_SECONDS)
    monkeypatch.setattr(os, 'getloadavg', lambda: (0.1, 0.0, 0.0))
    assert hand_over.load_factor() == 1.0
