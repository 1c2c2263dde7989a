"""Readers the planner puts into stages in place of Beam's, run in workers.

A module here is built by the driver (``planning.planner`` swaps a Beam DoFn
for one of these in a stage's payload) and runs in the Spark Python workers
(unpickled with the stage's descriptor), so both sides import it: it imports
Beam only, neither driver modules nor ``worker/`` (checked by
``tests/unit/test_architecture.py``).

* ``text_lines``: the lines of a plain text file of Beam's default
  ``ReadFromText``, read by Python's buffered I/O.
"""
