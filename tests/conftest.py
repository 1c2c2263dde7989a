"""Shared test setup: one local SparkSession for the whole run."""

from __future__ import annotations

import logging
import os

import pytest

# Py4J's INFO logs would drown test output.
logging.getLogger('py4j').setLevel(logging.WARNING)

# The suite runs with the options users get: tiny stages run in the driver
# (``execution.small``); a test that checks Spark's own execution (jobs, task
# retries, shipping, workers) passes ``--spark_small_data_kb=0`` itself.

SPARK_MASTER = os.environ.get('BEAM_SPARK_TEST_MASTER', 'local[2]')
# Separate executor JVMs (``tests/cluster``): run by tests/test_cluster_tier.py in
# a process of its own, as a process holds one SparkContext.
CLUSTER = SPARK_MASTER.startswith('local-cluster')
collect_ignore = [] if CLUSTER else ['cluster']


def shared_session():
    """The test run's SparkSession (created on first use, reused afterwards)."""
    from beam_spark_inproc.spark import session

    conf = {
        'spark.sql.shuffle.partitions': '4',
        'spark.driver.memory': '2g',
    }
    if CLUSTER:
        conf.update(
            {
                # Retries as on a real cluster (local masters take them from the URL).
                'spark.task.maxFailures': '4',
                'spark.excludeOnFailure.enabled': 'false',
            }
        )
    spark, _ = session.get_or_create(SPARK_MASTER, None, conf)
    return spark


@pytest.fixture(scope='session')
def spark():
    return shared_session()
