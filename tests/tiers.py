"""The suite's tiers, by test path: ``python -m pytest -m quick`` or ``-m compat``.

``tests/conftest.py`` marks each collected test whose node id starts with an
entry below (a folder, a file, or a file's test, with or without its
parameters) and refuses an entry that names nothing, so a renamed test cannot
fall out of a tier unnoticed.

* ``quick``: what a contributor runs after changing a module (under 5 minutes
  on two cores): the unit tests, the debug engine's semantics, and one smoke of
  each way a pipeline reaches Spark.
* ``compat``: what each cell of the support matrix (``tox.ini``) runs: every
  place where Beam's, PySpark's or Python's versions differ is exercised at
  least once on Spark (about 6 minutes).

The whole suite (``python -m pytest``, what ``.ci/run`` runs) is every test.
"""

from __future__ import annotations

QUICK = (
    'tests/unit',
    # Batch semantics against FnApiRunner; the debug engine.
    'tests/conformance/test_fn_api_runner_suite.py',
    'tests/integration/test_debug_mode.py',
    'tests/integration/test_runner.py',
    # Streaming semantics against BundleBasedDirectRunner (debug engine).
    'tests/streaming/test_beam_test_stream_suite.py',
    'tests/streaming/test_beam_transforms_suite.py',
    'tests/streaming/test_default_trigger.py',
    'tests/streaming/test_triggers.py',
    'tests/streaming/test_side_inputs.py',
    'tests/streaming/test_key_state.py',
    'tests/streaming/test_state_buckets.py',
    'tests/streaming/test_drain.py',
    'tests/streaming/test_update.py',
    'tests/streaming/test_mode.py',
    'tests/streaming/test_progress.py',
    'tests/streaming/test_refusals.py',
    'tests/streaming/test_file_naming.py',
    # A smoke of each way to Spark: a script, a stream on Spark.
    'tests/integration/test_examples.py::test_wordcount',
    'tests/streaming/test_on_spark.py',
)

COMPAT = (
    'tests/unit',
    # Stages on Spark: the worker's data channel, Arrow, shipping, types.
    'tests/integration/test_batch_correctness.py',
    'tests/integration/test_engine_contract.py',
    'tests/integration/test_spark_files.py',
    'tests/integration/test_spark_interop.py',
    'tests/integration/test_state_timers.py::test_every_state_kind_per_key_and_window',
    'tests/integration/test_state_timers.py::test_event_time_timers_fire_in_order_until_none_remain',
    'tests/integration/test_debug_mode.py',
    'tests/integration/test_examples.py::test_wordcount',
    # Streams on Spark: Spark's sources and sinks, job tags and cancelling.
    'tests/streaming/test_on_spark.py',
    'tests/streaming/test_spark_source.py',
    'tests/streaming/test_spark_sinks.py',
    'tests/streaming/test_interrupt.py::test_ctrl_c_lets_the_micro_batch_under_way_commit',
)

TIERS = {'quick': QUICK, 'compat': COMPAT}

# The longest files (minutes, mostly other processes: a local cluster, a Spark
# Connect server, spark-submit), collected first so that pytest-xdist's two
# workers start them first rather than finishing on them.
LONGEST_FIRST = (
    'tests/test_cluster_tier.py',
    'tests/integration/test_spark_connect.py',
    'tests/integration/test_spark_submit.py',
    'tests/streaming/test_model_refresh.py',
)
