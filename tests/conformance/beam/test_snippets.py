"""Beam's snippets tests with the runner's defaults (``conftest``: runner
selection).

CI runs the aggregation snippets (``examples/snippets/transforms/aggregation``:
combiners, GroupByKey, side inputs as users write them); a full run
(``BEAM_SPARK_INPROC_FULL_CONFORMANCE=1``) adds ``snippets_test`` and the
other snippet packages (docs/conformance.md).
"""

from tests.conformance.beam import tier

ENGINE = 'spark'
_SNIPPETS = 'apache_beam.examples.snippets'
CI = [_SNIPPETS + '.transforms.aggregation']
FULL = [_SNIPPETS]
MODULES = tier.load(globals(), *tier.chosen(CI, FULL))
