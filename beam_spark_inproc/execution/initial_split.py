"""Initial splitting: a splittable DoFn's restrictions cut into one equal share
per core before its stage starts.

Beam's SplitAndSizeRestrictions gives the runner what the DoFn's restriction
provider's ``split`` returns: for ``ReadFromText`` of one 24 MB file, five
restrictions of 4.9 MB (``Read.get_desired_chunk_size``), for a 1 GB file 32,
for a compressed file one. Spread as they come over two cores, five make a
3:2 imbalance; one runs on one core. Runner-initiated splitting of a running
bundle (``worker.sdf``) only starts after ``--spark_split_after_seconds``, and
its residuals run as a second round after the first has ended (P2 at 4M on
this machine: round one 1.3 s, then a 2:3 round two of 4.2 and 5.6 s).

When the driver holds the stage's input (``execution.small``, the debug engine),
``spread`` reads each element's restriction and size and cuts the
restrictions, taken in order, into ``ways`` parts of equal total size, one per
partition: a restriction that straddles a boundary is split there by its own
tracker (the provider's ``create_tracker``, then ``try_split`` at the fraction
of its size that fills the part), as Beam's SDK splits a running restriction,
before anything is claimed (a BoundedSource's offset range tracker, which
refuses to split before its first record, gets its start claimed first on a
tracker that is then thrown away). Each piece keeps the element, its
windows, timestamp, pane and watermark estimator state; its size is the
provider's ``restriction_size``. What is read does not change: the pieces tile
the restriction (a text file's split offsets fall mid-line; the source's range
tracker reads each line from the piece its start lies in). A restriction whose
tracker will not split (a compressed file, ``UnsplittableRangeTracker``) stays
whole in its part.

The parts are balanced (every cut made) or not; a balanced stage runs in one
round without runner splitting (equal shares, one per core: splitting them
again would only add a round), otherwise as before. Anything unexpected (an
input of another shape, a size that is not a number, a provider that raises)
leaves the input as it was: the runner's splitting at run time still applies.
Nor is tiny input cut: below ``MIN_SHARE`` units of restriction size per core
(bytes of a file, positions of an offset range) there is no work worth a
second core, and a piece shorter than a record reads nothing: Beam's pandas
reader (``dataframe.io.read_csv(..., splittable=True)``) then yields a frame of
no rows whose columns pandas types as ``object``, and the concatenated frame's
dtypes change (Beam's ``io_test`` ``test_read_write_1_csv``, files of ~30
bytes). Nor is a drained pipeline's stage cut (``is_drain``: it truncates each
restriction, e.g. to its first half, and the halves of a cut one would be
truncated each: Beam's ``test_sdf_with_truncate``).
"""

from __future__ import annotations

import logging
from typing import Optional

from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.internal import pickler
from apache_beam.io import iobase
from apache_beam.io import range_trackers
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners import common
from apache_beam.runners import pipeline_context
from apache_beam.transforms import core
from apache_beam.utils import proto_utils

from beam_spark_inproc.protocol.rows import CONTROL_TAG

_LOGGER = logging.getLogger(__name__)

_TRUNCATE = common_urns.sdf_components.TRUNCATE_SIZED_RESTRICTION.urn
# Restriction size per core (bytes of a file, positions of an offset range)
# below which the input is left as it is (see the module's docstring).
MIN_SHARE = 1024
# A part is full within this fraction of its share: no sliver is cut off for
# the next part.
_SLACK = 0.02


def spread(stage, rows: list[tuple], ways: int) -> Optional[tuple[list[list[tuple]], bool]]:
    """``rows`` ``(tag, key, data)`` of a splittable stage's input (``stage``: a
    ``planning.plan.StagePlan`` with ``split_input``) cut into ``ways`` parts of
    equal restriction size: (parts, balanced), control rows in the first part;
    None when there is nothing to do or the input is not as expected."""
    if ways < 2 or not stage.split_input:
        return None
    try:
        return _spread(stage, rows, ways)
    except Exception:  # never worse than no initial split
        _LOGGER.debug('Stage %r: no initial split', stage.name, exc_info=True)
        return None


def _spread(stage, rows, ways):
    ports = [port for port in stage.inputs if port.transform_id == stage.split_input]
    if len(stage.inputs) != 1 or len(ports) != 1:
        return None
    control = [row for row in rows if row[0] == CONTROL_TAG]
    elements = [row for row in rows if row[0] != CONTROL_TAG]
    if not elements or any(row[0] != 0 for row in elements):
        return None
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    if any(t.spec.urn == _TRUNCATE for t in descriptor.transforms.values()):
        return None  # drained: each restriction is truncated as it is
    context = pipeline_context.PipelineContext(descriptor)
    coder_impl = context.coders[ports[0].coder_id].get_impl()
    provider = _restriction_provider(descriptor, context)
    values = []
    for _, _, data in elements:
        stream = create_InputStream(data)
        value = coder_impl.decode_from_stream(stream, True)
        if stream.size():  # one element per row, always
            return None
        values.append(value)
    sizes = [float(v.value[1]) for v in values]
    total = sum(sizes)
    if not total > 0 or any(s < 0 for s in sizes):
        return None
    share = total / ways
    if share < MIN_SHARE:
        return None  # tiny: not worth a cut
    parts: list[list] = [[] for _ in range(ways)]
    part, filled, balanced = 0, 0.0, True

    def put(windowed, restriction, state, size):
        nonlocal filled
        (element, _), _ = windowed.value
        parts[part].append(windowed.with_value(((element, (restriction, state)), size)))
        filled += size

    for windowed, size in zip(values, sizes):
        (element, (restriction, state)), _ = windowed.value
        while True:
            room = share - filled
            last = part == ways - 1
            if last or size <= room + share * _SLACK:
                put(windowed, restriction, state, size)
                break
            if room <= share * _SLACK:  # this part is full: start the next
                part, filled = part + 1, 0.0
                continue
            pieces = _cut(provider, element, restriction, room / size)
            if pieces is None:  # will not split: whole, here
                balanced = False
                put(windowed, restriction, state, size)
                break
            (primary, primary_size), (restriction, size) = pieces
            put(windowed, primary, state, primary_size)
            part, filled = part + 1, 0.0
        if filled >= share - share * _SLACK and part < ways - 1:
            part, filled = part + 1, 0.0
    if sum(1 for p in parts if p) < 2:
        return None  # nothing to spread (one restriction that did not split)
    out = []
    for i, values_of_part in enumerate(parts):
        encoded = []
        for value in values_of_part:
            out_stream = create_OutputStream()
            coder_impl.encode_to_stream(value, out_stream, True)
            encoded.append((0, None, out_stream.get()))
        out.append((control if i == 0 else []) + encoded)
    return out, balanced


def _cut(provider, element, restriction, fraction: float):
    """((primary, its size), (residual, its size)) of the restriction split by
    its tracker with the primary keeping ``fraction``, or None."""
    tracker = provider.create_tracker(restriction)
    split = tracker.try_split(fraction)
    if not split and isinstance(tracker, iobase._SDFBoundedSourceRestrictionTracker):
        # A BoundedSource's offset range tracker refuses to split before its
        # first record ("unstarted"): on this throwaway tracker, claim the
        # range's start (the primary's), then split as the SDK would while
        # reading. The pieces travel as (weight, source, start, stop), without
        # the claim.
        ranges = restriction.range_tracker()
        if isinstance(ranges, range_trackers.OffsetRangeTracker) and ranges.try_claim(
            ranges.start_position()
        ):
            split = tracker.try_split(fraction)
    if not split:
        return None
    primary, residual = split
    if primary is None or residual is None:
        return None
    return (
        (primary, float(provider.restriction_size(element, primary))),
        (residual, float(provider.restriction_size(element, residual))),
    )


def _restriction_provider(descriptor, context):
    """The restriction provider of the stage's splittable DoFn (as Beam's
    bundle processor finds it)."""
    urn = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn
    for transform in descriptor.transforms.values():
        if transform.spec.urn == urn:
            payload = proto_utils.parse_Bytes(
                transform.spec.payload, beam_runner_api_pb2.ParDoPayload
            )
            dofn = pickler.loads(
                core.DoFnInfo.from_runner_api(payload.do_fn, context).serialized_dofn_data()
            )[0]
            return common.DoFnSignature(dofn).get_restriction_provider()
    raise ValueError('no splittable DoFn in the stage')
