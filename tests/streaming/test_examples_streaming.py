"""Smoke tests of the streaming examples, on the debug engine in this process
(each example module imported by name from examples/, as its own script would
import it): ``streaming_join`` against what the data generators imply,
``periodic_count`` run a few seconds, then cancelled."""

from __future__ import annotations

import pathlib
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / 'examples'


@pytest.fixture
def examples_path():
    sys.path.insert(0, str(EXAMPLES))
    yield
    sys.path.remove(str(EXAMPLES))


def test_streaming_join(examples_path, capsys):
    import streaming_join

    num_persons, num_auctions, seed = 10, 40, 5
    persons = streaming_join.generate_persons(num_persons, seed)
    auctions = streaming_join.generate_auctions(persons, num_auctions, seed)
    names = {pid: name for pid, name, _ in persons}
    expected_joins = sorted((names[seller], aid) for aid, seller, _ in auctions if seller in names)
    expected_unmatched = sorted((seller, aid) for aid, seller, _ in auctions if seller not in names)
    assert expected_joins and expected_unmatched  # both paths are exercised

    joins, unmatched = streaming_join.run(
        [
            '--num_persons',
            str(num_persons),
            '--num_auctions',
            str(num_auctions),
            '--seed',
            str(seed),
            '--inproc_debug',
        ]
    )
    assert joins == [tuple(j) for j in expected_joins]
    assert unmatched == [tuple(u) for u in expected_unmatched]
    assert (
        f'stream DONE: {num_persons} persons, {num_auctions} auctions: '
        f'{len(expected_joins)} joined, {len(expected_unmatched)} unmatched'
        in capsys.readouterr().out
    )


def test_periodic_count_runs_until_cancelled(examples_path, capsys):
    import periodic_count

    counts = periodic_count.run(['--seconds', '4', '--interval', '0.1', '--inproc_debug'])
    out = capsys.readouterr().out
    assert 'after 4 s: RUNNING' in out and 'cancelled: CANCELLED' in out
    # Windows come out once the watermark passed them: whole seconds, 10
    # ticks each, one after the other.
    assert counts, out  # at least one window closed in 4 s (a loaded machine)
    assert [c for _, _, c in counts] == [10] * len(counts)
    assert all(end - start == 1.0 for start, end, _ in counts)
    assert all(b[0] == a[1] for a, b in zip(counts, counts[1:]))
