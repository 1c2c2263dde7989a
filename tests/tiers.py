"""The suite's tiers, by test path: ``python -m pytest -m quick`` or ``-m compat``.

``tests/conftest.py`` marks each collected test whose node id starts with an
entry below (a folder, a file, or a file's test, with or without its
parameters) and refuses an entry that names nothing, so a renamed test cannot
fall out of a tier unnoticed.

* ``quick``: what a contributor runs after changing a module (under 5 minutes
  on two cores): the unit tests, the debug engine's semantics, and one smoke of
  each way a pipeline reaches Spark.
* ``compat``: what each cell of the support matrix (``tox.ini``) runs: every
  place where Beam's, PySpark's or Python's versions differ is exercised at
  least once on Spark (about 6 minutes).

The whole suite (``python -m pytest``, what ``.ci/run`` runs) is every test.
"""

from __future__ import annotations

QUICK = ('tests/unit',)

COMPAT = ('tests/unit',)

TIERS = {'quick': QUICK, 'compat': COMPAT}
