"""Beam's examples tests with the runner's defaults (``conftest``: runner
selection).

CI runs the word counts (text reads: splittable DoFn stages, which run on
Spark), ``tfidf`` (reads, side inputs, joins), the game examples and the
cookbook modules with side inputs and filters; a full run
(``BEAM_SPARK_INPROC_FULL_CONFORMANCE=1``) adds the rest of
``examples/complete`` and ``examples/cookbook`` (docs/conformance.md).
"""

from tests.conformance.beam import tier

ENGINE = 'spark'
_EX = 'apache_beam.examples.'
CI = [
    _EX + m
    for m in (
        'wordcount_test',
        'wordcount_minimal_test',
        'wordcount_debugging_test',
        'complete.tfidf_test',
        'complete.game',
        'cookbook.bigquery_side_input_test',
        'cookbook.filters_test',
    )
]
FULL = [_EX + 'complete', _EX + 'cookbook']
MODULES = tier.load(globals(), *tier.chosen(CI, FULL))
