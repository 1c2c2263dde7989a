"""The stateful benchmark's floor: what Beam's own per-element work for
``streaming._StatefulCount`` costs, and what this runner adds (issue #13,
item 12; docs/performance.md).

Each pipeline runs twice, with ``_StatefulCount`` (a ReadModifyWriteState per
key, read and written per element) and with ``_PlainCount`` (the same outputs
from a DoFn without state, a count per key in a dict of the bundle); the
difference in CPU per element is the user state's share:

* **Beam**: FnApiRunner (Beam's BundleProcessor and DoFnRunner over Beam's
  in-memory state servicer, one process), a batch pipeline: an Impulse, a
  FlatMap making the benchmark's elements, the DoFn, a Map;
* **this runner, debug engine**: the streaming benchmark's stateful pipeline
  (``streaming.stateful``, TestStream, the same elements) with either DoFn,
  no Spark: the runner's keyed input (rows per key, the state handler, state
  written per micro-batch) around the same Beam work.

Printed: CPU seconds of this process per run (median of ``--rounds``) and
microseconds per element.

    python -m tests.benchmarks.stateful_floor [--events 20] [--per-event 20000]
        [--keys 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from tests.benchmarks import streaming


class _PlainCount(beam.DoFn):
    """``_StatefulCount``'s outputs without state (a count per key in the
    bundle: the same work per element but the state's)."""

    def start_bundle(self):
        self._counts = {}

    def process(self, kv):
        n = self._counts.get(kv[0], 0) + 1
        self._counts[kv[0]] = n
        event, at = kv[1]
        yield kv[0], (n, event, at)


def _elements(events: int, per_event: int, keys: int):
    def make(_):
        for i in range(events):
            for j in range(per_event):
                yield beam.window.TimestampedValue((f'k{j % keys}', i), i)

    return make


def beam_run(dofn, args) -> float:
    """CPU seconds of FnApiRunner running the DoFn over the elements."""
    start = time.process_time()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | beam.Impulse()
            | beam.FlatMap(_elements(args.events, args.per_event, args.keys))
            | beam.Map(streaming._stamp)
            | beam.ParDo(dofn())
            | beam.Map(lambda kv: (kv[0], (1, kv[1][1], kv[1][2])))
        )
    return time.process_time() - start


def debug_run(dofn, args) -> float:
    """CPU seconds of the streaming benchmark's stateful pipeline with the
    DoFn on the debug engine."""
    original = streaming._StatefulCount
    streaming._StatefulCount = dofn
    try:
        start = time.process_time()
        streaming.run_one('stateful', 'debug', args)
        return time.process_time() - start
    finally:
        streaming._StatefulCount = original


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--events', type=int, default=20)
    parser.add_argument('--per-event', type=int, default=20_000)
    parser.add_argument('--keys', type=int, default=1000)
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    n = args.events * args.per_event
    warm = argparse.Namespace(events=2, per_event=100, keys=2)
    for run in (beam_run, debug_run):
        for dofn in (streaming._StatefulCount, _PlainCount):
            run(dofn, warm)
    cpu: dict = {}
    for _ in range(args.rounds):
        for run in (beam_run, debug_run):
            for dofn in (streaming._StatefulCount, _PlainCount):
                cpu.setdefault((run.__name__, dofn.__name__), []).append(run(dofn, args))
    for run in ('beam_run', 'debug_run'):
        stateful = statistics.median(cpu[(run, '_StatefulCount')])
        plain = statistics.median(cpu[(run, '_PlainCount')])
        print(
            f'{run:9s}: stateful {stateful:6.2f} CPU-s '
            f'({1e6 * stateful / n:5.2f} us/element), plain {plain:6.2f} '
            f"({1e6 * plain / n:5.2f} us/element); the state's share "
            f'{1e6 * (stateful - plain) / n:5.2f} us/element; runs '
            + ' '.join(f'{c:.2f}' for c in cpu[(run, '_StatefulCount')])
            + ' / '
            + ' '.join(f'{c:.2f}' for c in cpu[(run, '_PlainCount')]),
            flush=True,
        )


if __name__ == '__main__':
    main()
