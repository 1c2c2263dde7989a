"""Splittable DoFn residuals, fed back to the task that produced them.

A bundle that self-checkpoints (``defer_remainder``) returns residual
applications: an encoded element-and-restriction for the transform's main input.
As Beam's FnApiRunner does, the runner re-runs them as a new bundle, after the
resume delay the DoFn asked for, until no residual remains. Staying in the task
keeps them in the same Spark task attempt, so a retry re-runs them all.
"""
from __future__ import annotations

import time
from typing import Iterator

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.worker import bundle_processor

# Longest single wait honoured for a requested resume delay.
MAX_RESUME_DELAY_SECONDS = 60.0


def input_transform(descriptor, transform_id: str, input_id: str) -> str:
    """The DATA_INPUT transform feeding ``transform_id``'s input ``input_id``.

    A drained pipeline truncates restrictions between the data input and the
    Process transform: residuals go back in before the truncation, like new
    restrictions (as in FnApiRunner).
    """
    pcoll = descriptor.transforms[transform_id].inputs[input_id]
    for tid, t in descriptor.transforms.items():
        if pcoll not in t.outputs.values():
            continue
        if t.spec.urn == bundle_processor.DATA_INPUT_URN:
            return tid
        if t.spec.urn == common_urns.sdf_components.TRUNCATE_SIZED_RESTRICTION.urn:
            return input_transform(descriptor, tid, next(iter(t.inputs)))
    raise ValueError(
        f'No data input feeds {transform_id!r} ({input_id!r}): cannot resume '
        'its splittable DoFn residuals.')


def wait_for(residuals: list) -> None:
    """Sleeps for the shortest resume delay the residuals requested."""
    delays = [r.requested_time_delay.ToTimedelta().total_seconds()
              for r in residuals if r.HasField('requested_time_delay')]
    if delays:
        time.sleep(min(max(min(delays), 0.0), MAX_RESUME_DELAY_SECONDS))


def residual_inputs(entry, residuals: list) -> Iterator:
    descriptor = entry.processor.process_bundle_descriptor
    for residual in residuals:
        app = residual.application
        yield beam_fn_api_pb2.Elements.Data(
            transform_id=input_transform(descriptor, app.transform_id,
                                         app.input_id),
            data=app.element)
