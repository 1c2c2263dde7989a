"""A deterministic Nexmark event generator (Person, Auction, Bid).

Beam's Python Nexmark (``apache_beam.testing.benchmarks.nexmark``) reads its
events from files or Pub/Sub and has no generator; this one follows the rules
of Nexmark's own generator (the Java ``NexmarkGenerator`` / ``GeneratorConfig``)
closely enough for the queries to have something to find, and yields Beam's
model classes (``nexmark_model.Person`` / ``Auction`` / ``Bid``):

* event ``n`` is a person, an auction or a bid in the proportions 1 : 3 : 46
  (``n % 50``: 0 a person, 1-3 auctions, the rest bids);
* event time: ``BASE_TIME + n * inter_event_micros`` (whole milliseconds, as
  the model coders keep them), in order (a source gives each element its
  ``date_time`` as timestamp, as Beam's launcher does);
* ids: persons and auctions are numbered from 1000 in the order they are made;
  an auction's seller is a recent person (mostly the newest, the hot one; 1 in
  ``HOT_SELLER_RATIO`` any of the last ``ACTIVE_PEOPLE``), a bid's auction one
  of the last ``IN_FLIGHT_AUCTIONS`` auctions (mostly the hot one, 1 in
  ``HOT_AUCTION_RATIO`` not) and its bidder a recent person (mostly the hot
  one);
* an auction expires at a random time within twice the time it takes for
  ``IN_FLIGHT_AUCTIONS`` auctions to be made; its reserve is above its initial
  bid; prices are ``100 * 10**(6 * u)`` cents, ``u`` uniform, as Nexmark's
  ``PriceGenerator``; categories are 10..14.

**Random access.** ``event(n, seed)`` is a pure function of its arguments: its
random draws come from ``random.Random`` seeded with ``(seed, n)``, and the
numbers of persons and auctions made before event ``n`` follow from ``n``
(the proportions are fixed). So a source can start at any event number: the
restriction of the splittable DoFns in ``nexmark.source`` is an event-number
range, replayable from a position and splittable anywhere, and
``events(n)`` is a prefix of ``events(m)`` for ``m > n``.
"""

from __future__ import annotations

import random
from typing import Iterator
from typing import Union

from apache_beam.testing.benchmarks.nexmark.models import nexmark_model
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

_FIRST_NAMES = (
    'Peter',
    'Paul',
    'Luke',
    'John',
    'Saul',
    'Vicky',
    'Kate',
    'Julie',
    'Sarah',
    'Deiter',
    'Walter',
)
_LAST_NAMES = (
    'Shultz',
    'Abrams',
    'Spencer',
    'White',
    'Bartels',
    'Walton',
    'Smith',
    'Jones',
    'Noris',
)
_US_STATES = ('AZ', 'CA', 'ID', 'OR', 'WA', 'WY')
_US_CITIES = (
    'Phoenix',
    'Los Angeles',
    'San Francisco',
    'Boise',
    'Portland',
    'Bend',
    'Redmond',
    'Seattle',
    'Kent',
    'Cheyenne',
)

Event = Union[nexmark_model.Person, nexmark_model.Auction, nexmark_model.Bid]


def kind_of(n: int) -> str:
    """'person', 'auction' or 'bid': what event number ``n`` is."""
    r = n % TOTAL_PROPORTION
    if r < PERSON_PROPORTION:
        return 'person'
    if r < PERSON_PROPORTION + AUCTION_PROPORTION:
        return 'auction'
    return 'bid'


def _made_before(n: int, first: int, proportion: int) -> int:
    """How many events of the kind occupying ``n % 50`` in
    ``[first, first + proportion)`` come before event ``n``."""
    cycles, r = divmod(n, TOTAL_PROPORTION)
    return cycles * proportion + min(max(r - first, 0), proportion)


def persons_before(n: int) -> int:
    return _made_before(n, 0, PERSON_PROPORTION)


def auctions_before(n: int) -> int:
    return _made_before(n, PERSON_PROPORTION, AUCTION_PROPORTION)


def timestamp_of(n: int, inter_event_micros: int = INTER_EVENT_MICROS) -> Timestamp:
    return BASE_TIME + Duration(micros=n * inter_event_micros)


def _price(rng: random.Random) -> int:
    return round(10.0 ** (rng.random() * 6.0) * 100.0)


def event(n: int, seed: int = 0, inter_event_micros: int = INTER_EVENT_MICROS) -> Event:
    """Event number ``n`` (see the module doc)."""
    rng = random.Random(seed * 0x100000000 + n)
    now = timestamp_of(n, inter_event_micros)
    persons, auctions = persons_before(n), auctions_before(n)
    kind = kind_of(n)
    if kind == 'person':
        pid = FIRST_PERSON_ID + persons
        name = '%s %s' % (rng.choice(_FIRST_NAMES), rng.choice(_LAST_NAMES))
        return nexmark_model.Person(
            pid,
            name,
            name.replace(' ', '.').lower() + '@example.com',
            ' '.join('%04d' % rng.randrange(10000) for _ in range(4)),
            rng.choice(_US_CITIES),
            rng.choice(_US_STATES),
            now,
            '',
        )
    if kind == 'auction':
        aid = FIRST_AUCTION_ID + auctions
        initial = _price(rng)
        seller = _recent(rng, persons, ACTIVE_PEOPLE, HOT_SELLER_RATIO, FIRST_PERSON_ID)
        # Time for IN_FLIGHT_AUCTIONS auctions to be made: the auction horizon.
        horizon = IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION * inter_event_micros
        # Whole milliseconds, as Nexmark's (and the model coders') times.
        expires = now + Duration(micros=rng.randrange(1, 2 * horizon // 1000) * 1000)
        return nexmark_model.Auction(
            aid,
            'item-%d' % aid,
            'description of item %d' % aid,
            initial,
            initial + _price(rng),
            now,
            expires,
            seller,
            FIRST_CATEGORY_ID + rng.randrange(NUM_CATEGORIES),
            '',
        )
    auction = _recent(rng, auctions, IN_FLIGHT_AUCTIONS, HOT_AUCTION_RATIO, FIRST_AUCTION_ID)
    bidder = _recent(rng, persons, ACTIVE_PEOPLE, HOT_BIDDER_RATIO, FIRST_PERSON_ID)
    return nexmark_model.Bid(auction, bidder, _price(rng), now, '')


def events(
    n: int, seed: int = 0, start: int = 0, inter_event_micros: int = INTER_EVENT_MICROS
) -> Iterator[Event]:
    """Events ``start`` .. ``n - 1`` (see the module doc)."""
    for i in range(start, n):
        yield event(i, seed, inter_event_micros)


def _recent(rng: random.Random, made: int, window: int, hot_ratio: int, first_id: int) -> int:
    """An id among the last ``window`` of ``made`` (the newest, the hot one,
    all but 1 in ``hot_ratio`` times); ``first_id`` before any was made."""
    if made == 0:
        return first_id
    newest = made - 1
    if rng.randrange(hot_ratio) > 0:
        return first_id + newest
    return first_id + max(0, newest - rng.randrange(min(window, made)))
