"""Beam's DataFrame API tests on the debug engine (``conftest``: runner selection)."""
from tests.conformance.beam import tier

ENGINE = 'debug'
MODULES = tier.load(globals(), 'apache_beam.dataframe')
