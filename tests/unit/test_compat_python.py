"""compat.python: notes on exceptions, on every supported Python."""

from __future__ import annotations

import sys
import traceback

import pytest

from beam_spark_inproc.compat import python as compat_python


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def test_the_flag_matches_the_interpreter():
    assert compat_python.EXCEPTION_NOTES == (sys.version_info >= (3, 11))
    assert compat_python.VERSION == sys.version_info[:2]


@pytest.mark.parametrize('native', [True, False], ids=['add_note', 'python310'])
def test_a_note_is_kept_and_printed_with_the_traceback(monkeypatch, native):
    if native and not compat_python.EXCEPTION_NOTES:
        pytest.skip('BaseException.add_note is Python 3.11+')
    monkeypatch.setattr(compat_python, 'EXCEPTION_NOTES', native)
    error = _raised(ValueError('bad element'))
    compat_python.add_note(error, "transforms: 'Parse lines'")
    compat_python.add_note(error, 'second note')
    assert compat_python.notes(error) == ["transforms: 'Parse lines'", 'second note']
    text = ''.join(traceback.format_exception(type(error), error, error.__traceback__))
    assert "transforms: 'Parse lines'" in text
    assert 'second note' in text
    assert 'ValueError: bad element' in text


def test_an_exception_without_notes_has_none():
    assert compat_python.notes(ValueError('x')) == []
