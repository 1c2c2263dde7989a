"""Beam's own test modules run here too (``test_beam_*_suite``): register the
pytest markers they use, as the batch conformance tier does (the run is
``--strict-markers``)."""

from tests.conformance.beam.conftest import pytest_configure  # noqa: F401
