"""Beam's snippets tests with the runner's defaults (``conftest``: runner selection)."""
from tests.conformance.beam import tier

ENGINE = 'spark'
MODULES = tier.load(globals(), 'apache_beam.examples.snippets')
