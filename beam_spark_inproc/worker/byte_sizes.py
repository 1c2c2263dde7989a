"""Beam's sampled byte sizes of PCollections: off unless asked for.

Beam's SDK estimates the encoded size of sampled elements of every
PCollection in a bundle (``OperationCounters``: reservoir sampling, the first
10 elements of a processor's life always, then fewer and fewer) and reports
them as ``beam:metric:sampled_byte_size:v1``. An estimate encodes the element,
so its cost grows with the element: a PCollection of batches (``BatchElements``
before ``RunInference``: lists of up to 10,000 numpy arrays) pickles every
array of every sampled batch, and with few, large elements most of them are
sampled. Measured on RunInference with scikit-learn (docs/performance.md):
a third of the stage's CPU time.

The runner therefore takes no samples unless ``--spark_sampled_byte_sizes``
is given: element counts (``ELEMENT_COUNT``, which progress reports use) are
counted as before; only the byte-size distributions are missing from
``monitoring_metrics()``. With the option, Beam's sampling runs unchanged.

How: a processor's output counters take their next sample when their element
count reaches ``_next_sample`` (a public field of Beam's Cython
``OperationCounters``); set beyond reach, they never sample.
"""
from __future__ import annotations

from apache_beam.runners.worker import bundle_processor

OPTION = 'spark_sampled_byte_sizes'
_NEVER = 1 << 62


def wanted(runtime_options: tuple) -> bool:
    """Whether the pipeline asked for sampled byte sizes (its options as the
    task carries them, ``StageTask.runtime_options``)."""
    return bool(dict(runtime_options).get(OPTION))


def stop_sampling(processor: bundle_processor.BundleProcessor) -> None:
    """The processor's output counters take no byte-size samples."""
    for op in processor.ops.values():
        for receiver in getattr(op, 'receivers', None) or ():
            receiver.opcounter._next_sample = _NEVER
