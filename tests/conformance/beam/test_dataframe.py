"""Beam's DataFrame API tests with the runner's defaults (``conftest``: runner
selection).

CI runs ``convert_test`` (DataFrames to and from PCollections); a full run
(``BEAM_SPARK_INPROC_FULL_CONFORMANCE=1``) adds every module of
``apache_beam.dataframe`` (docs/conformance.md).
"""

from tests.conformance.beam import tier

ENGINE = 'spark'
CI = ['apache_beam.dataframe.convert_test']
FULL = ['apache_beam.dataframe']
MODULES = tier.load(globals(), *tier.chosen(CI, FULL))
