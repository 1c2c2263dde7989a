"""Beam's IO and ML-inference test modules on Spark (``conftest``: runner
selection; ``skips``: what cannot hold on a multi-process runner, each
measured on FnApiRunner with two workers).

What these exercise that the transform tests do not: the ``Watch`` transform
(a splittable DoFn polling in rounds of self-checkpoints), ``WatchFilePattern``'s
steps, file reads and writes split over partitions with relative paths resolved
in the driver's working directory (``worker.directory``), and ``RunInference``
with models loaded in Spark's Python workers.

``watch_test`` and ``utils_test`` run in CI; ``textio_test`` and ``base_test``
(208 tests, most of them pipelines) with ``BEAM_SPARK_INPROC_FULL_CONFORMANCE=1`` only: CI
time (docs/conformance.md).
"""
from tests.conformance.beam import tier

ENGINE = 'spark'
NAMES = ['apache_beam.io.watch_test',
         'apache_beam.ml.inference.utils_test']
if tier.FULL:
    NAMES += ['apache_beam.io.textio_test',
              'apache_beam.ml.inference.base_test']
MODULES = tier.load(globals(), *NAMES)
