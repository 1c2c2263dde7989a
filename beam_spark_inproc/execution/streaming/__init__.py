"""Streaming: unbounded pipelines as a driver-side loop of micro-batches.

A pipeline with an unbounded PCollection (a TestStream) or ``--streaming`` runs
here instead of the batch executor: ``run`` starts the loop in a driver thread
and returns a ``StreamingPipelineResult`` at once. Each micro-batch is ordinary
batch work on the engine (debug or Spark): the same StageTask in the workers,
with per-stage watermarks kept in the driver (``loop``), GroupByKey state and
trigger state kept per key between micro-batches as Parquet under the checkpoint
location (``store``, ``worker.streaming``), and TestStream events replayed as
the source (``teststream_source``). What the loop cannot run yet is rejected before
it starts (``support``).
"""
