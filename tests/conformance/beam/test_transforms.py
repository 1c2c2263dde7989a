"""Beam's transforms tests with the runner's defaults (``conftest``: runner
selection).

CI runs ``sideinputs_test`` and ``window_test``; a full run
(``BEAM_SPARK_INPROC_FULL_CONFORMANCE=1``) adds the other modules (most of
their tests are pipelines): CI time (docs/conformance.md).
"""

from tests.conformance.beam import tier

ENGINE = 'spark'
CI = ['sideinputs', 'window']
FULL = ['combiners', 'core', 'stats', 'trigger', 'userstate', 'deduplicate', 'ptransform', 'util']
MODULES = tier.load(globals(), *(f'apache_beam.transforms.{n}_test' for n in tier.chosen(CI, FULL)))
