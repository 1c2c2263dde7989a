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
_IO, _ML = 'apache_beam.io.', 'apache_beam.ml.inference.'
CI = [_IO + 'watch_test', _ML + 'utils_test']
FULL = [_IO + m for m in (
    'textio_test', 'avroio_test', 'parquetio_test', 'tfrecordio_test',
    'filebasedsource_test', 'filebasedsink_test', 'fileio_test',
    'sources_test', 'concat_source_test', 'iobase_test')] + [
    _ML + 'base_test', _ML + 'sklearn_inference_test']
MODULES = tier.load(globals(), *tier.chosen(CI, FULL))
