"""beam-spark-inproc: run Apache Beam Python pipelines on Apache Spark, in-process.

    import apache_beam as beam
    from beam_spark_inproc import InProcessSparkRunner

    with beam.Pipeline(runner=InProcessSparkRunner()) as p:
        ...

or ``--runner=beam_spark_inproc.InProcessSparkRunner`` on the command line.
Data flow: pipeline proto -> ``capabilities.check`` -> ``planning`` (Beam's
fusion phases, one ProcessBundleDescriptor per fused stage) -> ``spark`` (one
DataFrame per stage; DoFns run by Beam's BundleProcessor in ``worker``).

The names below are loaded on first use (PEP 562): a Spark Python worker that
unpickles a stage's task imports ``beam_spark_inproc.worker`` through this
package and must not load the runner, planner and options with it
(``tests/unit/test_worker_imports.py``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from beam_spark_inproc.errors import PipelineExecutionError
    from beam_spark_inproc.errors import UnsupportedPipelineError
    from beam_spark_inproc.options import SparkRunnerOptions
    from beam_spark_inproc.runner import InProcessSparkRunner

_EXPORTS = {
    'InProcessSparkRunner': 'beam_spark_inproc.runner',
    'PipelineExecutionError': 'beam_spark_inproc.errors',
    'SparkRunnerOptions': 'beam_spark_inproc.options',
    'UnsupportedPipelineError': 'beam_spark_inproc.errors',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
