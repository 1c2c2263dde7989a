"""Readers the planner puts into stages in place of Beam's, run in workers.

A module here is built by the driver (``planning.planner`` swaps a Beam DoFn
for one of these in a stage's payload) and runs in the Spark Python workers
(unpickled with the stage's descriptor), so both sides import it: it imports
Beam only, neither driver modules nor ``worker/`` (checked by
``tests/unit/test_architecture.py``).

* ``text_lines``: the lines of a plain text file of Beam's default
  ``ReadFromText``, read by Python's buffered I/O.

What users import from here themselves, run in workers the same way:

* ``file_naming.pane_file_naming``: a ``fileio.WriteToFiles`` file naming that
  keeps every pane of a window (Beam's default names a window's later pane
  onto its earlier one's file).
"""

from beam_spark_inproc.io.file_naming import pane_file_naming

__all__ = ['pane_file_naming']
