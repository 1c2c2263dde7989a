"""Worker side of batch semantics; the streaming side (``worker.streaming``)
builds on its GroupAlsoByWindow and its state and timer handling.

``grouping``: GroupAlsoByWindow of a GroupByKey inside the consuming stage, over
its input shuffled by key and sorted (the streaming GroupAlsoByWindow builds on
it); ``grouped_values``: a large group's values served page by page, spilling to
disk; ``stateful``: a stateful stage one key at a time, with batch semantics for
state and timers (once a key's input is complete its timers fire, then its
state is released).
"""
