"""Debugging without Spark: the same plan and worker code, run in the driver.

``engine.LocalEngine`` implements the executor's engine interface on lists of
Arrow batches in this process, so ``breakpoint()`` in a DoFn stops in the
user's terminal and exceptions keep their type. DoFns run in the driver's
process: those defined in an importable module share its module state; Beam's
pickler copies functions defined in ``__main__`` or nested ones (as with every
Beam runner), so those see a snapshot of the globals they use.
"""
