"""Executors import the user's code without the user doing anything unusual."""

from __future__ import annotations

import importlib
import sys
import uuid

import apache_beam as beam
import pyarrow as pa
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from beam_spark_inproc import InProcessSparkRunner

# What executors import: every stage on Spark, none of these tiny stages in
# the driver (``execution.small``), which has the driver's modules.
ON_SPARK = ['--spark_small_data_kb=0']


def _importable_on_executors(spark, name: str) -> bool:
    """Whether executors' Python workers can import ``name`` (plain Spark job)."""

    def probe(batches):
        import importlib

        for batch in batches:
            try:
                importlib.import_module(name)
                ok = True
            except ImportError:
                ok = False
            yield pa.RecordBatch.from_pydict({'ok': [ok] * batch.num_rows})

    rows = spark.range(4, numPartitions=2).mapInArrow(probe, 'ok boolean').collect()
    return all(r.ok for r in rows)


def test_module_next_to_the_script_is_shipped(spark, tmp_path):
    name = f'user_helper_{uuid.uuid4().hex[:8]}'
    (tmp_path / f'{name}.py').write_text(
        'def double(x):\n    return 2 * x\n\n'
        'class Tag:\n    def __init__(self, label):\n        self.label = label\n'
    )
    assert not _importable_on_executors(spark, name)
    sys.path.insert(0, str(tmp_path))  # as for a helper next to a pipeline script
    try:
        helper = importlib.import_module(name)
        with beam.Pipeline(
            runner=InProcessSparkRunner(spark=spark), options=PipelineOptions(ON_SPARK)
        ) as p:
            out = (
                p
                | beam.Create([1, 2, 3])
                | beam.Map(helper.double)  # pickled by reference to the module
                | beam.Map(lambda x, t: (t.label, x), t=helper.Tag('doubled'))
            )
            assert_that(out, equal_to([('doubled', 2), ('doubled', 4), ('doubled', 6)]))
    finally:
        sys.path.remove(str(tmp_path))


class _ImportsByName(beam.DoFn):
    """Imports a module the driver never imported (only --spark_py_files has it)."""

    def __init__(self, name):
        self._name = name

    def process(self, x):
        yield importlib.import_module(self._name).triple(x)


def test_spark_py_files_reach_the_executors(spark, tmp_path):
    name = f'extra_helper_{uuid.uuid4().hex[:8]}'
    path = tmp_path / f'{name}.py'
    path.write_text('def triple(x):\n    return 3 * x\n')
    assert not _importable_on_executors(spark, name)
    options = PipelineOptions([f'--spark_py_files={path}', *ON_SPARK])
    with beam.Pipeline(runner=InProcessSparkRunner(spark=spark), options=options) as p:
        out = p | beam.Create([1, 2]) | beam.ParDo(_ImportsByName(name))
        assert_that(out, equal_to([3, 6]))
