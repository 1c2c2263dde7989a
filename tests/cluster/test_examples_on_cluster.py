"""The examples on separate executor JVMs, imported as modules next to a script.

Each example module is imported by name from ``examples/`` (on the driver's
``sys.path`` only), so executors can unpickle its DoFns only from the code the
runner ships. Checks are those of ``tests/integration/test_examples.py``.
"""

from __future__ import annotations

import pytest

from tests.integration import test_examples as examples

pytestmark = pytest.mark.usefixtures('spark')

test_wordcount = examples.test_wordcount
test_custom_windows = examples.test_custom_windows
test_stateful_join = examples.test_stateful_join
test_sdf_expand = examples.test_sdf_expand
