"""User state and timers: the same pipelines on InProcessSparkRunner and FnApiRunner.

Outputs come back through files (DoFns run in Spark's Python workers) and are
compared as sorted lines.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.coders import StrUtf8Coder
from apache_beam.coders import VarIntCoder
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import userstate
from apache_beam.transforms.window import FixedWindows
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc import InProcessSparkRunner
from tests.integration.outputs import run_to_lines


def run_both(spark, build, tmp_path) -> list[str]:
    expected = run_to_lines(FnApiRunner(), build, str(tmp_path / 'fnapi'))
    actual = run_to_lines(InProcessSparkRunner(spark=spark), build, str(tmp_path / 'spark'))
    assert actual == expected
    return actual


class AllStates(beam.DoFn):
    """Every state kind Python offers, per key and window."""

    BAG = userstate.BagStateSpec('bag', StrUtf8Coder())
    VALUE = userstate.ReadModifyWriteStateSpec('value', VarIntCoder())
    TOTAL = userstate.CombiningValueStateSpec('total', sum)
    SEEN = userstate.SetStateSpec('seen', StrUtf8Coder())
    ORDERED = userstate.OrderedListStateSpec('ordered', StrUtf8Coder())

    def process(
        self,
        kv,
        ts=beam.DoFn.TimestampParam,
        window=beam.DoFn.WindowParam,
        bag=beam.DoFn.StateParam(BAG),
        value=beam.DoFn.StateParam(VALUE),
        total=beam.DoFn.StateParam(TOTAL),
        seen=beam.DoFn.StateParam(SEEN),
        ordered=beam.DoFn.StateParam(ORDERED),
    ):
        key, v = kv
        bag.add(str(v))
        value.write((value.read() or 0) + 1)
        total.add(v)
        seen.add(str(v % 3))
        ordered.add((Timestamp(v), str(v)))
        if value.read() == 3:
            bag.clear()
        yield (
            key,
            window.start,
            value.read(),
            total.read(),
            sorted(bag.read()),
            sorted(seen.read()),
            [x for _, x in ordered.read()][:3],
        )


def test_every_state_kind_per_key_and_window(spark, tmp_path):
    def build(p):
        data = [(k, v) for k in 'abcd' for v in range(1, 7)]
        return (
            p
            | beam.Create(data)
            | beam.Map(lambda kv: TimestampedValue(kv, kv[1] * 10))
            | beam.WindowInto(FixedWindows(30))
            | beam.ParDo(AllStates())
            # Values reach a key in any order: keep what does not depend on it.
            | beam.Map(lambda t: (t[0], t[1], t[2]))
        )

    assert len(run_both(spark, build, tmp_path)) == 24


class TimerChain(beam.DoFn):
    """Event-time timers: fire in order, set new ones while firing, clear, tag."""

    FIRST = userstate.TimerSpec('first', userstate.TimeDomain.WATERMARK)
    LOOP = userstate.TimerSpec('loop', userstate.TimeDomain.WATERMARK)
    TAGGED = userstate.TimerSpec('tagged', userstate.TimeDomain.WATERMARK)
    CANCELLED = userstate.TimerSpec('cancelled', userstate.TimeDomain.WATERMARK)
    FIRED = userstate.BagStateSpec('fired', StrUtf8Coder())

    def process(
        self,
        kv,
        first=beam.DoFn.TimerParam(FIRST),
        tagged=beam.DoFn.TimerParam(TAGGED),
        cancelled=beam.DoFn.TimerParam(CANCELLED),
    ):
        key, v = kv
        first.set(100)
        first.set(50)  # replaces 100
        tagged.set(200 + v, dynamic_timer_tag='t%d' % v)
        cancelled.set(10)
        cancelled.clear()

    @userstate.on_timer(FIRST)
    def on_first(
        self,
        key=beam.DoFn.KeyParam,
        ts=beam.DoFn.TimestampParam,
        loop=beam.DoFn.TimerParam(LOOP),
        fired=beam.DoFn.StateParam(FIRED),
    ):
        fired.add('first@%s' % ts)
        loop.set(ts + 10)
        yield key, 'first', ts.micros // 10**6

    @userstate.on_timer(LOOP)
    def on_loop(
        self,
        key=beam.DoFn.KeyParam,
        ts=beam.DoFn.TimestampParam,
        loop=beam.DoFn.TimerParam(LOOP),
        fired=beam.DoFn.StateParam(FIRED),
    ):
        fired.add('loop@%s' % ts)
        if ts < 80:
            loop.set(ts + 10)
        yield key, 'loop', ts.micros // 10**6, len(list(fired.read()))

    @userstate.on_timer(TAGGED)
    def on_tagged(
        self,
        key=beam.DoFn.KeyParam,
        ts=beam.DoFn.TimestampParam,
        tag=beam.DoFn.DynamicTimerTagParam,
        fired=beam.DoFn.StateParam(FIRED),
    ):
        # Tagged timers fire after the loop is done (200+ > 80): state saw them all.
        yield key, tag, ts.micros // 10**6, len(list(fired.read()))

    @userstate.on_timer(CANCELLED)
    def on_cancelled(self, key=beam.DoFn.KeyParam):
        yield key, 'cancelled timer fired'


def test_event_time_timers_fire_in_order_until_none_remain(spark, tmp_path):
    """Batch timer semantics, stated explicitly (FnApiRunner fires timers in
    rounds by family, so a later timer may run before an earlier one there)."""

    def build(p):
        return (
            p
            | beam.Create([(k, v) for k in ('x', 'y', 'z') for v in (1, 2)])
            | beam.ParDo(TimerChain())
        )

    out = tmp_path / 'spark'
    lines = run_to_lines(InProcessSparkRunner(spark=spark), build, str(out))
    expected = []
    for key in ('x', 'y', 'z'):
        # first.set(100) was replaced by first.set(50); 'cancelled' was cleared;
        # the loop timer is set while firing; each timer sees the state written
        # by every earlier one (fired in timestamp order).
        expected += [
            repr((key, 'first', 50)),
            repr((key, 'loop', 60, 2)),
            repr((key, 'loop', 70, 3)),
            repr((key, 'loop', 80, 4)),
            repr((key, 't1', 201, 4)),
            repr((key, 't2', 202, 4)),
        ]
    assert lines == sorted(expected)


def test_many_keys_state_is_per_key(spark, tmp_path):
    class Count(beam.DoFn):
        N = userstate.CombiningValueStateSpec('n', sum)
        DONE = userstate.TimerSpec('done', userstate.TimeDomain.WATERMARK)

        def process(self, kv, n=beam.DoFn.StateParam(N), done=beam.DoFn.TimerParam(DONE)):
            n.add(1)
            done.set(0)

        @userstate.on_timer(DONE)
        def finish(self, key=beam.DoFn.KeyParam, n=beam.DoFn.StateParam(N)):
            yield key, n.read()

    def build(p):
        return (
            p
            | beam.Create(range(4_000))
            | beam.Map(lambda i: (i % 1000, i))
            | beam.ParDo(Count())
            | beam.Map(lambda kv: kv[1])
            | beam.combiners.Count.PerElement()
        )

    # Each key's timer fires once, after all 4 of its elements: 1000 keys saw 4.
    assert run_both(spark, build, tmp_path) == ['(4, 1000)']
