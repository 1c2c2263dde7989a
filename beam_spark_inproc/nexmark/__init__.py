"""Nexmark, the streaming benchmark, as a source users can run.

``generator``: Person/Auction/Bid events as a pure function of their number
(Nexmark's proportions and event-time rules, Beam's model classes).
``source.ReadEvents``: those events as a bounded read or as an unbounded,
rate-limited stream with an event-time watermark (splittable DoFns whose
restriction is an event-number range). Beam's own queries
(``apache_beam.testing.benchmarks.nexmark.queries.query<N>.load``) read them;
``tests/benchmarks/nexmark.py`` runs them on this runner next to Beam's.

Nothing here is imported by the runner itself.
"""

from beam_spark_inproc.nexmark.source import ReadEvents

__all__ = ['ReadEvents']
