"""Where data enters a ProcessBundleDescriptor (pure proto look-ups)."""

from __future__ import annotations

from apache_beam.portability import common_urns
from apache_beam.runners.worker import bundle_processor


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
        'its splittable DoFn residuals.'
    )
