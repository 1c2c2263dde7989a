"""beam-spark-inproc: run Apache Beam Python pipelines on Apache Spark, in-process.

    import apache_beam as beam
    from beam_spark_inproc import InProcessSparkRunner

    with beam.Pipeline(runner=InProcessSparkRunner()) as p:
        ...

or ``--runner=beam_spark_inproc.InProcessSparkRunner`` on the command line.
Data flow: pipeline proto -> ``capabilities.check`` -> ``planning`` (Beam's
fusion phases, one ProcessBundleDescriptor per fused stage) -> ``spark`` (one
DataFrame per stage; DoFns run by Beam's BundleProcessor in ``worker``);
driver and worker agree on rows, reports and state buckets through ``protocol``.

The names below are loaded on first use (PEP 562): a Spark Python worker that
unpickles a stage's task imports ``beam_spark_inproc.worker`` through this
package and must not load the runner, planner and options with it
(``tests/unit/test_worker_imports.py``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import pathlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from beam_spark_inproc.errors import PipelineExecutionError as PipelineExecutionError
    from beam_spark_inproc.errors import SparkMasterError as SparkMasterError
    from beam_spark_inproc.errors import UnsupportedBeamVersion as UnsupportedBeamVersion
    from beam_spark_inproc.errors import UnsupportedPipelineError as UnsupportedPipelineError
    from beam_spark_inproc.options import SparkRunnerOptions as SparkRunnerOptions
    from beam_spark_inproc.runner import InProcessSparkRunner as InProcessSparkRunner

# The package's version: setup.cfg reads it from here, and CHANGELOG.md's top
# entry names it (tests/unit/test_version.py).
__version__ = '0.2.0'

_EXPORTS = {
    'InProcessSparkRunner': 'beam_spark_inproc.runner',
    'PipelineExecutionError': 'beam_spark_inproc.errors',
    'SparkMasterError': 'beam_spark_inproc.errors',
    'SparkRunnerOptions': 'beam_spark_inproc.options',
    'UnsupportedBeamVersion': 'beam_spark_inproc.errors',
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


class _SourceTreeTransforms(importlib.abc.MetaPathFinder):
    """Finds ``beam_spark_inproc.transforms`` in a source checkout.

    Installed, the top-level ``transforms/`` folder *is* this package's
    ``transforms`` subpackage (setup.cfg ``package_dir``). Run from a checkout
    (``python -m pytest`` puts the checkout first on ``sys.path``), this package
    has no such folder: the subpackage is then the ``transforms/`` beside it.
    """

    def __init__(self, folder: pathlib.Path):
        self._folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != __name__ + '.transforms':
            return None
        return importlib.util.spec_from_file_location(
            fullname, self._folder / '__init__.py', submodule_search_locations=[str(self._folder)]
        )


def _find_source_tree_transforms() -> None:
    here = pathlib.Path(__file__).parent
    beside = here.parent / 'transforms'
    if (here / 'transforms').is_dir() or not (beside / '__init__.py').is_file():
        return
    if not any(isinstance(f, _SourceTreeTransforms) for f in sys.meta_path):
        sys.meta_path.append(_SourceTreeTransforms(beside))


_find_source_tree_transforms()
