"""A hot key's values are iterated lazily (Beam's state-backed iterables), not
materialized as one list; past a memory budget its pages spill to a file."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner
from beam_spark_inproc.worker.batch import grouped_values

HOT, COLD = 500_000, 20_000  # the hot key's group encodes to ~2 MB


def _explode(i):
    key = 0 if i < HOT // COLD else i
    return ((key, j) for j in range(COLD))


def _summarize(kv):
    key, values = kv
    first = sum(values)
    again = sum(1 for _ in values)  # re-iterable
    return key, first, again, max(values), isinstance(values, list)


def _pipeline(p):
    return (
        p
        | beam.Create(list(range(HOT // COLD + 3)))
        | beam.FlatMap(_explode)
        | beam.GroupByKey()
        | beam.Map(_summarize)
    )


def _expected():
    """From Beam's FnApiRunner (its values are lists), minus the list flag."""
    with beam.Pipeline(runner=fn_runner.FnApiRunner()) as p:
        out = _pipeline(p) | beam.Map(lambda t: t[:4]).with_output_types(Any)
        assert_that(
            out,
            equal_to(
                [(0, HOT // COLD * sum(range(COLD)), HOT, COLD - 1)]
                + [
                    (i, sum(range(COLD)), COLD, COLD - 1)
                    for i in range(HOT // COLD, HOT // COLD + 3)
                ]
            ),
        )
    return [(0, HOT // COLD * sum(range(COLD)), HOT, COLD - 1)] + [
        (i, sum(range(COLD)), COLD, COLD - 1) for i in range(HOT // COLD, HOT // COLD + 3)
    ]


def _check(p, expected):
    out = _pipeline(p)
    # Small groups stay lists; the hot one is a lazily paged iterable.
    assert_that(out, equal_to([t + (t[0] != 0,) for t in expected]))


@pytest.fixture(scope='module')
def expected():
    return _expected()


def test_hot_key_lazy_on_spark(spark, expected):
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark)) as p:
        _check(p, expected)


def test_hot_key_spills_to_a_private_file(monkeypatch, expected):
    """Debug mode runs the same worker code in this process, where the memory
    budget can be set to nothing: every page goes through the spill file."""
    monkeypatch.setattr(grouped_values, 'MEMORY_BYTES', 0)
    spilled = []
    reset = grouped_values.GroupedValuesStore.reset

    def spy(self):
        spilled.append(self.spilled_bytes)
        reset(self)

    monkeypatch.setattr(grouped_values.GroupedValuesStore, 'reset', spy)
    with beam.Pipeline(runner=InProcessSparkRunner(debug=True)) as p:
        _check(p, expected)
    assert max(spilled) > 500_000, spilled  # all past the first MB inline
