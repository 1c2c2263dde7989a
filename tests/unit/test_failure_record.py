"""The failure record a failed bundle sends to the driver (``protocol.report.Failure``)."""

from __future__ import annotations

import dataclasses

from beam_spark_inproc.compat.python import add_note
from beam_spark_inproc.planning.plan import StagePlan
from beam_spark_inproc.protocol.report import Failure
from beam_spark_inproc.protocol.report import drop_failure_note

STAGE = StagePlan(
    name='ref_AppliedPTransform_Explode_3',
    kind='sdk',
    labels=('Before', 'Explode', 'After'),
    inputs=(),
    outputs=(),
)


class Terse(Exception):
    def __str__(self) -> str:
        return 'terse'


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as e:
        return e


def test_record_names_the_annotated_transform_and_survives_text():
    error = _raised(ValueError("bad element 3 [while running 'Explode']"))
    failure = Failure.of(error, STAGE)
    assert failure.transform == 'Explode'
    assert failure.exception_type == 'ValueError'
    assert failure.summary() == "ValueError: bad element 3 [while running 'Explode']"
    assert 'Traceback (most recent call last)' in failure.traceback
    # Spark hands the driver text: the record is found in it, whole.
    text = (
        'pyspark.errors.exceptions.captured.PythonException: \n'
        '  An exception was thrown from the Python worker.\n' + failure.note() + '\nmore text'
    )
    assert Failure.find(text) == failure


def test_annotation_in_args_is_found_when_str_hides_it():
    failure = Failure.of(_raised(Terse("x [while running 'Explode']")), STAGE)
    assert failure.transform == 'Explode'
    assert failure.exception_type.endswith('test_failure_record.Terse')
    assert failure.summary().endswith('Terse: terse')


def test_without_annotation_the_transform_is_unknown_and_labels_kept():
    failure = Failure.of(_raised(KeyError('k')), STAGE)
    assert failure.transform == '' and failure.labels == STAGE.labels
    assert dataclasses.replace(failure) == Failure.find(failure.note())
    assert Failure.find('no record here') is None


def test_debug_mode_drops_only_the_record():
    error = _raised(ValueError('x'))
    add_note(error, '[beam stage] s | transforms: a')
    add_note(error, Failure.of(error, STAGE).note())
    drop_failure_note(error)
    assert error.__notes__ == ['[beam stage] s | transforms: a']
