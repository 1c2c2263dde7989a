"""Worker side of streaming stages: a micro-batch's task, with the state that
lasts from one micro-batch to the next.

``grouping``: GroupAlsoByWindow across micro-batches, each key's panes and
trigger state kept as a state row; ``default_trigger``: the same under Beam's
default trigger, without the trigger driver; ``stateful``: stateful DoFns across
micro-batches, one key at a time; ``state_expiry``: user state dropped by
window; ``state_io``: a keyed stage's state buckets read and written by its own
task. Shard and bucket numbers, the step a task is told and the summaries it
reports are the driver's too (``protocol.buckets``, ``protocol.state``).
"""
