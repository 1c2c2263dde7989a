"""Faults Spark survives inside a stream's stateful stage, on separate executor
JVMs with task retries (``local-cluster``; ``local[N]`` masters do not retry):
a Python worker dies mid-bundle (``os._exit``), or the executor JVM running
the stage is killed (its shuffle outputs are lost and recomputed). The
stream's output and committed metrics must equal a fault-free run's on Beam's
BundleBasedDirectRunner (``tests/streaming/stream_faults``).

Each Spark task of the stateful stage writes its state itself, a Parquet file
per attempt (``worker.streaming.state_io``); only the attempt Spark committed
reports its file, so a dead attempt's writes are never read, and the records
are written by a stage of their own after a Reshuffle (a result stage whose
tasks run after the fault, once). The duplicates once seen here (one
micro-batch's records twice) were recorded on the loop before that
design (a persisted stateful result read by separate jobs: one collected its
summaries, one wrote its state, later stages read its output, each able to
recompute it after the fault); on this design they did not come back in 15
runs of each fault at load 15-25.
"""

from __future__ import annotations

import pytest

from beam_spark_inproc import InProcessSparkRunner
from tests.streaming import stream_faults


@pytest.mark.parametrize('fault', ['exit', 'kill_executor'])
def test_stream_survives_fault_in_a_stateful_stage(spark, tmp_path, fault):
    stream_faults.check(InProcessSparkRunner(spark=spark), fault, str(tmp_path / 'fault-injected'))
