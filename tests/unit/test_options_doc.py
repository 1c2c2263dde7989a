"""docs/options.md and the README's options table list every option of
``SparkRunnerOptions`` once, with the default the parser gives it (the first
table of each page that has such rows; options.md's table of Beam's own options
comes later)."""

from __future__ import annotations

import argparse
import pathlib
import re

import pytest

from beam_spark_inproc.options import SMALL_DATA_ENV
from beam_spark_inproc.options import SparkRunnerOptions

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A table row: | `--flag ARG` | default | meaning |, the flag possibly a link.
_ROW = re.compile(r'^\| \[?`(--[a-z_]+)[^`]*`(?:\]\([^)]*\))? \| ([^|]+) \|', re.MULTILINE)


def _defaults(monkeypatch) -> dict[str, object]:
    monkeypatch.delenv(SMALL_DATA_ENV, raising=False)
    parser = argparse.ArgumentParser()
    SparkRunnerOptions._add_argparse_args(parser)
    return {
        action.option_strings[0]: action.default
        for action in parser._actions
        if action.option_strings and action.option_strings[0].startswith('--')
    }


@pytest.mark.parametrize('page', ['docs/options.md', 'README.md'])
def test_each_option_is_listed_once_with_its_default(page, monkeypatch):
    defaults = _defaults(monkeypatch)
    text = (ROOT / page).read_text()
    start = _ROW.search(text).start()
    end = text.find('\n\n', start)
    rows = _ROW.findall(text[start:end])
    listed = [flag for flag, _ in rows]
    assert sorted(listed) == sorted(defaults), page
    for flag, default_text in rows:
        default = defaults[flag]
        if isinstance(default, bool):
            assert default_text.strip() == ('on' if default else 'off'), flag
        elif isinstance(default, (int, float)):
            number = re.match(r'`([\d.]+)`', default_text.strip())
            assert number and float(number.group(1)) == default, (flag, default_text)
