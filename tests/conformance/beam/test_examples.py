"""Beam's examples tests with the runner's defaults (``conftest``: runner selection)."""
from tests.conformance.beam import tier

ENGINE = 'spark'
MODULES = tier.load(
    globals(),
    'apache_beam.examples.complete', 'apache_beam.examples.cookbook',
    'apache_beam.examples.wordcount_test',
    'apache_beam.examples.wordcount_minimal_test',
    'apache_beam.examples.wordcount_debugging_test')
