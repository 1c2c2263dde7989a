"""Progress of a stream: what each micro-batch did and where each stage stands.

The role Spark's ``StreamingQueryProgress`` plays for a Structured Streaming
query (``lastProgress``, ``recentProgress``), in Beam's terms. After every
micro-batch the loop's commit (``restart.commit``) takes a plain JSON-able
dict (``StreamProgress.take``)::

    {'stream': '1a2b3c4d', 'micro_batch': 7, 'timestamp': '2026-...Z',
     'processing_time': 12.5,          # the loop's clock: wall or TestStream's
     'duration_seconds': 0.42,         # the micro-batch, from its start to its commit
     'job_seconds': 0.31,              # of which inside Spark jobs (the engine's actions)
     'driver_seconds': 0.11,           # the rest: building, watermarks, the commit
     'elements_in': 1000,              # what its sources and splittable DoFns emitted
     'elements_per_second': 2380.9,
     'state_keys': 1204, 'state_bytes': 2411724,
     'backlog': {'due_residuals': 0, 'pending_residuals': 0,
                 'timer_buckets': 3, 'held_side_input_elements': 0},
     'stages': [{'stage': 2, 'name': 'WindowInto+GroupByKey', 'reads': [1],
                 'input_watermark': '1970-01-01T00:00:05Z',
                 'output_watermark': '1970-01-01T00:00:01Z',
                 'input_watermark_lag_seconds': ..., 'output_watermark_lag_seconds': ...,
                 'elements_in': 2, 'elements_out': 2,
                 'total_elements_in': 3, 'total_elements_out': 3,
                 'state_keys': 2, 'state_bytes': 1830, 'timer_buckets': 2, ...}, ...],
     'sources': [{'source': 'Read events', 'stage': 1, 'kind': 'TestStream',
                  'elements': 12, 'backlog': {'events': 28}, 'caught_up': False,
                  'position': 'event 12 of 40'}],
     'caught_up': False}               # every read has read what there was

Everything comes from what the loop already holds after the micro-batch: no
Spark job, no state read. Its cost is a pass over the stages' consolidated
metrics and over each keyed stage's bucket summaries (a summary is converted
once, when a micro-batch replaces it) and state files (each ``stat``-ed
once): a small part of building and writing the commit record, which walks
the same buckets.

* **Watermarks** (``watermarks.Watermarks``) as RFC 3339 instants (``-inf``,
  ``+inf`` at the ends); the **lag** is the wall clock at the commit minus the
  watermark, in seconds (None at the ends).
* **Elements** in and out of a stage: Beam's ``ELEMENT_COUNT`` of the
  PCollections it reads (its data-input transforms' outputs) and writes (its
  data-output transforms' inputs), from the committed metrics the commit
  record carries anyway (``restart.CommittedMetrics``, consolidated per
  stage). Totals are cumulative over the stream (a restarted stream goes on
  from its commit record); a micro-batch's counts are the difference. A
  source's output is what its readers read of it; a leaf stage writes
  nothing (None). A GroupByKey's reader counts groups (fired panes).
* **State** of a keyed stage: its keys (the buckets' summaries,
  ``buckets``) and bytes (the sizes of the distinct Parquet files its current
  bucket versions name; a file is written once, so only files new since the
  last micro-batch are ``stat``-ed).
* **Backlog**: splittable DoFns' residuals pending and due at the loop's
  clock (``residuals``); state buckets holding a pending timer (the driver
  knows each bucket's earliest event-time and processing-time timer, not
  every timer: a GroupByKey's waiting windows count here too) with the
  earliest of them; main-input elements pushed back behind side inputs
  (``side_inputs``).
* **Reads** (``backlog``): per source and splittable DoFn, by the user's
  label, what it emitted so far, what it has left to read as far as it knows,
  and whether it has **caught up** (read everything there was when it last
  looked); the stream has caught up when every read has.
* **Duration**: from the micro-batch's start (``MicroBatch.started``) to its
  commit (the sources' step before it, and any wait for a splittable DoFn's
  resume delay, are not in it); **job seconds** are the time spent inside the engine's ``collect``
  (``JobClock``): on Spark, the micro-batch's Spark jobs. The debug engine
  runs each stage while the loop builds it, so there nearly all of it is
  driver time.

Where it goes after the commit (``publish``): ``latest``/``recent`` (the
result's ``progress()`` and ``recent_progress()``), one INFO line on the
``beam_spark_inproc.progress`` logger (``line``), gauges to the
``--metrics_sink``\\ s (``gauges``). Into the commit record goes ``record``:
the latest progress and a short history of every recent micro-batch
(duration, job seconds, elements, lowest output watermark), which ``python
-m beam_spark_inproc status`` reads (``beam_spark_inproc.status``).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any
from typing import Callable

from apache_beam.metrics import monitoring_infos
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.timestamp import Timestamp

from beam_spark_inproc.execution.executor import wire
from beam_spark_inproc.execution.streaming import backlog as reads_backlog
from beam_spark_inproc.execution.streaming.store import stage_key
from beam_spark_inproc.planning import plan as p
from beam_spark_inproc.status import human_bytes
from beam_spark_inproc.status import human_seconds

LOGGER = logging.getLogger('beam_spark_inproc.progress')
RECENT = 100  # micro-batches kept (Spark's numRecentProgressUpdates)
GAUGE_NAMESPACE = 'beam_spark_inproc.stream'


# Timers and holds at the end of the global window lie past datetime's range.
_GLOBAL_WINDOW_END = GlobalWindow().max_timestamp()


def instant(ts: Timestamp) -> str:
    """A watermark as RFC 3339, or ``-inf``/``+inf`` at the ends."""
    if ts >= MAX_TIMESTAMP:
        return '+inf'
    if ts <= MIN_TIMESTAMP:
        return '-inf'
    if ts >= _GLOBAL_WINDOW_END:
        return 'end of global window'
    try:
        return ts.to_rfc3339()
    except (OverflowError, ValueError):  # past datetime's year 9999
        return f'{ts.micros} us'


def _lag(now: float, ts: Timestamp) -> float | None:
    if ts >= MAX_TIMESTAMP or ts <= MIN_TIMESTAMP:
        return None
    return round(now - ts.micros / 1e6, 3)


class JobClock:
    """An engine (``execution.engine``) whose actions are timed: each
    ``collect`` is a job (on Spark, the micro-batch's Spark jobs)."""

    def __init__(self, engine: Any):
        self._engine = engine
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def collect(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self._engine.collect(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def take(self) -> float:
        """The seconds since the last call."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def _ports(stage: p.StagePlan) -> tuple[list[str | None], set[str]]:
    """The PCollection each input port's data-input transform outputs, and
    the PCollections the data-output transforms read."""
    if stage.kind != p.SDK_STAGE or not stage.descriptor:
        return [None] * len(stage.inputs), set()
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    transforms = descriptor.transforms
    inputs = []
    for port in stage.inputs:
        t = transforms.get(port.transform_id)
        inputs.append(next(iter(t.outputs.values()), None) if t else None)
    outputs = {
        pc
        for port in stage.outputs
        if port.transform_id in transforms
        for pc in transforms[port.transform_id].inputs.values()
    }
    if stage.split_input and not outputs:
        # A splittable DoFn fused with its consumers into a stage that writes
        # nothing: what the DoFn emitted is what entered the stream here.
        read = set(transforms[stage.split_input].outputs.values())
        outputs = {
            pc
            for t in transforms.values()
            if read & set(t.inputs.values())
            for pc in t.outputs.values()
        }
    return inputs, outputs


def display_name(stage: p.StagePlan) -> str:
    """A stage as a person reads it: its Beam transforms' labels (the
    GroupByKey it reads first)."""
    labels = [port.grouping.gbk_label for port in stage.inputs if port.grouping is not None]
    labels += [label for label in stage.labels if label]
    return '+'.join(labels) if labels else stage.kind


class StreamProgress:
    """Collects a stream's progress at each commit and publishes it (see the
    module doc). ``set_gauges``: where the gauges go (the run's
    ``MetricsPusher.set_gauges``), or None."""

    def __init__(
        self, plan: p.SparkPlan, job_id: str, set_gauges: Callable[[list], None] | None = None
    ):
        self.stream = job_id[:8]
        self._set_gauges = set_gauges
        self._plan = plan
        stages = plan.stages
        self._names = [display_name(s) for s in stages]
        ports = [_ports(s) for s in stages]
        self._inputs = [set(pc for pc in ins if pc) for ins, _ in ports]
        self._outputs = [outs for _, outs in ports]
        reads, _ = wire(plan)
        self._wire, self._port_pcolls = reads, ports
        self._read_entries = reads_backlog.Reads(plan)  # ``backlog``
        self._reads = [
            sorted({w for (j, _), ws in reads.items() if j == i for w, _ in ws})
            for i in range(len(stages))
        ]
        # A source's output: what its readers read of each of its outputs.
        self._source_outputs: dict[int, list[list[tuple[int, str]]]] = {}
        for i, stage in enumerate(stages):
            if stage.kind == p.TEST_STREAM_STAGE:
                self._add_source(i)
        self._keyed = [s.grouped or s.stateful for s in stages]
        # Where elements enter the stream: its sources and splittable DoFns
        # (each a read), else the stages reading no other stage.
        self._entries = [
            i for i, s in enumerate(stages) if s.kind == p.TEST_STREAM_STAGE or s.split_input
        ] or [i for i in range(len(stages)) if not self._reads[i]]
        self._index_of = {stage_key(s.name): i for i, s in enumerate(stages)}
        self._index_cache: dict[str, int | None] = {}
        self._sizes: dict[str, int | None] = {}  # state file -> bytes
        self._seen: dict[int, dict] = {}  # stage -> ``_buckets``' cache
        self._totals: tuple[list, list] | None = None
        self._lock = threading.Lock()
        self._recent: collections.deque = collections.deque(maxlen=RECENT)
        self._history: collections.deque = collections.deque(maxlen=RECENT)
        self._taken: dict | None = None
        self.clock: JobClock | None = None

    def _add_source(self, i: int) -> None:
        """Counts source ``i``'s output as what its readers read of it."""
        stages, reads, ports = self._plan.stages, self._wire, self._port_pcolls
        self._source_outputs[i] = [
            [
                (j, pcoll)
                for j, reader in enumerate(stages)
                for k, port in enumerate(reader.inputs)
                if reads.get((j, port.buffer_id)) == [(i, tag)] and (pcoll := ports[j][0][k])
            ]
            for tag in range(len(stages[i].outputs))
        ]

    # -- wiring into the loop ----------------------------------------------
    def time_jobs(self, engine: Any) -> JobClock:
        """``engine`` with its jobs timed for the micro-batches' split."""
        self.clock = JobClock(engine)
        return self.clock

    def after_commit(self, then: Callable[[list], None]) -> Callable[[list], None]:
        """The loop's ``on_reports``: publishes the progress, then ``then``."""

        def on_reports(reports: list) -> None:
            self.publish()
            then(reports)

        return on_reports

    def resume(self, executor: Any, record: dict) -> None:
        """A stream restarted from commit ``record`` (after ``restart.restore``):
        element totals go on from its committed metrics, the history from its
        progress."""
        self._totals = self._element_totals(executor.committed_metrics)
        saved = record.get('progress') or {}
        self._history.extend(saved.get('recent', ()))
        if saved.get('latest'):
            self._recent.append(saved['latest'])

    # -- collecting -----------------------------------------------------------
    def _index(self, name: str) -> int | None:
        if name not in self._index_cache:
            self._index_cache[name] = self._index_of.get(stage_key(name))
        return self._index_cache[name]

    def _element_totals(self, committed) -> tuple[list, list]:
        """Per stage: (elements read, elements written) so far."""
        n = len(self._plan.stages)
        ins, outs = [0] * n, [0] * n
        read: dict[tuple[int, str], int] = {}
        for name, infos in committed.by_stage().items():
            i = self._index(name)
            if i is None:
                continue
            for info in infos:
                if info.urn != monitoring_infos.ELEMENT_COUNT_URN:
                    continue
                pcoll = info.labels.get(monitoring_infos.PCOLLECTION_LABEL)
                if pcoll in self._inputs[i]:
                    count = monitoring_infos.extract_counter_value(info)
                    ins[i] += count
                    read[(i, pcoll)] = read.get((i, pcoll), 0) + count
                if pcoll in self._outputs[i]:
                    outs[i] += monitoring_infos.extract_counter_value(info)
        for i, tags in self._source_outputs.items():
            outs[i] = sum(max((read.get(r, 0) for r in readers), default=0) for readers in tags)
        return ins, outs

    def _state_bytes(self, paths: set[str]) -> int | None:
        total = 0
        for path in paths:
            size = self._sizes.get(path)
            if size is None:
                size = self._sizes[path] = _size(path)
            if size is None:
                return None
            total += size
        return total

    def take(self, executor: Any) -> dict:
        """The progress of ``executor``'s micro-batch just run, for its
        commit record (``record``); ``publish`` makes it public once
        committed."""
        batch = executor._batch  # None: a commit outside a micro-batch
        duration = (time.perf_counter() - batch.started) if batch else 0.0
        job = self.clock.take() if self.clock is not None else 0.0
        wall = time.time()
        clock = executor.now()
        plan, wm, buckets = self._plan, executor.watermarks, executor.buckets
        for i in executor.sources:  # a runner-native source (ReadFromSpark)
            if i not in self._source_outputs:
                self._add_source(i)
                self._entries = sorted(set(self._entries) | {i})
        ins, outs = self._element_totals(executor.committed_metrics)
        before = self._totals or ([0] * len(ins), [0] * len(outs))
        self._totals = (ins, outs)
        live: set[str] = set()
        stages: list[dict[str, Any]] = []
        for i, stage in enumerate(plan.stages):
            entry: dict[str, Any] = {
                'stage': i + 1,
                'name': self._names[i],
                'reads': [r + 1 for r in self._reads[i]],
                'input_watermark': instant(wm.input[i]),
                'output_watermark': instant(wm.output[i]),
                'input_watermark_lag_seconds': _lag(wall, wm.input[i]),
                'output_watermark_lag_seconds': _lag(wall, wm.output[i]),
                'elements_in': (ins[i] - before[0][i] if self._inputs[i] else None),
                'elements_out': (
                    outs[i] - before[1][i]
                    if self._outputs[i] or i in self._source_outputs
                    else None
                ),
                'total_elements_in': ins[i] if self._inputs[i] else None,
                'total_elements_out': (
                    outs[i] if self._outputs[i] or i in self._source_outputs else None
                ),
            }
            if self._keyed[i]:
                seen = self._seen.setdefault(i, {})
                entry.update(_buckets(buckets.summaries[i], seen))
                if len(seen) > 2 * len(buckets.summaries[i]):  # emptied ones
                    self._seen[i] = {b: seen[b] for b in buckets.summaries[i]}
                paths = set(buckets.versions[i].values())
                live |= paths
                entry['state_bytes'] = self._state_bytes(paths)
            if i in executor.gates:
                entry['held_side_input_elements'] = len(executor.gates[i].pending)
            if stage.split_input:
                pending, due = executor.residuals.waiting(i, clock)
                entry.update(pending_residuals=pending, due_residuals=due)
            stages.append(entry)
        if len(self._sizes) > 2 * len(live):  # files no bucket names now
            self._sizes = {path: self._sizes[path] for path in live}
        elements = sum(stages[i]['elements_out'] or 0 for i in self._entries)
        keyed = [s for s in stages if 'state_keys' in s]
        byte_counts = [s['state_bytes'] for s in keyed]
        progress = {
            'stream': self.stream,
            'micro_batch': executor.micro_batch,
            'timestamp': Timestamp(micros=int(wall * 1e6)).to_rfc3339(),
            'processing_time': clock,
            'duration_seconds': round(duration, 4),
            'job_seconds': round(job, 4),
            'driver_seconds': round(max(duration - job, 0.0), 4),
            'elements_in': elements,
            'elements_per_second': (round(elements / duration, 1) if duration > 0 else None),
            'state_keys': sum(s['state_keys'] for s in keyed),
            'state_bytes': (None if None in byte_counts else sum(byte_counts)),
            'backlog': {
                'due_residuals': sum(s.get('due_residuals', 0) for s in stages),
                'pending_residuals': sum(s.get('pending_residuals', 0) for s in stages),
                'timer_buckets': sum(s.get('timer_buckets', 0) for s in stages),
                'held_side_input_elements': sum(
                    s.get('held_side_input_elements', 0) for s in stages
                ),
            },
            'stages': stages,
        }
        progress['sources'] = self._read_entries.take(executor, outs, clock)
        progress['caught_up'] = reads_backlog.caught_up(progress['sources'])
        lowest = min(wm.output, default=MAX_TIMESTAMP)
        self._taken = progress
        self._history.append(
            {
                'micro_batch': progress['micro_batch'],
                'timestamp': progress['timestamp'],
                'duration_seconds': progress['duration_seconds'],
                'job_seconds': progress['job_seconds'],
                'elements_in': elements,
                'lowest_output_watermark': instant(lowest),
                'lag_seconds': _lag(wall, lowest),
                'caught_up': progress['caught_up'],
            }
        )
        return progress

    def record(self, executor: Any) -> dict:
        """The commit record's ``progress``: this micro-batch's (``take``)
        and the recent ones' history."""
        return {'latest': self.take(executor), 'recent': list(self._history)}

    # -- publishing -----------------------------------------------------------
    def publish(self) -> None:
        """The micro-batch taken is committed: it becomes ``latest``, is
        logged in one line and goes to the metric sinks as gauges."""
        progress, self._taken = self._taken, None
        if progress is None:
            return
        with self._lock:
            self._recent.append(progress)
        if LOGGER.isEnabledFor(logging.INFO):
            LOGGER.info('%s', line(progress))
        if self._set_gauges is not None:
            self._set_gauges(gauges(progress))

    def latest(self) -> dict | None:
        with self._lock:
            return self._recent[-1] if self._recent else None

    def recent(self) -> list[dict]:
        with self._lock:
            return list(self._recent)


_MAX_MICROS = MAX_TIMESTAMP.micros


def _buckets(summaries: dict, seen: dict) -> dict:
    """A keyed stage's state from its buckets' summaries, in one pass over
    plain numbers (a stage may hold thousands of buckets). ``seen``: bucket
    -> (summary, its earliest event-time timer in micros) of the last pass;
    a bucket whose summary is the same object is not converted again (a
    micro-batch replaces the summaries of the buckets it touched only)."""
    keys = timers = 0
    event, processing = _MAX_MICROS, float('inf')
    for b, s in summaries.items():
        keys += s.keys
        known = seen.get(b)
        if known is None or known[0] is not s:
            known = seen[b] = (s, s.event_timer.micros)
        e, t = known[1], s.processing_timer
        if e < _MAX_MICROS or t < float('inf'):
            timers += 1
            event, processing = min(event, e), min(processing, t)
    return {
        'state_keys': keys,
        'state_buckets': len(summaries),
        'timer_buckets': timers,
        'next_event_timer': instant(Timestamp(micros=event)),
        'next_processing_timer': (None if processing == float('inf') else processing),
    }


def _size(path: str) -> int | None:
    try:
        if os.path.isdir(path):
            return sum(
                os.path.getsize(os.path.join(d, name))
                for d, _, names in os.walk(path)
                for name in names
            )
        return os.path.getsize(path)
    except OSError:
        return None


def line(progress: dict) -> str:
    """One compact line for a person: the micro-batch, its time split, its
    input, the stage furthest behind, the state, the backlog and whether it
    has caught up."""
    behind = [s for s in progress['stages'] if s['output_watermark'] != '+inf']
    if behind:
        # Lexical order of RFC 3339 instants is time order; '-inf' sorts first.
        low = min(
            behind, key=lambda s: '' if s['output_watermark'] == '-inf' else s['output_watermark']
        )
        where = (
            f'lowest output watermark {low["output_watermark"]} '
            f'(stage {low["stage"]} {low["name"][:40]}, lag '
            f'{human_seconds(low["output_watermark_lag_seconds"])})'
        )
    else:
        where = 'output watermarks +inf'
    backlog = progress['backlog']
    parts = [f'{backlog["timer_buckets"]} timer buckets']
    caught = progress.get('caught_up')
    if backlog['pending_residuals']:
        parts.append(f'{backlog["due_residuals"]}/{backlog["pending_residuals"]} residuals due')
    if backlog['held_side_input_elements']:
        parts.append(f'{backlog["held_side_input_elements"]} held behind side inputs')
    return (
        f'Stream {progress["stream"]} micro-batch {progress["micro_batch"]}: '
        f'{progress["duration_seconds"]:.2f} s (jobs '
        f'{progress["job_seconds"]:.2f} s, driver '
        f'{progress["driver_seconds"]:.2f} s), '
        f'{progress["elements_in"]} elements in; {where}; state '
        f'{progress["state_keys"]} keys {human_bytes(progress["state_bytes"])};'
        f' backlog {", ".join(parts)}'
        + ('' if caught is None else '; caught up' if caught else '; catching up')
    )


def gauges(progress: dict) -> list:
    """The progress as gauges for the metric sinks
    (``metrics.snapshot.MetricRecord``, namespace ``GAUGE_NAMESPACE``): the
    stream's under step ``stream``, each stage's under its name. Watermarks
    at -inf or +inf have no gauge."""
    from beam_spark_inproc.metrics.snapshot import MetricRecord

    when = Timestamp.from_rfc3339(progress['timestamp']).micros / 1e6
    records = []

    def add(step: str, name: str, value) -> None:
        if value is None:
            return
        v = {'value': value, 'timestamp': when}
        records.append(MetricRecord(GAUGE_NAMESPACE, name, step, 'gauge', v, v))

    backlog = progress['backlog']
    for name in (
        'micro_batch',
        'duration_seconds',
        'job_seconds',
        'driver_seconds',
        'elements_in',
        'state_keys',
        'state_bytes',
    ):
        add('stream', name, progress[name])
    for name, value in backlog.items():
        add('stream', name, value)
    if progress.get('caught_up') is not None:
        add('stream', 'caught_up', int(progress['caught_up']))
    for read in progress.get('sources', ()):
        step = f'source:{read["source"]}'
        add(step, 'elements', read['elements'])
        add(step, 'caught_up', int(read['caught_up']))
        for name, value in read['backlog'].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                add(step, name, value)
    for s in progress['stages']:
        step = f'{s["stage"]}:{s["name"]}'
        for which in ('input', 'output'):
            wm = s[f'{which}_watermark']
            if wm not in ('-inf', '+inf'):
                add(step, f'{which}_watermark_seconds', Timestamp.from_rfc3339(wm).micros / 1e6)
                add(step, f'{which}_watermark_lag_seconds', s[f'{which}_watermark_lag_seconds'])
        for name in (
            'total_elements_in',
            'total_elements_out',
            'state_keys',
            'state_bytes',
            'timer_buckets',
            'pending_residuals',
            'due_residuals',
            'held_side_input_elements',
        ):
            add(step, name, s.get(name))
    return records
