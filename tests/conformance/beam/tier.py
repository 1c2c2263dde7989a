"""Loading Beam's own test modules (from the installed ``apache_beam``) into a
wrapper module of this tier.

``load(globals(), 'apache_beam.transforms.combiners_test', ...)`` puts each
module's ``unittest.TestCase`` classes (what Beam's pytest setup collects) into the
wrapper's namespace as ``<module>__<name>``, so pytest collects them there
(node ids ``tests/conformance/beam/test_transforms.py::combiners_test__CombineTest::test_...``)
and the wrapper's ``ENGINE`` picks the runner (``conftest``). A package name
loads every ``*_test`` module under it (``*_it_test`` are Beam's integration
tests, for GCP: left out). A module that cannot be imported (an optional
dependency Beam's default runner lacks too) becomes one skipped test naming
the import error.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import unittest

import pytest


def test_modules(name: str) -> list[str]:
    """``name`` if it is a module, else the ``*_test`` modules under the package."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        return [name]
    found = []
    for info in pkgutil.walk_packages(spec.submodule_search_locations, name + '.'):
        if info.name.endswith('_test') and not info.name.endswith('_it_test'):
            found.append(info.name)
    return sorted(found)


# CI runs a subset of the tier within its time budget;
# BEAM_SPARK_INPROC_FULL_CONFORMANCE=1 (docs/settings.md) adds the modules left
# out for time (docs/conformance.md has the figures).
FULL = bool(os.environ.get('BEAM_SPARK_INPROC_FULL_CONFORMANCE'))


def short_name(module: str) -> str:
    return module.split('.')[-1]


def chosen(ci: list[str], full: list[str]) -> list[str]:
    """The modules a run loads: ``ci`` always, ``full`` too in a full run."""
    return ci + full if FULL else ci


def load(namespace: dict, *names: str) -> list[str]:
    modules = list(dict.fromkeys(m for name in names for m in test_modules(name)))
    for module_name in modules:
        prefix = short_name(module_name)
        try:
            module = importlib.import_module(module_name)
        except (ImportError, unittest.SkipTest) as e:
            reason = (
                f"{module_name} not importable here (nor on Beam's "
                f'default runner): {type(e).__name__}: {e}'
            )

            def not_importable(reason=reason):
                pytest.skip(reason)

            namespace[f'test_{prefix}__not_importable'] = not_importable
            continue
        for name, obj in vars(module).items():
            if getattr(obj, '__module__', None) != module_name:
                continue
            if isinstance(obj, type) and issubclass(obj, unittest.TestCase):
                namespace[f'{prefix}__{name}'] = obj
    return modules
