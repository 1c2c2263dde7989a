"""Side inputs in a stream: main-input elements wait until their side inputs are ready.

A stage that reads side inputs gets a ``SideInputGate`` (Beam's pushback, as
``PushbackSideInputDoFnRunner`` in Java and the BundleBasedDirectRunner's
blocked tasks in Python):

* every micro-batch, what the side inputs' producers wrote is collected to the
  driver and added to what they wrote before: a side input's value for a window
  is every element it has received in that window (the DirectRunner's
  ``_SideInputView``), except in the global window once a trigger fired panes
  into it: there the latest firing replaces the earlier ones (Beam's
  programming guide: "If the side input has multiple trigger firings, Beam uses
  the value from the latest trigger firing"; the slowly-updating side input
  pattern, an ``AsSingleton`` refreshed by a periodic trigger). A firing is
  what the producer wrote in one micro-batch. Elements that reach a side input
  through no GroupByKey carry no pane (``UNKNOWN`` timing) and no trigger ran
  on them; when the side-input PCollection's windowing has a trigger of its
  own (``triggered``: WatchFilePattern's ``Repeatedly(AfterProcessingTime)``,
  the model-refresh side input of RunInference), what it wrote in a
  micro-batch is a firing of the global window all the same, as a runner that
  materializes the view by grouping would fire it: discarding, that firing
  alone is the value; accumulating, it joins the earlier ones. Its delay
  (``AfterProcessingTime(1)``) is not waited for: the firing is at the end of
  the micro-batch that wrote the elements;
* the main-input elements of the micro-batch join those pushed back earlier; an
  element in window W is **ready** when, for every side input, the side input's
  window for W (the ParDo's ``window_mapping_fn``) is ready: the side input's
  watermark reached that window's end (``block_until = window.end``, as the
  DirectRunner), or, for the global window (whose end only the end of the
  stream reaches), a pane a trigger fired is in it;
* ready elements go to the stage, with the side inputs served as Beam state
  (``execution.side_inputs.state_entries``, as batch); the others wait, and the
  earliest of their timestamps holds the stage's output watermark.

A side window's values are dropped once no main-input element can read them
(``drop_expired``: the main input's watermark, and the pushed-back elements'
timestamps, past the window's end plus the main input's allowed lateness).

Windows that end wait for the watermark even when an early pane fired: Beam's
``sideinputs_test.test_multi_triggered_gbk_side_input`` expects the element to
see the early and the on-time pane. The pushed-back elements and side-input
values are kept in the driver and go with every commit record (``restart``:
``checkpoint``/``restore``), so a restarted stream has them as committed.
A stateful DoFn's main input (rows keyed for the state shuffle) is pushed back
the same way: released elements get their key again (the producer's key
coder). A ParDo reading side inputs never shares the stage that reads a
GroupByKey (there the panes, made in the task, would have to wait): the planner
gives it a stage of its own (``planning.phases.boundary_before``; ``support``
rejects what still would).
"""

from __future__ import annotations

from typing import Any
from typing import Iterable
from typing import Iterator
from typing import Optional

from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.internal import pickler
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.transforms import sideinputs
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Duration
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfoTiming
from apache_beam.utils.windowed_value import WindowedValue

from beam_spark_inproc.execution.side_inputs import state_entries
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.protocol.rows import key_extractor


def decode_all(impl, chunks: Iterable[bytes]) -> Iterator:
    for chunk in chunks:
        stream = create_InputStream(chunk)
        while stream.size() > 0:
            yield impl.decode_from_stream(stream, True)


class _Side:
    """One side input's elements so far, and its windows with a fired pane."""

    def __init__(self, side_input: p.SideInput, transforms: dict, components, context):
        """``transforms``: the pipeline's transforms by unique name."""
        self.side_input = side_input
        self.coder = context.coders[side_input.coder_id]
        self._impl = self.coder.get_impl()
        reader = _transform(transforms, side_input.transform_id)
        payload = beam_runner_api_pb2.ParDoPayload.FromString(reader.spec.payload)
        # Its values serve the reading ParDo's main input, late elements
        # included: that input's allowed lateness (a stage's readers may have
        # differently windowed inputs).
        self.lateness = _main_input_lateness(reader, components)
        spec = payload.side_inputs[side_input.tag].window_mapping_fn
        self.window_mapping = (
            pickler.loads(spec.payload) if spec.payload else sideinputs._global_window_mapping_fn
        )
        self.triggered, self._accumulating = _triggered(reader, side_input.tag, components)
        self._chunks: list[bytes] = []
        self._latest: bytes = b''  # the global window's latest firing
        self.fired: set = set()

    @property
    def chunks(self) -> list[bytes]:
        return self._chunks + ([self._latest] if self._latest else [])

    def add(self, chunks: list[bytes]) -> None:
        kept, latest = create_OutputStream(), create_OutputStream()
        if self.triggered and self._accumulating and self._latest:
            latest.write(self._latest)
        for wv in decode_all(self._impl, chunks):
            if wv.pane_info.timing == PaneInfoTiming.UNKNOWN and not (
                self.triggered and any(isinstance(w, GlobalWindow) for w in wv.windows)
            ):
                self._impl.encode_to_stream(wv, kept, True)
                continue
            self.fired.update(wv.windows)
            globally = [w for w in wv.windows if isinstance(w, GlobalWindow)]
            if globally:
                self._impl.encode_to_stream(
                    wv if len(globally) == len(wv.windows) else _in(wv, globally), latest, True
                )
            others = [w for w in wv.windows if not isinstance(w, GlobalWindow)]
            if others:
                self._impl.encode_to_stream(wv if not globally else _in(wv, others), kept, True)
        if kept.size():
            self._chunks.append(kept.get())
        if latest.size() > (len(self._latest) if self.triggered and self._accumulating else 0):
            self._latest = latest.get()

    def checkpoint(self) -> dict:
        return {'chunks': list(self._chunks), 'latest': self._latest, 'fired': list(self.fired)}

    def restore(self, saved: dict) -> None:
        self._chunks = list(saved['chunks'])
        self._latest = saved['latest']
        self.fired = set(saved['fired'])

    def drop_expired(self, cutoff: Timestamp) -> bool:
        """Drops the values of windows (not the global one) whose
        ``max_timestamp()`` is before ``cutoff``; returns whether any went."""
        kept, dropped = create_OutputStream(), False
        for wv in decode_all(self._impl, self._chunks):
            live = [
                w for w in wv.windows if isinstance(w, GlobalWindow) or w.max_timestamp() >= cutoff
            ]
            if len(live) < len(wv.windows):
                dropped = True
            if live:
                self._impl.encode_to_stream(
                    wv if len(live) == len(wv.windows) else _in(wv, live), kept, True
                )
        if dropped:
            self._chunks = [kept.get()] if kept.size() else []
            self.fired = {
                w for w in self.fired if isinstance(w, GlobalWindow) or w.max_timestamp() >= cutoff
            }
        return dropped

    def ready(self, window, watermark: Timestamp) -> bool:
        side_window = self.window_mapping(window)
        if watermark >= MAX_TIMESTAMP or watermark >= side_window.end:
            return True
        return isinstance(side_window, GlobalWindow) and side_window in self.fired


def _transform(transforms: dict, unique_name: str):
    """The ParDo a ``SideInput`` names (by its unique name: the plan's
    components key transforms by id)."""
    try:
        return transforms[unique_name]
    except KeyError:
        raise KeyError(f'transform {unique_name!r} is not in the pipeline') from None


def _triggered(transform, tag: str, components) -> tuple[bool, bool]:
    """Whether a ParDo's side input ``tag`` is a PCollection whose windowing
    has a trigger other than the default, and whether it accumulates."""
    strategy = components.windowing_strategies[
        components.pcollections[transform.inputs[tag]].windowing_strategy_id
    ]
    accumulating = strategy.accumulation_mode == beam_runner_api_pb2.AccumulationMode.ACCUMULATING
    return strategy.trigger.WhichOneof('trigger') != 'default', accumulating


def _main_input_lateness(transform, components) -> Duration:
    """The allowed lateness of a ParDo's main input (its windowing)."""
    payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
    [main] = [pcoll for tag, pcoll in transform.inputs.items() if tag not in payload.side_inputs]
    strategy = components.windowing_strategies[components.pcollections[main].windowing_strategy_id]
    return Duration(micros=strategy.allowed_lateness * 1000)


def _in(wv, windows: list):
    return WindowedValue(wv.value, wv.timestamp, tuple(windows), wv.pane_info)


class SideInputGate:
    """Pushback of one stage's main input until its side inputs are ready."""

    def __init__(
        self, stage: p.StagePlan, components, context, key_coder_ids: dict[int, str] | None = None
    ):
        """``key_coder_ids``: input port -> the safe windowed KV coder its
        producer keys rows with (a stateful stage's keyed input)."""
        self.stage = stage
        transforms = {t.unique_name: t for t in components.transforms.values()}
        self.sides = [_Side(si, transforms, components, context) for si in stage.side_inputs]
        self._main = [context.coders[port.coder_id].get_impl() for port in stage.inputs]
        self._key_of = {}
        for port, coder_id in (key_coder_ids or {}).items():
            coder = context.coders[coder_id]
            self._key_of[port] = key_extractor(coder, coder.key_coder())
        self.pending: list[tuple[int, Any]] = []  # (input port, windowed value)
        self.version = 0  # bumped when a side input's value changes
        # The watermark (or hold) side windows were last dropped at, each
        # side's before it minus its reader's lateness.
        self._cutoff = MIN_TIMESTAMP

    @property
    def hold(self) -> Timestamp:
        """The earliest timestamp of a pushed-back element."""
        return min((wv.timestamp for _, wv in self.pending), default=MAX_TIMESTAMP)

    def add_side(self, side: int, chunks: list[bytes]) -> None:
        if chunks:
            self.sides[side].add(chunks)
            self.version += 1

    def add_main(self, port: int, chunks: list[bytes]) -> None:
        self.pending.extend((port, wv) for wv in decode_all(self._main[port], chunks))

    def release(self, watermarks: list[Timestamp]) -> list[tuple[int, Optional[bytes], bytes]]:
        """Rows (port, key or None, encoded elements) of the elements now ready:
        a keyed port's a row per element with its key."""
        waiting: list[tuple[int, Any]] = []
        ready: dict[int, list] = {}
        for port, wv in self.pending:
            if all(
                side.ready(window, wm)
                for window in wv.windows
                for side, wm in zip(self.sides, watermarks)
            ):
                ready.setdefault(port, []).append(wv)
            else:
                waiting.append((port, wv))
        self.pending = waiting
        rows: list[tuple[int, Optional[bytes], bytes]] = []
        for port, values in sorted(ready.items()):
            key_of = self._key_of.get(port)
            if key_of is not None:  # one keyed row per element
                for wv in values:
                    data = self._main[port].encode_nested(wv)
                    rows.append((port, key_of(data), data))
                continue
            out = create_OutputStream()
            for wv in values:
                self._main[port].encode_to_stream(wv, out, True)
            rows.append((port, None, out.get()))
        return rows

    def drop_expired(self, main_watermark: Timestamp) -> None:
        """Drops side-input values no main-input element can read any more:
        a main-input window W is droppable (too late) once the main input's
        watermark passed ``W.max_timestamp() + allowed lateness``; Beam's
        window mappings map W to the side window holding W's end, so a side
        window whose ``max_timestamp()`` is before ``watermark - lateness``
        serves no element still to come. Pushed-back elements count by their
        timestamps (``hold``), not their windows: a WindowInto fused into the
        stage assigns the windows the ParDo sees after the gate, each holding
        its element's timestamp. A late element (past the allowed lateness,
        which a ParDo does not drop) finds no values for a dropped window.
        Each side input by the allowed lateness of its own reader's main
        input (a stage may fuse readers of differently windowed inputs)."""
        start = min(main_watermark, self.hold)
        if start <= self._cutoff:
            return
        self._cutoff = start
        for side in self.sides:
            cutoff = MAX_TIMESTAMP if start >= MAX_TIMESTAMP else start - side.lateness
            if side.drop_expired(cutoff):
                self.version += 1

    def checkpoint(self) -> dict:
        """What the gate holds (for the commit record, ``restart``): each side
        input's values and fired windows, the pushed-back elements encoded
        with their port's coder."""
        return {
            'sides': [side.checkpoint() for side in self.sides],
            'pending': [(port, self._main[port].encode_nested(wv)) for port, wv in self.pending],
            'version': self.version,
            'cutoff': self._cutoff.micros,
        }

    def restore(self, saved: dict) -> None:
        for side, kept in zip(self.sides, saved['sides']):
            side.restore(kept)
        self.pending = [
            (port, self._main[port].decode_nested(data)) for port, data in saved['pending']
        ]
        self.version = saved['version']
        self._cutoff = Timestamp(micros=saved.get('cutoff', MIN_TIMESTAMP.micros))

    def state(self) -> list[tuple]:
        """Each side input's state entries (as batch serves them)."""
        return [
            tuple(state_entries(side.side_input, side.coder, side.chunks)) for side in self.sides
        ]
