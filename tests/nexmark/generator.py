"""A small deterministic Nexmark event generator (Person, Auction, Bid).

Beam's Python Nexmark (``apache_beam.testing.benchmarks.nexmark``) reads its
events from files or Pub/Sub and has no generator; this one follows the rules
of Nexmark's own generator (the Java ``NexmarkGenerator`` / ``GeneratorConfig``)
closely enough for the queries to have something to find, and yields Beam's
model classes (``nexmark_model.Person`` / ``Auction`` / ``Bid``):

* event ``n`` is a person, an auction or a bid in the proportions 1 : 3 : 46
  (``n % 50``: 0 a person, 1-3 auctions, the rest bids);
* event time: ``BASE_TIME + n * inter_event_micros`` (whole milliseconds, as
  the model coders keep them), in order (a reader gives
  each element ``date_time`` as its timestamp, as Beam's launcher does);
* ids: persons and auctions are numbered from 1000 in the order they are made;
  an auction's seller is a recent person (1 in ``HOT_SELLER_RATIO`` the hot
  one), a bid's auction one of the last ``IN_FLIGHT_AUCTIONS`` auctions (mostly
  the hot one, 1 in ``HOT_AUCTION_RATIO`` not) and its bidder a recent person
  (mostly the hot one);
* an auction expires at a random time within twice the time it takes for
  ``IN_FLIGHT_AUCTIONS`` auctions to be made; its reserve is above its initial bid;
  prices are ``100 * 10**(6 * u)`` cents, ``u`` uniform, as Nexmark's
  ``PriceGenerator``; categories are 10..14.

Everything is drawn from ``random.Random(seed)`` advanced event by event, so
``events(n, seed)`` is a pure function of its arguments (and ``events(m)`` for
``m > n`` starts with ``events(n)``).

As a Beam source: bounded, ``Create`` of the events with each one's
``date_time`` as timestamp (``queries.pipeline``); unbounded,
``test_stream(events, per_step)``: a TestStream adding ``per_step`` events at
a time, in order, each step followed by the event-time watermark moving to the
last event's time (no event is late), then to +inf. The stream's rate is
whatever the runner sustains (the benchmark measures it); a paced, endless
source needs the loop's unbounded splittable DoFns (PeriodicImpulse), which are
being added in parallel (issue #13), so this TestStream stands in for it.
"""
from __future__ import annotations

import random
from typing import Iterator, Union

from apache_beam.testing.benchmarks.nexmark.models import nexmark_model
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Duration
from apache_beam.utils.timestamp import Timestamp

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
IN_FLIGHT_AUCTIONS = 100
ACTIVE_PEOPLE = 1000
HOT_AUCTION_RATIO = 2
HOT_BIDDER_RATIO = 4
HOT_SELLER_RATIO = 4

# 2018-06-04T00:00:00Z, in seconds: Beam's Nexmark examples are from then.
BASE_TIME = Timestamp(1528070400)
INTER_EVENT_MICROS = 10_000  # 100 events per second of event time

_FIRST_NAMES = ('Peter', 'Paul', 'Luke', 'John', 'Saul', 'Vicky', 'Kate',
                'Julie', 'Sarah', 'Deiter', 'Walter')
_LAST_NAMES = ('Shultz', 'Abrams', 'Spencer', 'White', 'Bartels', 'Walton',
               'Smith', 'Jones', 'Noris')
_US_STATES = ('AZ', 'CA', 'ID', 'OR', 'WA', 'WY')
_US_CITIES = ('Phoenix', 'Los Angeles', 'San Francisco', 'Boise', 'Portland',
              'Bend', 'Redmond', 'Seattle', 'Kent', 'Cheyenne')

Event = Union[nexmark_model.Person, nexmark_model.Auction, nexmark_model.Bid]


def kind_of(n: int) -> str:
    """'person', 'auction' or 'bid': what event number ``n`` is."""
    r = n % TOTAL_PROPORTION
    if r < PERSON_PROPORTION:
        return 'person'
    if r < PERSON_PROPORTION + AUCTION_PROPORTION:
        return 'auction'
    return 'bid'


def timestamp_of(n: int, inter_event_micros: int = INTER_EVENT_MICROS) -> Timestamp:
    return BASE_TIME + Duration(micros=n * inter_event_micros)


def _price(rng: random.Random) -> int:
    return round(10.0 ** (rng.random() * 6.0) * 100.0)


def events(n: int, seed: int = 0,
           inter_event_micros: int = INTER_EVENT_MICROS) -> Iterator[Event]:
    """The first ``n`` events (see the module doc)."""
    rng = random.Random(seed)
    persons = auctions = 0  # made so far
    # Time for IN_FLIGHT_AUCTIONS auctions to be made: the auction horizon.
    horizon = (IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
               * inter_event_micros)
    for i in range(n):
        now = timestamp_of(i, inter_event_micros)
        kind = kind_of(i)
        if kind == 'person':
            pid = FIRST_PERSON_ID + persons
            persons += 1
            name = '%s %s' % (rng.choice(_FIRST_NAMES), rng.choice(_LAST_NAMES))
            yield nexmark_model.Person(
                pid, name, name.replace(' ', '.').lower() + '@example.com',
                ' '.join('%04d' % rng.randrange(10000) for _ in range(4)),
                rng.choice(_US_CITIES), rng.choice(_US_STATES), now, '')
        elif kind == 'auction':
            aid = FIRST_AUCTION_ID + auctions
            auctions += 1
            initial = _price(rng)
            seller = _recent(rng, persons, ACTIVE_PEOPLE, HOT_SELLER_RATIO,
                             FIRST_PERSON_ID)
            # Whole milliseconds, as Nexmark's (and the model coders') times.
            expires = now + Duration(
                micros=rng.randrange(1, 2 * horizon // 1000) * 1000)
            yield nexmark_model.Auction(
                aid, 'item-%d' % aid, 'description of item %d' % aid, initial,
                initial + _price(rng), now, expires, seller,
                FIRST_CATEGORY_ID + rng.randrange(NUM_CATEGORIES), '')
        else:
            auction = _recent(rng, auctions, IN_FLIGHT_AUCTIONS,
                              HOT_AUCTION_RATIO, FIRST_AUCTION_ID)
            bidder = _recent(rng, persons, ACTIVE_PEOPLE, HOT_BIDDER_RATIO,
                             FIRST_PERSON_ID)
            yield nexmark_model.Bid(auction, bidder, _price(rng), now, '')


def _recent(rng: random.Random, made: int, window: int, hot_ratio: int,
            first_id: int) -> int:
    """An id among the last ``window`` of ``made`` (the newest, the hot one,
    all but 1 in ``hot_ratio`` times); ``first_id`` before any was made."""
    if made == 0:
        return first_id
    newest = made - 1
    if rng.randrange(hot_ratio) > 0:
        return first_id + newest
    return first_id + max(0, newest - rng.randrange(min(window, made)))


def test_stream(events: list, per_step: int) -> TestStream:
    """The events as an unbounded source (see the module docstring)."""
    stream = TestStream()
    for start in range(0, len(events), per_step):
        chunk = events[start:start + per_step]
        stream = stream.add_elements(
            [window.TimestampedValue(e, e.date_time) for e in chunk])
        stream = stream.advance_watermark_to(chunk[-1].date_time)
    return stream.advance_watermark_to_infinity()


test_stream.__test__ = False  # not a pytest test
