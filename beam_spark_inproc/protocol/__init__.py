"""The contract between driver and worker: what both sides must agree on.

Everything a task and the driver exchange, apart from the task itself
(``worker.stage_task.StageTask``, which the driver builds), is defined here
once and imported by both sides:

* ``rows``: the row layout of every stage boundary, ``(tag, key, data)``; the
  control rows' tags; the key column's encoding; the batch bounds and the one
  writer of rows (``BatchBuilder``);
* ``report``: the control rows' reports and the failure record of a failed
  bundle, encoded in the worker and decoded in the driver;
* ``buckets``: streaming state's shard and bucket math and marker rows;
* ``state``: what a streaming micro-batch tells a stage's tasks (watermarks,
  clock, state files) and the per-bucket summaries they report back;
* ``attempts``: the frame of the attempt channel (metrics of attempts that do
  not commit).

Plain data and pure functions: imported by worker processes, so it imports
neither driver modules nor ``worker/``.
"""
