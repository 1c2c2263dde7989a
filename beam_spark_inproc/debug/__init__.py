"""Debugging without Spark: the same plan and worker code, run in the driver.

``engine.LocalEngine`` implements the executor's engine interface on lists of
Arrow batches in this process, so ``breakpoint()`` in a DoFn stops in the
user's terminal, DoFns see the driver's globals, and exceptions keep their type.
"""
