"""An incremental join with user state and an event-time timer (Nexmark-style persons x auctions).

    python examples/stateful_join.py                       # 8 persons, 30 auctions
    python examples/stateful_join.py --num_persons 50 --num_auctions 400 --seed 3
    python examples/stateful_join.py --spark_master 'local[2]'

Two generated PCollections, persons ``(person id, name, time)`` and auctions
``(auction id, seller person id, time)``, are keyed by person id and flattened
into one keyed stream of tagged records. The stateful ``JoinPersonAuctions``
DoFn keeps, per person id:

* ``person`` (ReadModifyWriteState): the person's name, once seen;
* ``pending`` (BagState): auctions that arrived before their seller, emitted
  as soon as the person shows up;
* ``expiry`` (an event-time timer): set to the person's time + 10 minutes (or,
  while the seller is unknown, to the latest pending auction's time + 10
  minutes). When it fires the key's state is cleared, and auctions whose seller
  never appeared leave on the ``unmatched`` output.

A join ``(person name, auction id)`` is emitted as soon as both sides are
present, whichever comes first. The generated auctions happen within 10 minutes
of their seller's registration, so every auction of a known seller joins (in
batch, as in streaming); a few auctions name sellers that do not exist.

Without ``--runner`` the pipeline runs on InProcessSparkRunner; any Beam runner
can be passed instead, with no change to the code.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile

import apache_beam as beam
from apache_beam.coders import StrUtf8Coder
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration

TTL_SECONDS = 10 * 60
START = 1_704_099_600  # 2024-01-01 09:00:00 UTC
FIRST = [
    'Ada',
    'Alan',
    'Barbara',
    'Dennis',
    'Edsger',
    'Frances',
    'Grace',
    'John',
    'Ken',
    'Leslie',
    'Margaret',
    'Niklaus',
    'Radia',
    'Tony',
]
LAST = [
    'Allen',
    'Hopper',
    'Kay',
    'Knuth',
    'Lamport',
    'Liskov',
    'Perlman',
    'Ritchie',
    'Thompson',
    'Turing',
    'Wirth',
]


def generate_persons(num_persons: int = 8, seed: int = 7) -> list[tuple[int, str, int]]:
    """``(person id, name, unix seconds)``: one person registers per minute."""
    rng = random.Random(seed)
    return [
        (pid, f'{rng.choice(FIRST)} {rng.choice(LAST)} #{pid}', START + 60 * pid)
        for pid in range(num_persons)
    ]


def generate_auctions(
    persons: list[tuple[int, str, int]], num_auctions: int = 30, seed: int = 7
) -> list[tuple[int, int, int]]:
    """``(auction id, seller id, unix seconds)``.

    An auction of a known seller happens between 2 minutes before and 8
    minutes after the seller registers (so before its seller's state expires);
    every tenth auction names a seller id no person has.
    """
    rng = random.Random(seed + 1)
    registered = {pid: t for pid, _, t in persons}
    auctions = []
    for aid in range(1000, 1000 + num_auctions):
        if not registered or aid % 10 == 9:
            seller = len(persons) + rng.randrange(3)  # nobody has this id
            t = START + rng.randrange(60 * max(len(persons), 1))
        else:
            seller = rng.choice(sorted(registered))
            t = registered[seller] + rng.randrange(-120, 480)
        auctions.append((aid, seller, t))
    return auctions


class JoinPersonAuctions(beam.DoFn):
    """(person id, ('person', name) | ('auction', id)) -> (name, auction id)."""

    UNMATCHED = 'unmatched'

    PERSON = userstate.ReadModifyWriteStateSpec('person', StrUtf8Coder())
    PENDING = userstate.BagStateSpec('pending', VarIntCoder())
    EXPIRY = userstate.TimerSpec('expiry', TimeDomain.WATERMARK)

    def process(
        self,
        element,
        timestamp=beam.DoFn.TimestampParam,
        person=beam.DoFn.StateParam(PERSON),
        pending=beam.DoFn.StateParam(PENDING),
        expiry=beam.DoFn.TimerParam(EXPIRY),
    ):
        _, (kind, value) = element
        if kind == 'person':
            person.write(value)
            for auction_id in pending.read():
                yield value, auction_id
            pending.clear()
            expiry.set(timestamp + Duration(seconds=TTL_SECONDS))
        else:
            name = person.read()
            if name is not None:
                yield name, value
            else:
                pending.add(value)
                expiry.set(timestamp + Duration(seconds=TTL_SECONDS))

    @userstate.on_timer(EXPIRY)
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


def join(persons: beam.PCollection, auctions: beam.PCollection):
    """-> (joined (name, auction id), unmatched (seller id, auction id))."""
    keyed_persons = (
        persons
        | 'PersonTime' >> beam.Map(lambda p: TimestampedValue(p, p[2]))
        | 'KeyPerson' >> beam.Map(lambda p: (p[0], ('person', p[1])))
    )
    keyed_auctions = (
        auctions
        | 'AuctionTime' >> beam.Map(lambda a: TimestampedValue(a, a[2]))
        | 'KeyAuction' >> beam.Map(lambda a: (a[1], ('auction', a[0])))
    )
    results = (
        (keyed_persons, keyed_auctions)
        | 'Flatten' >> beam.Flatten()
        | 'Join'
        >> beam.ParDo(JoinPersonAuctions()).with_outputs(
            JoinPersonAuctions.UNMATCHED, main='joined'
        )
    )
    return results.joined, results[JoinPersonAuctions.UNMATCHED]


def _write(pcoll, label: str, path: str) -> None:
    (
        pcoll
        | f'{label}Json' >> beam.Map(json.dumps)
        | f'{label}Write' >> beam.io.WriteToText(path, shard_name_template='')
    )


def _read(path: str) -> list[tuple]:
    with open(path) as f:
        return sorted(tuple(json.loads(line)) for line in f)


def run(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--num_persons', type=int, default=8)
    parser.add_argument('--num_auctions', type=int, default=30)
    parser.add_argument('--seed', type=int, default=7)
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if not options.view_as(StandardOptions).runner:
        options.view_as(StandardOptions).runner = 'beam_spark_inproc.InProcessSparkRunner'

    persons = generate_persons(args.num_persons, args.seed)
    auctions = generate_auctions(persons, args.num_auctions, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        joined_path = os.path.join(tmp, 'joined')
        unmatched_path = os.path.join(tmp, 'unmatched')
        with beam.Pipeline(options=options) as p:
            joined, unmatched = join(
                p | 'Persons' >> beam.Create(persons), p | 'Auctions' >> beam.Create(auctions)
            )
            _write(joined, 'Joined', joined_path)
            _write(unmatched, 'Unmatched', unmatched_path)
        # The DoFns ran in Spark's Python workers: read their output here.
        joins = _read(joined_path)
        unmatched = _read(unmatched_path)
    print(
        f'{len(persons)} persons, {len(auctions)} auctions: '
        f'{len(joins)} joined, {len(unmatched)} unmatched'
    )
    for name, auction_id in joins:
        print(f'joined: {name} <- auction {auction_id}')
    for seller, auction_id in unmatched:
        print(f'unmatched: auction {auction_id} (no person {seller})')
    return joins, unmatched


if __name__ == '__main__':
    run(sys.argv[1:])
