"""Recode: re-encodes the elements of a runner-executed Reshuffle whose output
coder differs from its input coder.

The runner moves a Reshuffle's bytes as they are, but Beam gives a
GroupByKey's input a deterministic key coder: a Reshuffle feeding a GroupByKey
directly reads with one coder (say, a ``NamedTuple`` key pickled) and its
consumer with another (the deterministic one). Forwarded bytes would fail to
decode there; this step decodes each element with the input coder and encodes
it with the output coder, in the pipeline's own Python (as the SDK would on
the far side of Beam's own Reshuffle expansion).

``reset_panes``: pipelines with ``update_compatibility_version`` before 2.65
expand Reshuffle without carrying pane info (its elements come out with
``PANE_INFO_UNKNOWN``); the runner's Reshuffle does the same for them.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from typing import Iterator

import pyarrow as pa
from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN
from apache_beam.utils.windowed_value import WindowedValue

from beam_spark_inproc.protocol.rows import CONTROL_TAG
from beam_spark_inproc.protocol.rows import DATA
from beam_spark_inproc.protocol.rows import KEY
from beam_spark_inproc.protocol.rows import TAG
from beam_spark_inproc.protocol.rows import BatchBuilder
from beam_spark_inproc.protocol.rows import column_slices


@dataclasses.dataclass(frozen=True)
class Recode:
    """A ``mapInArrow`` function: element rows re-encoded, control rows as
    they are. Coders are windowed value coders (Beam ``Coder`` objects)."""

    input_coder: Any
    output_coder: Any
    reset_panes: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        decode = self.input_coder.get_impl().decode_from_stream
        encode = self.output_coder.get_impl().encode_to_stream
        out: list = []
        builder = BatchBuilder(out.append)
        for tags, keys, datas in column_slices(batches, TAG, KEY, DATA):
            for tag, key, data in zip(tags, keys, datas):
                if tag == CONTROL_TAG:
                    builder.add(tag, key, data)
                    continue
                stream, recoded = create_InputStream(data), create_OutputStream()
                while stream.size():
                    element = decode(stream, True)
                    if self.reset_panes:
                        element = WindowedValue(
                            element.value, element.timestamp, element.windows, PANE_INFO_UNKNOWN
                        )
                    encode(element, recoded, True)
                builder.add(tag, key, recoded.get())
            yield from out
            out.clear()
        builder.flush()
        yield from out
