"""Worker side: runs inside Spark's Python workers (or the driver, in debug mode).

Never imports a driver module (``spark``, ``runner``...); what it shares with
the driver (row layout, control rows, reports, state buckets) is in
``protocol``. A ``StageTask`` is the
function given to ``DataFrame.mapInArrow``: it feeds the Arrow rows of a partition
to Beam's own ``BundleProcessor`` (cached per job and stage in each Python
process), grouping sorted keyed rows on the way for a GroupByKey, and streams the
bundle's outputs back as bounded Arrow batches while the bundle still runs.

Modules here serve batch and streaming stages alike (the task, the processor
cache, the data plane, SDF residuals, reports, logs, profiling); ``batch``
holds batch semantics (GroupAlsoByWindow of a key's whole input, large groups,
stateful stages one key at a time), on which ``streaming`` builds what a
micro-batch's task adds (panes, state and timers kept between micro-batches,
state buckets' I/O).
"""

from beam_spark_inproc.worker import logs as _logs

# In a Spark Python worker, unpickling a stage's task imports Beam through this
# package first: without Beam's import-time warning (``logs``).
_logs.import_beam_quietly()
