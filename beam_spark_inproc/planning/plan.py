"""The SparkPlan: pure, picklable data describing how each fused stage runs.

Every PCollection crossing a stage boundary is a Spark DataFrame of rows
``(tag int, key binary, data binary)``:

* ``tag`` says which output of the producing stage a row belongs to (a stage's
  mapInArrow emits all its outputs at once; consumers filter on ``tag``);
* ``data`` holds Beam-encoded windowed values (wire coder of the PCollection);
* ``key`` is set only for rows bound for a GroupByKey: the key's deterministic
  encoding, on which the shuffle partitions and sorts.

An output's *layout* says how its ``data`` is cut into rows: ``chunks`` (many
encoded elements per row, the cheap default), ``elements`` (one element per row,
so a Reshuffle can spread them), ``keyed_elements`` (one element per row plus its key:
a stateful stage's input that a Reshuffle or splittable stage also reads) or
``packed`` (a GroupByKey's or stateful stage's input: a row holds elements of
one key, many per row, so the shuffle moves a row per key and bundle rather
than per element; written by ``worker.channel``'s
``PackedOutputOperation``, the transform's URN being ``PACKED_SINK_URN``),
``packed_values`` (a GroupByKey's input in the global window with the default
trigger, in batch: as ``packed``, but a row holds only the key's values, as
chunks of Beam's iterable encoding, since that grouping drops windows,
timestamps and panes; ``PackedValuesOutputOperation``,
``PACKED_VALUES_SINK_URN``; its consumer's ``Grouping.values_only``) or
``arrow`` (a runner-native read's or query's output: the DataFrame itself, one
column per field of the elements' schema, read only by an ``ARROW`` stage).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

CHUNKS = 'chunks'
ELEMENTS = 'elements'
KEYED_ELEMENTS = 'keyed_elements'
PACKED = 'packed'
PACKED_VALUES = 'packed_values'
ARROW_LAYOUT = 'arrow'
PACKED_SINK_URN = 'beam-spark-inproc:packed-sink:v1'
PACKED_VALUES_SINK_URN = 'beam-spark-inproc:packed-values-sink:v1'
# A WindowInto with Beam's FixedWindows or SlidingWindows (payload: Beam's,
# the WindowingStrategy), run by ``worker.assign_windows``.
ASSIGN_WINDOWS_URN = 'beam-spark-inproc:assign-windows:v1'
# On a PACKED_SINK_URN transform: the id of the safe coder of its elements.
SAFE_CODER_ANNOTATION = 'beam-spark-inproc:safe-coder'

SDK_STAGE = 'sdk'
RESHUFFLE_STAGE = 'reshuffle'
# A runner-native transform (``planning.native``): the executor hands it to the
# handler registered for ``native_urn``.
NATIVE_STAGE = 'native'
# A TestStream (streaming only): the driver feeds its outputs from the payload's
# events (``execution.streaming.teststream_source``); ``descriptor`` holds the payload.
TEST_STREAM_STAGE = 'test_stream'

# How a stage's input arrives, decided once by the planner; the executor (which
# shuffle comes first) and the worker (how rows become Beam elements) dispatch
# on it through tables.
PLAIN = 'plain'  # rows in any order, fed as they come
GROUPED = 'grouped'  # shuffled by key, sorted by (tag, key): GroupAlsoByWindow first
STATEFUL = 'stateful'  # shuffled by key, sorted by (key, tag): a stateful stage, key after key
SPLITTABLE = 'splittable'  # one element per message; may run in rounds (worker.sdf)
# The stage's one input is a runner-native read's or query's output
# (``ARROW_LAYOUT``): the source's Arrow batches, made into Beam rows in bulk by
# the stage's own task (``StageTask.arrow_input``), with no step between Spark's
# reader (or query) and the bundle.
ARROW = 'arrow'
INPUT_MODES = (PLAIN, GROUPED, STATEFUL, SPLITTABLE, ARROW)


def input_mode(stateful: bool, grouped: bool, split_input: str) -> str:
    """A stage's input mode: state and timers need their keys in order first."""
    if stateful:
        return STATEFUL
    if grouped:
        return GROUPED
    return SPLITTABLE if split_input else PLAIN


@dataclasses.dataclass(frozen=True)
class Grouping:
    """GroupAlsoByWindow done by a consuming stage on its sorted, keyed input."""

    gbk_label: str
    pre_coder_id: str  # windowed KV<K, V> as written by the producer (safe coder)
    post_coder_id: str  # windowed KV<K, Iterable<V>> as read by the consumer
    windowing_strategy_id: str
    # A window type the runner does not know (a user's WindowFn with its own
    # window coder): the safe coders carry its windows as opaque bytes, and
    # GroupAlsoByWindow decodes them with this coder (the wire coder's window
    # component, the WindowFn's own coder) to merge and assign them.
    window_coder_id: Optional[str] = None
    # Its input is written ``PACKED_VALUES`` (default windowing, batch): rows
    # hold the values' iterable encoding, spliced into grouped elements.
    values_only: bool = False
    # Streaming: Beam's default trigger over a WindowFn that never merges,
    # with a portable timestamp combiner: panes made without Beam's trigger
    # driver (``worker.streaming.default_trigger``).
    default_trigger: bool = False


@dataclasses.dataclass(frozen=True)
class InputPort:
    transform_id: str  # the DATA_INPUT transform in the descriptor
    buffer_id: bytes
    coder_id: str  # wire coder of the elements fed to the transform
    grouping: Optional[Grouping] = None
    keyed: bool = False  # rows arrive sorted by key (a stateful stage's input)


@dataclasses.dataclass(frozen=True)
class TimerFamily:
    transform_id: str
    family_id: str
    event_time: bool  # else processing time


@dataclasses.dataclass(frozen=True)
class OutputPort:
    transform_id: str  # the DATA_OUTPUT transform in the descriptor
    buffer_id: bytes
    coder_id: str  # wire coder the transform writes with
    layout: str = CHUNKS
    key_coder_id: Optional[str] = None  # safe windowed KV coder, for KEYED_ELEMENTS


@dataclasses.dataclass(frozen=True)
class SideInput:
    transform_id: str
    tag: str
    buffer_id: bytes
    access_pattern_urn: str
    coder_id: str  # safe wire coder of the side-input PCollection


@dataclasses.dataclass(frozen=True)
class StagePlan:
    name: str
    kind: str
    labels: tuple[str, ...]  # Beam transform labels run by this stage
    inputs: tuple[InputPort, ...]
    outputs: tuple[OutputPort, ...]
    side_inputs: tuple[SideInput, ...] = ()
    descriptor: bytes = b''  # serialized ProcessBundleDescriptor (SDK stages)
    input_mode: str = PLAIN  # see INPUT_MODES
    timers: tuple[TimerFamily, ...] = ()
    # DATA_INPUT transform feeding a splittable DoFn's Process transform: the
    # runner may split its restrictions (see worker.sdf), or '' if none.
    split_input: str = ''
    # A Reshuffle of a pipeline whose update_compatibility_version predates
    # 2.65: Beam's expansion then drops pane info, so the runner's does too.
    reset_panes: bool = False
    # NATIVE_STAGE: the transform's URN and payload (see ``planning.native``).
    native_urn: str = ''
    native_payload: bytes = b''
    # NATIVE_STAGE: the transform's input tag each input port feeds.
    native_inputs: tuple[str, ...] = ()
    # TEST_STREAM_STAGE: the TestStream's output tag written by each output port.
    output_tags: tuple[str, ...] = ()

    def __post_init__(self):
        if self.input_mode not in INPUT_MODES:
            raise ValueError(
                f'Stage {self.name!r}: unknown input mode '
                f'{self.input_mode!r}, expected one of {INPUT_MODES}.'
            )

    @property
    def stateful(self) -> bool:
        """User state or timers: input shuffled by key, keys in order."""
        return self.input_mode == STATEFUL

    @property
    def grouped(self) -> bool:
        return any(p.grouping is not None for p in self.inputs)


@dataclasses.dataclass(frozen=True)
class SparkPlan:
    stages: tuple[StagePlan, ...]
    components: bytes  # serialized Components, for decoding side inputs on the driver
