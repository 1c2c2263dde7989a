"""The worker boundary at run time: what a Spark Python worker loads for a task.

A subprocess unpickles a StageTask (with a side input shipped as a file, as
Spark sends it) after importing only what PySpark's worker imports itself, and
lists the modules that appeared: of this package, only ``worker/``, the
driver-worker contract (``protocol/``), the plain data of ``planning.plan``
and ``planning.ports``, what differs between the dependencies' releases
(``compat/``) and the errors it raises (``errors``: the standard library
only) may load; nothing of the runner, planner, options or the driver's
Spark package, and no PySpark module. Rerun the measurement with
``python tests/benchmarks/worker_imports.py``.
"""

from __future__ import annotations

import pathlib
import sys

from tests.benchmarks import worker_imports

ALLOWED = (
    'beam_spark_inproc.worker',
    'beam_spark_inproc.protocol',
    'beam_spark_inproc.planning.plan',
    'beam_spark_inproc.planning.ports',
    'beam_spark_inproc.compat',
    'beam_spark_inproc.errors',
)
# A package's __init__ runs when a submodule loads; these stay empty of imports.
PACKAGES = ('beam_spark_inproc', 'beam_spark_inproc.planning')


def test_a_worker_loads_only_worker_modules(tmp_path: pathlib.Path):
    path = str(tmp_path / 'task.pkl')
    worker_imports.pickled_task(path)
    loaded = worker_imports.probe(path)['loaded']
    ours = [m for m in loaded if m.split('.')[0] == 'beam_spark_inproc']
    assert 'beam_spark_inproc.worker.stage_task' in ours  # the probe ran
    assert 'beam_spark_inproc.worker.shipped' in ours
    driver = [m for m in ours if m not in PACKAGES and not m.startswith(ALLOWED)]
    assert not driver, f'a worker loaded driver modules: {driver}'
    assert not [m for m in loaded if m.startswith('pyspark.sql')], loaded


def test_package_face_is_lazy_and_complete():
    import beam_spark_inproc

    for name in beam_spark_inproc.__all__:
        assert getattr(beam_spark_inproc, name).__name__ == name
    assert set(beam_spark_inproc.__all__) <= set(dir(beam_spark_inproc))
    try:
        _ = beam_spark_inproc.NoSuchThing
    except AttributeError as e:
        assert 'NoSuchThing' in str(e)
    else:
        raise AssertionError('an unknown name must raise AttributeError')
    assert sys.modules['beam_spark_inproc.runner']
