"""The slice of Beam's test modules that also runs on Spark.

The debug engine runs the same plan and worker code as Spark; what Spark adds
is partitions (bundles per partition, empty ones included), separate Python
worker processes (no driver globals, pickled DoFns and side inputs) and Spark's
shuffle (keyed state, grouping). These modules exercise exactly that:
``snippets_test`` (DoFns emitting in ``finish_bundle``, side inputs, combiners
as users write them), ``sideinputs_test`` and ``userstate_test``.
"""
from tests.conformance.beam import tier

ENGINE = 'spark'
MODULES = tier.load(globals(), *(
    'apache_beam.examples.snippets.snippets_test',
    'apache_beam.transforms.sideinputs_test',
    'apache_beam.transforms.userstate_test'))
