"""Beam's transforms tests with the runner's defaults (``conftest``: runner selection).

``ptransform_test`` and ``util_test`` (365 tests, most of them pipelines) run
with ``BEAM_CONFORMANCE=full`` only: CI time (docs/conformance.md).
"""
from tests.conformance.beam import tier

ENGINE = 'spark'
NAMES = ['combiners', 'core', 'sideinputs', 'stats', 'trigger', 'userstate',
         'window', 'deduplicate']
if tier.FULL:
    NAMES += ['ptransform', 'util']
MODULES = tier.load(globals(), *(f'apache_beam.transforms.{n}_test' for n in NAMES))
