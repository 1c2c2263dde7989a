"""Beam's transforms tests on the debug engine (``conftest``: runner selection)."""
from tests.conformance.beam import tier

ENGINE = 'debug'
MODULES = tier.load(globals(), *(
    f'apache_beam.transforms.{name}_test' for name in (
        'combiners', 'core', 'ptransform', 'sideinputs', 'stats', 'trigger',
        'userstate', 'util', 'window', 'deduplicate')))
