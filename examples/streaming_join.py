"""The incremental join of persons and auctions as a stream (Nexmark-style).

    python examples/streaming_join.py                           # on Spark local
    python examples/streaming_join.py --num_persons 20 --num_auctions 80

The same data as ``stateful_join.py`` (its generators), replayed as a stream
by a ``TestStream`` with two tagged outputs: each minute of event time, the
persons who registered and the auctions placed in it, then the watermark moves
to the minute's end. The pipeline:

1. ``CoGroupByKey`` of persons ``(person id, name)`` and auctions
   ``(seller id, auction id)`` in the **global window with an element-count
   trigger** (``Repeatedly(AfterCount(1))``, discarding): each pane carries
   what arrived for a person id since the last one, as soon as it arrives;
   the pane's timestamp is its earliest element's (``OUTPUT_AT_EARLIEST``);
2. a **stateful DoFn** per person id keeps the person's name and the auctions
   waiting for their seller, emits ``(name, auction id)`` as soon as both are
   known, and sets a **TTL timer** (event time, 10 minutes after the person or
   the waiting auction): when it fires, auctions whose seller never showed up
   leave as unmatched and the key's state is cleared.

The runner runs it as a stream (micro-batches, a watermark per stage); it ends
when the TestStream is exhausted and every watermark reached +inf. Outputs are
written by the DoFns as small files (so this works in Spark's workers too) and
printed as ``stateful_join.py`` prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid

import apache_beam as beam
from apache_beam.coders import StrUtf8Coder
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger
from apache_beam.transforms import userstate
from apache_beam.transforms import window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.utils.timestamp import Duration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stateful_join import TTL_SECONDS  # noqa: E402  (the same data as the batch join)
from stateful_join import generate_auctions  # noqa: E402
from stateful_join import generate_persons  # noqa: E402


def events(persons, auctions) -> TestStream:
    """Persons and auctions minute by minute, the watermark following."""
    by_minute: dict[int, list] = {}
    for pid, name, t in persons:
        by_minute.setdefault(t // 60, []).append(('persons', (pid, name), t))
    for aid, seller, t in auctions:
        by_minute.setdefault(t // 60, []).append(('auctions', (seller, aid), t))
    stream = TestStream(output_tags={'persons', 'auctions'})
    for minute in sorted(by_minute):
        for tag in ('persons', 'auctions'):
            values = [
                window.TimestampedValue(v, t) for kind, v, t in by_minute[minute] if kind == tag
            ]
            if values:
                stream = stream.add_elements(values, tag=tag)
        for tag in ('persons', 'auctions'):
            stream = stream.advance_watermark_to((minute + 1) * 60, tag=tag)
    for tag in ('persons', 'auctions'):
        stream = stream.advance_watermark_to_infinity(tag=tag)
    return stream


class JoinPanes(beam.DoFn):
    """(person id, {'persons': [name], 'auctions': [id]}) -> (name, auction id)."""

    UNMATCHED = 'unmatched'

    PERSON = userstate.ReadModifyWriteStateSpec('person', StrUtf8Coder())
    PENDING = userstate.BagStateSpec('pending', VarIntCoder())
    TTL = userstate.TimerSpec('ttl', TimeDomain.WATERMARK)

    def process(
        self,
        element,
        timestamp=beam.DoFn.TimestampParam,
        person=beam.DoFn.StateParam(PERSON),
        pending=beam.DoFn.StateParam(PENDING),
        ttl=beam.DoFn.TimerParam(TTL),
    ):
        _, pane = element
        name = person.read()
        for new_name in pane['persons']:
            name = new_name
            person.write(name)
            for auction_id in pending.read():
                yield name, auction_id
            pending.clear()
        for auction_id in pane['auctions']:
            if name is not None:
                yield name, auction_id
            else:
                pending.add(auction_id)
        ttl.set(timestamp + Duration(seconds=TTL_SECONDS))

    @userstate.on_timer(TTL)
    def expire(
        self,
        key=beam.DoFn.KeyParam,
        person=beam.DoFn.StateParam(PERSON),
        pending=beam.DoFn.StateParam(PENDING),
    ):
        for auction_id in pending.read():
            yield beam.pvalue.TaggedOutput(self.UNMATCHED, (key, auction_id))
        person.clear()
        pending.clear()


class WriteJson(beam.DoFn):
    def __init__(self, folder: str):
        self._folder = folder

    def process(self, element):
        with open(os.path.join(self._folder, uuid.uuid4().hex), 'w') as f:
            json.dump(element, f)


def read_json(folder: str) -> list[tuple]:
    found = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            found.append(tuple(json.load(f)))
    return sorted(found)


def build(p: beam.Pipeline, persons, auctions, joined_dir: str, unmatched_dir: str) -> None:
    stream = p | 'Events' >> events(persons, auctions)
    windowing = dict(
        trigger=trigger.Repeatedly(trigger.AfterCount(1)),
        accumulation_mode=trigger.AccumulationMode.DISCARDING,
        timestamp_combiner=window.TimestampCombiner.OUTPUT_AT_EARLIEST,
    )
    panes = {
        'persons': stream['persons']
        | 'PersonsWindow' >> beam.WindowInto(window.GlobalWindows(), **windowing),
        'auctions': stream['auctions']
        | 'AuctionsWindow' >> beam.WindowInto(window.GlobalWindows(), **windowing),
    } | 'CoGroup' >> beam.CoGroupByKey()
    results = panes | 'Join' >> beam.ParDo(JoinPanes()).with_outputs(
        JoinPanes.UNMATCHED, main='joined'
    )
    _ = results.joined | 'WriteJoined' >> beam.ParDo(WriteJson(joined_dir))
    _ = results[JoinPanes.UNMATCHED] | 'WriteUnmatched' >> beam.ParDo(WriteJson(unmatched_dir))


def run(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--num_persons', type=int, default=8)
    parser.add_argument('--num_auctions', type=int, default=30)
    parser.add_argument('--seed', type=int, default=7)
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    options.view_as(StandardOptions).streaming = True
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = 'beam_spark_inproc.InProcessSparkRunner'
    persons = generate_persons(args.num_persons, args.seed)
    auctions = generate_auctions(persons, args.num_auctions, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        joined_dir = os.path.join(tmp, 'joined')
        unmatched_dir = os.path.join(tmp, 'unmatched')
        os.makedirs(joined_dir)
        os.makedirs(unmatched_dir)
        p = beam.Pipeline(options=options)
        build(p, persons, auctions, joined_dir, unmatched_dir)
        state = p.run().wait_until_finish()
        joins = read_json(joined_dir)
        unmatched = read_json(unmatched_dir)
    print(
        f'stream {state}: {len(persons)} persons, {len(auctions)} auctions: '
        f'{len(joins)} joined, {len(unmatched)} unmatched'
    )
    for name, auction_id in joins:
        print(f'joined: {name} <- auction {auction_id}')
    for seller, auction_id in unmatched:
        print(f'unmatched: auction {auction_id} (no person {seller})')
    return joins, unmatched


if __name__ == '__main__':
    run(sys.argv[1:])
