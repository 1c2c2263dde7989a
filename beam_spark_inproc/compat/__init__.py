"""What differs between the releases this package supports, one module per dependency.

The runner sits on internals of Beam's Python SDK and of PySpark, which change from
release to release. Each dependency's differences are decided in one module here,
keyed by a feature test or by the version, and exported as named flags and functions;
no other module of the package reads a version (``tests/unit/test_architecture.py``
checks it). Each module checks its dependency's floor when it is imported and says,
in one line, which version it found and which range is supported.

* ``compat.beam``: Apache Beam's SDK internals (the data channel a bundle's
  operations are given, where pipeline utilities live, ...).
* ``compat.pyspark``: PySpark's API on classic sessions and over Spark Connect.
* ``compat.python``: the interpreter (exception notes).
* ``compat.versions``: the driver's and the Spark workers' Python, Beam and PySpark
  versions, which must match; a task fails in one line naming both sides if not.

The modules import nothing of the package outside ``compat``, so the Spark Python
workers' code (``worker/``) may use them.
"""
