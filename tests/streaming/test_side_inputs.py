"""Side inputs in a stream (debug engine): main-input elements wait until the
side input is ready for their window, compared with Beam's
BundleBasedDirectRunner on the same TestStream, or with Beam's model by hand
where the two differ on purpose (a fired pane in the global window)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger
from apache_beam.transforms import userstate
from apache_beam.transforms import window

from beam_spark_inproc import InProcessSparkRunner
from tests.streaming import oracle


def _tagged(p):
    """Main elements arrive before the side input of their window is complete."""
    stream = p | TestStream(output_tags={'main', 'side'}).advance_watermark_to(
        0, tag='side'
    ).add_elements([window.TimestampedValue('a', 3)], tag='main').add_elements(
        [window.TimestampedValue(('x', 1), 1)], tag='side'
    ).add_elements([window.TimestampedValue('b', 12)], tag='main').add_elements(
        [window.TimestampedValue(('y', 2), 4), window.TimestampedValue(('x', 5), 6)], tag='side'
    ).advance_watermark_to(10, tag='side').add_elements(
        [window.TimestampedValue(('z', 9), 15)], tag='side'
    ).advance_watermark_to(30, tag='main').advance_watermark_to_infinity(
        tag='side'
    ).advance_watermark_to_infinity(tag='main')
    main = stream['main'] | 'MainWindow' >> beam.WindowInto(window.FixedWindows(10))
    side = stream['side'] | 'SideWindow' >> beam.WindowInto(window.FixedWindows(10))
    return main, side


def _views(p):
    main, side = _tagged(p)
    values = side | 'Values' >> beam.Map(lambda kv: kv[1])
    return main | beam.Map(
        lambda x, as_dict, as_list, as_iter, multimap: (
            x,
            sorted(as_dict.items()),
            sorted(as_list),
            sorted(as_iter),
            [sorted(multimap[k]) for k in 'xyz'],
        ),
        beam.pvalue.AsDict(side | 'Last' >> beam.CombinePerKey(max)),
        beam.pvalue.AsList(values),
        beam.pvalue.AsIter(values),
        beam.pvalue.AsMultiMap(side),
    )


def test_windowed_side_inputs_every_access_pattern():
    expected = oracle.direct(_views)
    assert [r[0][0] for r in expected] == ['a', 'b']
    assert oracle.run(_views, InProcessSparkRunner(debug=True)) == expected


def _singleton_and_hold(p):
    """A pushed-back element holds the stage's output watermark: the window
    it joins downstream is not closed before it is released. The side input's
    window ([0, 20)) ends after the main input's ([0, 10)): the stage's input
    watermark (15) passes the main window's end while 'a' waits."""
    stream = p | TestStream(output_tags={'main', 'side'}).add_elements(
        [window.TimestampedValue('a', 3)], tag='main'
    ).advance_watermark_to(15, tag='side').advance_watermark_to(30, tag='main').add_elements(
        [window.TimestampedValue(1, 16)], tag='side'
    ).advance_watermark_to_infinity(tag='side').advance_watermark_to_infinity(tag='main')
    main = stream['main'] | 'MainWindow' >> beam.WindowInto(window.FixedWindows(10))
    total = (
        stream['side']
        | 'SideWindow' >> beam.WindowInto(window.FixedWindows(20))
        | 'Sum' >> beam.CombineGlobally(sum).without_defaults()
    )
    return (
        main
        | beam.Map(lambda x, s: ('k', (x, s)), beam.pvalue.AsSingleton(total))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: sorted(vs))
    )


def test_pushed_back_elements_hold_the_watermark():
    expected = oracle.direct(_singleton_and_hold)
    assert [r[0] for r in expected] == [[('a', 1)]]
    assert oracle.run(_singleton_and_hold, InProcessSparkRunner(debug=True)) == expected


class _CountWithSide(beam.DoFn):
    """A stateful DoFn reading a side input: a running count per key, plus
    the side input's value for the element's window."""

    COUNT = userstate.ReadModifyWriteStateSpec('count', VarIntCoder())

    def process(self, kv, side, count=beam.DoFn.StateParam(COUNT)):
        seen = (count.read() or 0) + 1
        count.write(seen)
        yield kv[0], seen, sorted(side)


def _stateful(p):
    main, side = _tagged(p)
    return (
        main
        | beam.Map(lambda x: ('k', x))
        | beam.ParDo(_CountWithSide(), beam.pvalue.AsList(side | beam.Map(lambda kv: kv[1])))
    )


def test_stateful_dofn_with_a_side_input():
    expected = oracle.direct(_stateful)
    assert [r[0] for r in expected] == [('k', 1, [1, 2, 5]), ('k', 1, [9])]
    assert oracle.run(_stateful, InProcessSparkRunner(debug=True)) == expected


def _slowly_updating(p):
    """The slowly-updating side input pattern: an AsSingleton refreshed by a
    trigger in the global window."""
    stream = p | TestStream(output_tags={'main', 'side'}).add_elements(
        [1, 2], tag='side'
    ).add_elements(['a'], tag='main').add_elements([10], tag='side').add_elements(
        ['b'], tag='main'
    ).advance_watermark_to_infinity(tag='side').advance_watermark_to_infinity(tag='main')
    latest = (
        stream['side']
        | beam.WindowInto(
            window.GlobalWindows(),
            trigger=trigger.Repeatedly(trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        | beam.CombineGlobally(sum).without_defaults()
    )
    return stream['main'] | beam.Map(lambda x, s: (x, s), beam.pvalue.AsSingleton(latest))


def test_slowly_updating_singleton_side_input():
    """By hand (latest firing, as above): 'a' sees the first firing's sum, 'b'
    the second's. (The DirectRunner serves both panes to a singleton view and
    fails: "more than one element".)"""
    records = oracle.run(_slowly_updating, InProcessSparkRunner(debug=True))
    assert sorted(r[0] for r in records) == [('a', 3), ('b', 10)]


def _bounded_global(p):
    stream = (
        p
        | TestStream()
        .advance_watermark_to(5)
        .add_elements([window.TimestampedValue(2, 7)])
        .advance_watermark_to_infinity()
    )
    factor = p | beam.Create([10])
    return stream | beam.Map(lambda x, f: x * f, beam.pvalue.AsSingleton(factor))


def test_bounded_global_side_input():
    expected = oracle.direct(_bounded_global)
    assert [r[0] for r in expected] == [20]
    assert oracle.run(_bounded_global, InProcessSparkRunner(debug=True)) == expected


def _fired_global(p):
    stream = p | TestStream(output_tags={'main', 'side'}).add_elements(
        ['x'], tag='side'
    ).add_elements(['a'], tag='main').add_elements(['y'], tag='side').add_elements(
        ['b'], tag='main'
    ).advance_watermark_to_infinity(tag='side').advance_watermark_to_infinity(tag='main')
    panes = (
        stream['side']
        | beam.WindowInto(
            window.GlobalWindows(),
            trigger=trigger.Repeatedly(trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        | beam.Map(lambda v: ('k', v))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, vs: ''.join(sorted(vs)))
    )
    return stream['main'] | beam.Map(lambda x, s: (x, sorted(s)), beam.pvalue.AsList(panes))


def test_a_fired_pane_makes_the_global_window_ready():
    """By hand from Beam's model: a pane fired, so the side input is ready for
    the global window (PushbackSideInputDoFnRunner), and its value is the
    latest firing (Beam's programming guide: "If the side input has multiple
    trigger firings, Beam uses the value from the latest trigger firing").
    The DirectRunner waits for the end of the stream instead and serves every
    pane, so every element there sees both."""
    records = oracle.run(_fired_global, InProcessSparkRunner(debug=True))
    assert sorted(r[0] for r in records) == [('a', ('x',)), ('b', ('y',))]
    direct = oracle.direct(_fired_global)
    assert sorted(r[0] for r in direct) == [('a', ('x', 'y')), ('b', ('x', 'y'))]


def _side_window_per_step(p):
    """Six windows; each step brings a side value and a main element of the
    next window and moves both watermarks past it. The main input is windowed
    before a Reshuffle, so the gate sees its windows and releases each element
    as soon as its side window is complete."""
    stream = TestStream(output_tags={'main', 'side'})
    for i in range(6):
        stream = (
            stream.add_elements([window.TimestampedValue(i, 10 * i + 1)], tag='side')
            .add_elements([window.TimestampedValue(f'm{i}', 10 * i + 2)], tag='main')
            .advance_watermark_to(10 * i + 10, tag='side')
            .advance_watermark_to(10 * i + 10, tag='main')
        )
    stream = stream.advance_watermark_to_infinity(tag='side').advance_watermark_to_infinity(
        tag='main'
    )
    tagged = p | stream
    main = (
        tagged['main'] | 'MainWindow' >> beam.WindowInto(window.FixedWindows(10)) | beam.Reshuffle()
    )
    side = tagged['side'] | 'SideWindow' >> beam.WindowInto(window.FixedWindows(10))
    return main | beam.Map(lambda x, values: (x, sorted(values)), beam.pvalue.AsList(side))


def test_side_input_values_of_closed_windows_are_dropped(monkeypatch):
    """A side window's values go once the main input's watermark passed its
    end plus the main input's allowed lateness (no main-input element can
    read it any more): the gate holds one or two windows, not all six. The
    output equals BundleBasedDirectRunner's."""
    from beam_spark_inproc.execution.streaming import side_inputs

    held = []
    drop = side_inputs.SideInputGate.drop_expired

    def recording(gate, watermark):
        drop(gate, watermark)
        side = gate.sides[0]
        held.append(
            len({w for wv in side_inputs.decode_all(side._impl, side.chunks) for w in wv.windows})
        )

    monkeypatch.setattr(side_inputs.SideInputGate, 'drop_expired', recording)
    expected = oracle.direct(_side_window_per_step)
    assert [r[0] for r in expected] == [(f'm{i}', (i,)) for i in range(6)]
    assert oracle.run(_side_window_per_step, InProcessSparkRunner(debug=True)) == expected
    assert len(held) >= 6 and max(held) <= 2, held


def _grouped_with_side(p):
    """The side input is read by the ParDo that consumes a GroupByKey (the
    planner gives it a stage of its own: ``phases.boundary_before``); early
    panes, so the panes' timing and index must reach it unchanged."""
    main, side = _tagged(p)
    values = side | 'Values' >> beam.Map(lambda kv: kv[1])
    return (
        main
        | 'Key' >> beam.Map(lambda x: ('k', x))
        | 'Early'
        >> beam.WindowInto(
            window.FixedWindows(10),
            trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
        )
        | beam.GroupByKey()
        | beam.Map(
            lambda kv, side: (kv[0], sorted(kv[1]), sorted(side)), beam.pvalue.AsList(values)
        )
    )


def test_side_input_read_after_a_group_by_key():
    expected = oracle.direct(_grouped_with_side)
    assert [r[0] for r in expected] and any(r[3] == 0 for r in expected)  # EARLY
    assert oracle.run(_grouped_with_side, InProcessSparkRunner(debug=True)) == expected


def test_windowed_write_to_text_in_a_stream(tmp_path):
    """Beam's WriteToText on unbounded input reads its side inputs in the
    stage consuming a GroupByKey: the same files, per window, as on
    BundleBasedDirectRunner."""
    import glob
    import os

    from apache_beam.options.pipeline_options import PipelineOptions

    def files(runner, folder):
        os.makedirs(folder)
        p = beam.Pipeline(runner=runner, options=PipelineOptions(['--streaming']))
        _ = (
            p
            | TestStream()
            .add_elements([window.TimestampedValue('a', 1), window.TimestampedValue('b', 12)])
            .advance_watermark_to(20)
            .add_elements([window.TimestampedValue('c', 25)])
            .advance_watermark_to_infinity()
            | beam.WindowInto(window.FixedWindows(10))
            | beam.io.WriteToText(os.path.join(folder, 'part'), num_shards=1)
        )
        assert p.run().wait_until_finish() == 'DONE'
        found = {}
        for name in glob.glob(os.path.join(folder, 'part*')):
            with open(name) as f:
                found[os.path.basename(name)] = f.read()
        return found

    expected = files(oracle.BundleBasedDirectRunner(), tmp_path / 'direct')
    assert len(expected) == 3
    assert files(InProcessSparkRunner(debug=True), tmp_path / 'runner') == expected


def _two_readers_two_latenesses(p):
    """Two side-input readers fused into one stage, their main inputs with
    allowed lateness 0 (A) and 100 s (B); an element late for both (behind
    the main watermark of 25) reads B's side input, whose window [0, 10) B's
    lateness still serves."""
    tagged = p | TestStream(output_tags={'main', 's1', 's2'}).add_elements(
        [window.TimestampedValue('one', 1)], tag='s1'
    ).add_elements([window.TimestampedValue('two', 1)], tag='s2').advance_watermark_to(
        30, tag='s1'
    ).advance_watermark_to(30, tag='s2').add_elements(
        [window.TimestampedValue('a', 13)], tag='main'
    ).advance_watermark_to(25, tag='main').advance_processing_time(1).add_elements(
        [window.TimestampedValue('late', 5)], tag='main'
    ).advance_watermark_to_infinity(tag='s1').advance_watermark_to_infinity(
        tag='s2'
    ).advance_watermark_to_infinity(tag='main')
    side1 = tagged['s1'] | 'W1' >> beam.WindowInto(window.FixedWindows(10))
    side2 = tagged['s2'] | 'W2' >> beam.WindowInto(window.FixedWindows(10))
    return (
        tagged['main']
        # Windowed before the gate (its stage's input), late data kept.
        | 'Lenient' >> beam.WindowInto(window.FixedWindows(10), allowed_lateness=100)
        | beam.Reshuffle()
        | 'OnTime' >> beam.WindowInto(window.FixedWindows(10))
        | 'A' >> beam.Map(lambda x, side: x, beam.pvalue.AsList(side1))
        | 'Lateness100' >> beam.WindowInto(window.FixedWindows(10), allowed_lateness=100)
        | 'B' >> beam.Map(lambda x, side: (x, sorted(side)), beam.pvalue.AsList(side2))
    )


def test_each_side_input_kept_for_its_own_readers_lateness():
    """The gate keeps a side window for the allowed lateness of the main input
    of the ParDo reading it, not of the stage's first reader: the late
    element still reads B's value. By hand from Beam's model: a Reshuffle
    drops nothing and a ParDo drops no late element; B's main input allows
    100 s, so [0, 10) of B's side input serves it. (BundleBasedDirectRunner
    loses the late element at the Reshuffle: no oracle here.)"""
    records = oracle.run(_two_readers_two_latenesses, InProcessSparkRunner(debug=True))
    assert sorted((r[0], r[1]) for r in records) == [
        (('a', ()), '[10.0, 20.0)'),
        (('late', ('two',)), '[0.0, 10.0)'),
    ]
