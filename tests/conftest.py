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


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config, items):
    """Marks the tests of ``tests/tiers.py``'s tiers (an entry that names no
    test is an error: the tier would silently shrink) and puts its longest
    files first."""
    import pathlib

    from tests.tiers import LONGEST_FIRST
    from tests.tiers import TIERS

    root = pathlib.Path(str(config.rootpath))
    first = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.nodeid.split('::', 1)[0], len(first)))
    collected = {item.nodeid.split('::', 1)[0] for item in items}
    for tier, entries in TIERS.items():
        marker = getattr(pytest.mark, tier)
        for entry in entries:
            path = entry.split('::', 1)[0]
            if not (root / path).exists():
                raise pytest.UsageError(
                    f'tests/tiers.py: {tier} names {path}, which does not exist'
                )
            matched = False
            for item in items:
                nodeid = item.nodeid
                if nodeid == entry or nodeid.startswith((entry + '::', entry + '[', entry + '/')):
                    item.add_marker(marker)
                    matched = True
            if not matched and '::' in entry and path in collected:
                raise pytest.UsageError(f'tests/tiers.py: {tier} names {entry}, which is no test')
