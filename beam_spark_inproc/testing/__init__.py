"""pytest fixtures for testing Beam pipelines on this runner (plugin: ``plugin``)."""
