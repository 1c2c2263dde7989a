"""The package's version is one value: ``beam_spark_inproc.__version__``, which
setup.cfg reads and CHANGELOG.md's top entry names."""

from __future__ import annotations

import configparser
import pathlib
import re

import beam_spark_inproc

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _changelog_versions() -> list[str]:
    text = (ROOT / 'CHANGELOG.md').read_text()
    return re.findall(r'^## \[(\d+\.\d+\.\d+)\]', text, flags=re.MULTILINE)


def test_version_is_the_changelogs_top_version():
    versions = _changelog_versions()
    assert versions, 'CHANGELOG.md has no "## [X.Y.Z]" version heading'
    assert beam_spark_inproc.__version__ == versions[0]


def test_changelog_versions_are_newest_first():
    versions = _changelog_versions()
    as_numbers = [tuple(int(part) for part in v.split('.')) for v in versions]
    assert as_numbers == sorted(as_numbers, reverse=True), versions
    assert len(set(versions)) == len(versions), versions


def test_setup_cfg_reads_the_version_from_the_package():
    config = configparser.ConfigParser()
    config.read(ROOT / 'setup.cfg')
    assert config['metadata']['version'] == 'attr: beam_spark_inproc.__version__'
