"""The slice of Beam's test modules that also runs on Spark.

The debug engine runs the same plan and worker code as Spark; what Spark adds
is partitions (bundles per partition, empty ones included), separate Python
worker processes (no driver globals, pickled DoFns and side inputs) and Spark's
shuffle (keyed state, grouping). These modules exercise exactly that:
``sideinputs_test`` and ``userstate_test``; with ``BEAM_CONFORMANCE=full``
also ``snippets_test`` (DoFns emitting in ``finish_bundle``, text IO, combiners
as users write them: where Spark shows gaps the debug engine does not), left
out of CI for time (852 s on the loaded machine, docs/conformance.md).
"""
from tests.conformance.beam import tier

ENGINE = 'spark'
NAMES = ['apache_beam.transforms.sideinputs_test',
         'apache_beam.transforms.userstate_test']
if tier.FULL:
    NAMES.append('apache_beam.examples.snippets.snippets_test')
MODULES = tier.load(globals(), *NAMES)
