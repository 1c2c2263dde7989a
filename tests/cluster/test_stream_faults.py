"""Faults Spark survives inside a stream's stateful stage, on separate executor
JVMs with task retries (``local-cluster``; ``local[N]`` masters do not retry):
a Python worker dies mid-bundle (``os._exit``), or the executor JVM running
the stage is killed (its shuffle outputs are lost and recomputed). The
stream's output and committed metrics equal a fault-free run's on Beam's
BundleBasedDirectRunner (``tests/streaming/stream_faults``)."""
from __future__ import annotations

import pytest

from beam_spark_inproc import InProcessSparkRunner
from tests.streaming import stream_faults


@pytest.mark.parametrize('fault', ['exit', pytest.param(
    'kill_executor', marks=pytest.mark.xfail(strict=False, reason=(
        'issue #14, open: after the executor running the stateful stage was '
        'killed, the outputs of the timers fired in a later micro-batch came '
        'twice (a:[12], b:[13]) on 2026-11-23; not localized yet (recomputed '
        'cached partitions or the round-robin Reshuffle after the lost '
        'shuffle output are the suspects)')))])
def test_stream_survives_fault_in_a_stateful_stage(spark, tmp_path, fault):
    stream_faults.check(InProcessSparkRunner(spark=spark), fault,
                        str(tmp_path / 'fault-injected'))
