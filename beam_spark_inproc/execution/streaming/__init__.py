"""Streaming: unbounded pipelines as a driver-side loop of micro-batches.

A pipeline with an unbounded PCollection (a TestStream) or ``--streaming`` runs
here instead of the batch executor: ``run`` starts the loop in a driver thread
and returns a ``StreamingPipelineResult`` at once. Each micro-batch is ordinary
batch work on the engine (debug or Spark): the same StageTask in the workers,
with per-stage watermarks kept in the driver, GroupByKey state and trigger
state kept per key between micro-batches as Parquet under the checkpoint
location (``store``, ``worker.streaming``), and TestStream events replayed as
the source (``teststream_source``). What the loop cannot run yet is rejected before
it starts (``support``).

The loop (``loop.StreamingExecutor``) decides what runs when; its parts each
have a module: the sources it steps (``source``) and the driver's rows as
engine data (``feed``), how each kind of stage is built (``steps``), the
per-stage watermarks
(``watermarks``), the state-bucket table (``buckets``), one micro-batch's
bookkeeping (``micro_batch``), stage tasks and the side-input values they
carry (``tasks``), side-input gates (``side_inputs``), splittable DoFns'
residuals (``residuals``), the next micro-batch built ahead (``prebuild``),
WriteToSpark and SparkSql stages (``spark_sinks``), the commit record and
restart from it (``restart``), draining (``drain``), and the progress each
micro-batch reports (``progress``; read back from a checkpoint by
``beam_spark_inproc.status``).
"""
