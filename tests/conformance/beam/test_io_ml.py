"""Beam's IO and ML-inference test modules on Spark (``conftest``: runner
selection; ``skips``: what cannot hold on a multi-process runner, each
measured on FnApiRunner with two workers).

What these exercise that the transform tests do not: the ``Watch`` transform
(a splittable DoFn polling in rounds of self-checkpoints), ``WatchFilePattern``'s
steps, file reads and writes split over partitions (text, Avro, Parquet,
TFRecord, ``fileio``'s matches and dynamic writes, ``FileBasedSource``/``Sink``)
with relative paths resolved in the driver's working directory
(``worker.directory``), ``BoundedSource`` reads through Beam's SDF wrapper, and
``RunInference`` with models loaded in Spark's Python workers (scikit-learn,
``large_model`` shared across them).

CI runs ``watch_test``, ``utils_test`` and ``sklearn_inference_test`` (21
tests, 13 of them small pipelines); ``BEAM_SPARK_INPROC_FULL_CONFORMANCE=1``
adds the rest (about 430 tests, most of them pipelines): CI time
(docs/conformance.md).
"""

from tests.conformance.beam import tier

ENGINE = 'spark'
_IO, _ML = 'apache_beam.io.', 'apache_beam.ml.inference.'
CI = [_IO + 'watch_test', _ML + 'utils_test', _ML + 'sklearn_inference_test']
FULL = [
    _IO + m
    for m in (
        'textio_test',
        'avroio_test',
        'parquetio_test',
        'tfrecordio_test',
        'filebasedsource_test',
        'filebasedsink_test',
        'fileio_test',
        'sources_test',
        'concat_source_test',
        'iobase_test',
    )
] + [_ML + 'base_test']
MODULES = tier.load(globals(), *tier.chosen(CI, FULL))
