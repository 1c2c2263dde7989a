"""Draining a stream: stop reading, let everything pending fire, end DONE.

What Dataflow calls a drain (``gcloud dataflow jobs drain``; Flink's
``stop --drain``): the stream reads nothing more, but everything it has read
is finished as if its input had ended there. Asked for by
``result.drain()`` (``StreamingPipelineResult``) or, from another process, by
``python -m beam_spark_inproc drain CHECKPOINT_LOCATION``, which writes
``REQUEST_FILE`` into the stream's checkpoint location. The loop looks for
either at each micro-batch boundary (``Drain.check``), and also while it
waits for a splittable DoFn's resume delay. From the next micro-batch on:

* **sources stop at their current position** (``StreamSource.drain``): a
  TestStream drops the events it has not replayed, so its next step moves its
  watermarks to +inf;
* **splittable DoFns are asked to stop** with Beam's truncate: their stage
  runs the drained plan's descriptor (the pipeline planned again with
  ``is_drain``: a ``TruncateSizedRestriction`` before the Process transform,
  as Beam's FnApiRunner(is_drain=True) and Dataflow do), so every
  restriction that reaches it, new input and residuals alike, goes through
  the DoFn's ``truncate_restriction``. Beam's default truncation drops an
  unbounded restriction (PeriodicImpulse, and file-watching transforms built
  on it, stop producing) and keeps a bounded one whole, which is then
  finished. The residuals pending when the drain begins are due at once
  (their resume delay is not waited for: they are truncated); those a
  bounded restriction leaves afterwards honour their delay;
* the **watermarks** then reach +inf through the ordinary cascade: every
  pending window, trigger and timer fires, sinks write their last panes,
  and the loop ends as a finished stream does: **DONE**.

**The commit record says so.** From the first draining micro-batch on, every
commit record holds ``drain``: who asked (``requested_by``), the last
micro-batch committed before it (``after_micro_batch``), where each source
stopped (``sources_stopped_at``, their ``checkpoint()`` then), and
``drained``: true in the record where every source is exhausted, no residual
is pending and every watermark is +inf.

**Restart.** A driver that dies while draining resumes the drain: a record
whose ``drain`` is not yet ``drained`` makes the restarted run drain from
its first micro-batch (its sources' positions are already past their last
event). A checkpoint whose stream **was drained is refused** at restart
(``StreamDrainedError``, before any Spark job): its sources were stopped and
its windows fired, so resuming it would read past a point the drain gave up
on; start the pipeline on a new checkpoint location (Dataflow likewise starts
a new job after a drain). A drain or cancel of a run that already ended
changes nothing and returns its final state; the ``drain`` command on a
drained checkpoint says so and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
from typing import Any
from typing import Callable

from beam_spark_inproc.planning import plan as p

_LOGGER = logging.getLogger(__name__)

# Written into a checkpoint location by ``python -m beam_spark_inproc drain``.
REQUEST_FILE = 'drain-request.json'


class StreamDrainedError(ValueError):
    """The checkpoint location holds a stream that was drained."""


class Drain:
    """A stream's drain: requested, then active (see the module doc).

    ``replan``: the pipeline planned with ``is_drain`` (called once, when a
    drain begins in a plan with splittable DoFns)."""

    def __init__(self, root: str | None = None, replan: Callable[[], p.SparkPlan] | None = None):
        self.root = root  # the checkpoint location (the request file's)
        self.replan = replan
        self._requested = threading.Event()
        self._requested_by = ''
        self.active = False
        self.after_micro_batch = -1
        self.began_at = 0.0  # wall time of the boundary the drain began at
        self.sources_stopped_at: dict[str, dict] = {}
        self._plan: p.SparkPlan | None = None  # ``replan``'s, once needed
        self._stages: dict[int, p.StagePlan] = {}

    # -- requests ---------------------------------------------------------
    def request(self, by: str) -> None:
        """Asks the loop to drain from its next micro-batch boundary."""
        if not self._requested.is_set():
            self._requested_by = by
            self._requested.set()

    def _request_path(self) -> str | None:
        return None if self.root is None else os.path.join(self.root, REQUEST_FILE)

    def waiting(self) -> bool:
        """Whether a drain was asked for and has not begun (the loop stops
        waiting for a resume delay)."""
        if self.active:
            return False
        if self._requested.is_set():
            return True
        path = self._request_path()
        if path is not None and os.path.exists(path):
            self.request(_read_request(path))
            return True
        return False

    # -- the loop ---------------------------------------------------------
    def check(self, executor: Any) -> None:
        """At a micro-batch boundary: begins the drain if one was asked for."""
        if self.active:
            if executor.micro_batch > self.after_micro_batch + 1:
                # A commit record carries the drain on: the request is done.
                _remove(self._request_path())
            return
        if self.waiting():
            self._begin(executor)

    def finish(self, micro_batch: int) -> None:
        """The loop has ended before ``micro_batch``: a drain's request file
        is done with once a commit record carries the drain (a stop right
        after the drain began leaves it for the next run)."""
        if self.active and micro_batch > self.after_micro_batch + 1:
            _remove(self._request_path())

    def _begin(self, executor: Any) -> None:
        self.active = True
        self.after_micro_batch = executor.micro_batch - 1
        self.began_at = time.time()
        self.sources_stopped_at = {
            str(i): source.checkpoint() for i, source in executor.sources.items()
        }
        for source in executor.sources.values():
            source.drain()
        executor.residuals.expedite(executor.now())
        positions = {
            executor.plan.stages[int(i)].labels[0]: position
            for i, position in self.sources_stopped_at.items()
        }
        _LOGGER.info(
            'Stream %s: draining after micro-batch %d (requested by %s): '
            'sources stop at %s; splittable DoFns truncate their '
            'restrictions; every window and timer fires, then the stream '
            'ends',
            executor.stream_id,
            self.after_micro_batch,
            self._requested_by,
            positions or 'their impulse',
        )

    def stage(self, index: int, stage: p.StagePlan) -> p.StagePlan:
        """The plan a splittable DoFn's stage runs: the drained one (its
        restrictions truncated) once the drain is active."""
        if not self.active or not stage.split_input:
            return stage
        if index not in self._stages:
            self._stages[index] = self._drained(stage)
        return self._stages[index]

    def _drained(self, stage: p.StagePlan) -> p.StagePlan:
        """``stage`` as the drained plan fuses it: the same ports, with a
        ``TruncateSizedRestriction`` before its Process transform."""
        if self.replan is None:
            raise RuntimeError(
                f'Cannot drain stage {stage.name!r}: the stream was started '
                'without its drained plan (splittable DoFns cannot be '
                'truncated).'
            )
        if self._plan is None:
            self._plan = self.replan()
        for drained in self._plan.stages:
            if drained.split_input != stage.split_input:
                continue
            if _ports(drained) == _ports(stage):
                return drained
        raise RuntimeError(
            f'Cannot drain stage {stage.name!r} (transforms '
            f'{", ".join(stage.labels)}): the pipeline planned for a drain '
            'fuses its splittable DoFn into a stage with other inputs or '
            'outputs, so its restrictions cannot be truncated in place.'
        )

    # -- the commit record ------------------------------------------------
    def record(self, executor: Any) -> dict | None:
        """The commit record's ``drain`` (None: not draining)."""
        if not self.active:
            return None
        return {
            'requested_by': self._requested_by,
            'after_micro_batch': self.after_micro_batch,
            'began_at': self.began_at,
            'sources_stopped_at': self.sources_stopped_at,
            'drained': bool(
                all(s.exhausted for s in executor.sources.values())
                and not executor.residuals.pending
                and executor.watermarks.final
            ),
        }

    def restore(self, record: dict | None, stream_id: str = '') -> None:
        """A restart from a commit record written while draining: the drain
        goes on from the first micro-batch."""
        if not record:
            return
        self.active = True
        self._requested_by = record.get('requested_by', '')
        self._requested.set()
        self.after_micro_batch = record['after_micro_batch']
        self.began_at = record.get('began_at', 0.0)
        self.sources_stopped_at = record.get('sources_stopped_at', {})
        _LOGGER.info(
            'Stream %s: continuing the drain begun after micro-batch %d',
            stream_id,
            self.after_micro_batch,
        )


def _ports(stage: p.StagePlan) -> tuple:
    return (
        [port.buffer_id for port in stage.inputs],
        [port.buffer_id for port in stage.outputs],
        [s.buffer_id for s in stage.side_inputs],
    )


def refuse_drained(record: dict | None, root: str) -> None:
    """Raises ``StreamDrainedError`` when commit ``record`` (the one a
    restart would resume from) says its stream was drained."""
    if record is None:
        return
    drain = record.get('drain') or {}
    if drain.get('drained'):
        raise StreamDrainedError(
            f'--checkpoint_location {root!r} holds a stream that was drained '
            f'(requested by {drain.get("requested_by") or "?"} after '
            f'micro-batch {drain.get("after_micro_batch")}, ended at '
            f'micro-batch {record.get("micro_batch")}): its sources were '
            'stopped and every window fired, so it does not resume. Run the '
            'pipeline on a new checkpoint location to start a new stream.'
        )


def _read_request(path: str) -> str:
    try:
        with open(path) as f:
            return json.load(f).get('requested_by', REQUEST_FILE)
    except (OSError, ValueError):
        return REQUEST_FILE


def _remove(path: str | None) -> None:
    if path is not None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


# -- ``python -m beam_spark_inproc drain CHECKPOINT_LOCATION`` ----------------
def newest_record(root: str) -> dict | None:
    """The newest commit record under checkpoint location ``root`` that
    reads whole (None: none), read only."""
    folder = os.path.join(root, 'commits')
    numbers = sorted(
        (
            int(name[:-5])
            for name in (os.listdir(folder) if os.path.isdir(folder) else ())
            if name[:-5].isdigit() and name.endswith('.json')
        ),
        reverse=True,
    )
    for n in numbers:
        try:
            with open(os.path.join(folder, f'{n}.json')) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        if record.get('micro_batch') == n:
            return record
    return None


def _drained_line(record: dict) -> str:
    drain = record['drain']
    return (
        f'drained after micro-batch {drain["after_micro_batch"]} (ended '
        f'at micro-batch {record["micro_batch"]}, requested by '
        f'{drain["requested_by"]})'
    )


def main(argv: list[str]) -> int:
    """Asks the stream whose checkpoint location is given to drain."""
    parser = argparse.ArgumentParser(
        prog='python -m beam_spark_inproc drain',
        description='Drains the stream running on CHECKPOINT_LOCATION (its '
        '--checkpoint_location): it reads nothing more, every pending window '
        'and timer fires, splittable DoFns truncate their restrictions, and '
        'the run ends DONE. The loop sees the request at its next '
        'micro-batch boundary; a stream that is not running drains when it '
        'is next run on this location.',
    )
    parser.add_argument('checkpoint_location')
    parser.add_argument(
        '--wait',
        type=float,
        default=0,
        metavar='SECONDS',
        help='wait up to SECONDS for the commit record that '
        'says the stream was drained (exit status 1 if it '
        'does not come)',
    )
    args = parser.parse_args(argv)
    root = os.path.abspath(args.checkpoint_location)
    if not os.path.exists(os.path.join(root, 'pipeline.json')):
        print(f"{root} is not a stream's checkpoint location (no pipeline.json): nothing to drain.")
        return 2
    record = newest_record(root)
    if record is not None and (record.get('drain') or {}).get('drained'):
        print(f'The stream at {root} was already {_drained_line(record)}: nothing to do.')
        return 0
    path = os.path.join(root, REQUEST_FILE)
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(
            {'requested_by': 'python -m beam_spark_inproc drain', 'requested_at': time.time()}, f
        )
    os.replace(tmp, path)
    print(
        f'Drain requested for the stream at {root}: it drains from its '
        'next micro-batch boundary (if it is not running, when it is next '
        'run there).'
    )
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        record = newest_record(root)
        if record is not None and (record.get('drain') or {}).get('drained'):
            print(f'The stream was {_drained_line(record)}.')
            return 0
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
    if args.wait:
        print(f'No commit record says the stream was drained after {args.wait:g} s.')
        return 1
    return 0
